"""Every OpSpec.backward_float against finite differences of its own evaluate_float (compress/distill.py trains
through them): on a tiny layer, the loss sum(y * r) for a fixed random r, its gradient with respect to each data
input and each trained parameter compared with central differences at random coordinates."""
from __future__ import annotations

import numpy as np
import pytest

from tinyaot.ir import Graph, Node, Tensor
from tinyaot.ops.common import spatial_out
from tinyaot.ops.registry import FloatUnsupported, get_op

N = 2  # samples per batch
EPS = 1e-6


def _graph(op, attrs, data_shapes, consts, out_shape):
    """One node of `op` on data inputs of `data_shapes` (batch 1 each) and constants `consts` (name -> array,
    "" for an absent input), NHWC."""
    tensors, inputs = {}, []
    for k, shape in enumerate(data_shapes):
        tensors[f"x{k}"] = Tensor(f"x{k}", (1, *shape))
        inputs.append(f"x{k}")
    for name, value in consts:
        if name:
            tensors[name] = Tensor(name, tuple(value.shape), "float32", np.asarray(value, np.float32))
        inputs.append(name)
    tensors["y"] = Tensor("y", (1, *out_shape))
    node = Node(op, "n", inputs, ["y"], dict(attrs))
    return Graph("g", tensors, [node], [i for i in inputs if i.startswith("x")], ["y"], layout="NHWC"), node


def _check(graph, node, data_shapes, seed=0):
    rng = np.random.default_rng(seed)
    spec = get_op(node.op)
    xs = [rng.normal(0, 1, (N, *s)) for s in data_shapes]

    def run(values):
        ins = list(values) + [None] * (len(node.inputs) - len(values))
        return spec.evaluate_float(node, graph, ins)[0]

    y = run(xs)
    r = rng.normal(0, 1, y.shape)
    grad_in, grad_params = spec.backward_float(node, graph, xs + [None] * (len(node.inputs) - len(xs)), [y], [r])

    def loss():
        return float(np.sum(run(xs) * r))

    checked = 0
    for k, x in enumerate(xs):
        assert grad_in[k].shape == x.shape
        for flat in rng.choice(x.size, min(12, x.size), replace=False):
            idx = np.unravel_index(flat, x.shape)
            old = x[idx]
            x[idx] = old + EPS
            up = loss()
            x[idx] = old - EPS
            down = loss()
            x[idx] = old
            assert grad_in[k][idx] == pytest.approx((up - down) / (2 * EPS), rel=1e-4, abs=1e-6)
            checked += 1
    for k, g in grad_params.items():
        t = graph.tensors[node.inputs[k]]
        assert g.shape == t.data.shape
        base = np.array(t.data, np.float64)
        for flat in rng.choice(base.size, min(12, base.size), replace=False):
            idx = np.unravel_index(flat, base.shape)
            vals = []
            for d in (EPS, -EPS):
                moved = base.copy()
                moved[idx] += d
                t.data = moved  # float64: the finite difference must not round to float32
                vals.append(loss())
            t.data = base
            assert g[idx] == pytest.approx((vals[0] - vals[1]) / (2 * EPS), rel=1e-4, abs=1e-6)
            checked += 1
    assert checked


def _conv(rng, h, w, c, o, k, stride, pads, dilation=(1, 1), depthwise=False, bias=True, activation=None):
    weight = rng.normal(0, 0.5, (1, *k, o) if depthwise else (o, *k, c))
    attrs = {"kernel_shape": list(k), "strides": list(stride), "pads": list(pads), "dilations": list(dilation)}
    if depthwise:
        attrs["depthwise"] = True
    if activation:
        attrs["activation"] = activation
    oh, ow = spatial_out((h, w), k, stride, pads, dilation)
    consts = [("w", weight), ("b" if bias else "", rng.normal(0, 0.5, o))]
    return _graph("Conv", attrs, [(h, w, c)], consts, (oh, ow, o))


@pytest.mark.parametrize("case", ["plain", "strided_padded_relu", "dilated_no_bias", "depthwise",
                                  "depthwise_multiplier_relu6"])
def test_conv_backward_matches_finite_differences(case):
    rng = np.random.default_rng(1)
    shapes = (6, 5, 3)
    if case == "plain":
        g, n = _conv(rng, *shapes, 4, (3, 3), (1, 1), (0, 0, 0, 0))
    elif case == "strided_padded_relu":
        g, n = _conv(rng, *shapes, 4, (3, 2), (2, 1), (1, 0, 1, 1), activation=(0.0, np.inf))
    elif case == "dilated_no_bias":
        g, n = _conv(rng, *shapes, 5, (2, 2), (1, 2), (1, 1, 0, 0), dilation=(2, 1), bias=False)
    elif case == "depthwise":
        g, n = _conv(rng, *shapes, 3, (3, 3), (1, 1), (1, 1, 1, 1), depthwise=True)
    else:
        g, n = _conv(rng, *shapes, 6, (3, 3), (2, 2), (1, 1, 1, 1), depthwise=True, activation=(0.0, 6.0))
    _check(g, n, [shapes])


def test_fully_connected_backward_matches_finite_differences():
    rng = np.random.default_rng(2)
    g, n = _graph("FullyConnected", {"activation": (0.0, np.inf)}, [(7,)],
                  [("w", rng.normal(0, 0.5, (4, 7))), ("b", rng.normal(0, 0.5, 4))], (4,))
    _check(g, n, [(7,)])


@pytest.mark.parametrize("op,attrs,out", [
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, (3, 3, 3)),
    ("AveragePool", {"kernel_shape": [3, 2], "strides": [1, 2], "pads": [1, 0, 1, 0], "count_include_pad": 1},
     (5, 2, 3)),
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}, (2, 2, 3)),
    ("GlobalAveragePool", {}, (1, 1, 3)),
])
def test_pool_backward_matches_finite_differences(op, attrs, out):
    g, n = _graph(op, attrs, [(5, 4, 3)], [], out)
    _check(g, n, [(5, 4, 3)])


def test_add_relu_clip_reshape_transpose_backward_match_finite_differences():
    g, n = _graph("Add", {"activation": (0.0, np.inf)}, [(3, 4, 2), (3, 4, 2)], [], (3, 4, 2))
    _check(g, n, [(3, 4, 2), (3, 4, 2)])
    g, n = _graph("Relu", {}, [(3, 4)], [], (3, 4))
    _check(g, n, [(3, 4)])
    g, n = _graph("Clip", {"min": -0.5, "max": 0.7}, [(3, 4)], [], (3, 4))
    _check(g, n, [(3, 4)])
    g, n = _graph("Reshape", {}, [(3, 4, 2)], [("shape", np.array([1, 24]))], (24,))
    _check(g, n, [(3, 4, 2)])
    g, n = _graph("Transpose", {"perm": [0, 2, 3, 1]}, [(3, 4, 2)], [], (4, 2, 3))
    _check(g, n, [(3, 4, 2)])


def test_an_op_without_a_backward_pass_says_so():
    g, n = _conv(np.random.default_rng(3), 4, 4, 4, 4, (1, 1), (1, 1), (0, 0, 0, 0))
    g.tensors["w"].data = g.tensors["w"].data[..., :2]  # two groups: no backward pass
    with pytest.raises(FloatUnsupported):
        get_op("Conv").backward_float(n, g, [np.zeros((1, 4, 4, 4)), None, None], [np.zeros((1, 4, 4, 4))],
                                      [np.zeros((1, 4, 4, 4))])
    g, n = _graph("Softmax", {}, [(4,)], [], (4,))
    with pytest.raises(FloatUnsupported):
        get_op("Softmax").backward_float(n, g, [np.zeros((1, 4))], [np.zeros((1, 4))], [np.zeros((1, 4))])
