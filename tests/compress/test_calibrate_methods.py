"""Calibration methods (compress/ranges.py) on arrays and a small graph with known answers."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tinyaot.compress.calibrate import collect_ranges
from tinyaot.compress.ranges import (DEFAULT_METHOD, METHODS, Histogram, calibration_record, choose_range,
                                     entropy_range, mse_range, parse_method, percentile_range, quant_mse)
from tinyaot.errors import TinyaotError


def test_uniform_data_keeps_minmax():
    # uniform on [0, 1]: nothing to clip; every method must keep (nearly) the whole range, and auto must not do
    # worse than minmax
    v = np.random.default_rng(0).uniform(0.0, 1.0, 200_000)
    h = Histogram(v)
    assert choose_range(h, "minmax")[0] == (0.0, pytest.approx(v.max()))
    for m in ("mse", "entropy"):
        lo, hi = choose_range(h, m)[0]
        assert lo == 0.0 and hi > 0.97, (m, hi)
    (lo, hi), _ = choose_range(h, "auto")
    assert quant_mse(h, lo, hi) <= quant_mse(h, 0.0, float(v.max())) * 1.0001


def test_percentile_clips_an_outlier():
    v = np.concatenate([np.random.default_rng(1).uniform(-1, 1, 100_000), [50.0]])
    h = Histogram(v)
    lo, hi = percentile_range(h, 99.99)
    assert -1.05 < lo < -0.95 and 0.95 < hi < 1.05  # the 50.0 is clipped, the bulk kept
    assert choose_range(h, "minmax")[0][1] == 50.0
    # on the bulk of the values the clipped range's error is far below min/max's (the step is ~25x smaller)
    bulk = Histogram(v[:-1])
    assert quant_mse(bulk, lo, hi) < quant_mse(bulk, h.lo, h.hi) / 100


def test_percentile_one_sided_keeps_zero():
    v = np.abs(np.random.default_rng(2).normal(0, 1, 100_000))
    lo, hi = percentile_range(Histogram(v), 99.0)
    assert lo == 0.0 and hi == pytest.approx(np.percentile(v, 99.0), rel=0.01)


def test_mse_finds_the_known_optimal_clip_of_a_laplacian():
    # For a Laplace(b=1) tensor quantized symmetrically-ish on 8 bits the MSE-optimal clip is about 9.9 b
    # (Banner et al., "ACIQ": alpha* = 9.89 b for 8 bits): compare with a brute-force search of the same error.
    v = np.random.default_rng(3).laplace(0.0, 1.0, 400_000)
    h = Histogram(v)
    lo, hi = mse_range(h)
    best = min(np.linspace(2, h.hi, 400), key=lambda t: quant_mse(h, max(h.lo, -t), t))
    assert quant_mse(h, lo, hi) <= quant_mse(h, max(h.lo, -best), best) * 1.02
    assert 7.0 < hi < 13.0 and -13.0 < lo < -7.0
    assert hi < h.hi  # clipped: a Laplacian's extremes are not worth their resolution


def test_entropy_clips_a_long_tail_but_not_a_uniform():
    rng = np.random.default_rng(4)
    tail = np.abs(rng.standard_cauchy(200_000))
    tail = tail[tail < 1000]
    lo, hi = entropy_range(Histogram(tail))
    assert lo == 0.0 and hi < 0.2 * tail.max()
    u = rng.uniform(0, 1, 200_000)
    assert entropy_range(Histogram(u))[1] > 0.95


def test_auto_picks_the_least_error():
    v = np.concatenate([np.random.default_rng(5).normal(0, 1, 100_000), [40.0, -35.0]])
    h = Histogram(v)
    (lo, hi), picked = choose_range(h, "auto")
    errors = {m: quant_mse(h, *choose_range(h, m)[0]) for m in ("minmax", "percentile", "entropy", "mse")}
    assert picked in errors and quant_mse(h, lo, hi) == min(errors.values())
    assert picked != "minmax"


def test_parse_method_errors():
    assert parse_method("percentile:99.9") == ("percentile", 99.9)
    assert parse_method(None) == parse_method(DEFAULT_METHOD)
    for bad in ("kl", "percentile:abc", "percentile:20", "mse:3"):
        with pytest.raises(TinyaotError):
            parse_method(bad)


def test_an_all_zero_tensor_keeps_a_zero_range_under_every_method():
    # a ReLU that never fires on the calibration data (a fuzz graph: relu(x + c) with x + c < 0): minmax gives
    # (0, 0); a clipping method must not shrink the histogram's nominal width to ~1e-15, a scale whose Add
    # rescaling factor (input scale / output scale) no kernel can encode
    h = Histogram(np.zeros(50, np.float32))
    for m in METHODS:
        assert choose_range(h, m)[0] == (0.0, 0.0), m


def test_calibration_record_resolves_the_default():
    r = calibration_record({}, None, False)
    assert r["method"] == parse_method(DEFAULT_METHOD)[0] and r["default"] and not r["bias_correction"]
    r = calibration_record({"equalization": {"pairs": 3}, "bias_corrected": ["a", "b"]}, "percentile:99.9", True)
    assert (r["method"], r["percentile"], r["default"], r["cle"], r["cle_pairs"], r["bias_correction"],
            r["bias_corrected_layers"]) == ("percentile", 99.9, False, True, 3, True, 2)


def _relu_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])],
                          "g", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_collect_ranges_histograms_in_the_onnxruntime_pass():
    # a ReLU output with one outlier sample: minmax keeps it, percentile clips it; the input's own range is the
    # sample's; the Neg output is the mirror image (a clipped bottom)
    rng = np.random.default_rng(6)
    x = rng.uniform(-1, 1, (200, 1, 64)).astype(np.float32)
    x[7, 0, 3] = 30.0
    m = _relu_model()
    mm = collect_ranges(m, {"x": x}, ["r", "y"])
    assert mm["r"] == (0.0, 30.0) and mm["y"][0] == -30.0
    chosen: dict[str, str] = {}
    pc = collect_ranges(m, {"x": x}, ["r", "y"], "percentile:99.9", chosen)
    assert pc["r"][0] == 0.0 and 0.9 < pc["r"][1] < 1.1
    assert -1.1 < pc["y"][0] < -0.9 and pc["y"][1] == 0.0
    assert chosen["r"] == "percentile"


def test_sweep_grid_takes_the_quantization_settings():
    from tinyaot.sweep.grid import Config, check_config

    c = check_config(Config("q", {"calibrate": "percentile:99.9", "cle": True, "bias_correction": False}), "grid")
    assert c.command_line == "--calibrate percentile:99.9 --cle --no-bias-correction"


def test_a_wrong_sample_shape_names_both_accepted_layouts(tmp_path):
    from tinyaot.compress.calibrate import load_samples

    np.savez(tmp_path / "c.npz", x=np.zeros((4, 49, 10), np.float32))
    with pytest.raises(TinyaotError, match=r"expected \[N, 1, 49, 10, 1\] or \[N, 49, 10, 1\]"):
        load_samples(tmp_path / "c.npz", [{"name": "x", "shape": [1, 49, 10, 1]}])
    np.savez(tmp_path / "ok.npz", x=np.zeros((4, 49, 10, 1), np.float32))
    assert load_samples(tmp_path / "ok.npz", [{"name": "x", "shape": [1, 49, 10, 1]}])["x"].shape == (4, 1, 49, 10, 1)


def test_a_grid_with_a_bad_calibration_method_fails_when_read():
    from tinyaot.sweep.grid import Config, check_config

    with pytest.raises(TinyaotError, match=r"grid: config q: --calibrate must be one of"):
        check_config(Config("q", {"calibrate": "bogus"}), "grid")
