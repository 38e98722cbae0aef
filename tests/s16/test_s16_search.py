"""--max-accuracy-drop on a small MLP whose int8 model loses top-1 to float (labels are the float model's answers on
near-tied inputs): the search promotes layers to 16 bits until the measured drop is within the budget, and what it
records (per-layer bits, top-1, arena) is what compiling those bits gives."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from tinyaot.api import compile_model, evaluate
from tinyaot.options import Options
from tinyaot.pipeline.precision_search import search_precision
from tinyaot.oracle.sessions import session_options  # one thread, as tinyaot's own sessions


def _model(path, rng):
    w1, b1 = rng.normal(0, 0.5, (12, 24)).astype(np.float32), rng.normal(0, 0.1, 24).astype(np.float32)
    w2, b2 = rng.normal(0, 0.3, (24, 10)).astype(np.float32), rng.normal(0, 0.01, 10).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))]
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["z"]), helper.make_node("Softmax", ["z"], ["y"], axis=1)]
    g = helper.make_graph(nodes, "mlp16", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 12])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 10])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def test_search_promotes_until_within_budget(tmp_path):
    rng = np.random.default_rng(5)
    model = tmp_path / "mlp16.onnx"
    _model(model, rng)
    x = rng.normal(0, 1, (300, 1, 12)).astype(np.float32)
    sess = ort.InferenceSession(str(model), session_options(), providers=["CPUExecutionProvider"])
    y = np.array([int(np.argmax(sess.run(None, {"x": s})[0])) for s in x])  # float top-1 is 100 %
    np.savez(tmp_path / "cal.npz", x=x[:100])
    np.savez(tmp_path / "data.npz", x=x[100:], y=y[100:])
    # CLE off throughout: the test needs int8 to lose to float, whatever the default equalization does
    r8 = evaluate(model, tmp_path / "cal.npz", tmp_path / "data.npz", compare_onnxruntime=False, cle=False)
    r16 = evaluate(model, tmp_path / "cal.npz", tmp_path / "data.npz", compare_onnxruntime=False, activation_bits=16,
                   cle=False)
    drop8, drop16 = 100 * (1 - r8["int8_top1"]), 100 * (1 - r16["int8_top1"])
    assert drop8 > drop16  # int8 loses samples that 16x8 keeps
    budget = (drop8 + drop16) / 2
    rec = search_precision(model, tmp_path / "cal.npz", tmp_path / "data.npz", budget, Options.of(cle=False))
    assert rec["drop_points"] <= budget + 1e-9 and 16 in rec["bits"].values()
    assert len(rec["sensitivity"]) == 3 and len(rec["measurements"]) >= 5  # Gemm, Gemm (Relu fused), Softmax
    c = compile_model(model, tmp_path / "cal.npz", activation_bits=rec["bits"], cle=False)
    assert c.plan.arena_bytes == rec["arena_bytes"]
    again = evaluate(model, tmp_path / "cal.npz", tmp_path / "data.npz", compare_onnxruntime=False,
                     max_accuracy_drop=budget, cle=False)
    assert again["int8_top1"] == rec["top1"] and again["activation_bits"]["search"]["bits"] == rec["bits"]


def test_every_mobilenetv3_layer_is_a_candidate(tmp_path):
    """pt_mbv3_se (HardSwish, squeeze-and-excitation: HardSigmoid and a broadcast Mul): every layer has a 16-bit
    kernel, so --max-accuracy-drop may promote any of them (none is forced to 8 bits)."""
    from pathlib import Path

    from tinyaot.compress.precision import layer_names
    from tinyaot.pipeline.precision_search import candidate_layers

    models = Path(__file__).resolve().parent.parent / "models"
    with np.load(models / "pt_mbv3_se_data.npz") as z:
        np.savez(tmp_path / "cal.npz", x=z["x"][:8])
    g = compile_model(models / "pt_mbv3_se.onnx", tmp_path / "cal.npz").graph
    ops = {n.op for n in g.nodes if n.name in candidate_layers(g)}
    assert candidate_layers(g) == layer_names(g)
    assert {"HardSwish", "HardSigmoid", "Mul", "Add", "Conv", "Softmax"} <= ops


def test_sweep_grid_takes_activation_bits(tmp_path):
    """Sweep grid rows take activation_bits (passed to evaluate and deploy like the other quantization settings,
    written as --activation-bits in the row's command line); a width other than 8 or 16 is refused up front,
    naming the setting, before any setting runs."""
    import pytest

    from tinyaot.errors import TinyaotError
    from tinyaot.sweep.grid import QUANT_KEYS, Config
    from tinyaot.api import sweep as run_sweep

    assert "activation_bits" in QUANT_KEYS
    assert Config("a16", {"activation_bits": 16}).command_line == "--activation-bits 16"
    model = tmp_path / "mlp16.onnx"
    _model(model, np.random.default_rng(6))
    np.savez(tmp_path / "cal.npz", x=np.zeros((2, 1, 12), np.float32))
    np.savez(tmp_path / "data.npz", x=np.zeros((2, 1, 12), np.float32), y=np.zeros(2, np.int64))
    with pytest.raises(TinyaotError, match="setting a12: activation_bits must be 8 or 16"):
        run_sweep(model, "mps2-an386", tmp_path / "cal.npz", tmp_path / "data.npz", tmp_path / "sw2",
                  [Config("a12", {"activation_bits": 12})], workers=1, verify=False, cache=False, quiet=True)


def test_bounds_refuse_an_int64_accumulator_past_2_47(tmp_path):
    """compress/bounds.py bounds the s16 layers' int64 accumulators: |bias| + sum|w| * 32768 must stay below 2**47
    (the int64 requantization's range), or compilation stops naming the layer."""
    import pytest

    from tinyaot.compress.bounds import check_graph
    from tinyaot.errors import TinyaotError

    rng = np.random.default_rng(7)
    model = tmp_path / "mlp16.onnx"
    _model(model, rng)
    np.savez(tmp_path / "cal.npz", x=rng.normal(0, 1, (20, 1, 12)).astype(np.float32))
    g = compile_model(model, tmp_path / "cal.npz", activation_bits=16).graph
    fc = next(n for n in g.nodes if n.op == "FullyConnectedS16")
    assert g.meta["accumulator_bounds"][fc.name] < 1 << 47
    bias = g.tensors[fc.inputs[2]]
    bias.data = np.full_like(bias.data, (1 << 47) - 1000)
    with pytest.raises(TinyaotError, match=r"FullyConnectedS16 node .*int64 accumulator"):
        check_graph(g)
