"""Building firmware for a board: compile and link with arm-none-eabi-gcc (with the board's HAL, which codegen renders:
startup, linker script, semihosting shim), and read section sizes back with arm-none-eabi-size.

A program too big for the board is the error users meet most, so a RAM or flash overflow becomes a TinyaotError
naming the board and the number of bytes missing; any other compiler failure reports its first error line.
"""
from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import Iterable

from tinyaot.boards import Board
from tinyaot.codegen.project import render_hal
from tinyaot.toolchain.objects import Deadline, compile_objects, remove_working_files
from tinyaot.toolchain.proc import COMPILE_TIMEOUT_S, INSPECT_TIMEOUT_S, run_tool
from tinyaot.errors import TinyaotError

# Flags every build uses on top of the board's cpu flags (DESIGN: C99, warning-free with -Wall -Wextra).
COMMON_CFLAGS = ("-O2", "-std=c99", "-Wall", "-Wextra", "-ffunction-sections", "-fdata-sections")
# -nostartfiles: startup.c is the whole runtime start. libc stays for memcpy/memset (GCC emits calls to them from
# plain loops) and libgcc for division on cores without a divide instruction.
LINK_FLAGS = ("-nostartfiles", "-Wl,--gc-sections")

# Which Debian package provides each tool, for the install hint when one is missing.
_PACKAGES = {
    "arm-none-eabi-gcc": "gcc-arm-none-eabi libnewlib-arm-none-eabi",
    "arm-none-eabi-size": "binutils-arm-none-eabi",
    "arm-none-eabi-nm": "binutils-arm-none-eabi",
    "qemu-system-arm": "qemu-system-arm",
    "gcc": "gcc",
}


def find_tool(name: str) -> str:
    """Absolute path of an executable on PATH, or a TinyaotError telling how to install it."""
    found = shutil.which(name)
    if found is None:
        package = _PACKAGES.get(name, name)
        raise TinyaotError(
            f"'{name}' was not found on PATH; install it with: "
            f"sudo apt-get install --no-install-recommends {package}"
        )
    return found


def compile_flags(board: Board) -> list[str]:
    """The compiler flags a build for `board` uses (cpu flags first), e.g. for a generated Makefile."""
    return [*board.cpu_flags, *COMMON_CFLAGS]


# The most telling line of compiler/linker output, in order of preference: a compiler diagnostic ("file:line:col:
# error: ..."), an unresolved or duplicate symbol, any other linker complaint. Matching on a bare "error" would pick
# up file paths that merely contain the word.
_ERROR_PATTERNS = (r"(?<!collect2: )\b(?:fatal )?error:", r"undefined reference|multiple definition", r"\bld: ",
                   r"\berror\b")


def _first_error(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for pattern in _ERROR_PATTERNS:
        for line in lines:
            if re.search(pattern, line):
                return line
    return lines[0] if lines else "no diagnostic output"


def _overflow_message(output: str, board: Board, stack: int) -> str | None:
    found = {region: int(n) for region, n in re.findall(r"region `(\w+)' overflowed by (\d+) bytes?", output)}
    if "RAM" in found:
        return (f"the program does not fit board '{board.name}': RAM overflowed by {found['RAM']} bytes "
                f"({board.ram_bytes} bytes of RAM, of which {stack} reserved for the stack)")
    if "FLASH" in found:
        return (f"the program does not fit board '{board.name}': flash overflowed by {found['FLASH']} bytes "
                f"({board.flash_bytes} bytes of flash)")
    # ld stops at the region check first; the assertions are a backstop should a section escape the regions.
    for region in ("RAM", "FLASH"):
        if f"TINYAOT_{region}_OVERFLOW" in output:
            return (f"the program does not fit board '{board.name}': {region.lower()} is too small "
                    f"({_first_error(output)})")
    return None


def build_firmware(sources: list[Path], include_dirs: list[Path], board: Board, out_dir: Path,
                   name: str = "firmware", defines: Iterable[str] = (), *, stack_bytes: int | None = None,
                   extra_cflags: Iterable[str] = (), werror: bool = False,
                   timeout_s: float = COMPILE_TIMEOUT_S, hal_dir: Path | None = None) -> Path:
    """Compile and link `sources` with the board's HAL into out_dir/<name>.elf and return that path.

    The HAL is rendered into hal_dir (default out_dir), which is also on the include path, for tinyaot_hal.h; a
    deployed folder passes its own hal/ so the HAL exists once in it. `defines` are
    "NAME" or "NAME=VALUE" strings. stack_bytes overrides the board's stack reservation. werror turns warnings
    into errors, which is how tests hold generated code to the warning-free promise. A compile and link longer
    than timeout_s is stopped and raises TinyaotError.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    gcc = find_tool("arm-none-eabi-gcc")
    stack = board.stack_bytes if stack_bytes is None else stack_bytes
    hal_dir = out_dir if hal_dir is None else Path(hal_dir)
    hal = render_hal(board, hal_dir, stack_bytes=stack)
    hal_sources = [p for p in hal if p.suffix == ".c"]
    linker_script = hal_dir / "linker.ld"
    elf = out_dir / f"{name}.elf"

    flags = [*compile_flags(board), *(["-Werror"] if werror else []), *extra_cflags, *[f"-D{d}" for d in defines]]
    includes = [f"-I{d}" for d in dict.fromkeys([out_dir, hal_dir, *include_dirs])]
    deadline = Deadline(f"arm-none-eabi-gcc building {elf.name} for board '{board.name}'", timeout_s)
    # each source through the object cache (toolchain/objects.py), then one link
    objects, output, returncode = compile_objects(gcc, flags, includes, [*hal_sources, *sources],
                                                  out_dir / f"{name}.objects", deadline)
    cmd = [gcc, *flags, *includes, *map(str, [*hal_sources, *sources]), *LINK_FLAGS, f"-T{linker_script}",
           f"-Wl,-Map={out_dir / (name + '.map')}", "-o", str(elf)]  # what the build amounts to, for the log
    if returncode == 0:
        link = deadline.run([gcc, *flags, *map(str, objects), *LINK_FLAGS, f"-T{linker_script}",
                             f"-Wl,-Map={out_dir / (name + '.map')}", "-o", str(elf)])
        output, returncode = "\n".join(filter(None, [output, (link.stdout + link.stderr).strip()])), link.returncode
    remove_working_files(out_dir / f"{name}.objects")
    (out_dir / f"{name}.build.log").write_text(" ".join(cmd) + "\n" + output)
    if returncode != 0:
        if "No space left on device" in output:  # the disk, not the code
            raise TinyaotError(f"cannot write {out_dir} (or the temporary folder {tempfile.gettempdir()}): No space "
                               "left on device; free some space or choose another folder")
        message = _overflow_message(output, board, stack)
        if message is None:
            message = f"arm-none-eabi-gcc failed for board '{board.name}': {_first_error(output)}"
        raise TinyaotError(message)
    return elf


def elf_size(elf: Path) -> dict[str, int]:
    """Sizes in bytes from arm-none-eabi-size: text (code and constants), data (initialised RAM data, stored in
    flash too), bss (zeroed and uninitialised RAM, the arena included), flash_bytes = text + data,
    static_ram_bytes = data + bss, and stack_bytes, the stack the linker script reserved. size's berkeley format
    counts the reserved stack as bss; it is taken out of bss here so static RAM means the program's own data."""
    size = find_tool("arm-none-eabi-size")

    def run(fmt: str) -> list[list[str]]:
        proc = run_tool([size, fmt, "-d", str(elf)], what=f"arm-none-eabi-size reading {elf}",
                        timeout_s=INSPECT_TIMEOUT_S)
        if proc.returncode != 0:
            raise TinyaotError(f"arm-none-eabi-size failed on {elf}: {_first_error(proc.stderr)}")
        return [line.split() for line in proc.stdout.splitlines()]

    # Berkeley: a header line, then "text data bss dec hex filename".
    text, data, bss = (int(v) for v in run("-B")[1][:3])
    # SysV (-A): one "name size addr" row per section.
    stack = sum(int(row[1]) for row in run("-A") if len(row) == 3 and row[0] == ".stack")
    bss -= stack
    return {"text": text, "data": data, "bss": bss, "flash_bytes": text + data,
            "static_ram_bytes": data + bss, "stack_bytes": stack}


def symbol_address(elf: Path, symbol: str) -> int | None:
    """Address of a function or object in the ELF (Thumb bit cleared), or None if it is not there."""
    nm = find_tool("arm-none-eabi-nm")
    proc = run_tool([nm, "--defined-only", str(elf)], what=f"arm-none-eabi-nm reading {elf}",
                    timeout_s=INSPECT_TIMEOUT_S)
    if proc.returncode != 0:
        raise TinyaotError(f"arm-none-eabi-nm failed on {elf}: {_first_error(proc.stderr)}")
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == symbol:
            # Thumb function symbols carry bit 0 set; QEMU reports instruction addresses without it.
            return int(parts[0], 16) & ~1
    return None
