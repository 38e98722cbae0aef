"""Conv followed by Add of a per-channel constant (CNTK/mnist style bias) folds the constant into the Conv bias.
Assumes the Conv output is read by that Add only and the constant is [C,1,1], [1,C,1,1] or broadcastable to it."""
import numpy as np

from tinyaot.ir import Graph

from ._util import real_value, single_consumer


def fuse_bias_add(graph: Graph) -> Graph:
    for add in [n for n in graph.nodes if n.op == "Add"]:
        for k in (0, 1):
            src, other = add.inputs[k], add.inputs[1 - k]
            prod = graph.producer(src)
            cons = single_consumer(graph, src)
            # a pre-quantized model stores this constant as int8: the fused bias is its real value
            c = real_value(graph, other) if graph.tensors[other].is_const else None
            if prod is None or prod.op != "Conv" or cons is not add or c is None:
                continue
            out_ch = graph.tensors[src].shape[1]
            if c.size not in (1, out_ch) or (c.size == out_ch and c.ndim >= 3 and c.shape[-3] != out_ch) or (
                    c.size == out_ch > 1 and c.ndim < 3):
                continue
            bias = np.broadcast_to(c.reshape(-1), (out_ch,)).astype(np.float32)
            if len(prod.inputs) > 2 and prod.inputs[2]:
                bias = bias + real_value(graph, prod.inputs[2])
            prod.inputs[2:] = [graph.add_const(f"{prod.name}_bias", bias)]
            graph.nodes.remove(add)
            # The Conv writes the Add's output: its calibrated range (or given quantization) includes the bias.
            prod.outputs[0] = add.outputs[0]
            break
    graph.remove_unused_tensors()
    return graph
