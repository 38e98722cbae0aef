"""Stage 2, stage: a compiled model -> the folder an engineer vendors, written into a staging folder that replaces
the output folder only once everything succeeded.

The folder (see README "Vendoring the generated C"):
    <name>.h, <name>.c        the model: every symbol and macro carries its name (tinyaot_<name>_...)
    tinyaot_*.c, tinyaot_*.h  the shared kernels, byte-identical in every folder of one tinyaot version
    Makefile, CMakeLists.txt, <name>.mk
    hal/                      the board's startup code, linker script and semihosting shim (verification only)
    firmware/                 the verification harness and, once built, firmware.elf, firmware.map and input.bin (the
                              samples it was verified with: `make run` runs them)
    report.json, report.md
    .tinyaot-manifest.json    what tinyaot wrote (tinyaot/files.py): a redeploy replaces only such folders
"""
from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from tinyaot.boards import Board
from tinyaot.codegen.emit import Emitted, emit_model
from tinyaot.codegen.project import render_build_files, render_hal, render_harness
from tinyaot.files import DEPLOY_PRODUCTS, MANIFEST, STAGING_MARK, output_folder
from tinyaot.toolchain.firmware import compile_flags

from .compile import Compiled

HAL_DIR = "hal"
FIRMWARE_DIR = "firmware"


@contextlib.contextmanager
def staging(out_dir: Path):
    """A staging folder that replaces `out_dir` only if everything inside the block succeeds, atomically and only
    if `out_dir` holds nothing but an earlier tinyaot output (tinyaot/files.py: the manifest, the refusal of foreign
    files, the exchange, the tidying of what killed runs left). A failed deploy never leaves a half-written output
    folder and never touches an existing one."""
    with output_folder(out_dir, "deploy", products=DEPLOY_PRODUCTS) as tmp:
        yield tmp


def clear_staging(tmp: Path) -> None:
    """Empty a staging folder for a second try (its lock marker stays)."""
    for child in Path(tmp).iterdir():
        if child.name == STAGING_MARK:
            continue
        shutil.rmtree(child) if child.is_dir() else child.unlink()


def stage_model(compiled: Compiled, board: Board, folder: Path, *, harness: bool = True) -> Emitted:
    """Write the model's C, the shared kernels, the build files, the board's HAL (hal/) and, with `harness`, the
    verification harness (firmware/verify_main.c) into `folder`. Returns what codegen emitted."""
    folder = Path(folder)
    emitted = emit_model(compiled.graph, compiled.plan.offsets, compiled.plan.arena_bytes, compiled.lower_bound,
                         f"{board.name} ({board.core})", folder, compiled.patch,
                         compiled.layer_by_layer[0] if compiled.layer_by_layer else None,
                         aligned_only=board.aligned_only)
    render_hal(board, folder / HAL_DIR)
    render_build_files(folder, emitted, board, compile_flags(board))
    if harness:
        render_harness(emitted.prefix[len("tinyaot_"):], folder / FIRMWARE_DIR, header=emitted.header.name,
                       inputs=[p.macro for p in emitted.inputs], outputs=[p.macro for p in emitted.outputs])
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
            "firmware": listing(FIRMWARE_DIR), "report": ["report.json", "report.md"],
            "manifest": [MANIFEST]}  # what tinyaot wrote, with hashes: a redeploy replaces only such folders
