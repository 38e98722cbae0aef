"""Sequence models made by tests/models/make_models_rnn.py (torch is not imported here): each deploys on
stm32 with the first 100 samples as calibration and verifies under QEMU (outputs == the numpy reference,
every layer within its tolerance of onnxruntime), and on the other 200 samples tinyaot's int8 top-1 stays within
1.5 points of the float model's (issue 13's bound)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from tinyaot.api import deploy, evaluate

HERE = Path(__file__).resolve().parent.parent / "models"
N_CAL = 100

# name -> ONNX ops its export must contain, and the tinyaot kernels its deploy must run
MODELS = {
    "pt_frames_attention": ({"Gemm", "MatMul", "Transpose", "Softmax", "Mul", "Relu", "Reshape"},
                            {"tinyaot_batch_matmul_s8", "tinyaot_softmax_s8"}),
    "pt_frames_lstm": ({"LSTM", "Squeeze", "Reshape", "Gemm", "Softmax"}, {"tinyaot_lstm_s8"}),
    "pt_frames_gru": ({"GRU", "Reshape", "Gemm", "Softmax"}, {"tinyaot_gru_s8"}),
}


def _split(name: str, tmp: Path) -> tuple[Path, Path]:
    with np.load(HERE / f"{name}_data.npz") as z:
        x, y = z["x"], z["y"]
    assert x.dtype == np.float32 and y.dtype == np.int64 and len(x) == len(y) == 300
    cal, data = tmp / "cal.npz", tmp / "eval.npz"
    np.savez(cal, x=x[:N_CAL])
    np.savez(data, x=x[N_CAL:], y=y[N_CAL:])
    return cal, data


@pytest.mark.parametrize("name", list(MODELS))
def test_sequence_model_deploys_and_keeps_accuracy(name, tmp_path):
    ops, kernels = MODELS[name]
    got = {n.op_type for n in onnx.load(str(HERE / f"{name}.onnx")).graph.node}
    assert ops <= got, f"{name}: missing {sorted(ops - got)}"
    cal, data = _split(name, tmp_path)
    report = deploy(HERE / f"{name}.onnx", "stm32", cal, tmp_path / "out").report
    v = report["verify"]
    assert v["ran"] and v["exit_code"] == 0 and v["outputs_match"] and v["max_abs_diff_vs_reference"] == 0
    bad = [l for l in v["layers_vs_onnxruntime"] if l["max_abs_diff"] > l["tolerance"]]
    assert not bad, bad
    assert kernels <= {l["kernel"] for l in report["layers"]}
    assert v["instructions"] > 0

    r = evaluate(HERE / f"{name}.onnx", cal, data, compare_onnxruntime=False)
    assert r["samples"] == 200 and r["host_c_matches_reference"]
    assert r["float_top1"] > 0.9
    assert abs(r["int8_top1"] - r["float_top1"]) <= 0.015, r


@pytest.mark.parametrize("name,ops", [("pt_rnn_plumbing", {"Shape", "Gather", "Expand", "LSTM", "GRU"}),
                                      ("pt_rnn_plumbing_dynamo", {"LSTM", "GRU"})])
def test_recurrent_layers_called_without_states_deploy_from_both_exporters(name, ops, tmp_path):
    """nn.LSTM and a bidirectional nn.GRU called without initial states: the TorchScript export builds the zero
    states from the input's shape at run time (folded at compile time here), the dynamo one (opset 18) does not."""
    model = onnx.load(str(HERE / f"{name}.onnx"))
    assert ops <= {n.op_type for n in model.graph.node}
    cal = tmp_path / "cal.npz"
    np.savez(cal, x=np.random.default_rng(5).standard_normal((8, 16, 1, 16)).astype(np.float32))
    report = deploy(HERE / f"{name}.onnx", "stm32", cal, tmp_path / "out").report
    v = report["verify"]
    assert v["ran"] and v["outputs_match"] and v["max_abs_diff_vs_reference"] == 0
    assert not [l for l in v["layers_vs_onnxruntime"] if l["max_abs_diff"] > l["tolerance"]]
    assert {"tinyaot_lstm_s8", "tinyaot_gru_s8"} <= {l["kernel"] for l in report["layers"]}
