"""Boards as data: every board file loads, names and aliases resolve, mistakes in a board file are errors."""
from __future__ import annotations

import pytest

from tinyaot.boards import ARCHES, Board, list_boards, load_board
from tinyaot.errors import TinyaotError

# The product's promise per board (name: qemu machine, core, flash origin/size, RAM origin/size).
EXPECTED = {
    "stm32": ("netduinoplus2", "cortex-m4", 0x08000000, 1 << 20, 0x20000000, 128 << 10),
    "mps2-an385": ("mps2-an385", "cortex-m3", 0, 4 << 20, 0x20000000, 4 << 20),
    "mps2-an386": ("mps2-an386", "cortex-m4", 0, 4 << 20, 0x20000000, 4 << 20),
    "mps2-an500": ("mps2-an500", "cortex-m7", 0, 4 << 20, 0x20000000, 4 << 20),
    "mps2-an505": ("mps2-an505", "cortex-m33", 0x10000000, 4 << 20, 0x38000000, 2 << 20),
    "mps3-an547": ("mps3-an547", "cortex-m55", 0, 512 << 10, 0x20000000, 512 << 10),
    "microbit": ("microbit", "cortex-m0", 0, 256 << 10, 0x20000000, 16 << 10),
    "stm32vldiscovery": ("stm32vldiscovery", "cortex-m3", 0x08000000, 128 << 10, 0x20000000, 8 << 10),
}


def test_every_supported_board_is_a_data_file_with_the_promised_memory_map():
    boards = {b.name: b for b in list_boards()}
    assert set(boards) == set(EXPECTED)
    for name, (machine, core, flash_origin, flash_bytes, ram_origin, ram_bytes) in EXPECTED.items():
        b = boards[name]
        assert (b.qemu_machine, b.core, b.flash_origin, b.flash_bytes, b.ram_origin, b.ram_bytes) == (
            machine, core, flash_origin, flash_bytes, ram_origin, ram_bytes), name
        assert b.arch in ARCHES
        assert f"-mcpu={b.core}" in b.cpu_flags
        assert 0 < b.stack_bytes <= b.ram_bytes // 4


def test_isa_features_follow_the_core():
    assert load_board("microbit").arch == "armv6-m"
    assert not load_board("microbit").has_dsp
    assert load_board("mps2-an385").float_abi == "soft"
    assert load_board("stm32").has_dsp and load_board("stm32").float_abi == "hard"
    assert load_board("m55").has_mve and load_board("m55").arch == "armv8.1-m.main"
    # MSPLIM exists on ARMv8-M only.
    assert {b.name for b in list_boards() if b.set_msplim} == {"mps2-an505", "mps3-an547"}


def test_aliases_and_case_resolve_to_the_same_board():
    assert load_board("stm32") == load_board("netduinoplus2") == load_board("STM32F405")
    assert load_board("an505").name == "mps2-an505"
    assert load_board(" Microbit ").name == "microbit"


def test_unknown_board_names_every_known_board():
    with pytest.raises(TinyaotError) as err:
        load_board("esp32")
    message = str(err.value)
    assert message.startswith("unknown board 'esp32'; known boards: ")
    for name in EXPECTED:
        assert name in message


def test_board_from_a_file_path(tmp_path):
    text = load_board("microbit").path.read_text().replace('name = "microbit"', 'name = "tiny"')
    path = tmp_path / "tiny.toml"
    path.write_text(text.replace("ram_bytes = 0x4000", "ram_bytes = 0x1000"))
    board = load_board(str(path))
    assert isinstance(board, Board) and board.name == "tiny" and board.ram_bytes == 4096


@pytest.mark.parametrize("edit, complaint", [
    (lambda t: t.replace("clock_hz", "clock_mhz"), "unknown keys ['clock_mhz']"),
    (lambda t: t.replace("stack_bytes = 2048\n", ""), "missing keys ['stack_bytes']"),
    (lambda t: t.replace("ram_bytes = 0x4000", "ram_bytes = true"), "'ram_bytes' must be int"),
    (lambda t: t.replace('arch = "armv6-m"', 'arch = "armv9-a"'), "arch 'armv9-a'"),
    (lambda t: t.replace("stack_bytes = 2048", "stack_bytes = 20000"), "stack_bytes must be"),
    (lambda t: t.replace('name = "microbit"', 'name = "other"'), "differs from the file name"),
])
def test_mistakes_in_a_board_file_are_errors(tmp_path, edit, complaint):
    path = tmp_path / "microbit.toml"
    path.write_text(edit(load_board("microbit").path.read_text()))
    with pytest.raises(TinyaotError, match=complaint.replace("[", r"\[").replace("]", r"\]")):
        load_board(str(path))
