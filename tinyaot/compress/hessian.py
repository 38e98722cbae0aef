"""Input second moments of each layer, H = E[x x^T] over the patches its weight rows multiply, from calibration
inputs run through the int8 graph's numpy reference.

Clustering uses H to measure (and reduce) the error a layer's *output* suffers, not only its weights: a weight
whose input is often large matters more, and errors of weights whose inputs move together can cancel. The inputs
are the dequantized int8 activations the deployed layer really receives (same names, NHWC layout, after pruning),
so nothing has to be mapped back to the ONNX model.
"""
from __future__ import annotations

import numpy as np

from tinyaot.ir import Graph, Node
from tinyaot.ops.registry import get_op
from tinyaot.oracle.reference import run_node

# Calibration samples the fitting sees. Enough that H is well determined where rows are long and outputs small
# (ic_resnet8's last convolutions: 576 inputs, 64 output pixels per sample, so 16 samples gave 1024 patches for a
# 576 x 576 H): from 16 to 64, the noise-to-signal ratio of the logits with --clusters 16 against the plain int8
# model on calibration samples 64-99 fell from 0.0070 to 0.0061 (kws_dscnn) and from 0.0116 to 0.0101 (ic_resnet8),
# with bias correction; compile time of ic_resnet8 with --clusters 16 about 20 s either way.
MAX_SAMPLES = 64


def layer_patches(node: Node, graph: Graph, xs: list[np.ndarray]) -> np.ndarray | None:
    """The real-valued input patches one weighted layer's weight rows multiply, from its int8 inputs `xs` (one
    array per sample): [M, row_len], or [M, kh*kw, C] for depthwise with channel multiplier 1; None for grouped
    convolutions and depthwise with a multiplier (rows are not input channels). Its op's weight_row_inputs."""
    xt = graph.tensors[node.inputs[0]]
    x = (np.stack([np.asarray(v) for v in xs]).astype(np.float64) - xt.quant.zp) * xt.quant.s
    x = x.reshape((-1, *xt.shape[1:]))  # samples along the batch axis
    return get_op(node.op).weight_row_inputs(node, graph, x)


def layer_hessian(node: Node, graph: Graph, xs: list[np.ndarray]) -> np.ndarray | None:
    """H of one Conv/FullyConnected layer from its int8 inputs `xs` (one array per sample): [row_len, row_len]
    shared by all output channels, or [C, kh*kw, kh*kw] (one per channel) for depthwise with channel multiplier 1;
    None for grouped convolutions and depthwise with a multiplier."""
    stats = layer_statistics(node, graph, xs)
    return None if stats is None else stats[0]


def layer_statistics(node: Node, graph: Graph, xs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
    """(H, mean) of the layer's input patches: H as `layer_hessian` gives it, and the mean patch m in the int8
    accumulator's units, i.e. E[x_q + input_offset] per weight ([row_len], or [C, kh*kw] for depthwise), padding
    counted as the kernels count it (offset-applied zero). None where layer_hessian gives None. H stays the
    uncentred second moment although bias correction takes out the mean shift: fitting to the covariance instead
    was measured worse (ic_resnet8 --clusters 16, logits noise-to-signal ratio 0.0086 -> 0.0118)."""
    p = layer_patches(node, graph, xs)
    if p is None:
        return None
    s_in = graph.tensors[node.inputs[0]].quant.s
    m = p.mean(axis=0)
    if p.ndim == 3:  # depthwise: [M, kk, C]
        return np.einsum("mkc,mlc->ckl", p, p) / p.shape[0], np.ascontiguousarray(m.T) / s_in
    return p.T @ p / p.shape[0], m / s_in


CHUNK = 8  # samples per block of patches when accumulating moments (bounds the im2col memory)


def cross_moments(node: Node, graph: Graph, xs: list[np.ndarray], dense_node: Node, dense_graph: Graph,
                  dense_xs: list[np.ndarray], channels: np.ndarray | None = None):
    """The moments compress/reconstruct.py fits a layer with, from its int8 inputs `xs` in the compressed graph and
    `dense_xs` of the same layer in the dense graph (same samples): (E[x' x'^T] [G, n, n], E[x' x^T] [G, n, m],
    E[x'] [G, n], E[x] [G, m], the number of patches) over the real-valued input patches, G = 1, or one per
    channel for depthwise (`channels`: the dense channel each compressed channel is, when channel pruning removed
    some). None where layer_patches gives None for either."""
    acc = None
    count = 0
    for s in range(0, len(xs), CHUNK):
        p = layer_patches(node, graph, xs[s:s + CHUNK])
        d = layer_patches(dense_node, dense_graph, dense_xs[s:s + CHUNK])
        if p is None or d is None:
            return None
        if p.ndim == 3:  # depthwise [M, kk, C] -> [C, M, kk]
            if channels is not None:
                d = d[:, :, channels]
            p, d = p.transpose(2, 0, 1), d.transpose(2, 0, 1)
        else:
            p, d = p[None], d[None]
        pt = p.transpose(0, 2, 1)
        parts = (pt @ p, pt @ d, p.sum(axis=1), d.sum(axis=1))
        acc = parts if acc is None else tuple(a + b for a, b in zip(acc, parts))
        count += p.shape[1]
    return None if acc is None else (*(a / count for a in acc), count)


class SampleRunner:
    """Runs the int8 graph's numpy reference node by node over several samples at once, so that a caller can
    change a layer's weights just before it runs and every later layer sees the changed activations (clustering
    each layer against the inputs the compressed model really gives it, in one pass)."""

    def __init__(self, graph: Graph, inputs: list, limit: int = MAX_SAMPLES):
        """`inputs`: int8 samples, each a {graph input name: values} feed (or, for a single-input model, the
        first input's values alone); the first `limit` are run."""
        self.graph = graph
        self.values = [{name: np.asarray(q[name] if isinstance(q, dict) else q).reshape(graph.tensors[name].shape)
                        for name in (graph.inputs if isinstance(q, dict) else graph.inputs[:1])}
                       for q in inputs[:limit]]

    def inputs_of(self, node: Node) -> list[np.ndarray]:
        return [v[node.inputs[0]] for v in self.values]

    def run(self, node: Node) -> None:
        run_node(self.graph, node, self.values)


__all__ = ["MAX_SAMPLES", "layer_patches", "layer_hessian", "layer_statistics", "cross_moments", "SampleRunner"]
