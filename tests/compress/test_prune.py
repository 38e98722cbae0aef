"""Pruning: magnitude (global LAMP threshold vs per layer, exclusion, zeros surviving quantization) and structured
channel pruning (eligibility, channel groups through residual Adds, shapes, exactness of the bias folding, the
least-squares refit, deploy under QEMU, ic_resnet8's cost and accuracy)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tinyaot.api import compile_model, deploy
from tinyaot.compress.cluster import allocate
from tinyaot.compress.options import CompressionOptions, options_from_flags
from tinyaot.compress.pipeline import SPEED_SLACK, _faster_picks
from tinyaot.compress.pattern import block_scores
from tinyaot.compress.prune import (channel_group, eligible_producers, group_scores, lamp_scores, layer_nodes,
                                    magnitude_prune, prune_channels, prune_smallest)
from tinyaot.compress.storage import rows
from tinyaot.compress.refit import pre_activation, refit_consumers, ridge_fit, run_node, snapshot
from tinyaot.errors import TinyaotError
from tinyaot.ops.compressed import conv_estimate
from tinyaot.frontend import import_model
from tinyaot.passes import run_passes
from tinyaot.oracle.sessions import session_options  # one thread, as tinyaot's own sessions

from compress_models import calibration, conv_dw_conv, conv_relu_conv_gap_gemm, float_forward
from shared_data import MODELS, few_calibration_samples


def _float_graph(path):
    return run_passes(import_model(path, None).graph, echo=lambda _: None)


def _node(graph, name):
    return [n for n in graph.nodes if n.name == name][0]


def _names(nodes):
    return [n.name for n in nodes]


# ---- magnitude pruning on arrays ------------------------------------------------------------------------------

def test_prune_smallest_single_array_is_plain_magnitude():
    a = np.array([0.5, -0.1, 0.3, -0.9, 0.2, 0.05], np.float32)
    (out,) = prune_smallest([a], 0.5)  # 3 smallest |a|: 0.05, -0.1, 0.2
    assert out.tolist() == pytest.approx([0.5, 0.0, 0.3, -0.9, 0.0, 0.0])


def test_prune_smallest_ties_break_by_position():
    (out,) = prune_smallest([np.array([1.0, -1.0, 1.0, 1.0])], 0.5)
    assert out.tolist() == [0.0, 0.0, 1.0, 1.0]


def test_lamp_scores_by_hand():
    # sorted squares 1, 4, 9, 16: suffix sums 30, 29, 25, 16
    s = lamp_scores(np.array([4.0, -1.0, 3.0, 2.0]))
    assert s.tolist() == pytest.approx([16 / 16, 1 / 30, 9 / 25, 4 / 29])


def test_global_threshold_is_scale_invariant_and_differs_from_per_layer():
    small = np.array([0.01, 0.02, 0.03, 0.04], np.float32)  # a layer with tiny weights (say after BN folding)
    large = np.array([1.0, 5.0, 6.0, 7.0], np.float32)  # one small weight among large ones
    g_small, g_large = prune_smallest([small, large], 0.25)  # 2 of 8 by LAMP score
    # LAMP scores: small 1/30, 4/29, 9/25, 1; large 1/111, 25/110, 36/85, 1 -> the two lowest are
    # large[0] (0.009) and small[0] (0.033): raw |w| would have emptied the small layer first
    assert g_small.tolist() == pytest.approx([0.0, 0.02, 0.03, 0.04])
    assert g_large.tolist() == pytest.approx([0.0, 5.0, 6.0, 7.0])
    # the same scores for the small layer scaled up 100x: a layer's scale does not change its share
    g_small2, _ = prune_smallest([small * 100, large], 0.25)
    assert (g_small2 == 0).tolist() == (g_small == 0).tolist()
    # per layer: each loses its own 25 %, i.e. exactly one weight
    p_small, p_large = prune_smallest([small], 0.25)[0], prune_smallest([large], 0.25)[0]
    assert (p_small == 0).sum() == 1 and (p_large == 0).sum() == 1


# ---- magnitude pruning on a graph -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("small")
    return conv_relu_conv_gap_gemm(d / "small.onnx"), calibration(d / "cal.npz")


def test_magnitude_prune_scopes_and_exclusion(small_model):
    path, _ = small_model
    g = _float_graph(path)
    names = [n.name for n in layer_nodes(g)]
    assert names == ["conv1", "conv2", "dense"]
    sizes = {n.name: g.tensors[n.inputs[1]].size for n in layer_nodes(g)}
    before = {n.name: np.array(g.tensors[n.inputs[1]].data) for n in layer_nodes(g)}
    achieved = magnitude_prune(g, {"conv1": 0.5, "conv2": 0.5}, pooled={"conv1", "conv2"})
    after = {n.name: g.tensors[n.inputs[1]].data for n in layer_nodes(g)}
    total = sizes["conv1"] + sizes["conv2"]
    assert sum(int((after[n] == 0).sum()) for n in ("conv1", "conv2")) == round(0.5 * total)
    assert np.array_equal(after["dense"], before["dense"])  # not asked: untouched
    for n in ("conv1", "conv2"):  # inside each layer the zeros are its smallest weights
        zero = after[n] == 0
        assert np.abs(before[n][zero]).max() <= np.abs(before[n][~zero]).min()
        assert achieved[n] == pytest.approx(zero.mean())
    g2 = _float_graph(path)
    magnitude_prune(g2, {"conv1": 0.5, "conv2": 0.5}, pooled=set())
    for n in layer_nodes(g2):
        if n.name != "dense":
            assert int((g2.tensors[n.inputs[1]].data == 0).sum()) == round(0.5 * sizes[n.name])


def test_options_exclude_from_pruning(small_model):
    path, cal = small_model
    c = compile_model(path, cal, compression=CompressionOptions(prune=0.6, prune_exclude=("conv*",)))
    layers = c.graph.meta["compression"]["layers"]
    plain = compile_model(path, cal)
    for n in layer_nodes(c.graph):
        w = c.graph.tensors[n.inputs[1]].data
        w0 = plain.graph.tensors[[m for m in layer_nodes(plain.graph) if m.name == n.name][0].inputs[1]].data
        if n.name.startswith("conv"):
            assert np.array_equal(w, w0) and layers[n.name]["storage"] == "dense"
        else:  # dense is the only pruned layer: all of the global 60 % falls on it
            assert (w == 0).sum() >= round(0.6 * w.size)


def test_zeros_survive_quantization(small_model):
    path, cal = small_model
    g = _float_graph(path)
    magnitude_prune(g, {n.name: 0.5 for n in layer_nodes(g)}, pooled=set())
    masks = {n.name: g.tensors[n.inputs[1]].data == 0 for n in layer_nodes(g)}
    c = compile_model(path, cal, compression=dict(prune=0.5, prune_scope="layer", prune_method="magnitude"))
    obs = compile_model(path, cal, compression=dict(prune=0.5, prune_scope="layer"))  # masks by data
    for n in layer_nodes(c.graph):
        q = c.graph.tensors[n.inputs[1]].data
        assert np.all(q[masks[n.name]] == 0), n.name  # every pruned weight is an int8 zero
        assert c.graph.meta["compression"]["layers"][n.name]["sparsity"] >= 0.5
        assert obs.graph.meta["compression"]["layers"][n.name]["sparsity"] >= 0.5
    r = c.graph.meta["compression"]
    assert r["layers"]["conv1"]["storage"] in ("dense", "sparse_bitmap", "sparse_rle")


def test_block_pattern_zeroes_whole_blocks_and_stores_them_depthwise_stays_dense(tmp_path):
    path = conv_dw_conv(tmp_path / "d.onnx", c=16)
    c = compile_model(path, calibration(tmp_path / "cal.npz"),
                      compression=options_from_flags(None, prune=0.5, prune_scope="layer", prune_pattern="block"))
    layers = c.graph.meta["compression"]["layers"]
    kinds = {}
    for n in layer_nodes(c.graph):
        q = c.graph.tensors[n.inputs[1]].data
        kinds[n.name] = layers[n.name]["storage"]
        if n.attrs.get("depthwise"):  # no block kernel: left dense, not pruned
            assert kinds[n.name] == "dense" and layers[n.name]["sparsity"] < 0.2
            continue
        zero_blocks = block_scores(rows(q, False)) == 0  # [block-rows, block-columns]; 4x4 blocks of the rows view
        assert zero_blocks.sum() >= zero_blocks.size // 2, n.name
        assert kinds[n.name] == "sparse_block", n.name  # never the (slower) bitmap / run-length kernels
    assert sorted(kinds.values()) == ["dense", "sparse_block", "sparse_block", "sparse_block"]
    with pytest.raises(TinyaotError, match="prune-pattern"):
        CompressionOptions(prune=0.5, prune_pattern="4x4")


def test_pruning_a_prequantized_model_is_refused_clustering_works(tmp_path):
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.calibrate import CalibrationDataReader

    path = conv_relu_conv_gap_gemm(tmp_path / "f.onnx", pool=False)  # (a QDQ average pool is another matter)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": np.random.default_rng(k).uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)}
                            for k in range(4)])

        def get_next(self):
            return next(self.it, None)

    qdq = tmp_path / "q.onnx"
    quantize_static(str(path), str(qdq), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    for options in (dict(prune=0.5), dict(prune_channels=0.25)):
        with pytest.raises(TinyaotError, match="pre-quantized"):
            compile_model(qdq, None, compression=options)
    # clustering needs no float weights: the model's own int8 values are clustered, its scales kept
    plain, clus = compile_model(qdq, None), compile_model(qdq, None, compression=dict(clusters=4))
    kinds = []
    for a, b in zip(layer_nodes(plain.graph), layer_nodes(clus.graph)):
        wa, wb = plain.graph.tensors[a.inputs[1]], clus.graph.tensors[b.inputs[1]]
        assert np.array_equal(wa.quant.scale, wb.quant.scale)
        kinds.append(wb.storage.kind)
        if wb.storage.kind == "clustered":
            cb, gs = wb.storage.arrays["codebooks"], wb.storage.meta["group_size"]
            for ch in range(wb.shape[0]):
                assert set(np.unique(wb.data[ch])) <= set(cb[ch // gs].tolist())
        else:
            assert np.array_equal(wa.data, wb.data)
    assert kinds.count("clustered") >= 2


# ---- structured pruning ---------------------------------------------------------------------------------------

def test_channel_eligibility(tmp_path):
    g = _float_graph(conv_relu_conv_gap_gemm(tmp_path / "a.onnx"))
    # conv1 -> conv2 directly; conv2 -> GlobalAveragePool -> flatten -> dense; dense is the graph output
    assert eligible_producers(g) == ["conv1", "conv2"]
    group = channel_group(g, _node(g, "conv2"))
    assert [n.op for n in group.ties] == ["GlobalAveragePool", "Reshape"] and _names(group.consumers) == ["dense"]
    assert _names(group.producers) == ["conv2"]
    # a residual Add(conv2(r1), r1) ties conv1's channels to conv2's: one group, both producers, and conv2 both
    # reads and writes it
    g2 = _float_graph(conv_relu_conv_gap_gemm(tmp_path / "b.onnx", residual=True))
    assert eligible_producers(g2) == ["conv1", "conv2"]
    group = channel_group(g2, _node(g2, "conv1"))
    assert _names(group.producers) == ["conv1", "conv2"] and _names(group.consumers) == ["conv2", "dense"]
    assert [n.op for n in group.ties] == ["Add", "GlobalAveragePool", "Reshape"]
    assert channel_group(g2, _node(g2, "conv2")).tensors == group.tensors == {"r1", "c2", "r2", "g", "f"}
    # the graph output (dense) is never a group's producer
    assert channel_group(g2, _node(g2, "dense")) is None


def test_channel_pruning_shapes_and_exact_bias_folding(tmp_path):
    # conv1's channels 2 and 5 are constant (zero weights, positive bias): the smallest L1 norms, so they go;
    # conv2 is 1x1 (no padding), so folding their constant into conv2's bias keeps the function exactly
    path = conv_relu_conv_gap_gemm(tmp_path / "m.onnx", dead_channels=(2, 5), c1=8, c2=8)
    g = _float_graph(path)
    x = np.random.default_rng(3).uniform(-1, 1, (4, 3, 8, 8))
    y0 = float_forward(g, x)
    removed = prune_channels(g, {"conv1": 0.25})
    assert removed == {"conv1": 2}
    w1 = [g.tensors[n.inputs[1]] for n in g.nodes if n.name == "conv1"][0]
    w2 = [g.tensors[n.inputs[1]] for n in g.nodes if n.name == "conv2"][0]
    assert w1.shape == (6, 3, 3, 3) and w2.shape == (8, 1, 1, 6)
    assert g.tensors["r1"].shape == (1, 8, 8, 6)
    assert np.allclose(float_forward(g, x), y0, atol=1e-5)


def test_channel_pruning_through_depthwise_is_exact(tmp_path):
    # pw1's constant channels 1 and 6 go; the depthwise conv between (no padding) loses the same channels, and
    # their constant, carried through it, lands in pw2's bias: the float function is unchanged
    path = conv_dw_conv(tmp_path / "d.onnx", dead_channels=(1, 6))
    g = _float_graph(path)
    assert eligible_producers(g) == ["pw1", "pw2"]
    group = channel_group(g, _node(g, "pw1"))
    assert _names(group.ties) == ["dw"] and _names(group.consumers) == ["pw2"]
    x = np.random.default_rng(4).uniform(-1, 1, (3, 3, 8, 8))
    y0 = float_forward(g, x)
    assert prune_channels(g, {"pw1": 0.25}) == {"pw1": 2}
    shapes = {n.name: g.tensors[n.inputs[1]].shape for n in layer_nodes(g)}
    assert shapes == {"pw1": (6, 1, 1, 3), "dw": (1, 3, 3, 6), "pw2": (8, 1, 1, 6), "dense": (4, 8)}
    assert np.allclose(float_forward(g, x), y0, atol=1e-5)


def test_channel_pruning_into_a_flattened_feature_map(tmp_path):
    # conv2 [1, 8, 8, 8] is flattened (channels innermost) into the Gemm: each removed channel takes its 64 columns
    path = conv_relu_conv_gap_gemm(tmp_path / "m.onnx", pool=False, dead_channels=(3,))
    g = _float_graph(path)
    x = np.random.default_rng(5).uniform(-1, 1, (2, 3, 8, 8))
    y0 = float_forward(g, x)
    group = channel_group(g, _node(g, "conv2"))
    assert _names(group.consumers) == ["dense"] and g.tensors["f"].shape == (1, 64 * 8)
    dense_w = [g.tensors[n.inputs[1]].data for n in g.nodes if n.name == "dense"][0].reshape(4, 64, 8)
    conv2_w = [g.tensors[n.inputs[1]].data for n in g.nodes if n.name == "conv2"][0]
    gone = np.argsort(np.abs(conv2_w.reshape(8, -1)).sum(axis=1), kind="stable")[:2]
    assert prune_channels(g, {"conv2": 0.25}) == {"conv2": 2}
    new = [g.tensors[n.inputs[1]].data for n in g.nodes if n.name == "dense"][0]
    assert new.shape == (4, 64 * 6) and g.tensors["f"].shape == (1, 384)
    assert np.array_equal(new.reshape(4, 64, 6), dense_w[:, :, np.setdiff1d(np.arange(8), gone)])
    # conv1 has a constant channel and feeds conv2 (1x1): removing it keeps the function exactly
    assert prune_channels(g, {"conv1": 0.125}) == {"conv1": 1}
    y1 = float_forward(g, x)
    assert not np.allclose(y1, y0)  # conv2's channels were real ones: the output changed...
    g2 = _float_graph(path)
    prune_channels(g2, {"conv1": 0.125})
    assert np.allclose(float_forward(g2, x), y0, atol=1e-5)  # ...conv1's constant one was not


def test_channel_pruning_through_pool_and_flatten(tmp_path):
    path = conv_relu_conv_gap_gemm(tmp_path / "m.onnx", c1=8, c2=8, classes=4)
    g = _float_graph(path)
    removed = prune_channels(g, {"conv1": 0.5, "conv2": 0.25})
    assert removed == {"conv1": 4, "conv2": 2}
    shapes = {n.name: g.tensors[n.inputs[1]].shape for n in layer_nodes(g)}
    assert shapes == {"conv1": (4, 3, 3, 3), "conv2": (6, 1, 1, 4), "dense": (4, 6)}
    assert g.tensors["g"].shape == (1, 1, 1, 6) and g.tensors["f"].shape == (1, 6)


def test_residual_group_is_pruned_jointly_and_exactly(tmp_path):
    # channels 2 and 5 are constant in both producers (conv1 and conv2), hence in the Add: the group's joint score is
    # 0 there. They go from both producers' outputs, conv2's inputs (1x1: exact folding), the Add, the pooling and
    # the Gemm's inputs, and the float function is unchanged
    path = conv_relu_conv_gap_gemm(tmp_path / "r.onnx", residual=True, dead_channels=(2, 5), dead_channels2=(2, 5))
    g = _float_graph(path)
    x = np.random.default_rng(6).uniform(-1, 1, (4, 3, 8, 8))
    y0 = float_forward(g, x)
    group = channel_group(g, _node(g, "conv2"))
    assert np.argsort(group_scores(g, group), kind="stable")[:2].tolist() == [2, 5]
    w2 = np.array(g.tensors[_node(g, "conv2").inputs[1]].data)
    assert prune_channels(g, {"conv1": 0.25, "conv2": 0.25}) == {"conv1": 2, "conv2": 2}
    keep = [0, 1, 3, 4, 6, 7]
    shapes = {n.name: g.tensors[n.inputs[1]].shape for n in layer_nodes(g)}
    assert shapes == {"conv1": (6, 3, 3, 3), "conv2": (6, 1, 1, 6), "dense": (4, 6)}
    # conv2 reads and writes the group: the same channels leave its inputs and its outputs
    assert np.array_equal(g.tensors[_node(g, "conv2").inputs[1]].data, w2[keep][..., keep])
    assert [g.tensors[t].shape for t in ("r1", "c2", "r2", "g", "f")] == [(1, 8, 8, 6)] * 3 + [(1, 1, 1, 6), (1, 6)]
    assert np.allclose(float_forward(g, x), y0, atol=1e-5)


def test_residual_group_is_left_whole_unless_every_producer_is_pruned(tmp_path):
    path = conv_relu_conv_gap_gemm(tmp_path / "r.onnx", residual=True)
    g = _float_graph(path)
    shapes = {n.name: g.tensors[n.inputs[1]].shape for n in layer_nodes(g)}
    assert prune_channels(g, {"conv1": 0.25}) == {}  # conv2, the Add's other producer, is not asked
    assert {n.name: g.tensors[n.inputs[1]].shape for n in layer_nodes(g)} == shapes
    # the group takes its producers' smallest fraction
    assert prune_channels(g, {"conv1": 0.5, "conv2": 0.25}) == {"conv1": 2, "conv2": 2}
    cal = calibration(tmp_path / "cal.npz")
    c = compile_model(path, cal, compression=dict(prune_channels=0.25, prune_exclude=("conv2",)))
    assert c.graph.meta["compression"]["channels_removed"] == {}


def test_float_runner_matches_onnxruntime(tmp_path):
    import onnxruntime as ort

    path = conv_relu_conv_gap_gemm(tmp_path / "r.onnx", residual=True, k2=3)
    g = _float_graph(path)
    x = np.random.default_rng(7).uniform(-1, 1, (5, 1, 3, 8, 8)).astype(np.float32)
    values = {"x": x.reshape(5, 3, 8, 8).astype(np.float64)}
    for node in g.nodes:
        run_node(g, node, values)
    sess = ort.InferenceSession(str(path), session_options(), providers=["CPUExecutionProvider"])
    want = np.concatenate([sess.run(None, {"x": s})[0] for s in x])
    assert np.allclose(values["y"], want, atol=1e-4)


def test_ridge_fit_recovers_a_linear_layer(tmp_path, monkeypatch):
    import tinyaot.compress.refit as refit

    monkeypatch.setattr(refit, "RIDGE", 1e-12)
    g = _float_graph(conv_relu_conv_gap_gemm(tmp_path / "m.onnx", k2=3, pool=False))
    rng = np.random.default_rng(8)
    for name, shape in (("conv2", (6, 8, 8, 8)), ("dense", (600, 512))):  # 3x3, pad 1; flattened Gemm
        node = _node(g, name)
        x = rng.normal(0, 1, shape)
        w, b = ridge_fit(g, node, x, pre_activation(g, node, x))
        assert np.allclose(w, g.tensors[node.inputs[1]].data, atol=1e-6)
        assert np.allclose(b, g.tensors[node.inputs[2]].data, atol=1e-6)


def test_refit_brings_the_pruned_outputs_back(tmp_path):
    path = conv_relu_conv_gap_gemm(tmp_path / "r.onnx", residual=True, k2=3, c1=16, c2=16)
    g = _float_graph(path)
    cal = np.random.default_rng(9).uniform(-1, 1, (64, 3, 8, 8))
    held_out = np.random.default_rng(10).uniform(-1, 1, (64, 3, 8, 8))
    y0 = float_forward(g, held_out)
    before, kept, consumers = snapshot(g), {}, set()
    prune_channels(g, {"conv1": 0.25, "conv2": 0.25}, kept, consumers)
    assert consumers == {"conv2", "dense"} and kept["conv1"].tolist() == kept["conv2"].tolist()
    err_pruned = np.abs(float_forward(g, held_out) - y0).mean()
    r = refit_consumers(before, g, cal, consumers, kept)
    assert set(r["layers"]) == {"conv2", "dense"}
    err_refit = np.abs(float_forward(g, held_out) - y0).mean()
    assert err_refit < 0.5 * err_pruned  # on samples the fit never saw


def test_channel_budget_counts_macs_exactly_and_the_classifier_after_pooling_fits_on_positions(tmp_path):
    from tinyaot.compress.channel_budget import _mac_terms, count_macs, removed
    from tinyaot.compress.refit import _pooled_source
    from tinyaot.ops.registry import get_op

    g = _float_graph(conv_relu_conv_gap_gemm(tmp_path / "m.onnx", k2=3, c1=16, c2=16))
    terms = _mac_terms(g, [channel_group(g, _node(g, name)) for name in ("conv1", "conv2")])
    for f1, f2 in ((0.25, 0.25), (0.0, 0.5), (0.5, 0.125), (0.75, 0.0)):
        pruned = snapshot(g)
        prune_channels(pruned, {"conv1": f1, "conv2": f2})
        kept = np.array([[1 - removed(16, f1) / 16, 1 - removed(16, f2) / 16]])
        assert count_macs(terms, kept)[0] == sum(get_op(n.op).macs(n, pruned) for n in pruned.nodes)
    pool = next(n for n in g.nodes if n.op == "GlobalAveragePool")
    assert _pooled_source(g, _node(g, "dense")) == pool.inputs[0] and _pooled_source(g, _node(g, "conv2")) is None
    flat = _float_graph(conv_relu_conv_gap_gemm(tmp_path / "f.onnx", k2=3, pool=False))
    assert _pooled_source(flat, _node(flat, "dense")) is None


@pytest.mark.parametrize("pool,residual", [(True, False), (False, False), (True, True)])
def test_channel_pruned_model_deploys_bit_exact(tmp_path, pool, residual):
    # 16 channels, so that the 12 kept fill the fold kernel's blocks of four output channels: with 8 the 6 kept ran
    # a two-channel tail and no fewer instructions than 8 once the dense kernels got faster (6134211)
    path = conv_relu_conv_gap_gemm(tmp_path / "m.onnx", k2=3, pool=pool, residual=residual, c1=16, c2=16)
    cal = calibration(tmp_path / "cal.npz")
    r = deploy(path, "stm32", cal, tmp_path / "out", compression=dict(prune_channels=0.25)).report
    v = r["verify"]
    assert v["ran"] and v["outputs_match"] and v["max_abs_diff_vs_reference"] == 0
    assert v["max_abs_diff_vs_onnxruntime"] <= 1
    # spread by measured sensitivity (compress/channel_budget.py) within the MACs that 4 of each 16 would leave
    alloc = r["compression"]["channel_allocation"]
    removed = r["compression"]["channels_removed"]
    if residual:  # the Add ties both convs into one channel group: nothing to spread, 4 of 16 go
        assert "skipped" in alloc and removed == {"conv1": 4, "conv2": 4}
    else:
        dense_macs, budget, got = alloc["macs"]
        assert got <= budget < dense_macs and alloc["cost"][1] <= alloc["cost"][0]
        assert removed and {name: int(16 * alloc["fractions"][name] + 1e-9) for name in removed} == removed
    refit = r["compression"]["refit"]["layers"]  # the layers that lost input channels and all after, error left
    assert set(refit) <= {"conv2", "dense"} and refit and all(0 <= e < 1 for e in refit.values())
    rows = {l["name"]: l for l in r["layers"]}
    kept = 16 - removed.get("conv1", 0)
    assert rows["conv1"]["weights_bytes"] == kept * 27 and rows["conv1"]["weights_bytes_dense"] == 16 * 27
    assert json.loads((tmp_path / "out" / "report.json").read_text())["compression"] == r["compression"]
    # the compressed report measures the uncompressed build itself (the same model, calibration and board)
    base = r["compression"]["uncompressed"]
    assert r["macs"] < base["macs"] and r["memory"]["weights_bytes"] < base["weights_bytes"]
    assert v["instructions"] < base["instructions"]
    if not pool or residual:
        return
    # once (one model of the three): that measurement is the same firmware and sample as a plain deploy's
    plain = deploy(path, "stm32", cal, tmp_path / "plain").report
    assert base["instructions"] == plain["verify"]["instructions"]
    assert base["flash_bytes"] == plain["memory"]["flash_bytes"] and base["macs"] == plain["macs"]
    assert base["weights_bytes"] == plain["memory"]["weights_bytes"]
    plain_rows = {l["name"]: l["instructions"] for l in plain["layers"] if l["instructions"] is not None}
    assert {l["name"]: l["instructions_uncompressed"] for l in r["layers"] if l["instructions"] is not None} \
        == plain_rows


def test_ic_resnet8_channel_pruning_cuts_macs_and_instructions(tmp_path, cal_dir):
    """Issue 4: --prune-channels 0.25 on ic_resnet8 must execute >= 20 % fewer instructions. Every conv is pruned:
    the first conv of each residual block alone, the others in the three groups the Adds tie (block output conv,
    1x1 shortcut conv and the conv before them). Measured: 43.1 % fewer MACs, 36.8 % fewer instructions. By
    magnitude, so uniformly (the removal spread by measured sensitivity keeps the same MACs: the accuracy test
    below; measuring it costs this test ~20 s)."""
    cal = few_calibration_samples(cal_dir, "ic_resnet8")  # counts and costs, not accuracy: 16 samples do
    pruned = deploy(MODELS / "ic_resnet8.onnx", "stm32", cal, tmp_path / "pruned",
                    compression=dict(prune_channels=0.25, prune_method="magnitude")).report
    removed = pruned["compression"]["channels_removed"]
    assert len(removed) == 9 and sorted(removed.values()) == [4] * 3 + [8] * 3 + [16] * 3
    plain = pruned["compression"]["uncompressed"]  # the same model built and run without compression
    assert pruned["verify"]["outputs_match"] and pruned["verify"]["max_abs_diff_vs_reference"] == 0
    assert pruned["macs"] <= 0.6 * plain["macs"]
    assert pruned["verify"]["instructions"] <= 0.8 * plain["instructions"]


# ic_resnet8's top-1 under --prune-channels 0.25 (61 % uniform, 74 % allocated, line 75 %) is measured by
# ci/compression_benchmark.py (its ACCURACY_LINES) on the held-out split: the allocation measures 48 prunings and the
# test took 42 s of the suite's time; the allocation itself is checked by the deploy test above and the MACs test.


def test_block_pruning_keeps_the_allocation_with_less_measured_noise(tmp_path):
    """--prune --prune-pattern block with masks by data: the depthwise layer stays dense (its share moved onto the
    others, together the asked 50 % of all the pruned layers' weights), the allocation kept is the one of the
    knapsack's and the uniform one with less noise measured at the model's output, and each mask is a union of
    4x4 blocks of the rows view."""
    from tinyaot.compress.storage import rows

    path = conv_dw_conv(tmp_path / "d.onnx", c=16)
    c = compile_model(path, calibration(tmp_path / "cal.npz"), compression=dict(prune=0.5, prune_pattern="block"))
    info = c.graph.meta["compression"]
    alloc = info["allocation"]
    assert set(alloc["measured"]) == {"knapsack", "uniform"}
    assert alloc["measured"][alloc["chosen"]] == min(alloc["measured"].values())
    levels = info["layer_sparsity"]
    sizes = {name: w.size for name, (w, _) in info["float_layers"].items()}
    nodes = {n.name: n for n in layer_nodes(c.graph)}
    dw = [name for name in sizes if nodes[name].attrs.get("depthwise")]
    assert len(dw) == 1 and levels[dw[0]] == 0.0 and dw[0] not in info["pruned_masks"]
    removed = sum(sizes[n] * levels[n] for n in sizes)
    assert abs(removed - 0.5 * sum(sizes.values())) <= 0.05 * sum(sizes.values())
    if alloc["chosen"] == "uniform":
        assert len({levels[n] for n in sizes if n not in dw}) == 1
    for name, node in nodes.items():
        if name in dw:
            continue
        w = rows(np.asarray(c.graph.tensors[node.inputs[1]].data), False)
        pruned = rows(info["pruned_masks"][name], False)
        assert np.all(w[pruned] == 0), name
        out, k = pruned.shape
        for i in range(0, out, 4):
            for j in range(0, k, 4):
                blk = pruned[i:i + 4, j:j + 4]
                assert blk.all() or not blk.any(), (name, i, j)


def test_block2x1_pruning_masks_pairs_of_channels(tmp_path):
    """--prune-pattern block2x1: the convolutions' masks are unions of 2x1 blocks of the rows view (a pair of
    output channels drops an input position together), the depthwise layer is pruned too (unstructured) but stored
    dense, the knapsack's allocation is kept unmeasured, and 50 % of all the weights go."""
    from tinyaot.compress.storage import rows

    path = conv_dw_conv(tmp_path / "d.onnx", c=16)
    c = compile_model(path, calibration(tmp_path / "cal.npz"), compression=dict(prune=0.5, prune_pattern="block2x1"))
    info = c.graph.meta["compression"]
    assert "allocation" not in info
    levels = info["layer_sparsity"]
    sizes = {name: w.size for name, (w, _) in info["float_layers"].items()}
    removed = sum(sizes[n] * levels[n] for n in sizes)
    assert abs(removed - 0.5 * sum(sizes.values())) <= 0.05 * sum(sizes.values())
    for name, node in {n.name: n for n in layer_nodes(c.graph)}.items():
        dw = bool(node.attrs.get("depthwise"))
        if dw:
            assert info["layers"][name]["storage"] == "dense"
            continue
        if name not in info["pruned_masks"]:  # the knapsack left it dense
            continue
        w = rows(np.asarray(c.graph.tensors[node.inputs[1]].data), False)
        pruned = rows(info["pruned_masks"][name], False)
        assert pruned.any() and np.all(w[pruned] == 0), name
        assert np.array_equal(pruned[0::2], pruned[1::2]), name  # 16 channels: whole pairs
        # stored in 2x1 blocks exactly where the estimate says they run faster than dense (the speed form)
        pixels = int(np.prod(c.graph.tensors[node.outputs[0]].shape[:-1]))
        kept = float(np.mean((w[0::2] != 0) | (w[1::2] != 0)))
        faster = conv_estimate(pixels, w.shape[1], w.shape[0], kept) < conv_estimate(pixels, w.shape[1], w.shape[0])
        assert (info["layers"][name]["storage"] == "sparse_block") == faster, name
    assert len(info["pruned_masks"]) >= 2
    noise, estimate = info["speed_allocation"]["noise"], info["speed_allocation"]["estimate_vs_dense"]
    assert noise[1] <= (1 + SPEED_SLACK) * noise[0] + 1e-12 and estimate[1] <= estimate[0]


def test_allocation_prices_instructions_when_the_speed_form_runs_slow():
    """_faster_picks: two layers of equal weights and noise curves, one whose weights serve 16 times the
    instructions; above SPEED_TARGET the picks move sparsity to it (within SPEED_SLACK of the noise), below it the
    fewest-noise picks stay."""
    curve = [(0.0, 0.0), (0.25, 0.01), (0.5, 0.03), (0.75, 0.052)]
    options = [[(100 * (1 - lv), e) for lv, e in curve] for _ in range(2)]
    speed = [lambda lv: 16.0 * (1.0 - 0.3 * lv), lambda lv: 1.0 - 0.3 * lv]  # 0.85 of dense at 50 %
    budget = 100.0  # half of the weights go
    picks = allocate(options, budget)
    info = {}
    faster = _faster_picks(options, [100, 100], speed, budget, picks, info)
    assert curve[faster[0]][0] > curve[faster[1]][0]  # the busy layer pruned further
    assert info["speed_allocation"]["estimate_vs_dense"][1] < info["speed_allocation"]["estimate_vs_dense"][0]
    assert info["speed_allocation"]["noise"][1] <= (1 + SPEED_SLACK) * info["speed_allocation"]["noise"][0]
    quick = [lambda lv: 0.5, lambda lv: 0.5]  # already below the target: nothing moves
    assert _faster_picks(options, [100, 100], quick, budget, picks, {}) == picks
