"""Running a sweep's settings: one setting = the same `evaluate` and `deploy` calls a user would make (so every figure
equals theirs), run in parallel by a process pool or on a Ray cluster, each result written as soon as it is known
(an interrupted sweep resumes), and cached by content hash.

The cache key of a setting is a hash of everything its figures depend on: the bytes of the model, calibration and
data files (and of a per-layer spec), the board, the flags, whether QEMU runs, and a fingerprint of the compiler
itself (tinyaot's sources, templates and board files, the versions of arm-none-eabi-gcc, qemu-system-arm, numpy and
onnxruntime). Equal keys mean equal figures, because every step is deterministic (fixed seeds, bit-exact integer
code). The cache lives in $TINYAOT_CACHE/sweep (default ~/.cache/tinyaot/sweep); past its size cap
(TINYAOT_SWEEP_CACHE_MB, default 64) the least recently used entries go. Host libraries have their own
content-hash cache (toolchain/host.py), which is what makes a cold setting's `evaluate` cheap after its first run.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path
from typing import Callable

from tinyaot import __version__
from tinyaot.cache import cache_root, read_record, warn, write_record
from tinyaot.compress.options import options_from_flags
from tinyaot.errors import InternalError, TinyaotError, VerificationError
from tinyaot.files import env_error, sha256_file
from tinyaot.frontend import import_model
from tinyaot.interrupt import run_job, worker_setup
from tinyaot.options import Options
from tinyaot.paths import TEMPLATES
from tinyaot.pipeline.compile import compile_model
from tinyaot.pipeline.deploy import deploy
from tinyaot.pipeline.evaluate import evaluate
from tinyaot.toolchain.versions import versions

from .grid import QUANT_KEYS, Config

PACKAGE = Path(__file__).resolve().parent.parent
CACHE_CAP_MB = 64
# How long stopped workers get to tidy up (their staging folders, their tools' process groups) before SIGKILL.
STOP_GRACE_S = 10.0


@functools.lru_cache(maxsize=1)
def fingerprint() -> str:
    """A hash of the compiler: tinyaot's sources, templates and board files, and the tools and libraries whose
    versions could change a figure."""
    h = hashlib.sha256(__version__.encode())
    roots = [PACKAGE, TEMPLATES, PACKAGE.parent / "boards" if (PACKAGE.parent / "boards").is_dir() else None]
    for root in [r for r in roots if r is not None]:
        for f in sorted(Path(root).rglob("*")):
            if f.is_file() and f.suffix in (".py", ".j2", ".c", ".h", ".toml", ".json", ".ld", ".s", ".S", ".yaml"):
                h.update(str(f.relative_to(root)).encode())
                h.update(sha256_file(f).encode())
    h.update(json.dumps(versions(), sort_keys=True).encode())
    return h.hexdigest()


def cache_dir() -> Path:
    return cache_root() / "sweep"


def config_key(config: Config, inputs: dict[str, str], board: str, qemu: bool, limit: int | None,
               label_output: str | None = None) -> str:
    """The content hash of one setting (see the module's docstring). `inputs`: file role -> sha256."""
    flags = dict(config.flags)
    if "compression" in flags:
        flags["compression"] = sha256_file(Path(flags["compression"]))
    scored = {} if label_output is None else {"label_output": label_output}  # old keys stay valid without it
    blob = json.dumps({"inputs": inputs, "board": board, "flags": flags, "qemu": qemu, "limit": limit,
                       "compiler": fingerprint(), **scored}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


class ResultCache:
    """JSON results by key, least recently used evicted past `cap_bytes` (a hit refreshes the entry's mtime)."""

    def __init__(self, folder: Path | None = None, cap_bytes: int | None = None):
        self.folder = Path(folder) if folder is not None else cache_dir()
        mb = os.environ.get("TINYAOT_SWEEP_CACHE_MB")
        self.cap = cap_bytes if cap_bytes is not None else int(float(mb) * 2**20) if mb else CACHE_CAP_MB * 2**20

    def get(self, key: str) -> dict | None:
        """The cached result of `key`, if its record checks out (a damaged one: a warning, and None)."""
        path = self.folder / f"{key}.json"
        data, why = read_record(path)
        if why is not None or (data is not None and data.get("key", key) != key):
            warn(f"cached sweep result {path} is damaged ({why or 'wrong key'}); measuring it again")
            return None
        if data is not None:
            try:
                os.utime(path)
            except OSError:
                pass
        return data

    def put(self, key: str, result: dict) -> None:
        """Store a result (sealed with its checksum, renamed into place: parallel sweeps never read half an entry);
        a cache that cannot be written only costs time."""
        write_record(self.folder / f"{key}.json", result)
        try:
            self.evict()
        except OSError:
            pass

    def evict(self) -> None:
        entries = []
        for p in self.folder.glob("*.json"):
            try:
                st = p.stat()
            except OSError:
                continue
            entries.append((st.st_mtime, st.st_size, p))
        total = sum(e[1] for e in entries)
        for _, size, p in sorted(entries, key=lambda e: e[0]):
            if total <= self.cap:
                break
            p.unlink(missing_ok=True)
            total -= size


def measure(job: dict) -> dict:
    """One setting's figures, from the functions `tinyaot evaluate` and `tinyaot deploy` run: top-1 from `evaluate`
    (host-compiled C), bytes and instructions from `deploy` (arm-none-eabi-size, QEMU), the model imported and compiled
    once. Never raises: a failure is the result's `error`. Runs in a worker process (or a Ray task): `job` is plain
    data."""
    flags = dict(job["flags"])
    result = {"name": job["name"], "flags": job["flags"], "command_line": job["command_line"], "key": job["key"],
              "top1": None, "float_top1": None, "weights_bytes": None, "flash_bytes": None, "arena_bytes": None,
              "instructions": None, "macs": None, "samples": None, "verified": False, "error": None,
              "error_kind": None}
    started = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="tinyaot-sweep-")
    try:
        files = _materialize(job, Path(scratch))
        spec = flags.pop("compression", None)
        if spec is not None:
            spec = files.get("compression", spec)
        quant = {k: flags.pop(k) for k in QUANT_KEYS if k in flags}
        optimize = flags.pop("optimize", "speed")  # the kernel variants deploy chooses (evaluate's C is generic)
        options = Options.of(compression=options_from_flags(spec, **flags), optimize=optimize, limit=job["limit"],
                             compare_onnxruntime=False, verify=job["qemu"], label_output=job.get("label_output"),
                             **quant)
        model = import_model(files["model"])
        # one compilation for both (compression's fitting is most of a setting's time), unless a precision search
        # picks the widths, which evaluate and deploy each run with what they are given
        compiled = None if options.quantization.max_accuracy_drop is not None else \
            compile_model(model, files["calibration"], options)
        ev = evaluate(model, files["calibration"], files["data"], options, compiled=compiled)
        out = Path(job["deploy_dir"]) if job.get("deploy_dir") else Path(scratch) / "deploy"
        dep = deploy(model, job["board"], files["calibration"], out, options, compiled=compiled)
        r = dep.report
        result.update(top1=ev["int8_top1"], float_top1=ev["float_top1"], samples=ev["samples"],
                      weights_bytes=r["memory"]["weights_bytes"], flash_bytes=r["memory"]["flash_bytes"],
                      arena_bytes=r["memory"]["arena_bytes"], macs=r["macs"], verified=bool(r["verify"]["ran"]),
                      instructions=r["verify"].get("instructions") if r["verify"]["ran"] else None)
        if ev["weights_bytes"] != result["weights_bytes"]:  # one setting, one compilation: they must agree
            raise InternalError(f"evaluate and deploy disagree on weights bytes ({ev['weights_bytes']} vs "
                               f"{result['weights_bytes']}); a tinyaot bug")
    except TinyaotError as exc:
        result["error"] = str(exc)
        result["error_kind"] = error_kind(exc)
    except OSError as exc:  # the environment (a full disk, an unwritable folder), not the setting
        result["error"] = str(env_error(exc))
        result["error_kind"] = "environment"
    except Exception as exc:  # a bug in one setting must not lose the others' figures
        result["error"] = f"internal error: {type(exc).__name__}: {exc}"
        result["error_kind"] = "internal"
        result["traceback"] = traceback.format_exc()
    finally:  # also on Interrupted (SIGTERM from the parent): the scratch folder goes, the exception goes on
        shutil.rmtree(scratch, ignore_errors=True)
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


# A failed setting's kind decides the sweep's exit code (README "Exit codes"): "verification" 1 (the code failed
# its proof), "input" and "environment" 2 (the setting or the machine is misconfigured), "internal" 3 (a bug).
def error_kind(exc: TinyaotError) -> str:
    if isinstance(exc, VerificationError):
        return "verification"
    if isinstance(exc, InternalError):
        return "internal"
    return "input"


def _materialize(job: dict, scratch: Path) -> dict[str, str]:
    """The job's input files: its paths, or (a Ray task on another machine) the bytes it carries, written out."""
    files = {role: job["files"][role] for role in job["files"]}
    for role, blob in (job.get("blobs") or {}).items():
        if not Path(files[role]).exists():
            dest = scratch / Path(files[role]).name
            dest.write_bytes(blob)
            files[role] = str(dest)
    return files


Done = Callable[[dict, dict], None]


def run_process_pool(jobs: list[dict], workers: int, on_done: Done) -> None:
    """Run the jobs on a pool of forked workers, calling on_done in this process as each finishes. Workers die
    with this process (PR_SET_PDEATHSIG) and ignore SIGINT; when this process is interrupted (or fails), the
    results that finished are still handed to on_done, the queued jobs are cancelled and the running ones told to
    stop (SIGTERM: their staging folders and tools go), and the exception goes on."""
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            on_done(job, measure(job))
        return
    # fork: the workers start with tinyaot already imported (spawn would import it again in each worker)
    pool = ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=get_context("fork"),
                               initializer=worker_setup, initargs=(os.getpid(),))
    pending = {}
    try:
        pending = {pool.submit(run_job, measure, job): job for job in jobs}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                on_done(pending.pop(fut), fut.result())
    except BaseException:
        _stop(pool, pending, on_done)
        raise
    pool.shutdown(wait=True)


def _stop(pool: ProcessPoolExecutor, pending: dict, on_done: Done) -> None:
    """Keep what finished, cancel the rest, tell the workers to stop and wait for them (briefly)."""
    for fut in [f for f in pending if f.done() and not f.cancelled()]:
        job = pending.pop(fut)
        try:
            on_done(job, fut.result(timeout=0))
        except BaseException:
            pass  # a worker that died while stopping has no result to keep
    processes = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        try:
            p.terminate()  # SIGTERM: the job unwinds (staging folder removed, tool group killed), then exits
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + STOP_GRACE_S
    for p in processes:
        try:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(30.0)  # SIGKILL is certain; its locks are released when it is gone
        except (OSError, ValueError, AssertionError):
            pass


def run_ray(jobs: list[dict], workers: int, on_done: Done) -> None:
    """The jobs as Ray tasks: on the cluster at $RAY_ADDRESS, else on a local instance with `workers` CPUs.
    Each task carries its input files' bytes, so workers need no shared file system."""
    try:
        import ray
    except ImportError:
        raise TinyaotError("--executor ray needs Ray: pip install 'tinyaot[ray]'") from None
    address = os.environ.get("RAY_ADDRESS") or None
    started = not ray.is_initialized()
    if started:
        kwargs = {"address": address} if address else {"num_cpus": workers, "include_dashboard": False}
        ray.init(log_to_driver=False, **kwargs)
    pending = {}
    try:
        task = ray.remote(num_cpus=1)(measure)
        for job in jobs:
            job = dict(job, deploy_dir=None,  # a worker may be another machine: its deploy folder is scratch
                       blobs={role: Path(p).read_bytes() for role, p in job["files"].items()})
            pending[task.remote(job)] = job
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                job = pending.pop(ref)
                job.pop("blobs", None)
                on_done(job, ray.get(ref))
    except BaseException:  # interrupted: the finished results were kept by on_done; the others are cancelled
        for ref in pending:
            try:
                ray.cancel(ref, force=True)
            except Exception:
                pass
        raise
    finally:
        if started:
            ray.shutdown()


EXECUTORS = {"process": run_process_pool, "ray": run_ray}
