"""Stage 3, build: a staged folder -> the verification firmware (firmware/firmware.elf) and its section sizes.

The firmware is the model, its kernels, the harness (firmware/verify_main.c) and the folder's own HAL (hal/),
compiled with the flags the folder's Makefile uses, held to -Werror.
"""
from __future__ import annotations

from pathlib import Path

from tinyaot.boards import Board
from tinyaot.codegen.emit import Emitted
from tinyaot.codegen.project import HARNESS
from tinyaot.toolchain.firmware import build_firmware, compile_flags, elf_size

from .stage import FIRMWARE_DIR, HAL_DIR

# What stays in firmware/ after a build: the harness, the ELF and its link map (the build log and objects go), and
# the input it was verified with, so that `make run` in the folder runs it.
KEEP_SUFFIXES = (".elf", ".c", ".map")
KEEP_NAMES = ("input.bin",)


def build_verification_firmware(emitted: Emitted, board: Board, folder: Path, *, trace: bool = True,
                                werror: bool = True) -> Path:
    """Compile and link the staged model in `folder` with its harness and HAL into firmware/firmware.elf; `trace`
    defines TINYAOT_TRACE (the per-layer instruction marks QEMU counts), `werror` holds it to no warnings."""
    folder = Path(folder)
    fw = folder / FIRMWARE_DIR
    return build_firmware([fw / HARNESS, *emitted.sources], [folder], board, fw, name="firmware",
                          defines=["TINYAOT_TRACE"] if trace else [], werror=werror, hal_dir=folder / HAL_DIR)


# The level of a debug build, whose stack the report and the header state beside the product build's.
DEBUG_OPT = "-O0"


def optimization_level(board: Board) -> str:
    """The -O flag the product build uses for `board` (the last one of its compile flags, as GCC reads them)."""
    return [f for f in compile_flags(board) if f.startswith("-O")][-1]


def build_debug_firmware(emitted: Emitted, board: Board, folder: Path, out_dir: Path, stack_bytes: int) -> Path:
    """The verification firmware of the staged `folder` built again with every file at DEBUG_OPT, into `out_dir`
    (its own HAL there, with a stack reservation of `stack_bytes`): what a debug build of the product needs. No
    instruction marks, warnings not held (the product build was)."""
    fw = Path(folder) / FIRMWARE_DIR
    return build_firmware([fw / HARNESS, *emitted.sources], [folder], board, out_dir, name="debug",
                          extra_cflags=[DEBUG_OPT], stack_bytes=stack_bytes, hal_dir=Path(out_dir) / HAL_DIR)


def firmware_sizes(elf: Path) -> dict[str, int]:
    """Flash and static RAM of the firmware (arm-none-eabi-size)."""
    return elf_size(elf)


def tidy_firmware_dir(folder: Path) -> None:
    """Leave only the harness, firmware.elf, firmware.map and the verified input (input.bin) in firmware/ (the build
    log, QEMU's output files and the HAL copies are working files, not part of the vendored folder)."""
    for junk in (Path(folder) / FIRMWARE_DIR).glob("*"):
        if junk.is_file() and junk.suffix not in KEEP_SUFFIXES and junk.name not in KEEP_NAMES:
            junk.unlink()
