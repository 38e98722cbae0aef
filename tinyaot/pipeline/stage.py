"""Stage 2, stage: a compiled model -> the folder an engineer vendors, written into a staging folder that replaces
the output folder only once everything succeeded.

The folder (see README "Vendoring the generated C"):
    <name>.h, <name>.c        the model: every symbol and macro carries its name (tinyaot_<name>_...)
    tinyaot_*.c, tinyaot_*.h  the shared kernels, byte-identical in every folder of one tinyaot version
    Makefile, CMakeLists.txt, <name>.mk
    hal/                      the board's startup code, linker script and semihosting shim (verification only)
    firmware/                 the verification harness and, once built, firmware.elf and firmware.map
    report.json, report.md
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from tinyaot.boards import Board
from tinyaot.codegen.emit import Emitted, emit_model
from tinyaot.codegen.project import render_build_files, render_hal, render_harness
from tinyaot.errors import TinyaotError
from tinyaot.toolchain.firmware import compile_flags

from .compile import Compiled

HAL_DIR = "hal"
FIRMWARE_DIR = "firmware"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def staging(out_dir: Path):
    """A sibling temp folder that replaces `out_dir` only if everything inside the block succeeds, so a failed
    deploy never leaves a half-written output folder (and never destroys a previous good one). mkdtemp creates the
    folder private (0700); it gets the mode any new folder gets (0755 under the usual umask 022) before it becomes
    `out_dir`, as a checked-out folder would have."""
    out_dir = Path(out_dir)
    parent = out_dir.resolve().parent
    if out_dir.exists() and not out_dir.is_dir():
        raise TinyaotError(f"--out {out_dir} exists and is not a directory")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=parent))
    except OSError as exc:
        raise TinyaotError(f"cannot write to {parent}: {exc.strerror}") from None
    try:
        yield tmp
        tmp.chmod(0o777 & ~_umask())
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if out_dir.exists():
        old = parent / f".{out_dir.name}.old-{tmp.name.rsplit('-', 1)[-1]}"
        out_dir.rename(old)
    tmp.rename(out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def stage_model(compiled: Compiled, board: Board, folder: Path, *, harness: bool = True) -> Emitted:
    """Write the model's C, the shared kernels, the build files, the board's HAL (hal/) and, with `harness`, the
    verification harness (firmware/verify_main.c) into `folder`. Returns what codegen emitted."""
    folder = Path(folder)
    emitted = emit_model(compiled.graph, compiled.plan.offsets, compiled.plan.arena_bytes, compiled.lower_bound,
                         f"{board.name} ({board.core})", folder)
    render_hal(board, folder / HAL_DIR)
    render_build_files(folder, emitted, board, compile_flags(board))
    if harness:
        render_harness(emitted.prefix[len("tinyaot_"):], folder / FIRMWARE_DIR, header=emitted.header.name)
    return emitted


def folder_files(folder: Path, emitted: Emitted) -> dict[str, list[str]]:
    """The staged folder's files by role, paths relative to it (report.json's `files`; report.json and report.md
    themselves included)."""
    folder = Path(folder)
    model = [emitted.header.name, emitted.source.name]
    kernels = sorted(p.name for p in emitted.files[2:])
    build = [f for f in ("Makefile", "CMakeLists.txt", f"{emitted.name}.mk") if (folder / f).is_file()]

    def listing(sub: str) -> list[str]:
        return sorted(f"{sub}/{p.name}" for p in (folder / sub).glob("*") if p.is_file())

    return {"model": model, "kernels": kernels, "build": build, "hal": listing(HAL_DIR),
            "firmware": listing(FIRMWARE_DIR), "report": ["report.json", "report.md"]}
