"""Overruns the verification harness can see: the canary zones after the arena and below the stack, and high-water
marks scanned past the regions they measure, so that they can exceed them."""
from __future__ import annotations

import random

import pytest

from tinyaot.boards import load_board
from tinyaot.codegen.project import CANARY_BYTES
from tinyaot.toolchain.firmware import symbol_address
from tinyaot.toolchain.qemu import overrun, read_stats, run_qemu

INPUT_SIZE = 37      # TINYAOT_FAKE_INPUT_SIZE in fake_model/fake.h
ARENA_SIZE = 100     # TINYAOT_FAKE_ARENA_SIZE
SAMPLES = 3


def _run(elf, board, workdir):
    workdir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(7)
    (workdir / "input.bin").write_bytes(bytes(rng.randrange(256) for _ in range(SAMPLES * INPUT_SIZE)))
    return run_qemu(elf, board, workdir, timeout_s=20, count_instructions=False)


def test_linker_places_the_canaries_against_the_regions(tmp_path, build_fake):
    elf = build_fake(load_board("stm32"), tmp_path)
    arena = symbol_address(elf, "tinyaot_fake_arena")
    assert symbol_address(elf, "__tinyaot_arena_canary_start") == arena + ARENA_SIZE
    assert symbol_address(elf, "__tinyaot_arena_end") == arena + ARENA_SIZE + CANARY_BYTES
    assert (symbol_address(elf, "__tinyaot_stack_canary_start") + CANARY_BYTES
            == symbol_address(elf, "__tinyaot_stack_limit"))


@pytest.mark.parametrize("board_name", ["stm32", "microbit", "mps3-an547"])
def test_intact_canaries_are_reported(tmp_path, board_name, build_fake):
    board = load_board(board_name)
    result = _run(build_fake(board, tmp_path / "fw"), board, tmp_path / "run")
    assert result.exit_code == 0, result.stderr
    stats = read_stats(tmp_path / "run")
    assert stats["arena_canary_intact"] == 1 and stats["stack_canary_intact"] == 1
    assert stats["arena_bytes"] == ARENA_SIZE and stats["canary_bytes"] == CANARY_BYTES
    assert stats["arena_high_water_bytes"] <= ARENA_SIZE
    assert stats["stack_high_water_bytes"] <= stats["stack_reserved_bytes"]
    assert overrun(stats) is None


@pytest.mark.parametrize("board_name", ["stm32", "microbit"])
@pytest.mark.parametrize("past", [1, 3, CANARY_BYTES])
def test_a_kernel_writing_past_the_arena_fails_the_run(tmp_path, board_name, past, build_fake):
    board = load_board(board_name)
    elf = build_fake(board, tmp_path / "fw", defines=[f"FAKE_OVERRUN_BYTES={past}"])
    result = _run(elf, board, tmp_path / "run")
    assert result.exit_code == 22, result.stderr
    assert result.exit_meaning.startswith("arena overrun")
    assert "arena overrun" in result.stderr
    stats = read_stats(tmp_path / "run")
    # Stopped at the first inference, with a high-water mark above the arena's size: by exactly the overrun.
    assert stats["samples"] == 1
    assert stats["arena_high_water_bytes"] == ARENA_SIZE + past > ARENA_SIZE
    assert stats["arena_canary_intact"] == 0 and stats["stack_canary_intact"] == 1
    assert f"wrote {past} byte(s) past the end of its {ARENA_SIZE}-byte arena" in overrun(stats)


@pytest.mark.parametrize("board_name", ["stm32", "microbit"])
def test_a_stack_deeper_than_its_reservation_fails_the_run(tmp_path, board_name, build_fake):
    board = load_board(board_name)
    ok = _run(build_fake(board, tmp_path / "fw"), board, tmp_path / "ok")
    assert ok.exit_code == 0, ok.stderr
    need = read_stats(tmp_path / "ok")["stack_high_water_bytes"]
    # The same program with a stack 1-8 bytes too small: it overruns into the canary zone, not past it (a bigger
    # overrun runs off the bottom of RAM and faults, which test_build_qemu covers), and the harness reports it from
    # there without going past the zone either.
    tiny = (need + 7) // 8 * 8 - 8
    elf = build_fake(board, tmp_path / "fw_tiny", stack_bytes=tiny)
    result = _run(elf, board, tmp_path / "tiny")
    assert result.exit_code == 23, result.stderr
    assert "stack overrun" in result.stderr and result.exit_meaning.startswith("stack overrun")
    stats = read_stats(tmp_path / "tiny")
    assert stats["stack_reserved_bytes"] == tiny
    # The same code needs the same stack: the mark shows the true need, above the reservation.
    assert stats["stack_high_water_bytes"] == need > tiny
    assert stats["stack_canary_intact"] == 0 and stats["arena_canary_intact"] == 1
    assert f"used {need} B of stack, more than the {tiny} B reserved" in overrun(stats)
