"""LSTM (tinyaot/ops/lstm.py, templates/kernels/tinyaot_lstm_s8.c): the integer sigmoid/tanh against the real
functions, and onnx.helper-built LSTM layers (forward, reverse, bidirectional; zero or given initial states)
deployed under QEMU: C == numpy reference bit for bit, the layer within its measured bound (ops/lstm.py
`oracle_tolerance`) of onnxruntime's float LSTM on the dequantized inputs."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from op_models import calibration, const, deploy_verified, layer_ops, save_model
from tinyaot.ops.lstm import LSTM, sigmoid_q15, tanh_q15


def test_integer_sigmoid_and_tanh_are_within_one_step():
    z = np.arange(-32768, 32768, 7, dtype=np.int64)  # Q3.12
    real = z / 4096.0
    assert np.abs(sigmoid_q15(z) / 32768.0 - 1 / (1 + np.exp(-real))).max() <= 2**-15 + 1e-6
    assert np.abs(tanh_q15(z << 14) / 32768.0 - np.tanh(real)).max() <= 2**-15 + 1e-6


def _lstm_model(tmp_path, direction: str, states: bool, steps=8, inp=6, hidden=5, seed=0):
    rng = np.random.default_rng(seed)
    dirs = 2 if direction == "bidirectional" else 1
    inits = [const("W", rng.standard_normal((dirs, 4 * hidden, inp)) * 0.4),
             const("R", rng.standard_normal((dirs, 4 * hidden, hidden)) * 0.4),
             const("B", rng.standard_normal((dirs, 8 * hidden)) * 0.2)]
    ins = ["x", "W", "R", "B"]
    if states:
        inits += [const("h0", rng.uniform(-0.5, 0.5, (dirs, 1, hidden))),
                  const("c0", rng.uniform(-1, 1, (dirs, 1, hidden)))]
        ins += ["", "h0", "c0"]
    node = helper.make_node("LSTM", ins, ["y"], hidden_size=hidden, direction=direction)
    m = save_model(tmp_path / f"lstm_{direction}.onnx", [node], [steps, 1, inp], [steps, dirs, 1, hidden], inits)
    return m, calibration(tmp_path / "cal.npz", [steps, 1, inp], scale=1.0)


@pytest.mark.parametrize("direction,states", [("forward", False), ("reverse", True), ("bidirectional", True)])
def test_lstm_deploys_under_qemu(tmp_path, direction, states):
    m, cal = _lstm_model(tmp_path, direction, states)
    report = deploy_verified(m, cal, tmp_path / "out")
    assert ("LSTM", "tinyaot_lstm_s8") in layer_ops(report)
    diffs = [l["max_abs_diff"] for l in report["verify"]["layers_vs_onnxruntime"] if l["op"] == "LSTM"]
    assert diffs and max(diffs) <= LSTM.oracle_tolerance
