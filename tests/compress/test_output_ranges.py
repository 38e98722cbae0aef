"""`--calibrate auto` and the default `auto-input` (compress/output_ranges.py): ranges judged by the model's output,
on small graphs with known answers."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from tinyaot.compress.calibrate import collect_ranges, float_session
from tinyaot.oracle.fake_quant import fake_quant_model
from tinyaot.compress.ranges import Histogram, choose_range, quant_mse
from tinyaot.core.quant import activation_qparams


def _model(nodes, inits=(), n_in=2, n_out=1) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n_in])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n_out])
    g = helper.make_graph(nodes, "g", [x], [y], initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _identity() -> onnx.ModelProto:
    return _model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sub", ["r", "x"], ["y0"]),
                   helper.make_node("Add", ["y0", "x"], ["y"])])


def test_fake_quant_model_rounds_to_the_int8_grid_of_the_range():
    m = _identity()
    fq = float_session(fake_quant_model(m, ["x", "r"], {"x": 2, "r": 2}), ["r"])
    qp = activation_qparams(-1.0, 3.0)
    x = np.array([[-2.0, 0.37]], np.float32)  # -2 saturates at -128 (the range's bottom)
    s, zp = np.asarray(qp.scale, np.float32), np.asarray(qp.zp, np.float32)
    feeds = {"x__fq_s": s, "x__fq_zp": zp, "r__fq_s": s, "r__fq_zp": zp}
    (r, y) = fq.run(["r", "y"], {"x": x, **feeds})
    want = (np.clip(np.floor(x / np.float32(qp.scale) + 0.5) + qp.zp, -128, 127) - qp.zp) * np.float32(qp.scale)
    np.testing.assert_allclose(r, np.maximum(want, 0.0), rtol=1e-6)  # r = relu of the quantized input, quantized
    assert want[0, 0] == np.float32((-128 - qp.zp) * np.float32(qp.scale))


def test_auto_on_an_identity_model_picks_the_least_own_error():
    # the output is the input itself: the output error of a range is the input's own quantization error, so the
    # judged choice must be the candidate with the least quant_mse (the histogram method's `auto`)
    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, (400, 1, 2)).astype(np.float32)
    x[5, 0, 0], x[9, 0, 1] = 11.0, -9.0
    chosen: dict[str, str] = {}
    got = collect_ranges(_identity(), {"x": x}, ["r"], "auto", chosen, scored=["x"])
    h = Histogram(x.ravel())
    cands = {m: choose_range(h, m)[0] for m in ("minmax", "percentile", "mse", "entropy")}
    best = min(cands, key=lambda k: quant_mse(h, *cands[k]))
    assert chosen["x"] == best != "minmax"
    assert got["x"] == cands[best]


def test_auto_keeps_a_tail_the_output_needs_where_mse_clips_it():
    # y = x^3 of Laplacian x: x's own error favours clipping its tails (mse does), but the cube weights a tail
    # value's error ~x^4-fold, so judged by the output the full range wins
    x = np.random.default_rng(4).laplace(0, 1, (300, 1, 64)).astype(np.float32)
    m = _model([helper.make_node("Mul", ["x", "x"], ["s"]), helper.make_node("Mul", ["s", "x"], ["y"])],
               n_in=64, n_out=64)
    clipped = choose_range(Histogram(x.ravel()), "mse")[0]
    assert clipped[0] > x.min() + 0.2 and clipped[1] < x.max() - 0.2
    chosen: dict[str, str] = {}
    got = collect_ranges(m, {"x": x}, ["s"], "auto", chosen, scored=["x"])
    assert chosen["x"] == "minmax" and got["x"] == (float(x.min()), float(x.max()))


def test_the_default_judges_only_the_input_and_keeps_min_max_inside():
    # auto-input: an inner tensor with a far outlier keeps it (min/max); the input, whose one hot value the output
    # does not need (the model zeroes it: relu(-x)), may be clipped to its percentile range and never deeper
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (200, 1, 2)).astype(np.float32)
    x[3, 0, 0] = 40.0
    m = _model([helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Relu", ["n"], ["r"]),
                helper.make_node("Add", ["r", "r"], ["y0"]), helper.make_node("Mul", ["y0", "x"], ["y"])], n_out=2)
    chosen: dict[str, str] = {}
    got = collect_ranges(m, {"x": x}, ["n", "r", "y0"], "auto-input", chosen)
    assert chosen["n"] == chosen["r"] == chosen["y0"] == "minmax"
    assert got["n"] == (-40.0, float(-x.min()))
    assert chosen["x"] in ("minmax", "percentile")
    minmax = collect_ranges(m, {"x": x}, ["n"], "minmax")
    assert minmax["x"] == (float(x.min()), 40.0)
    if chosen["x"] == "percentile":
        assert got["x"] == choose_range(Histogram(x.ravel()), "percentile")[0]
