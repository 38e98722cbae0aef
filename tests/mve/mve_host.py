"""Host builds for tests/mve: a test program (written for tinyaot_hal.h's puts/put_uint) linked with kernel files
whose MVE code compiles out on the host, so their plain C paths run; the kernel files under ASan and UBSan with
every report fatal. Nothing here is product code."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from mve.mve_harness import KERNELS

HOST_HAL = r"""
#include <stdio.h>
#include <stdint.h>
static inline void tinyaot_hal_puts(const char *s) { fputs(s, stderr); }
static inline void tinyaot_hal_put_uint(uint32_t v) { fprintf(stderr, "%lu", (unsigned long)v); }
"""


def run_host(tmp_path: Path, source: str, kernel_files) -> subprocess.CompletedProcess:
    """Build (the program plain, so its large constant arrays compile fast; the kernels sanitized) and run."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no host C compiler")
    (tmp_path / "tinyaot_hal.h").write_text(HOST_HAL)
    (tmp_path / "program.c").write_text(source)
    common = ["-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{tmp_path}", f"-I{KERNELS}"]
    san = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    objs = []
    for i, src in enumerate([tmp_path / "program.c", *[KERNELS / f for f in kernel_files]]):
        obj = tmp_path / f"o{i}.o"
        flags = ["-O0"] if i == 0 else ["-O1", "-g", *san]
        subprocess.run([cc, *common, *flags, "-c", str(src), "-o", str(obj)], check=True)
        objs.append(str(obj))
    exe = tmp_path / "program"
    subprocess.run([cc, *san, *objs, "-o", str(exe)], check=True)
    return subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
