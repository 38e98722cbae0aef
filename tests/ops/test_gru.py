"""GRU (tinyaot/ops/gru.py, templates/kernels/tinyaot_gru_s8.c): onnx.helper-built GRU layers (forward, reverse,
bidirectional; linear_before_reset 0 and 1; zero or given initial state; Y or Y_h) deployed under QEMU: C == numpy
reference bit for bit, the layer within its measured bound (ops/gru.py `oracle_tolerance`) of onnxruntime's float
GRU on the dequantized inputs."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from op_models import calibration, const, deploy_verified, layer_ops, save_model
from tinyaot.ops.gru import GRU


def _gru_model(tmp_path, direction, lbr, state, last_only=False, steps=8, inp=6, hidden=5, seed=0):
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    inits = [const("W", rng.standard_normal((dirs, 3 * hidden, inp)) * 0.4),
             const("R", rng.standard_normal((dirs, 3 * hidden, hidden)) * 0.4),
             const("B", rng.standard_normal((dirs, 6 * hidden)) * 0.2)]
    ins = ["x", "W", "R", "B"]
    if state:
        inits.append(const("h0", rng.uniform(-0.5, 0.5, (dirs, 1, hidden))))
        ins += ["", "h0"]
    outs = ["", "y"] if last_only else ["y"]
    node = helper.make_node("GRU", ins, outs, hidden_size=hidden, direction=direction, linear_before_reset=lbr)
    y_shape = [dirs, 1, hidden] if last_only else [steps, dirs, 1, hidden]
    m = save_model(tmp_path / f"gru_{direction}.onnx", [node], [steps, 1, inp], y_shape, inits)
    return m, calibration(tmp_path / "cal.npz", [steps, 1, inp], scale=1.0)


@pytest.mark.parametrize("direction,lbr,state,last_only", [("forward", 1, False, False), ("reverse", 0, True, False),
                                                           ("bidirectional", 1, True, True)])
def test_gru_deploys_under_qemu(tmp_path, direction, lbr, state, last_only):
    m, cal = _gru_model(tmp_path, direction, lbr, state, last_only)
    report = deploy_verified(m, cal, tmp_path / "out")
    assert ("GRU", "tinyaot_gru_s8") in layer_ops(report)
    diffs = [l["max_abs_diff"] for l in report["verify"]["layers_vs_onnxruntime"] if l["op"] == "GRU"]
    assert diffs and max(diffs) <= GRU.oracle_tolerance
