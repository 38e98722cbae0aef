"""The 1-D sensor CNN (tests/models/pt_sensor_cnn1d*.onnx, made by tests/models/make_models_1d.py; torch is not
imported here), exported twice from one trained network: TorchScript (dynamo=False, opset 13, standalone
BatchNormalization nodes) and dynamo=True (opset 18: BN folded by the exporter, adaptive pooling as
Unsqueeze + ReduceMean + Squeeze). Each deploys on stm32 with the first 100 samples as calibration and verifies
under QEMU (outputs == the numpy reference, every layer within its tolerance of onnxruntime); on the other 200
samples tinyaot's int8 top-1 stays within 1.5 points of the float model's."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from tinyaot.api import deploy, evaluate

HERE = Path(__file__).resolve().parent.parent / "models"
N_CAL = 100
DATA = "pt_sensor_cnn1d_data.npz"

# name -> (opset, the ONNX ops its export must contain)
MODELS = {
    "pt_sensor_cnn1d": (13, {"Conv", "BatchNormalization", "Relu", "Clip", "MaxPool", "AveragePool",
                             "GlobalAveragePool", "Flatten", "Gemm", "Softmax"}),
    "pt_sensor_cnn1d_dynamo": (18, {"Conv", "Relu", "Clip", "MaxPool", "AveragePool", "Unsqueeze", "ReduceMean",
                                    "Squeeze", "Gemm", "Softmax"}),
}


def _split(tmp: Path) -> tuple[Path, Path]:
    with np.load(HERE / DATA) as z:
        x, y = z["x"], z["y"]
    assert x.shape == (300, 3, 64) and x.dtype == np.float32 and y.dtype == np.int64
    cal, data = tmp / "cal.npz", tmp / "eval.npz"
    np.savez(cal, x=x[:N_CAL])
    np.savez(data, x=x[N_CAL:], y=y[N_CAL:])
    return cal, data


@pytest.mark.parametrize("name", list(MODELS))
def test_export_is_1d_and_of_its_kind(name):
    opset, ops = MODELS[name]
    model = onnx.load(str(HERE / f"{name}.onnx"))
    assert model.opset_import[0].version == opset
    assert ops <= {n.op_type for n in model.graph.node}
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    kernels = {tuple(a.ints) for n in convs for a in n.attribute if a.name == "kernel_shape"}
    assert kernels and all(len(k) == 1 for k in kernels)  # 1-D convolutions only
    groups = {a.i for n in convs for a in n.attribute if a.name == "group"}
    assert {4, 16} <= groups  # a grouped and a depthwise one


@pytest.mark.parametrize("name", list(MODELS))
def test_sensor_cnn1d_deploys_on_stm32_and_keeps_accuracy(name, tmp_path):
    cal, data = _split(tmp_path)
    out = tmp_path / "out"
    result = deploy(HERE / f"{name}.onnx", "stm32", cal, out)
    report = json.loads((out / "report.json").read_text())
    assert report == json.loads(json.dumps(result.report))
    v = report["verify"]
    assert v["ran"] and v["exit_code"] == 0 and v["outputs_match"]
    assert v["max_abs_diff_vs_reference"] == 0
    bad = [l for l in v["layers_vs_onnxruntime"] if l["max_abs_diff"] > l["tolerance"]]
    assert not bad, bad
    assert v["instructions"] > 0
    ops = [l["op"] for l in report["layers"]]
    # lowered to the 2-D kernels; between the first Conv and the pooling at the end nothing moves bytes
    assert ops.count("Conv") == 4 and "Transpose" not in ops[ops.index("Conv"):]

    r = evaluate(HERE / f"{name}.onnx", cal, data, compare_onnxruntime=False)
    assert r["samples"] == 200 and r["host_c_matches_reference"]
    assert r["float_top1"] > 0.9
    assert abs(r["int8_top1"] - r["float_top1"]) <= 0.015, r
