"""End-to-end distillation (compress/distill.py): on a small model, training the pruned layers' kept weights to the
dense model's logits lowers the logits error that the same masks leave without it, and masks given stay exactly as
given; --prune-method distill keeps the "obs" method's masks and compiles to block-sparse int8 weights within their
bounds."""
from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from tinyaot.compress import distill as distill_mod
from tinyaot.api import compile_model
from tinyaot.compress.distill import Target, distill
from tinyaot.compress.prune import layer_nodes
from tinyaot.compress.reconstruct import Pattern
from tinyaot.compress.refit import snapshot
from tinyaot.compress.pattern import is_block_sparse
from tinyaot.frontend import import_model
from tinyaot.passes import run_passes

from compress_models import calibration, conv_relu_conv_gap_gemm


def _graph(path):
    return run_passes(import_model(path, None).graph, echo=lambda _: None)


def test_distillation_lowers_the_logits_error_of_the_same_masks(tmp_path):
    path = conv_relu_conv_gap_gemm(tmp_path / "m.onnx", k2=3, c1=8, c2=8)
    x = np.random.default_rng(3).uniform(-1, 1, (32, 1, 3, 8, 8))
    targets = {"conv2": Target(0.5, Pattern(4, 4)), "conv1": Target(0.5, Pattern(1, 1))}
    g0 = _graph(path)
    plain = distill(g0, snapshot(g0), x, targets, steps=0)  # the final masks at once, no training
    g1 = _graph(path)
    trained = distill(g1, snapshot(g1), x, targets, steps=60)
    assert plain["loss_after"] > 0.01
    assert trained["loss_after"] < 0.5 * plain["loss_after"]
    conv2 = [n for n in layer_nodes(g1) if n.name == "conv2"][0]
    w = np.asarray(g1.tensors[conv2.inputs[1]].data)
    assert np.mean(w == 0) == 0.5 and is_block_sparse(w)  # whole 4x4 blocks of the rows view
    assert np.array_equal(trained["masks"]["conv2"], w != 0)
    # deterministic: the same run gives the same weights
    g2 = _graph(path)
    distill(g2, snapshot(g2), x, targets, steps=60)
    assert np.array_equal(np.asarray(g2.tensors[conv2.inputs[1]].data), w)
    # masks given (`keep`): exactly the dropped weights are zero, and a kept weight that starts at zero trains
    g3 = _graph(path)
    c3 = [n for n in layer_nodes(g3) if n.name == "conv2"][0]
    keep = trained["masks"]["conv2"]
    w3 = np.array(g3.tensors[c3.inputs[1]].data)
    w3[keep & (np.arange(w3.size).reshape(w3.shape) % 7 == 0)] = 0.0
    g3.tensors[c3.inputs[1]].data = w3
    got = distill(g3, snapshot(_graph(path)), x, steps=20, keep={"conv2": keep})
    w3 = np.asarray(g3.tensors[c3.inputs[1]].data)
    assert np.array_equal(got["masks"]["conv2"], keep) and np.array_equal(w3 != 0, keep)


def test_the_training_runs_on_one_blas_thread(tmp_path, monkeypatch):
    """OpenBLAS sums a float32 product differently on one thread than on two, and the training amplifies it: the
    compiled weights depended on OPENBLAS_NUM_THREADS (kws_dscnn, see compress/distill.py). Every forward pass of
    the training must see a single BLAS thread, whatever the process was given (2 here)."""
    path = conv_relu_conv_gap_gemm(tmp_path / "m.onnx", k2=3, c1=8, c2=8)
    x = np.random.default_rng(3).uniform(-1, 1, (8, 1, 3, 8, 8))
    seen = []
    forward = distill_mod.forward

    def counting(*args, **kwargs):
        seen.extend(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas")
        return forward(*args, **kwargs)

    monkeypatch.setattr(distill_mod, "forward", counting)
    with threadpool_limits(limits=2, user_api="blas"):
        g = _graph(path)
        distill(g, snapshot(g), x, {"conv2": Target(0.5, Pattern(4, 4))}, steps=2)
        assert all(p["num_threads"] == 2 for p in threadpool_info() if p["user_api"] == "blas")  # restored after
    assert seen and set(seen) == {1}


def test_prune_method_distill_compiles_block_sparse(tmp_path):
    path = conv_relu_conv_gap_gemm(tmp_path / "m.onnx", k2=3, c1=8, c2=8)
    cal = calibration(tmp_path / "cal.npz")
    compiled = compile_model(path, cal, compression=dict(prune=0.5, prune_pattern="block", prune_method="distill"))
    info = compiled.graph.meta["compression"]
    assert info["distilled"] and info["distill"]["loss_after"] < 1.0
    # the masks are those the "obs" method chooses on the same data, kept through the distillation
    obs = compile_model(path, cal, compression=dict(prune=0.5, prune_pattern="block")).graph.meta["compression"]
    assert info["distill"]["masks_from"] == "obs" and obs["pruned_masks"]
    for name, mask in obs["pruned_masks"].items():
        assert np.array_equal(info["pruned_masks"][name], mask), name
    conv2 = [n for n in compiled.graph.nodes if n.name == "conv2"][0]
    assert is_block_sparse(np.asarray(compiled.graph.tensors[conv2.inputs[1]].data))


def test_distillation_after_channel_pruning_matches_the_kept_channels_of_the_dense_maps(tmp_path):
    """--prune-channels with --prune-method distill: the kept weights trained to the dense model's logits and to its
    layers' and joins' outputs at the channels each group kept (pipeline._distill_features); the residual group's
    Add output is matched at exactly the channels the producers kept, the head is not a feature, and the training
    lowers the calibration error it starts from."""
    from tinyaot.compress.distill import logits_tensor
    from tinyaot.compress.pipeline import _distill_features
    from tinyaot.compress.prune import prune_channels

    path = conv_relu_conv_gap_gemm(tmp_path / "r.onnx", residual=True)
    g = _graph(path)
    teacher = snapshot(g)
    kept = {}
    prune_channels(g, {"conv1": 0.25, "conv2": 0.25}, kept)
    feats = _distill_features(g, teacher, kept)
    add = next(n for n in g.nodes if n.op == "Add").outputs[0]
    assert np.array_equal(feats[add][1], kept["conv1"]) and len(kept["conv1"]) == 6
    assert logits_tensor(g) not in feats
    for t, (tt, ch) in feats.items():  # each feature is the dense tensor itself or its kept channels
        assert g.tensors[t].shape[-1] == (teacher.tensors[tt].shape[-1] if ch is None else len(ch))
    cal = calibration(tmp_path / "cal.npz")
    compiled = compile_model(path, cal, compression=dict(prune_channels=0.25, prune_method="distill"))
    info = compiled.graph.meta["compression"]
    assert info["distilled"] and info["distill"]["features"] >= 3
    assert info["distill"]["loss_after"] < info["distill"]["loss_before"]


def test_shifts_follow_the_layout_the_first_convolution_reads(tmp_path):
    """augmented shifts a sample along the axes the first sliding-window layer slides over: H and W of an NHWC
    input (ic_resnet8 reads [1, 32, 32, 3] as it is), the last two of an NCHW one (a Transpose to NHWC follows)."""
    from shared_data import MODELS

    from tinyaot.compress.distill import augmented, spatial_axes

    assert spatial_axes(_graph(MODELS / "ic_resnet8.onnx")) == (0, 1)
    assert spatial_axes(_graph(conv_relu_conv_gap_gemm(tmp_path / "m.onnx"))) is None
    x = np.zeros((2, 6, 6, 3), np.float32)
    x[:, 2, 3, :] = [1.0, 2.0, 3.0]  # one pixel, three channels
    out = augmented({"x": x}, 4, 0, (0, 1))["x"]
    for s in out[2:]:  # the copies: the pixel moved (or mixed), its channels never mixed across
        nz = np.argwhere(s != 0)
        assert len(nz) and np.allclose(s[s != 0].reshape(-1, 3) / s[s != 0].reshape(-1, 3)[:, :1], [1, 2, 3])


def test_every_distillation_path_shifts_the_spatial_axes(monkeypatch):
    """distill itself picks the shifted axes from the graph (spatial_axes), whatever the caller: the --prune path
    (masks given or chosen here) shifted a sample's last two axes, W and C of an NHWC input, moving ic_resnet8's
    RGB channels into each other. Here without features or shift axes from the caller, as --prune calls it."""
    from shared_data import MODELS

    pools = []
    real = distill_mod.augmented
    monkeypatch.setattr(distill_mod, "augmented", lambda *a: pools.append(real(*a)) or pools[-1])
    g = _graph(MODELS / "ic_resnet8.onnx")
    x = np.zeros((2, 32, 32, 3), np.float32)
    x[:, 15, 16, :] = [1.0, 2.0, 3.0]  # one pixel, three channels
    distill(g, snapshot(g), x, steps=0, copies=8)
    (pool,) = [p[g.inputs[0]] for p in pools]
    assert pool.shape == (16, 32, 32, 3)
    moved = 0
    for s in pool[2:]:  # the copies: the pixel moved along H and W, its channels never mixed across
        nz, v = np.argwhere(s != 0), s[s != 0]
        assert len(nz) and v.size % 3 == 0 and np.allclose(v.reshape(-1, 3) / v.reshape(-1, 3)[:, :1], [1, 2, 3])
        moved += bool(np.any(nz[:, 0] != 15))
    assert moved  # H is shifted too, not only W
