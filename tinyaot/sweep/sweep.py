"""`tinyaot sweep`: every setting of a grid measured, results written as they come (DIR/configs/<name>.json, which a
rerun reuses when its content hash still matches: an interrupted sweep resumes), then the reports."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Callable

from tinyaot import __version__
from tinyaot.boards import load_board
from tinyaot.compress.options import options_from_flags
from tinyaot.errors import TinyaotError

from .grid import DEPLOY_KEYS, QUANT_KEYS, Config
from .report import write_reports
from .run import EXECUTORS, ResultCache, _sha256_file, config_key

CONFIGS_DIR = "configs"


def _progress(total: int, quiet: bool):
    """A rich progress bar on stderr when it is a terminal; nothing otherwise (CI logs stay clean)."""
    if quiet or not sys.stderr.isatty():
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.description}"), console=Console(stderr=True), transient=True)
    bar.start()
    bar.add_task("", total=total)
    return bar


def run_sweep(model: str | Path, board: str, calibration: str | Path, data: str | Path, out: str | Path,
              configs: list[Config], *, workers: int | None = None, qemu: bool = True, executor: str = "process",
              limit: int | None = None, cache: ResultCache | None = None, use_cache: bool = True,
              quiet: bool = False, echo: Callable[[str], None] | None = None) -> dict:
    """Measure every config; write DIR/report.json, report.md, report.html and the Pareto PNGs; return the report."""
    if executor not in EXECUTORS:
        raise TinyaotError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
    b = load_board(board)  # a bad board name fails before any work
    files = {"model": Path(model), "calibration": Path(calibration), "data": Path(data)}
    for role, path in files.items():
        if not path.is_file():
            raise TinyaotError(f"{role} file not found: {path}")
    for c in configs:  # bad flags fail now, in one line naming the setting, not after the others ran
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
    inputs = {role: _sha256_file(p) for role, p in files.items()}
    out = Path(out)
    results_dir = out / CONFIGS_DIR
    try:
        results_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TinyaotError(f"cannot create {out}: {exc.strerror}") from None
    workers = workers or os.cpu_count() or 1
    cache = cache if cache is not None else ResultCache()
    results: dict[str, dict] = {}
    jobs = []
    reused = {"resumed": 0, "cached": 0}
    for c in configs:
        key = config_key(c, inputs, b.name, qemu, limit)
        done_file = results_dir / f"{c.name}.json"
        previous = _read(done_file)
        if previous is not None and previous.get("key") == key and not previous.get("error"):
            results[c.name] = previous
            reused["resumed"] += 1
            continue
        hit = cache.get(key) if use_cache else None
        if hit is not None and hit.get("key") == key:
            hit["name"] = c.name
            results[c.name] = hit
            done_file.write_text(json.dumps(hit, indent=2) + "\n")
            reused["cached"] += 1
            continue
        job_files = {role: str(p.resolve()) for role, p in files.items()}
        if "compression" in c.flags:
            job_files["compression"] = str(Path(c.flags["compression"]).resolve())
        jobs.append({"name": c.name, "flags": c.flags, "command_line": c.command_line, "key": key,
                     "files": job_files, "board": b.name, "qemu": qemu, "limit": limit,
                     "deploy_dir": str((results_dir / c.name).resolve())})
    if echo and (reused["resumed"] or reused["cached"]):
        echo(f"{reused['resumed']} settings already in {results_dir}, {reused['cached']} from the cache; "
             f"measuring {len(jobs)}")
    bar = _progress(len(configs), quiet)
    if bar is not None:
        bar.update(bar.task_ids[0], completed=len(configs) - len(jobs))

    def on_done(job: dict, result: dict) -> None:
        results[job["name"]] = result
        # written at once: a sweep stopped after this point keeps this setting's figures
        (results_dir / f"{job['name']}.json").write_text(json.dumps(result, indent=2) + "\n")
        if use_cache and not result.get("error"):
            cache.put(job["key"], result)
        if bar is not None:
            bar.update(bar.task_ids[0], advance=1, description=job["name"])

    try:
        EXECUTORS[executor](jobs, workers, on_done)
    finally:
        if bar is not None:
            bar.stop()
    ordered = [results[c.name] for c in configs]
    for r in ordered:
        r.pop("traceback", None)
    float_top1 = next((r["float_top1"] for r in ordered if r.get("float_top1") is not None), None)
    samples = next((r["samples"] for r in ordered if r.get("samples") is not None), None)
    report = {"tinyaot_version": __version__, "model": str(model), "model_sha256": inputs["model"],
              "board": b.name, "calibration": str(calibration), "data": str(data), "samples": samples,
              "float_top1": float_top1, "qemu": qemu, "executor": executor,
              "configs": [{k: v for k, v in r.items() if k != "key"} for r in ordered]}
    write_reports(report, out)
    return report


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
