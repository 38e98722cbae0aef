"""Overruns a generated model's verification can see, and report.json fields that are measured, not constants.

A normal deploy reports both canaries intact and high-water marks within the planned arena and the reserved
stack; a test-only copy of the generated C whose fully connected kernel is told its output has three more
channels than the arena holds writes past the arena, and the same verification that deploy runs refuses it."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tinyaot.api import compile_model, deploy, evaluate
from tinyaot.pipeline.verify import verify_under_qemu
from tinyaot.boards import load_board
from tinyaot.codegen.project import render_harness
from tinyaot.toolchain.firmware import build_firmware
from tinyaot.toolchain.qemu import read_stats
from tinyaot.codegen.emit import emit_model
from tinyaot.errors import TinyaotError

ROOT = Path(__file__).resolve().parents[2]
SINE = ROOT / "examples" / "tflm_hello_world_sine.onnx"
SINE_CAL = ROOT / "calibration_data" / "tflm_hello_world_sine.npz"


def test_normal_deploy_reports_intact_canaries_and_marks_within_the_plan(tmp_path):
    deploy(SINE, "stm32", SINE_CAL, tmp_path / "out")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    v, m = report["verify"], report["memory"]
    assert v["arena_canary_intact"] is True and v["stack_canary_intact"] is True
    assert 0 < v["arena_high_water_bytes"] <= m["arena_bytes"]
    assert v["stack_reserved_bytes"] == m["stack_bytes"]
    assert 0 < v["stack_high_water_bytes"] <= v["stack_reserved_bytes"]
    assert "(canaries after the arena and below the stack: intact)" in (tmp_path / "out" / "report.md").read_text()


def _broken_sine(tmp_path: Path, extra: int):
    """The sine model's generated C, with step 1's fully connected call told its output has `extra` more channels
    (and its weights as many more rows, read past the table in flash): the kernel then writes `extra` bytes past its
    16-byte output, which the plan put at the very end of the 32-byte arena."""
    compiled = compile_model(SINE, SINE_CAL)
    out = tmp_path / "c"
    emitted = emit_model(compiled.graph, compiled.plan.offsets, compiled.plan.arena_bytes, compiled.lower_bound,
                         "test", out)
    model_c = emitted.source
    text = model_c.read_text()
    body_at = text.index("/* step 1:", text.index("_run("))  # the schedule, which both entry points inline
    end_at = text.index("/* step 2:", body_at)
    step = text[body_at:end_at]
    # Guard the premises, so a change in the plan or the code generator fails here and not mysteriously below.
    assert compiled.plan.arena_bytes == 32 and "(arena + 16)));" in step  # inside TINYAOT_TRY(...)
    broken = step.replace("filter_dims = {16, 1, 1, 16}", f"filter_dims = {{16, 1, 1, {16 + extra}}}")
    broken = broken.replace("output_dims = {1, 1, 1, 16}", f"output_dims = {{1, 1, 1, {16 + extra}}}")
    assert broken.count(str(16 + extra)) == 2
    model_c.write_text(text[:body_at] + broken + text[end_at:])
    board = load_board("stm32")
    fw = out / "firmware"
    harness = render_harness(emitted.prefix[len("tinyaot_"):], fw)
    elf = build_firmware([harness, *[p for p in emitted.files if p.suffix == ".c"]], [out], board, fw,
                         defines=["TINYAOT_TRACE"])
    return compiled, board, elf, fw, len([layer for layer in emitted.layers if layer.code])


def test_a_kernel_writing_past_the_arena_fails_verification(tmp_path):
    compiled, board, elf, fw, layers = _broken_sine(tmp_path, extra=3)
    with pytest.raises(TinyaotError) as err:
        verify_under_qemu(compiled, board, elf, fw, 8, 30, layers)
    msg = str(err.value)
    assert "\n" not in msg
    assert re.search(r"verification failed under QEMU netduinoplus2: arena overrun: the model wrote [1-3] byte\(s\) "
                     r"past the end of its 32-byte arena", msg), msg
    stats = read_stats(fw)
    # The high-water mark is scanned past the arena, so it shows the overrun (a written byte may happen to equal
    # the paint byte, hence a range).
    assert 32 < stats["arena_high_water_bytes"] <= 35
    assert stats["arena_canary_intact"] == 0 and stats["samples"] == 1


def test_a_stack_too_small_for_the_model_fails_verification(tmp_path):
    # The sine model's real firmware, built once with the board's stack to measure what it needs, then with a
    # reservation 4-8 bytes short of that: the run overruns into the canary below the stack and is refused.
    compiled = compile_model(SINE, SINE_CAL)
    out = tmp_path / "c"
    emitted = emit_model(compiled.graph, compiled.plan.offsets, compiled.plan.arena_bytes, compiled.lower_bound,
                         "test", out)
    board = load_board("stm32")
    sources = [p for p in emitted.files if p.suffix == ".c"]
    layers = len([layer for layer in emitted.layers if layer.code])
    needs = []
    for stack in (None, "tiny"):
        fw = out / f"fw_{stack}"
        harness = render_harness(emitted.prefix[len("tinyaot_"):], fw)
        stack_bytes = None if stack is None else (needs[0] + 7) // 8 * 8 - 8
        elf = build_firmware([harness, *sources], [out], board, fw, defines=["TINYAOT_TRACE"],
                             stack_bytes=stack_bytes)
        if stack is None:
            v, _ = verify_under_qemu(compiled, board, elf, fw, 2, 30, layers)
            assert v.stack_canary_intact is True
            needs.append(v.stack_high_water_bytes)
            continue
        with pytest.raises(TinyaotError) as err:
            verify_under_qemu(compiled, board, elf, fw, 2, 30, layers)
        assert (f"stack overrun: the program used {needs[0]} B of stack, more than the {stack_bytes} B reserved"
                in str(err.value)), str(err.value)
        assert read_stats(fw)["stack_canary_intact"] == 0


def test_evaluate_computes_host_c_matches_reference(tmp_path):
    x = np.load(SINE_CAL)["serving_default_dense_input:0"][:6]
    data = tmp_path / "data.npz"
    np.savez(data, x=x, y=np.zeros(len(x), np.int64))  # one output: top-1 is trivially class 0
    r = evaluate(SINE, SINE_CAL, data, compare_onnxruntime=False)
    assert r["host_c_matches_reference"] is True and r["reference_checked_samples"] == 4
