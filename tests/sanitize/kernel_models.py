"""A small float ONNX graph that, compiled with the per-layer compression rules below, uses every kernel in
templates/kernels: what the sanitizer tests build to put each kernel under ASan and UBSan with the arguments real
layers give it (the emitted C calls them as a deploy does). One graph and one build keep it cheap.

Each weight storage kind has one conv, one depthwise conv and one fully connected layer of its own, selected by
layer name: dense int8, int4, clustered (16 values), bitmap-sparse (half the weights zero), run-length-sparse
(95 % zero, where runs take fewer bytes than a bitmap), block-sparse (half the weights zero in 4x4 blocks; its
depthwise layer stays dense) and 2x1 block-sparse (block2x1: its conv in pairs of channels, its depthwise layer pruned
but stored dense). A 1x1 conv and a 3x3 depthwise conv with int4 weights reach the dense variants'
decoded forms (tinyaot/ops/decoded.py) on the DSP and Helium targets.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tinyaot.ops.registry import ops_with, traits_of

KINDS = {  # layer-name suffix -> the per-layer rule fields that make the layer's storage that kind
    "s8": {"exclude": True},
    "s4": {"weight_bits": 4},
    "clustered": {"clusters": 16},
    "sparse": {"sparsity": 0.5},
    "block": {"sparsity": 0.5, "prune_pattern": "block"},
    "b2x1": {"sparsity": 0.5, "prune_pattern": "block2x1"},  # conv 2x1 blocks; its fully connected layer 4x4
    "rle": {"sparsity": 0.95},  # last: its fully connected layer (10 outputs) feeds the LSTM
}
# cluster_fc "codebook": the clustered fully connected layer keeps its codebook (by default a layer that uses each
# weight once takes an evenly spaced grid and runs the int4 kernels), so the clustered FC kernels stay covered
COMPRESSION = {"rules": [{"pattern": f"*_{kind}", **fields} for kind, fields in KINDS.items()],
               "cluster_fc": "codebook"}
X_SHAPE = [1, 3, 8, 8]
C = 8  # channels of the conv stack


def _init(rng: np.random.Generator, name: str, shape, scale: float = 0.4) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def all_kernels_model(path: Path, seed: int = 0) -> Path:
    """x [1, 3, 8, 8]: six 3x3 convs and six 5x5 depthwise convs (5x5, so their rows are long enough to be
    stored sparse), one of each per storage kind; then add, mul, PRelu, sigmoid, pad, max pool, resize, average
    pools (padding counted or not), transposed conv, concat, clip, ReduceMean (the layout change after it runs the
    transpose kernel), six fully connected layers, one per storage kind (48-long rows), and softmax."""
    rng = np.random.default_rng(seed)
    n = helper.make_node
    inits, nodes = [], []
    # an int4 1x1 conv on the input first, where the arena has room for its decoded tile: the Helium target takes
    # it on the decoded 1x1 kernel (tinyaot_convolve_s8_mve_decoded.c)
    rng0 = np.random.default_rng(seed + 2)
    inits += [_init(rng0, "wpw0", (X_SHAPE[1], X_SHAPE[1], 1, 1)), _init(rng0, "bpw0", (X_SHAPE[1],), 0.1)]
    nodes.append(n("Conv", ["x", "wpw0", "bpw0"], ["pw0"], name="pw0_s4"))
    cur, ch = "pw0", X_SHAPE[1]
    for kind in KINDS:
        inits += [_init(rng, f"wc_{kind}", (C, ch, 3, 3)), _init(rng, f"bc_{kind}", (C,), 0.1)]
        nodes += [n("Conv", [cur, f"wc_{kind}", f"bc_{kind}"], [f"c_{kind}"], name=f"conv_{kind}", pads=[1, 1, 1, 1]),
                  n("Relu", [f"c_{kind}"], [f"rc_{kind}"])]
        cur, ch = f"rc_{kind}", C
    for kind in KINDS:
        inits += [_init(rng, f"wd_{kind}", (C, 1, 5, 5)), _init(rng, f"bd_{kind}", (C,), 0.1)]
        nodes.append(n("Conv", [cur, f"wd_{kind}", f"bd_{kind}"], [f"d_{kind}"], name=f"dw_{kind}",
                       pads=[2, 2, 2, 2], group=C))
        cur = f"d_{kind}"
    # layers the faster kernel variants take (tests/sanitize/test_sanitizers.py compiles for DSP and MVE targets
    # too): a 1x1 conv, a 3x3 depthwise conv, and a global average pool that requantizes (its mean is scaled back
    # onto the layer, squeeze-and-excitation style, by a broadcast Mul)
    inits += [_init(rng, "wpw", (C, C, 1, 1)), _init(rng, "bpw", (C,), 0.1),
              _init(rng, "wd3", (C, 1, 3, 3)), _init(rng, "bd3", (C,), 0.1),
              _init(rng, "wpw4", (C, C, 1, 1)), _init(rng, "bpw4", (C,), 0.1),
              _init(rng, "wd34", (C, 1, 3, 3)), _init(rng, "bd34", (C,), 0.1)]
    nodes += [n("Conv", [cur, "wpw4", "bpw4"], ["pw4"], name="pw_s4"),
              n("Conv", ["pw4", "wd34", "bd34"], ["dw34"], name="dw3_s4", pads=[1, 1, 1, 1], group=C),
              n("Conv", ["dw34", "wpw", "bpw"], ["pw"], name="pw_s8"),
              n("Conv", ["pw", "wd3", "bd3"], ["dw3"], name="dw3_s8", pads=[1, 1, 1, 1], group=C),
              n("GlobalAveragePool", ["dw3"], ["gap"]),
              n("Mul", ["dw3", "gap"], ["se"])]
    cur = "se"
    inits += [
        numpy_helper.from_array(rng.uniform(0.05, 0.3, (C, 1, 1)).astype(np.float32), "slope"),
        numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads"),
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
        _init(rng, "wt", (C, 4, 2, 2)), _init(rng, "bt", (4,), 0.1),
        numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
        numpy_helper.from_array(np.array(3.0, np.float32), "hi"),
    ]
    nodes += [
        n("Add", [cur, "rc_rle"], ["a1"]),
        n("Mul", ["a1", "rc_rle"], ["m1"]),
        n("PRelu", ["m1", "slope"], ["p1"]),
        n("Sigmoid", ["p1"], ["s1"]),
    ]
    # Every registered unary elementwise op whose kernel no op of this graph reaches (an op added later, e.g.
    # Abs) joins here, so a new op's kernel is under the sanitizers without this file listing it.
    fixed = {"Conv", "Relu", "Add", "Mul", "GlobalAveragePool", "PRelu", "Sigmoid", "Pad", "MaxPool", "Resize",
             "AveragePool", "ConvTranspose", "Concat", "Clip", "ReduceMean", "FullyConnected", "Softmax", "Transpose"}
    covered = {k for op in fixed for k in traits_of(op).kernels}
    cur = "s1"
    for op in ops_with(layout="elementwise", broadcast=False):
        if not set(traits_of(op).kernels) <= covered:
            nodes.append(n(op, [cur], [f"{op.lower()}_out"]))
            cur = f"{op.lower()}_out"
            covered |= set(traits_of(op).kernels)
    nodes += [
        n("Pad", [cur, "pads"], ["pd"], mode="constant"),
        n("MaxPool", ["pd"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Resize", ["mp", "", "scales"], ["rs"], mode="nearest"),
        n("AveragePool", ["rs"], ["ap1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
          count_include_pad=1),
        n("ConvTranspose", ["ap1", "wt", "bt"], ["ct"], kernel_shape=[2, 2], strides=[2, 2]),
        n("AveragePool", ["ct"], ["ap2"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        n("Concat", ["ap2", "ap1"], ["cc"], axis=1),
        n("Clip", ["cc", "lo", "hi"], ["cl"]),
        n("ReduceMean", ["cl"], ["gm"], axes=[2, 3], keepdims=0),
    ]
    cur, width = "gm", C + 4
    for kind in KINDS:
        out = 10 if kind == "rle" else 48
        inits += [_init(rng, f"wf_{kind}", (width, out), 0.3), _init(rng, f"bf_{kind}", (out,), 0.1)]
        nodes.append(n("Gemm", [cur, f"wf_{kind}", f"bf_{kind}"], [f"f_{kind}"], name=f"fc_{kind}"))
        cur, width = f"f_{kind}", out
        if kind != "rle":
            nodes.append(n("Relu", [cur], [f"rf_{kind}"]))
            cur = f"rf_{kind}"
    # a bidirectional LSTM over [5 steps, 1, 2 features], 1 unit per direction: [5, 2, 1, 1] -> [1, 10]
    rng_l = np.random.default_rng(seed + 1)
    inits += [numpy_helper.from_array(np.array([5, 1, 2], np.int64), "shape_seq"),
              numpy_helper.from_array(np.array([1, 10], np.int64), "shape_seq_out"),
              _init(rng_l, "lstm_w", (2, 4, 2), 0.8), _init(rng_l, "lstm_r", (2, 4, 1), 0.8),
              _init(rng_l, "lstm_b", (2, 8), 0.2)]
    nodes += [n("Reshape", [cur, "shape_seq"], ["seq"]),
              n("LSTM", ["seq", "lstm_w", "lstm_r", "lstm_b"], ["lstm_y"], hidden_size=1, direction="bidirectional"),
              n("Reshape", ["lstm_y", "shape_seq_out"], ["lstm_flat"])]
    # the same shape through a bidirectional GRU (linear_before_reset=0, ONNX's default)
    inits += [_init(rng_l, "gru_w", (2, 3, 2), 0.8), _init(rng_l, "gru_r", (2, 3, 1), 0.8),
              _init(rng_l, "gru_b", (2, 6), 0.2)]
    nodes += [n("Reshape", ["lstm_flat", "shape_seq"], ["gru_seq"]),
              n("GRU", ["gru_seq", "gru_w", "gru_r", "gru_b"], ["gru_y"], hidden_size=1, direction="bidirectional"),
              n("Reshape", ["gru_y", "shape_seq_out"], ["gru_flat"])]
    cur = "gru_flat"
    # attention-style tail: an outer product of two activations (BatchMatMul), a Softmax over a middle axis (the
    # strided kernel), a second BatchMatMul back to [1, 10]
    inits += [numpy_helper.from_array(np.array(shape, np.int64), f"shape_{k}")
              for k, shape in (("col", [1, 10, 1]), ("row", [1, 1, 10]), ("flat", [1, 10]))]
    nodes += [n("Reshape", [cur, "shape_col"], ["att_col"]), n("Reshape", [cur, "shape_row"], ["att_row"]),
              n("MatMul", ["att_col", "att_row"], ["att_outer"]), n("Softmax", ["att_outer"], ["att_sm"], axis=1),
              n("MatMul", ["att_row", "att_sm"], ["att_mix"]), n("Reshape", ["att_mix", "shape_flat"], ["att_out"])]
    # a reversing Slice of an activation: the IndexCopy kernel (tinyaot_index_copy_s8)
    inits += [numpy_helper.from_array(np.array(v, np.int64), k)
              for k, v in (("sl_st", [-1]), ("sl_en", [-100]), ("sl_ax", [1]), ("sl_sp", [-1]))]
    nodes.append(n("Slice", ["att_out", "sl_st", "sl_en", "sl_ax", "sl_sp"], ["att_rev"]))
    nodes.append(n("Softmax", ["att_rev"], ["y"], axis=1))
    graph = helper.make_graph(nodes, path.stem, [helper.make_tensor_value_info("x", TensorProto.FLOAT, X_SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


def calibration(path: Path, n: int = 16, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    np.savez(path, x=(rng.standard_normal((n, *X_SHAPE)) * 1.5 + 0.2).astype(np.float32))
    return path
