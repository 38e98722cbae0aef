"""The versions of what measured a figure: tinyaot, arm-none-eabi-gcc, qemu-system-arm, onnxruntime and numpy.
report.json records them (`versions`), a sweep's cache key hashes them, and `tinyaot compare` notes where a
baseline's differ from the current report's (a figure may have moved with the toolchain, not with the model)."""
from __future__ import annotations

import functools
import re

from tinyaot import __version__
from tinyaot.errors import TinyaotError
from tinyaot.toolchain.proc import run_tool


def _first_line(cmd: list[str]) -> str:
    try:
        out = run_tool(cmd, what=f"{cmd[0]} --version", timeout_s=30).stdout
    except TinyaotError:
        return "missing"
    return out.splitlines()[0].strip() if out.strip() else "missing"


def _short(line: str) -> str:
    """'arm-none-eabi-gcc (15:13.2.rel1-2) 13.2.1 20231009' -> '13.2.1 20231009 (15:13.2.rel1-2)'; QEMU's
    'QEMU emulator version 8.2.2 (Debian 1:8.2.2+ds-0ubuntu1)' -> '8.2.2 (Debian 1:8.2.2+ds-0ubuntu1)'."""
    m = re.search(r"version\s+(\S.*)$", line)
    if m:
        return m.group(1)
    m = re.match(r"^\S+\s+\((.*?)\)\s+(.*)$", line)
    return f"{m.group(2)} ({m.group(1)})" if m else line


@functools.lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    import numpy
    import onnxruntime

    return {"tinyaot": __version__,
            "gcc": _short(_first_line(["arm-none-eabi-gcc", "--version"])),
            "qemu": _short(_first_line(["qemu-system-arm", "--version"])),
            "onnxruntime": onnxruntime.__version__,
            "numpy": numpy.__version__}
