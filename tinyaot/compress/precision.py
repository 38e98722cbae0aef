"""Per-layer activation widths (8 or 16 bits) on the float graph, before quantization.

`apply_precision(graph, ranges, bits)`: every node that computes gets a width (`bits`: 8 or 16 for all, or a
dict node name -> width, unnamed nodes 8). A node at 16 bits becomes its s16 op type (ops/s16.py: Conv ->
ConvS16, ...), with `attrs["activation_bits"] = 16`; a reshape (an alias) keeps its input's width. Where a
tensor's width differs from the width of the node reading it, a Requantize node converts it (int8 <-> int16, one
per tensor and width); its output tensor takes the calibrated range of the tensor it converts. The model's input
and output stay int8, so the generated API (`invoke(const int8_t *, int8_t *)`) and everything that feeds and
reads it are unchanged: a 16-bit first layer reads a converted input, and a 16-bit last layer is followed by a
conversion, except Softmax, whose s16 kernel outputs int8 probabilities itself (scale 1/256, as at 8 bits).

Ops other than those in `S16_OPS` (and reshapes) cannot run at 16 bits: asking for it is a one-line error naming
the op and node and listing the supported ones.
"""
from __future__ import annotations

from tinyaot.errors import TinyaotError
from tinyaot.ir import Graph, Node
from tinyaot.ops.s16 import S16_OPS

ALIAS_OPS = ("Reshape",)
MOVE_OPS_AT_8 = ("Transpose",)


def supported_ops() -> list[str]:
    return sorted(set(S16_OPS) | set(ALIAS_OPS))


def layer_names(graph: Graph) -> list[str]:
    """The nodes whose width can be chosen (every node but the reshapes), in schedule order."""
    return [n.name for n in graph.nodes if n.op not in ALIAS_OPS]


def apply_precision(graph: Graph, ranges: dict, bits) -> Graph:
    """Rewrite `graph` (float, after the passes) for the widths `bits` (int or {node name: 8|16}); adds the
    converted tensors' ranges to `ranges`. bits == 8 everywhere leaves the graph untouched."""
    # With one width for all, data movement without an s16 kernel (the layout pass's Transpose of an NCHW image
    # input or output) stays int8: it moves values, so converting before or after it is the same conversion.
    want = {n.name: (int(bits) if n.op not in MOVE_OPS_AT_8 else 8) if not isinstance(bits, dict)
            else int(bits.get(n.name, 8)) for n in graph.nodes}
    bad = [w for w in want.values() if w not in (8, 16)]
    if bad:
        raise TinyaotError(f"activation bits must be 8 or 16, not {bad[0]}")
    if isinstance(bits, dict):
        unknown = sorted(set(bits) - set(want))
        if unknown:
            raise TinyaotError(f"activation bits given for {unknown[0]!r}, which is no layer of the model")
    if all(w == 8 for w in want.values()):
        return graph
    if graph.meta.get("prequantized"):
        raise TinyaotError("--activation-bits 16 needs a float model; this one is pre-quantized (QDQ ONNX or int8 "
                           "TFLite: its own int8 parameters)")
    for node in graph.nodes:
        if want[node.name] == 16 and node.op not in S16_OPS and node.op not in ALIAS_OPS:
            raise TinyaotError(f"{node.op} node {node.name!r} cannot run with 16-bit activations; the ops that can "
                               f"are {', '.join(supported_ops())}")
    width = {name: 8 for name in graph.inputs}
    converted: dict[tuple[str, int], str] = {}
    nodes: list[Node] = []

    def convert(tensor: str, to: int) -> str:
        key = (tensor, to)
        if key not in converted:
            t = graph.tensors[tensor]
            out = graph.add_tensor(f"{tensor}_s{to}", t.shape)
            name = graph.fresh_node_name(f"{tensor}_to_s{to}", [n.name for n in nodes])
            nodes.append(Node("Requantize", name, [tensor], [out], {"out_bits": to, "activation_bits": to}))
            if tensor in ranges:
                ranges[out] = ranges[tensor]
            width[out] = to
            converted[key] = out
        return converted[key]

    for node in graph.nodes:
        if node.op in ALIAS_OPS:
            w = width.get(node.inputs[0], 8)
        else:
            w = want[node.name]
            for k, i in enumerate(node.inputs):
                if i and not graph.tensors[i].is_const and width.get(i, 8) != w:
                    node.inputs[k] = convert(i, w)
            if w == 16:
                node.attrs["onnx_op"] = node.op
                if node.op == "GlobalAveragePool":
                    node.attrs["global"] = True
                node.op = S16_OPS[node.op]
            node.attrs["activation_bits"] = w
        nodes.append(node)
        for o in node.outputs:
            width[o] = 8 if node.op == "SoftmaxS16" else w
    for k, out in enumerate(graph.outputs):
        if width.get(out, 8) == 16:
            # the model's output stays int8: the last node writes a renamed tensor, converted into the output
            producer = next(n for n in nodes if out in n.outputs)
            inner = graph.add_tensor(f"{out}_s16", graph.tensors[out].shape)
            producer.outputs[producer.outputs.index(out)] = inner
            for n in nodes:
                n.inputs = [inner if i == out else i for i in n.inputs]
            if out in ranges:
                ranges[inner] = ranges[out]
            name = graph.fresh_node_name(f"{out}_to_s8", [n.name for n in nodes])
            nodes.append(Node("Requantize", name, [inner], [out], {"out_bits": 8, "activation_bits": 8}))
    graph.nodes = nodes
    graph.meta["activation_bits"] = {n.name: int(n.attrs.get("activation_bits", 8)) for n in nodes}
    return graph


def layer_bits(graph: Graph, node) -> int:
    """The activation width a node computes at (a reshape: its output's, i.e. its input's)."""
    if "activation_bits" in node.attrs:
        return int(node.attrs["activation_bits"])
    return 16 if graph.tensors[node.outputs[0]].dtype == "int16" else 8


def precision_report(graph: Graph) -> dict:
    """report.json `quantization.activation_bits`: 8, 16 or "mixed", the 16-bit layers, and the search's record
    (`--max-accuracy-drop`) when there was one."""
    bits = {n.name: layer_bits(graph, n) for n in graph.nodes if n.op not in ALIAS_OPS}
    # the conversions and the data movement kept at int8 (MOVE_OPS_AT_8) do not make a model "mixed"
    widths = {v for k, v in bits.items() if graph_op(graph, k) not in ("Requantize",) + MOVE_OPS_AT_8} or {8}
    out = {"mode": widths.pop() if len(widths) == 1 else "mixed",
           "layers_16": [k for k, v in bits.items() if v == 16 and graph_op(graph, k) != "Requantize"],
           "conversions": [n.name for n in graph.nodes if n.op == "Requantize"]}
    if "mixed_precision" in graph.meta:
        out["search"] = graph.meta["mixed_precision"]
    return out


__all__ = ["apply_precision", "supported_ops", "layer_names", "layer_bits", "precision_report"]


def graph_op(graph: Graph, name: str) -> str:
    return next(n.op for n in graph.nodes if n.name == name)
