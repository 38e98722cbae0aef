"""Firmware under QEMU on every board: outputs through semihosting files, exit statuses, instruction counts,
arena and stack high-water marks."""
from __future__ import annotations

import random
import re

import pytest

from tinyaot.boards import list_boards, load_board
from tinyaot.toolchain.firmware import symbol_address
from tinyaot.toolchain.qemu import plugin_path, read_stats, run_qemu, split_segments
from tinyaot.errors import TinyaotError

INPUT_SIZE = 37      # TINYAOT_FAKE_INPUT_SIZE in fake_model/fake.h
ARENA_OFFSET = 10    # FAKE_ARENA_OFFSET
SAMPLES = 3


def _samples() -> bytes:
    rng = random.Random(1234)
    return bytes(rng.randrange(256) for _ in range(SAMPLES * INPUT_SIZE))


@pytest.mark.parametrize("board", list_boards(), ids=lambda b: b.name)
def test_fake_model_runs_on_every_board(tmp_path, board, build_fake):
    elf = build_fake(board, tmp_path / "fw")
    data = _samples()
    runs = []
    for attempt in ("first", "second"):
        workdir = tmp_path / attempt
        workdir.mkdir()
        (workdir / "input.bin").write_bytes(data)
        result = run_qemu(elf, board, workdir, timeout_s=20)
        assert result.exit_code == 0, result.stderr
        # output = input + 1 (mod 256): right only if .data was copied and the harness moved every sample.
        assert (workdir / "output.bin").read_bytes() == bytes((b + 1) & 0xFF for b in data)
        runs.append((result, read_stats(workdir)))

    (first, stats), (second, stats_again) = runs
    assert stats == stats_again
    assert stats["samples"] == SAMPLES
    # The model writes arena[10 .. 46]: the paint-and-scan must find exactly that extent.
    assert stats["arena_high_water_bytes"] == ARENA_OFFSET + INPUT_SIZE
    assert stats["stack_reserved_bytes"] == board.stack_bytes
    # invoke keeps a 37-byte volatile buffer on the stack; the whole program needs more than invoke alone.
    assert INPUT_SIZE <= stats["invoke_stack_bytes"] < stats["stack_high_water_bytes"] < board.stack_bytes

    # Instruction counts are deterministic, positive, and the same for every sample of this data-independent model.
    assert first.segments == second.segments
    assert first.instructions_total == second.instructions_total
    per_sample = split_segments(first.segments, SAMPLES)
    assert len(per_sample[0]) == 2  # harness mark, the model's mark between its two "layers", harness mark
    assert per_sample[0] == per_sample[1] == per_sample[2]
    assert all(count > 0 for count in first.segments)
    assert first.instructions_total > sum(first.segments)


@pytest.mark.parametrize("board", list_boards(), ids=lambda b: b.name)
def test_main_return_value_is_qemu_exit_status(tmp_path, board, build_program):
    elf = build_program(board, tmp_path, "int main(void) { return 7; }\n")
    result = run_qemu(elf, board, tmp_path, count_instructions=False)
    assert result.exit_code == 7
    assert result.instructions_total is None and result.segments == []


FEATURE_PROGRAM = r"""
#include <stdint.h>
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#include <arm_acle.h>
#endif
#ifdef __ARM_FEATURE_MVE
#include <arm_mve.h>
#endif
volatile float half = 1.5f;
volatile int8_t v[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
volatile int32_t packed = 0x00030002, weights = 0x00050004;
/* Exit status: a bit per ISA feature the build enabled AND whose instructions computed the right answer. */
int main(void) {
    int seen = 0;
    if ((int)(half * 3.0f) != 4) return 100;  /* float arithmetic works either way (FPU or libgcc) */
#ifdef __ARM_FP
    seen |= 1;
#endif
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
    if (__smlad((uint32_t)packed, (uint32_t)weights, 1) == 2 * 4 + 3 * 5 + 1) seen |= 2;
#endif
#ifdef __ARM_FEATURE_MVE
    if (vmladavq_s8(vldrbq_s8((const int8_t *)v), vldrbq_s8((const int8_t *)v)) == 1496) seen |= 4;
#endif
    return seen;
}
"""


@pytest.mark.parametrize("board", list_boards(), ids=lambda b: b.name)
def test_board_flags_enable_the_features_the_board_claims_and_qemu_runs_them(tmp_path, board, build_program):
    # Hard-float and Helium code only runs if the start-up code enabled the coprocessors (CPACR).
    elf = build_program(board, tmp_path, FEATURE_PROGRAM)
    result = run_qemu(elf, board, tmp_path, count_instructions=False)
    assert result.exit_code == board.has_fpu | board.has_dsp << 1 | board.has_mve << 2, result.stderr


def test_invoke_stack_matches_gcc_stack_usage(tmp_path, build_fake):
    # -fstack-usage states invoke's frame; the paint-and-scan measure of invoke must agree with it.
    board = load_board("mps2-an386")
    out = tmp_path / "fw"
    elf = build_fake(board, out, extra_cflags=["-fstack-usage"])
    (su_file,) = (out / "firmware.objects").glob("*fake.su")  # beside fake.c's object
    su = su_file.read_text()
    frame = int(re.search(r"tinyaot_fake_invoke\t(\d+)\tstatic", su).group(1))
    (tmp_path / "input.bin").write_bytes(_samples())
    assert run_qemu(elf, board, tmp_path).exit_code == 0
    # tinyaot_mark, the only callee, uses no stack; the scan sees whole words, so it can only round down.
    measured = read_stats(tmp_path)["invoke_stack_bytes"]
    assert frame - 4 < measured <= frame


@pytest.mark.parametrize("board_name", ["mps2-an385", "microbit"])
def test_instruction_counts_are_exact(tmp_path, board_name, build_program):
    # Two builds that differ only by 990 NOPs between two marks must differ by exactly 990 in that segment,
    # which also spans several translation blocks (QEMU ends a block after at most 512 instructions).
    board = load_board(board_name)
    source = ('#include "tinyaot_hal.h"\n'
              "#define STR2(x) #x\n#define STR(x) STR2(x)\n"
              "int main(void) {\n tinyaot_mark();\n"
              ' __asm__ volatile(".rept " STR(NOPS) "\\n nop\\n .endr");\n'
              " tinyaot_mark();\n return 0;\n}\n")
    counts = {}
    for nops in (10, 1000):
        elf = build_program(board, tmp_path / str(nops), source, defines=[f"NOPS={nops}"])
        result = run_qemu(elf, board, tmp_path / str(nops))
        assert result.exit_code == 0 and len(result.segments) == 1
        counts[nops] = result.segments[0]
    assert counts[1000] - counts[10] == 990
    assert counts[10] >= 10


def test_harness_reports_io_and_invoke_failures(tmp_path, build_fake):
    board = load_board("stm32vldiscovery")
    elf = build_fake(board, tmp_path / "fw")
    missing = tmp_path / "missing"
    missing.mkdir()
    assert run_qemu(elf, board, missing, count_instructions=False).exit_code == 16
    ragged = tmp_path / "ragged"
    ragged.mkdir()
    (ragged / "input.bin").write_bytes(bytes(INPUT_SIZE + 1))
    result = run_qemu(elf, board, ragged, count_instructions=False)
    assert result.exit_code == 17 and "not a whole number of samples" in result.stderr

    failing = build_fake(board, tmp_path / "fw_fail", defines=["FAKE_INVOKE_FAILS"])
    (tmp_path / "input.bin").write_bytes(_samples())
    result = run_qemu(failing, board, tmp_path, count_instructions=False)
    assert result.exit_code == 20 and "invoke returned an error" in result.stderr
    assert result.exit_meaning == "the model's invoke returned an error"


@pytest.mark.parametrize("board_name, code, name", [
    ("microbit", 3, "HardFault"),      # ARMv6-M: every fault is a HardFault
    ("mps2-an386", 6, "UsageFault"),   # mainline: UsageFault enabled by the start-up code
])
def test_faults_exit_with_their_code_and_name(tmp_path, board_name, code, name, build_program):
    board = load_board(board_name)
    elf = build_program(board, tmp_path, "int main(void) { __builtin_trap(); }\n")
    result = run_qemu(elf, board, tmp_path, count_instructions=False)
    assert result.exit_code == code and result.exit_meaning == name
    # The report carries the faulting pc, which must be inside main.
    pc = int(re.search(r"pc=0x([0-9a-f]+)", result.stderr).group(1), 16)
    assert name in result.stderr
    assert 0 <= pc - symbol_address(elf, "main") < 16


@pytest.mark.parametrize("board", list_boards(), ids=lambda b: b.name)
def test_stack_overflow_ends_in_a_reported_fault(tmp_path, board, build_program):
    # The stack sits at the bottom of RAM, so overflowing it must end in a fault report, never a lockup (134),
    # a hang, or a wrong answer computed over a corrupted arena.
    source = ("#include <stdint.h>\n"
              "__attribute__((noinline)) static int deep(int n) {\n"
              " volatile int8_t frame[256];\n frame[0] = (int8_t)n;\n"
              " return n == 0 ? 0 : deep(n - 1) + frame[0];\n}\n"
              "int main(void) { return deep(100); }\n")  # ~26 KB of stack; at most 4 KB reserved
    result = run_qemu(build_program(board, tmp_path, source), board, tmp_path, timeout_s=10,
                      count_instructions=False)
    assert result.exit_code in (3, 4, 5, 6), result.stderr
    assert "stack overflow" in result.stderr
    if board.set_msplim:
        # v8-M: MSPLIM catches the very push that overflows (UsageFault, UFSR.STKOF).
        cfsr = int(re.search(r"CFSR=0x([0-9a-f]+)", result.stderr).group(1), 16)
        assert result.exit_code == 6 and cfsr & (1 << 20)


def test_a_hang_is_killed_at_the_timeout(tmp_path, build_program):
    board = load_board("mps2-an385")
    elf = build_program(board, tmp_path, "int main(void) { for (;;) { } }\n")
    with pytest.raises(TinyaotError, match=r"timed out after 1 s"):
        run_qemu(elf, board, tmp_path, timeout_s=1)


def test_split_segments_rejects_counts_that_do_not_fit_the_samples():
    assert split_segments([5, 6, 100, 5, 6], 2) == [[5, 6], [5, 6]]
    with pytest.raises(TinyaotError):
        split_segments([5, 6, 100, 5], 2)


def test_plugin_is_compiled_once_into_the_configured_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYAOT_CACHE", str(tmp_path / "cache"))
    first = plugin_path()
    assert first.parent == tmp_path / "cache" and first.suffix == ".so"
    stamp = first.stat().st_mtime_ns
    assert plugin_path() == first and first.stat().st_mtime_ns == stamp
    # no temporary left behind; the library's sha256 beside it (checked at every use)
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [first.name, first.name + ".sha256"]
