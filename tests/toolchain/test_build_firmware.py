"""Firmware builds: sizes, a model too big for the board as a clear error, compiler errors, missing tools."""
from __future__ import annotations

import re

import pytest

from tinyaot.boards import load_board
from tinyaot.codegen.project import CANARY_BYTES, render_harness
from tinyaot.toolchain.firmware import elf_size, find_tool, symbol_address
from tinyaot.errors import TinyaotError

SMALL_PROGRAM = """
#include <stdint.h>
%s
int main(void) { return (int)%s; }
"""


def test_static_arrays_beyond_ram_name_the_board_and_the_overflow(tmp_path, build_program):
    board = load_board("microbit")  # 16 KB RAM, 2 KB of it stack
    source = SMALL_PROGRAM % ("static volatile int8_t big[20 * 1024];", "big[5]")
    with pytest.raises(TinyaotError) as err:
        build_program(board, tmp_path, source)
    message = str(err.value)
    assert "'microbit'" in message and "RAM" in message
    overflow = int(re.search(r"overflowed by (\d+) bytes", message).group(1))
    # 20480 + 2048 stack - 16384 RAM = 6144, plus the two canary zones (below the stack, after the arena), the HAL's
    # few bytes of .bss and alignment.
    canaries = 2 * CANARY_BYTES
    assert 6144 + canaries <= overflow < 6144 + canaries + 64


def test_constants_beyond_flash_name_the_board_and_the_overflow(tmp_path, build_program):
    board = load_board("stm32vldiscovery")  # 128 KB flash
    # Read through a volatile pointer: GCC puts `const volatile` objects in RAM, and an unread table is dropped.
    source = SMALL_PROGRAM % ("const int8_t table[130 * 1024] = {1}; const int8_t *volatile p = table;", "p[5]")
    with pytest.raises(TinyaotError) as err:
        build_program(board, tmp_path, source)
    message = str(err.value)
    assert "'stm32vldiscovery'" in message and "flash overflowed by" in message
    overflow = int(re.search(r"overflowed by (\d+) bytes", message).group(1))
    # 2 KB of table over, plus the code (a few KB at most).
    assert 2048 < overflow < 2048 + 8192


def test_the_same_program_fits_a_bigger_board_and_sizes_add_up(tmp_path, build_program):
    board = load_board("mps2-an385")
    base = elf_size(build_program(board, tmp_path / "a", SMALL_PROGRAM % ("", "0")))
    bigger = elf_size(build_program(board, tmp_path / "b", SMALL_PROGRAM % (
        "static volatile int8_t buf[1000]; const int8_t table[3000] = {1}; const int8_t *volatile p = table;",
        "buf[1] + p[2]")))
    assert base["stack_bytes"] == bigger["stack_bytes"] == board.stack_bytes
    assert bigger["bss"] - base["bss"] == 1000
    assert bigger["data"] - base["data"] == 4  # the pointer
    assert 3000 <= bigger["text"] - base["text"] < 3100
    for sizes in (base, bigger):
        assert sizes["flash_bytes"] == sizes["text"] + sizes["data"]
        assert sizes["static_ram_bytes"] == sizes["data"] + sizes["bss"]


def test_compiler_errors_report_the_first_error_line(tmp_path, build_program):
    with pytest.raises(TinyaotError, match=r"failed for board 'mps2-an385': .*program\.c:2:.*error"):
        build_program(load_board("mps2-an385"), tmp_path, "int main(void) {\n return undeclared; }\n")


def test_warnings_fail_when_werror_is_asked(tmp_path, build_program):
    with pytest.raises(TinyaotError, match="unused"):
        build_program(load_board("microbit"), tmp_path, "int main(void) { int unused; return 0; }\n")


def test_missing_tool_gives_an_install_hint():
    assert find_tool("arm-none-eabi-gcc").endswith("arm-none-eabi-gcc")
    with pytest.raises(TinyaotError, match="not found on PATH; install it with: .*apt-get install"):
        find_tool("arm-none-eabi-does-not-exist")


def test_harness_name_must_be_a_c_identifier(tmp_path):
    with pytest.raises(TinyaotError, match="not a C identifier"):
        render_harness("kws; system(1)", tmp_path)
    text = render_harness("kws_2", tmp_path).read_text()
    assert "tinyaot_kws_2_invoke" in text and "TINYAOT_KWS_2_INPUT_SIZE" in text


def test_marker_address_has_the_thumb_bit_cleared(tmp_path, build_program):
    elf = build_program(load_board("mps2-an505"), tmp_path, "#include \"tinyaot_hal.h\"\n"
                        "int main(void) { tinyaot_mark(); return 0; }\n")
    address = symbol_address(elf, "tinyaot_mark")
    assert address is not None and address % 2 == 0 and address >= 0x10000000
    assert symbol_address(elf, "no_such_symbol") is None
