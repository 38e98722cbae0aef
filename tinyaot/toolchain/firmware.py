"""Building firmware for a board: render the HAL (startup, linker script, semihosting shim), compile and link with
arm-none-eabi-gcc, and read section sizes back with arm-none-eabi-size.

A program too big for the board is the error users meet most, so a RAM or flash overflow becomes a TinyaotError
naming the board and the number of bytes missing; any other compiler failure reports its first error line.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Iterable

import jinja2

from tinyaot import paths
from tinyaot.boards import Board
from tinyaot.toolchain.proc import COMPILE_TIMEOUT_S, INSPECT_TIMEOUT_S, run_tool
from tinyaot.errors import TinyaotError

# Flags every build uses on top of the board's cpu flags (DESIGN: C99, warning-free with -Wall -Wextra).
COMMON_CFLAGS = ("-O2", "-std=c99", "-Wall", "-Wextra", "-ffunction-sections", "-fdata-sections")
# -nostartfiles: startup.c is the whole runtime start. libc stays for memcpy/memset (GCC emits calls to them from
# plain loops) and libgcc for division on cores without a divide instruction.
LINK_FLAGS = ("-nostartfiles", "-Wl,--gc-sections")

HAL_FILES = ("startup.c", "tinyaot_hal.c", "tinyaot_hal.h", "linker.ld")
# Bytes of each canary zone the linker script puts below the stack limit and after the model arena (a multiple of
# 8, so the stack above it stays 8-byte aligned). Small on purpose: an overrun writes the first bytes past a region
# before any later ones, so a few words catch it, and the zones cost RAM on the smallest boards.
CANARY_BYTES = 32

# Which Debian package provides each tool, for the install hint when one is missing.
_PACKAGES = {
    "arm-none-eabi-gcc": "gcc-arm-none-eabi libnewlib-arm-none-eabi",
    "arm-none-eabi-size": "binutils-arm-none-eabi",
    "arm-none-eabi-nm": "binutils-arm-none-eabi",
    "qemu-system-arm": "qemu-system-arm",
    "gcc": "gcc",
}

_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


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


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(paths.TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _render(template: str, dest: Path, **context: object) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(_environment().get_template(template).render(**context))
    return dest


def render_hal(board: Board, dest_dir: Path, stack_bytes: int | None = None) -> list[Path]:
    """Write the board's HAL (startup.c, tinyaot_hal.c, tinyaot_hal.h, linker.ld) into dest_dir."""
    stack = board.stack_bytes if stack_bytes is None else stack_bytes
    if stack <= 0 or stack % 8:
        raise TinyaotError(f"stack size must be a positive multiple of 8 bytes, got {stack}")
    return [_render(f"hal/{f}", Path(dest_dir) / f, board=board, stack_bytes=stack, canary_bytes=CANARY_BYTES)
            for f in HAL_FILES]


def render_harness(name: str, dest_dir: Path) -> Path:
    """Write verify_main.c, the verification harness for the model whose C prefix is tinyaot_<name>_."""
    if not _C_IDENTIFIER.match(name):
        raise TinyaotError(f"model name '{name}' is not a C identifier")
    return _render("harness/verify_main.c", Path(dest_dir) / "verify_main.c", name=name, NAME=name.upper())


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
            return f"the program does not fit board '{board.name}': {region.lower()} is too small ({_first_error(output)})"
    return None


def build_firmware(sources: list[Path], include_dirs: list[Path], board: Board, out_dir: Path,
                   name: str = "firmware", defines: Iterable[str] = (), *, stack_bytes: int | None = None,
                   extra_cflags: Iterable[str] = (), werror: bool = False,
                   timeout_s: float = COMPILE_TIMEOUT_S) -> Path:
    """Compile and link `sources` with the board's HAL into out_dir/<name>.elf and return that path.

    The HAL is rendered into out_dir (which is also on the include path, for tinyaot_hal.h). `defines` are
    "NAME" or "NAME=VALUE" strings. stack_bytes overrides the board's stack reservation. werror turns warnings
    into errors, which is how tests hold generated code to the warning-free promise. A compile and link longer
    than timeout_s is stopped and raises TinyaotError.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    gcc = find_tool("arm-none-eabi-gcc")
    stack = board.stack_bytes if stack_bytes is None else stack_bytes
    hal = render_hal(board, out_dir, stack_bytes=stack)
    hal_sources = [p for p in hal if p.suffix == ".c"]
    linker_script = out_dir / "linker.ld"
    elf = out_dir / f"{name}.elf"

    cmd = [gcc, *compile_flags(board), *(["-Werror"] if werror else []), *extra_cflags]
    cmd += [f"-I{d}" for d in [out_dir, *include_dirs]]
    cmd += [f"-D{d}" for d in defines]
    cmd += [str(p) for p in [*hal_sources, *sources]]
    cmd += [*LINK_FLAGS, f"-T{linker_script}", f"-Wl,-Map={out_dir / (name + '.map')}", "-o", str(elf)]
    proc = run_tool(cmd, what=f"arm-none-eabi-gcc building {elf.name} for board '{board.name}'",
                    timeout_s=timeout_s)
    (out_dir / f"{name}.build.log").write_text(" ".join(cmd) + "\n" + proc.stdout + proc.stderr)
    if proc.returncode != 0:
        output = proc.stdout + proc.stderr
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
