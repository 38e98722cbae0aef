"""Fold BatchNormalization into the Conv or FullyConnected that feeds it (inference mode).

y = gamma * (conv(x) + b - mean) / sqrt(var + eps) + beta is a per-output-channel scale and shift, so it
becomes part of the weights and bias. Assumes the producer's output is read by the BatchNormalization only (and is
not a graph output).
"""
import numpy as np

from tinyaot.ir import Graph
from tinyaot.ops.registry import traits_of

from ._util import single_consumer


def fold_batchnorm(graph: Graph) -> Graph:
    for bn in [n for n in graph.nodes if n.op == "BatchNormalization"]:
        prod = graph.producer(bn.inputs[0])
        if prod is None or not traits_of(prod.op).weighted_layer or single_consumer(graph, bn.inputs[0]) is not bn:
            continue
        if bn.inputs[0] in graph.outputs:  # the un-normalized values are an output of their own
            continue
        if not all(graph.tensors[i].is_const for i in bn.inputs[1:5]):
            continue
        if graph.tensors[prod.inputs[1]].quant is not None:
            # A pre-quantized model's int8 weights are used as given, never rescaled; `batchnorm_to_conv` turns
            # the BatchNormalization into its own layer instead.
            continue
        gamma, beta, mean, var = (graph.tensors[i].data.astype(np.float64) for i in bn.inputs[1:5])
        eps = float(bn.attrs.get("epsilon", 1e-5))
        k = gamma / np.sqrt(var + eps)
        w = graph.tensors[prod.inputs[1]].data.astype(np.float64)
        out_ch = w.shape[0]
        b = (graph.tensors[prod.inputs[2]].data.astype(np.float64) if len(prod.inputs) > 2 and prod.inputs[2]
             else np.zeros(out_ch))
        w = w * k.reshape((out_ch,) + (1,) * (w.ndim - 1))
        b = (b - mean) * k + beta
        name = prod.name
        prod.inputs[1:] = [graph.add_const(f"{name}_weight_bn", w.astype(np.float32)),
                           graph.add_const(f"{name}_bias_bn", b.astype(np.float32))]
        graph.nodes.remove(bn)
        # The folded layer now computes the BatchNormalization's values, so it writes the BatchNormalization's
        # output tensor: calibration looks ranges up by ONNX tensor name, and the range of the layer's old output
        # (before normalization) is not the range of what it now computes (pt_mbv3_se's first conv: -5.6..5.3
        # where its values span -18..18, saturated).
        out, old = bn.outputs[0], prod.outputs[0]
        graph.tensors[out].shape = graph.tensors[old].shape
        prod.outputs[0] = out
    graph.remove_unused_tensors()
    return graph
