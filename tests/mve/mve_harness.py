"""Build and run small C programs on the Helium board (mps3-an547, Cortex-M55 with MVE) for the tests in
tests/mve: the product's HAL (startup enables the FPU/MVE coprocessors, semihosting, tinyaot_mark) plus one
program file and the kernel templates. Nothing here is product code."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from tinyaot.boards import load_board
from tinyaot.paths import TEMPLATES
from tinyaot.toolchain.firmware import build_firmware
from tinyaot.toolchain.qemu import QemuResult, run_qemu

KERNELS = TEMPLATES / "kernels"
HAVE_ARM = shutil.which("arm-none-eabi-gcc") is not None and shutil.which("qemu-system-arm") is not None
needs_arm = pytest.mark.skipif(not HAVE_ARM, reason="arm-none-eabi-gcc or qemu-system-arm is not installed")


def c_array(name: str, values, ctype: str) -> str:
    """A static const C array (values must fit ctype; int32 minimum written as an expression)."""
    flat = np.asarray(values).astype(np.int64).ravel()
    items = ", ".join(f"({v + 1} - 1)" if v == -(1 << 31) else str(int(v)) for v in flat)
    return f"static const {ctype} {name}[{max(len(flat), 1)}] = {{{items or '0'}}};\n"


def run_program(out_dir: Path, source: str, kernel_files=(), board_name: str = "mps3-an547",
                count: bool = False, defines=()) -> QemuResult:
    """Compile `source` (a program with main) with the given kernel .c files for the board (-Werror) and run it."""
    board = load_board(board_name)
    out_dir.mkdir(parents=True, exist_ok=True)
    src = out_dir / "program.c"
    src.write_text(source)
    elf = build_firmware([src, *[KERNELS / f for f in kernel_files]], [KERNELS], board, out_dir, werror=True,
                         defines=defines)
    return run_qemu(elf, board, out_dir, timeout_s=60, count_instructions=count)
