"""Padding spelled as a separate Pad (zeros around H and W, or L of a 1-D layer) before a convolution folds into
the convolution's own pads: the Conv pads with the real value 0 (its input zero point in int8), so the result is
the same to the bit, with no padded copy of the tensor and no extra layer. Assumes the Pad is constant mode with
value 0, pads only the spatial axes (never N or C), and its output is read by that Conv only (as its data input)
and is no graph output; a Conv with `auto_pad` other than NOTSET keeps its Pad."""
from tinyaot.ir import Graph
from tinyaot.ops.pad import onnx_pad_spec

from ._util import single_consumer


def fold_pad(graph: Graph) -> Graph:
    if graph.meta.get("prequantized"):  # an int8 .tflite model: its own ops' arithmetic, bit for bit
        return graph
    for pad in [n for n in graph.nodes if n.op == "Pad"]:
        out = pad.outputs[0]
        conv = single_consumer(graph, out)
        rank = len(graph.tensors[pad.inputs[0]].shape)
        if (conv is None or conv.op != "Conv" or conv.inputs[0] != out or rank not in (3, 4)
                or conv.attrs.get("auto_pad", "NOTSET") != "NOTSET" or pad.attrs.get("mode", "constant") != "constant"):
            continue
        begins, ends, value = onnx_pad_spec(pad, graph, rank)
        if value != 0.0 or begins[:2] != [0, 0] or ends[:2] != [0, 0]:
            continue
        spatial = rank - 2
        pads = [int(p) for p in conv.attrs.get("pads", [0] * 2 * spatial)]
        conv.attrs["pads"] = [pads[k] + begins[2 + k] for k in range(spatial)] + \
                             [pads[spatial + k] + ends[2 + k] for k in range(spatial)]
        conv.inputs[0] = pad.inputs[0]
        graph.nodes.remove(pad)
    graph.remove_unused_tensors()
    return graph
