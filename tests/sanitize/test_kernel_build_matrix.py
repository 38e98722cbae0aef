"""Every kernel in templates/kernels compiles warning-free (-Werror) at every optimisation level a firmware project
may use, for the three M-profile architecture families the kernels have code paths for: v6-M (no DSP), v7E-M
(SIMD32: SMLAD, SXTB16) and v8.1-M (Helium). Firmware often builds at -O0/-Og for debugging and -Os for size, so
a kernel that only builds at the product's -O2 is a bug (GCC refused the always_inline decoders of the compressed
fully connected kernels at -O1 once).

The cpu flags come from the board files (the ones the product builds with) and the other flags from
tinyaot/build/firmware.py; one gcc invocation compiles all kernels per combination (-c only), which keeps the 15
combinations within a few seconds each.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tinyaot.boards import load_board
from tinyaot.build.firmware import COMMON_CFLAGS
from tinyaot.paths import TEMPLATES

KERNELS = TEMPLATES / "kernels"
ARM_GCC = shutil.which("arm-none-eabi-gcc")

# board whose cpu flags stand for the architecture, and the architecture the board file must name
CORES = {"v6-M": ("microbit", "armv6-m"), "v7E-M": ("stm32", "armv7e-m"), "v8.1-M": ("mps3-an547", "armv8.1-m.main")}
OPT_LEVELS = ("-O0", "-O1", "-O2", "-O3", "-Os")


def kernel_sources() -> list[Path]:
    sources = sorted(KERNELS.glob("*.c"))
    assert len(sources) >= 30, f"expected the kernel templates in {KERNELS}"
    return sources


@pytest.mark.skipif(ARM_GCC is None, reason="arm-none-eabi-gcc not installed")
@pytest.mark.parametrize("opt", OPT_LEVELS)
@pytest.mark.parametrize("arch", list(CORES))
def test_all_kernels_build_warning_free(arch: str, opt: str, tmp_path: Path) -> None:
    board_name, want_arch = CORES[arch]
    board = load_board(board_name)
    assert board.arch == want_arch, f"board {board_name} is {board.arch}, expected {want_arch}"
    flags = [*board.cpu_flags, *(f for f in COMMON_CFLAGS if not f.startswith("-O")), opt, "-Werror", "-c"]
    cmd = [ARM_GCC, *flags, f"-I{KERNELS}", *map(str, kernel_sources())]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    diagnostics = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 0 and not diagnostics, f"{arch} {opt}: {' '.join(flags)}\n{diagnostics[:4000]}"
    objects = sorted(p.stem for p in tmp_path.glob("*.o"))
    assert objects == [s.stem for s in kernel_sources()]
