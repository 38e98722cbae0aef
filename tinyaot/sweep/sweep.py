"""`tinyaot sweep`: every setting of a grid measured, results written as they come (DIR/configs/<name>.json, which a
rerun reuses when its content hash and checksum still match: an interrupted sweep resumes), then the reports.

DIR is an output folder tinyaot owns (tinyaot/files.py): a folder with files tinyaot did not write is refused
before any work. Each finished setting's record (sealed with a checksum) and deploy folder (configs/<name>/) land
atomically as the setting finishes; the reports (report.json/.md/.html, the plots) and the set of settings switch
together at the end, in one atomic exchange of the whole folder, which also drops what an earlier run left for
settings no longer in the grid. SIGINT or SIGTERM stop the workers; the finished settings stay for the rerun.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from tinyaot import __version__
from tinyaot.boards import load_board
from tinyaot.cache import cache_folder, read_record, record_text, warn
from tinyaot.compress.options import options_from_flags
from tinyaot.errors import TinyaotError
from tinyaot.files import check_output_folder, link_tree, output_folder, sha256_file, tidy_folder, write_file
from tinyaot.interrupt import Interrupted, stop_on_signals
from tinyaot.options import Options
from tinyaot.toolchain.versions import versions

from .compare import DEFAULT_TOLERANCES, flags_digest, judge
from .grid import DEPLOY_KEYS, QUANT_KEYS, Config
from .report import write_reports
from .run import EXECUTORS, ResultCache, config_key

CONFIGS_DIR = "configs"
# The records a run writes into DIR/configs as settings finish (tinyaot's, also before the closing switch-over
# lists them in the manifest); per-setting deploy folders carry manifests of their own.
PRODUCTS = (f"{CONFIGS_DIR}/*.json",)


def _progress(total: int, quiet: bool):
    """A rich progress bar on stderr when it is a terminal; nothing otherwise (CI logs get one line per setting)."""
    if quiet or not sys.stderr.isatty():
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.description}"), console=Console(stderr=True), transient=True)
    bar.start()
    bar.add_task("", total=total)
    return bar


def figures_line(c: dict) -> str:
    """A setting's figures (or its error) in one line, as the sweep prints them."""
    if c.get("error"):
        return "failed: " + c["error"]
    return (f"top-1 {100 * c['top1']:.2f} %, weights {c['weights_bytes']} B, flash {c['flash_bytes']} B, "
            f"arena {c['arena_bytes']} B, instructions "
            f"{c['instructions'] if c['instructions'] is not None else '- (--no-qemu)'}")


def check_configs(configs: list[Config]) -> None:
    """Bad flags fail now, in one line naming the setting, not after the others ran."""
    for c in configs:
        flags = {k: v for k, v in c.flags.items() if k not in QUANT_KEYS + DEPLOY_KEYS}
        if c.flags.get("activation_bits", 8) not in (8, 16):
            raise TinyaotError(f"setting {c.name}: activation_bits must be 8 or 16, got {c.flags['activation_bits']!r}")
        if c.flags.get("optimize", "speed") not in ("speed", "size"):
            raise TinyaotError(f"setting {c.name}: optimize must be speed or size, got {c.flags['optimize']!r}")
        try:
            options_from_flags(flags.pop("compression", None), **flags)
        except TinyaotError as exc:
            raise TinyaotError(f"setting {c.name}: {exc}") from None
        except TypeError as exc:  # a flag of the wrong type (e.g. a list where a number goes)
            raise TinyaotError(f"setting {c.name}: bad flags {c.flags}: {exc}") from None


def run_sweep(model: str | Path, board: str, calibration: str | Path, data: str | Path, out: str | Path,
              configs: list[Config], options: Options | None = None, *, baseline: dict | None = None,
              tolerances: dict | None = None, baseline_name: str = "the baseline") -> dict:
    """Measure every config; write DIR/report.json, report.md, report.html and the Pareto PNGs; return the report.
    `options`: `sweep` (workers, executor, cache: True, False or the ResultCache to use), `verification.verify`
    (each firmware run under QEMU), `verification.limit` (the first N labelled samples), `verification.label_output`
    (the output top-1 is scored on, for a model of several outputs; default its first), `output` (echo, quiet: no
    progress bar). Each setting's own options come from its flags (sweep/run.py `measure`).
    With `baseline` (a sweep report) the gate's verdict goes into the report (`gate`) and its .md and .html.
    Interrupted (SIGINT/SIGTERM) propagates with `kept` saying which results stay."""
    options = Options() if options is None else options
    workers, executor = options.sweep.workers, options.sweep.executor
    qemu, limit = options.verification.verify, options.verification.limit
    label_output = options.verification.label_output
    use_cache = options.sweep.cache is not False
    cache = options.sweep.cache if isinstance(options.sweep.cache, ResultCache) else None
    quiet, echo = options.output.quiet, options.output.echo
    if executor not in EXECUTORS:
        raise TinyaotError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
    b = load_board(board)  # a bad board name fails before any work
    files = {"model": Path(model), "calibration": Path(calibration), "data": Path(data)}
    for role, path in files.items():
        if not path.is_file():
            raise TinyaotError(f"{role} file not found: {path}" if not path.exists() else
                               f"{role} {path} is not a file")
    check_configs(configs)
    out = Path(out)
    check_output_folder(out)  # a folder with the user's files in it is refused before any work
    cache_folder()  # an unusable cache folder is an environment error now, not in every setting
    inputs = {role: sha256_file(p) for role, p in files.items()}
    if not out.is_dir():
        with output_folder(out, "sweep", products=PRODUCTS, checked=True) as tmp:
            (tmp / CONFIGS_DIR).mkdir()
    results_dir = out / CONFIGS_DIR
    try:
        results_dir.mkdir(exist_ok=True)
    except OSError as exc:
        raise TinyaotError(f"cannot create {results_dir}: {exc.strerror}") from None
    workers = workers or os.cpu_count() or 1
    cache = cache if cache is not None else ResultCache()
    results: dict[str, dict] = {}
    jobs = []
    reused = {"resumed": 0, "cached": 0}
    for c in configs:
        key = config_key(c, inputs, b.name, qemu, limit, label_output)
        done_file = results_dir / f"{c.name}.json"
        previous, why = read_record(done_file)
        if why is not None:
            warn(f"{done_file} is damaged ({why}); measuring {c.name} again")
        if previous is not None and previous.get("key") == key and not previous.get("error"):
            results[c.name] = previous
            reused["resumed"] += 1
            continue
        hit = cache.get(key) if use_cache else None
        if hit is not None and hit.get("key") == key and not hit.get("error"):
            hit["name"] = c.name
            results[c.name] = hit
            write_file(done_file, record_text(hit), what="sweep record")
            reused["cached"] += 1
            continue
        job_files = {role: str(p.resolve()) for role, p in files.items()}
        if "compression" in c.flags:
            job_files["compression"] = str(Path(c.flags["compression"]).resolve())
        jobs.append({"name": c.name, "flags": c.flags, "command_line": c.command_line, "key": key,
                     "flags_digest": flags_digest(c.flags), "files": job_files, "board": b.name, "qemu": qemu,
                     "limit": limit, "label_output": label_output,
                     "deploy_dir": str((results_dir / c.name).resolve())})
    say = echo if (echo is not None and not quiet) else None
    if say and (reused["resumed"] or reused["cached"]):
        say(f"{reused['resumed']} settings already in {results_dir}, {reused['cached']} from the cache; "
            f"measuring {len(jobs)}")
    bar = _progress(len(configs), quiet)
    if bar is not None:
        bar.update(bar.task_ids[0], completed=len(configs) - len(jobs))
    started = time.monotonic()
    finished = []

    def on_done(job: dict, result: dict) -> None:
        result["flags_digest"] = job.get("flags_digest")
        results[job["name"]] = result
        finished.append(job["name"])
        # written at once: a sweep stopped after this point keeps this setting's figures
        write_file(results_dir / f"{job['name']}.json", record_text(result), what="sweep record")
        if use_cache and not result.get("error"):
            cache.put(job["key"], result)
        if bar is not None:
            bar.update(bar.task_ids[0], advance=1, description=job["name"])
        elif say:  # no terminal (a CI log): one line per finished setting
            left = len(jobs) - len(finished)
            say(f"[{len(configs) - left}/{len(configs)}] {job['name']}: {figures_line(result)}; "
                f"{result.get('seconds', 0):.1f} s, elapsed {time.monotonic() - started:.0f} s, {left} left")

    try:
        with stop_on_signals():  # SIGTERM too unwinds: workers stopped, finished results kept
            EXECUTORS[executor](jobs, workers, on_done)
    except (Interrupted, KeyboardInterrupt) as exc:
        if not isinstance(exc, Interrupted):
            exc = Interrupted(signal.SIGINT)
        tidy_folder(results_dir)  # a worker that had to be killed while stopping leaves its staging folder: gone
        kept = len(results)
        exc.kept = (f"kept {kept} finished setting(s) of {len(configs)} in {results_dir} (a rerun of the same "
                    f"command resumes them); the reports were not written")
        raise exc from None
    finally:
        if bar is not None:
            bar.stop()
    ordered = [results[c.name] for c in configs]
    for r in ordered:
        r.pop("traceback", None)
    float_top1 = next((r["float_top1"] for r in ordered if r.get("float_top1") is not None), None)
    samples = next((r["samples"] for r in ordered if r.get("samples") is not None), None)
    report = {"tinyaot_version": __version__, "versions": versions(), "model": str(model),
              "model_sha256": inputs["model"], "board": b.name, "calibration": str(calibration), "data": str(data),
              "samples": samples, "float_top1": float_top1, "qemu": qemu, "executor": executor,
              "configs": [{k: v for k, v in r.items() if k != "key"} for r in ordered]}
    if baseline is not None:  # the gate's verdict in report.json, .md and .html too, not only on stdout
        report["gate"] = judge(baseline, report, tolerances or DEFAULT_TOLERANCES, baseline_name).section()
    # The closing switch-over: this grid's settings (their records and, for those that succeeded, their deploy
    # folders, hard-linked) and the new reports, exchanged with DIR in one step.
    with output_folder(out, "sweep", products=PRODUCTS) as tmp:
        (tmp / CONFIGS_DIR).mkdir()
        for c in configs:
            link_tree(results_dir / f"{c.name}.json", tmp / CONFIGS_DIR / f"{c.name}.json")
            if not results[c.name].get("error") and (results_dir / c.name).is_dir():
                link_tree(results_dir / c.name, tmp / CONFIGS_DIR / c.name)
        write_reports(report, tmp)
    return report
