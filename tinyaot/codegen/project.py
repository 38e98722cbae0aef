"""Everything around the model's C that tinyaot generates, rendered from templates/ through the one environment
(codegen/env.py): the board's HAL (startup code, linker script, semihosting shim), the verification harness, the
build files an engineer vendors (Makefile, CMakeLists.txt, <name>.mk) and report.md.

Nothing here compiles or runs anything (toolchain/ does); the compiler flags come in as arguments.
"""
from __future__ import annotations

import re
from pathlib import Path

from tinyaot.boards import Board
from tinyaot.errors import TinyaotError

from .env import render, render_to

HAL_FILES = ("startup.c", "tinyaot_hal.c", "tinyaot_hal.h", "linker.ld")
HARNESS = "verify_main.c"
# Bytes of each canary zone the linker script puts below the stack limit and after the model arena (a multiple of
# 8, so the stack above it stays 8-byte aligned). Small on purpose: an overrun writes the first bytes past a region
# before any later ones, so a few words catch it, and the zones cost RAM on the smallest boards.
CANARY_BYTES = 32

_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def render_hal(board: Board, dest_dir: Path, stack_bytes: int | None = None) -> list[Path]:
    """Write the board's HAL (startup.c, tinyaot_hal.c, tinyaot_hal.h, linker.ld) into dest_dir."""
    stack = board.stack_bytes if stack_bytes is None else stack_bytes
    if stack <= 0 or stack % 8:
        raise TinyaotError(f"stack size must be a positive multiple of 8 bytes, got {stack}")
    return [render_to(f"hal/{f}", Path(dest_dir) / f, board=board, stack_bytes=stack, canary_bytes=CANARY_BYTES)
            for f in HAL_FILES]


def render_harness(name: str, dest_dir: Path, header: str | None = None, inputs=("INPUT",),
                   outputs=("OUTPUT",)) -> Path:
    """Write verify_main.c, the verification harness for the model whose C prefix is tinyaot_<name>_ and whose
    header is `header` (default `<name>.h`). `inputs` / `outputs`: the macro stems of the model's ports in invoke's
    order (codegen/io.Port.macro, e.g. "INPUT_LEFT"; the default is a single-input, single-output model's unnamed
    INPUT / OUTPUT macros)."""
    if not _C_IDENTIFIER.match(name):
        raise TinyaotError(f"model name '{name}' is not a C identifier")
    return render_to(f"harness/{HARNESS}", Path(dest_dir) / HARNESS, name=name, NAME=name.upper(),
                     header=header or f"{name}.h", inputs=list(inputs), outputs=list(outputs))


def render_sanitize_runner(prefix: str, header: str, dest_dir: Path, inputs=("INPUT",),
                           outputs=("OUTPUT",)) -> Path:
    """Write sanitize_main.c, the host runner toolchain/sanitize.py builds under ASan and UBSan (`inputs` /
    `outputs` as for render_harness)."""
    return render_to("harness/sanitize_main.c", Path(dest_dir) / "sanitize_main.c", prefix=prefix,
                     PREFIX=prefix.upper(), header=header, inputs=list(inputs), outputs=list(outputs))


def render_build_files(out: Path, emitted, board: Board, cflags: list[str]) -> list[Path]:
    """The build files of a generated folder: Makefile (a static library, the verification firmware, a QEMU run),
    CMakeLists.txt (`add_subdirectory` + `target_link_libraries`) and <name>.mk (for a firmware's own Makefile).
    Kernel targets are guarded by name so two model folders in one build compile each shared kernel once."""
    model_c = emitted.source.name
    kernels = sorted(p.name for p in emitted.sources if p.name != model_c)
    ctx = dict(prefix=emitted.prefix, PREFIX=emitted.prefix.upper(), name=emitted.name, board=board,
               cflags=" ".join(cflags), model_c=model_c, kernel_files=kernels,
               kernel_targets=[f[:-2] for f in kernels], hal_files=HAL_FILES, harness=HARNESS)
    out = Path(out)
    return [render_to("project/Makefile.j2", out / "Makefile", **ctx),
            render_to("project/CMakeLists.txt.j2", out / "CMakeLists.txt", **ctx),
            render_to("project/model.mk.j2", out / f"{emitted.name}.mk", **ctx)]


def render_report_md(report: dict, **extra: object) -> str:
    """report.md from report.json's dict."""
    return render("report/report.md.j2", r=report, **extra)
