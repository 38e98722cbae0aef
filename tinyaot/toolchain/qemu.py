"""Running firmware under qemu-system-arm, with exact instruction counts from tinyaot's TCG plugin.

QEMU is not cycle-accurate, but the number of executed instructions is deterministic, so it is what tinyaot
reports: in total, and per segment between consecutive calls of the firmware's `tinyaot_mark()`.
"""
from __future__ import annotations

import base64
import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tinyaot.boards import Board
from tinyaot.cache import cache_folder, env_error, evict, install, read_record, verified, warn, write_record
from tinyaot.toolchain.firmware import find_tool, symbol_address
from tinyaot.toolchain.proc import COMPILE_TIMEOUT_S, run_tool
from tinyaot.toolchain.versions import versions
from tinyaot.errors import TinyaotError

PLUGIN_SOURCE = Path(__file__).with_name("insn_plugin.c")
MARK_SYMBOL = "tinyaot_mark"

# Exit statuses with a meaning (TINYAOT_EXIT_* in templates/hal/tinyaot_hal.h; 134 is QEMU's own abort).
EXIT_MEANINGS = {
    0: "success",
    2: "NMI",
    3: "HardFault",
    4: "MemManage fault",
    5: "BusFault",
    6: "UsageFault",
    8: "SecureFault",
    9: "unexpected exception",
    16: "cannot open input.bin",
    17: "input.bin is empty or not a whole number of samples",
    18: "short read from input.bin",
    19: "cannot write output.bin",
    20: "the model's invoke returned an error",
    21: "cannot write stats.txt",
    22: "arena overrun (the canary after the model arena was overwritten)",
    23: "stack overrun (the canary below the stack limit was overwritten)",
    24: "the arena canary is not right after the arena (linker script)",
    134: "QEMU aborted (core lockup, e.g. a fault while handling a fault)",
}


@dataclass
class QemuResult:
    exit_code: int                   # QEMU's exit status; a signal N shows as 128 + N, as in a shell
    stdout: str
    stderr: str                      # semihosting console output (SYS_WRITE0) lands here
    instructions_total: int | None   # None when not counted (or QEMU died before the plugin could write)
    segments: list[int] = field(default_factory=list)  # instructions between consecutive tinyaot_mark() calls

    @property
    def exit_meaning(self) -> str:
        return EXIT_MEANINGS.get(self.exit_code, "program-defined exit status")


def cache_dir() -> Path:
    """Where compiled helpers are kept: $TINYAOT_CACHE, else ~/.cache/tinyaot (created; an unusable folder is a
    TinyaotError naming it)."""
    return cache_folder()


def plugin_path() -> Path:
    """The instruction-count plugin, compiled with the host gcc on first use and cached by a hash of its source.

    The compiler writes to a private temporary name that is then renamed into place, so concurrent first uses
    (parallel tests, two CLI runs) never load a half-written library; the library's own sha256 is recorded beside
    it and checked at every use, so a truncated or overwritten plugin is rebuilt (with a warning), not loaded.
    """
    source = PLUGIN_SOURCE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    target = cache_dir() / f"insn_plugin-{digest}.so"
    if verified(target, "QEMU instruction-count plugin"):
        return target
    gcc = find_tool("gcc")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
        os.close(fd)
    except OSError as exc:
        raise env_error(exc, target.parent, "write to the cache folder") from None
    try:
        proc = run_tool([gcc, "-shared", "-fPIC", "-O2", "-std=gnu11", "-Wall", "-Wextra",
                         "-o", tmp_name, str(PLUGIN_SOURCE)],
                        what="gcc compiling the QEMU instruction-count plugin", timeout_s=COMPILE_TIMEOUT_S)
        if proc.returncode != 0:
            if "No space left" in proc.stderr:
                raise TinyaotError(f"cannot write {target.parent}: No space left on device; free some space or "
                                   "set TINYAOT_CACHE to another folder")
            raise TinyaotError(f"cannot compile the QEMU instruction-count plugin: {proc.stderr.strip()}")
        try:
            install(Path(tmp_name), target)
        except OSError as exc:
            raise env_error(exc, target, "write to the cache folder") from None
    finally:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
    return target


def _option_value(text: str) -> str:
    # QEMU's option parser splits at commas; a literal comma in a value is written as two.
    return text.replace(",", ",,")


def _read_counts(path: Path) -> tuple[int | None, list[int]]:
    if not path.is_file():
        return None, []
    lines = path.read_text().split("\n")
    total = int(lines[0].split()[1])
    n_marks = int(lines[1].split()[1])
    marks = [int(v) for v in lines[2:2 + n_marks]]
    return total, [b - a for a, b in zip(marks, marks[1:])]


def run_qemu(elf: Path, board: Board, workdir: Path, timeout_s: float = 60,
             count_instructions: bool = True, cached: bool = False) -> QemuResult:
    """Run `elf` on the board's QEMU machine with semihosting, in `workdir` (where the firmware's host files are
    read and written). A run longer than timeout_s is killed and raises TinyaotError. `cached`: a successful run of
    the same ELF bytes on the same input.bin, machine and QEMU is taken from the run cache (`RUN_FILES` written
    back into `workdir`) instead of run again; for a measurement that only repeats one (the debug build's stack,
    the uncompressed model's costs), never for a verification the user asked for."""
    qemu = find_tool("qemu-system-arm")
    elf = Path(elf).resolve()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if cached and not any((workdir / name).exists() for name in RUN_FILES):  # (else a run's files are unclear)
        key = _run_key(qemu, elf, board, workdir, count_instructions)
        hit = _cached_run(key, workdir)
        if hit is not None:
            return hit
        result = run_qemu(elf, board, workdir, timeout_s, count_instructions)
        if result.exit_code == 0:
            _store_run(key, result, workdir)
        return result
    cmd = [qemu, "-M", board.qemu_machine, "-nographic", "-monitor", "none",
           "-semihosting-config", "enable=on,target=native", "-kernel", str(elf)]
    with tempfile.TemporaryDirectory(prefix="tinyaot-qemu-") as tmp:
        counts_file = Path(tmp) / "counts.txt"
        if count_instructions:
            plugin_args = [str(plugin_path()), f"out={counts_file}"]
            mark = symbol_address(elf, MARK_SYMBOL)
            if mark is not None:
                plugin_args.append(f"mark={mark:#x}")
            cmd += ["-plugin", ",".join(_option_value(a) for a in plugin_args)]
        proc = run_tool(cmd, cwd=workdir, what=f"QEMU ({board.qemu_machine}) running {elf.name}",
                        timeout_s=timeout_s,
                        timeout_hint=" (the firmware hangs or the model is too slow for the timeout)")
        total, segments = _read_counts(counts_file) if count_instructions else (None, [])
    code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    return QemuResult(exit_code=code, stdout=proc.stdout, stderr=proc.stderr,
                      instructions_total=total, segments=segments)


# ---- the run cache: QEMU is deterministic (same ELF, input and QEMU -> same outputs and instruction counts) -------
RUN_FILES = ("output.bin", "stats.txt")  # what the verification harness writes into its working folder
RUN_CACHE = "qemu-runs"
RUN_CACHE_ENTRIES = 4000  # records of a few hundred bytes each: the least recently used go past this


def _run_key(qemu: str, elf: Path, board: Board, workdir: Path, count_instructions: bool) -> str:
    h = hashlib.sha256(b"tinyaot qemu run 1\0")
    for part in (versions()["qemu"], Path(qemu).name, board.qemu_machine, str(count_instructions),
                 hashlib.sha256(PLUGIN_SOURCE.read_bytes()).hexdigest() if count_instructions else ""):
        h.update(part.encode() + b"\0")
    h.update(hashlib.sha256(elf.read_bytes()).digest())
    inp = workdir / "input.bin"
    h.update(hashlib.sha256(inp.read_bytes()).digest() if inp.is_file() else b"no input")
    return h.hexdigest()


def _cached_run(key: str, workdir: Path) -> QemuResult | None:
    """The recorded run of `key` with its files written into `workdir`, or None (no record; a damaged one: a
    warning)."""
    path = cache_folder(RUN_CACHE) / f"{key}.json"
    rec, why = read_record(path)
    if why is not None:
        warn(f"cached QEMU run {path} is damaged ({why}); running it again")
        return None
    if rec is None:
        return None
    for name, data in rec["files"].items():
        (workdir / name).write_bytes(base64.b64decode(data))
    os.utime(path)  # recently used
    return QemuResult(exit_code=rec["exit_code"], stdout=rec["stdout"], stderr=rec["stderr"],
                      instructions_total=rec["instructions_total"], segments=list(rec["segments"]))


def _store_run(key: str, result: QemuResult, workdir: Path) -> None:
    files = {name: base64.b64encode((workdir / name).read_bytes()).decode()
             for name in RUN_FILES if (workdir / name).is_file()}
    try:
        folder = cache_folder(RUN_CACHE)
    except TinyaotError:
        return  # a cache that cannot be written only costs time
    path = folder / f"{key}.json"
    write_record(path, {"exit_code": result.exit_code, "stdout": result.stdout, "stderr": result.stderr,
                        "instructions_total": result.instructions_total, "segments": result.segments,
                        "files": files})
    evict(folder, ".json", RUN_CACHE_ENTRIES, keep=path)


def read_stats(workdir: Path) -> dict[str, int]:
    """The key=value integers the verification harness writes to stats.txt (templates/harness/verify_main.c says
    what each means); written at the end of a run and also when a canary stops it."""
    path = Path(workdir) / "stats.txt"
    try:
        text = path.read_text()
    except OSError as exc:
        raise TinyaotError(f"the firmware wrote no stats file {path}: {exc}") from exc
    stats = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep or not value.strip().isdigit():
            raise TinyaotError(f"malformed line in {path}: {line!r}")
        stats[key.strip()] = int(value)
    return stats


def overrun(stats: dict[str, int]) -> str | None:
    """What an overwritten canary says about the run, in one sentence, or None if both canaries held.

    The harness scans the high-water marks over region + canary zone, so an overrun shows as a mark above the
    region's size; the `*_canary_intact` flags are the harness's own verdict on the same bytes."""
    problems = []
    arena, arena_hw = stats.get("arena_bytes"), stats.get("arena_high_water_bytes")
    if stats.get("arena_canary_intact") == 0 or (arena is not None and arena_hw is not None and arena_hw > arena):
        problems.append(f"arena overrun: the model wrote {arena_hw - arena} byte(s) past the end of its {arena}-byte "
                        f"arena (arena high-water {arena_hw} B; the canary after the arena was overwritten)")
    reserved, stack_hw = stats.get("stack_reserved_bytes"), stats.get("stack_high_water_bytes")
    if stats.get("stack_canary_intact") == 0 or (reserved is not None and stack_hw is not None
                                                  and stack_hw > reserved):
        problems.append(f"stack overrun: the program used {stack_hw} B of stack, more than the {reserved} B "
                        f"reserved (the canary below the stack limit was overwritten)")
    return "; ".join(problems) or None


def split_segments(segments: list[int], samples: int) -> list[list[int]]:
    """Group the harness's segments by sample: the per-sample lists of instruction counts inside invoke.

    The harness marks before and after each invoke and the model may mark between layers, so a run of S samples
    with K marks inside invoke has S*(K+2) marks: per sample K+1 segments inside invoke, then one segment of
    harness work (file I/O) before the next sample, which is dropped here.
    """
    if samples <= 0 or (len(segments) + 1) % samples:
        raise TinyaotError(f"{len(segments)} instruction segments cannot be split into {samples} samples")
    per_sample = (len(segments) + 1) // samples  # K + 2 marks per sample
    inside = per_sample - 1
    if inside < 1:
        raise TinyaotError("the firmware did not mark the start and end of each inference")
    return [segments[s * per_sample: s * per_sample + inside] for s in range(samples)]

