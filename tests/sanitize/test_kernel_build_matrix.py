"""Every kernel in templates/kernels compiles warning-free (-Werror) at every optimisation level a firmware project
may use, for the three M-profile architecture families the kernels have code paths for: v6-M (no DSP), v7E-M
(SIMD32: SMLAD, SXTB16) and v8.1-M (Helium). Firmware often builds at -O0/-Og for debugging and -Os for size, so
a kernel that only builds at the product's -O2 is a bug (GCC refused the always_inline decoders of the compressed
fully connected kernels at -O1 once).

The cpu flags come from the board files (the ones the product builds with) and the other flags from
tinyaot/toolchain/firmware.py; one gcc invocation compiles all kernels per combination (-c only), and the 15
invocations run two at a time (the suite's machines have two cores), each test reading its own result.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tinyaot.boards import load_board
from tinyaot.toolchain.firmware import COMMON_CFLAGS
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


def _compile(arch: str, opt: str, out: Path) -> tuple[list[str], subprocess.CompletedProcess, list[str]]:
    board_name, want_arch = CORES[arch]
    board = load_board(board_name)
    assert board.arch == want_arch, f"board {board_name} is {board.arch}, expected {want_arch}"
    flags = [*board.cpu_flags, *(f for f in COMMON_CFLAGS if not f.startswith("-O")), opt, "-Werror", "-c"]
    out.mkdir(parents=True)
    cmd = [ARM_GCC, *flags, f"-I{KERNELS}", *map(str, kernel_sources())]
    proc = subprocess.run(cmd, cwd=out, capture_output=True, text=True, timeout=600)
    return flags, proc, sorted(p.stem for p in out.glob("*.o"))


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """All combinations compiled up front, two gcc processes at a time."""
    root = tmp_path_factory.mktemp("kernel_matrix")
    combos = [(a, o) for a in CORES for o in OPT_LEVELS]
    with ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1))) as pool:
        futures = {c: pool.submit(_compile, *c, root / f"{c[0]}{c[1]}") for c in combos}
        return {c: f.result() for c, f in futures.items()}


@pytest.mark.skipif(ARM_GCC is None, reason="arm-none-eabi-gcc not installed")
@pytest.mark.parametrize("opt", OPT_LEVELS)
@pytest.mark.parametrize("arch", list(CORES))
def test_all_kernels_build_warning_free(builds, arch: str, opt: str) -> None:
    flags, proc, objects = builds[arch, opt]
    assert {"-std=c99", "-Wall", "-Wextra", "-Werror"} <= set(flags)
    diagnostics = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 0 and not diagnostics, f"{arch} {opt}: {' '.join(flags)}\n{diagnostics[:4000]}"
    assert objects == [s.stem for s in kernel_sources()]
