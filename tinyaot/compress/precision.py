"""Per-layer activation widths (8 or 16 bits) on the float graph, before quantization.

`apply_precision(graph, ranges, bits)`: every node that computes gets a width (`bits`: 8 or 16 for all, or a
dict node name -> width, unnamed nodes 8). A node at 16 bits becomes its 16-bit op type (the 16-bit op declares
which ops it computes: `Traits.int16_form_of`, e.g. ops/conv_s16.py: Conv -> ConvS16), with
`attrs["activation_bits"] = 16`; a reshape (an alias, `Traits.alias`) keeps its input's width. Where a
tensor's width differs from the width of the node reading it, a Requantize node converts it (int8 <-> int16, one
per tensor and width); its output tensor takes the calibrated range of the tensor it converts. The model's input
and output stay int8, so the generated API (`invoke(const int8_t *, int8_t *)`) and everything that feeds and
reads it are unchanged: a 16-bit first layer reads a converted input, and a 16-bit last layer is followed by a
conversion, except Softmax, whose s16 kernel outputs int8 probabilities itself (scale 1/256, as at 8 bits).

Ops without a 16-bit form (other than aliases) cannot run at 16 bits: asking for it is a one-line error naming
the op and node and listing the supported ones.
"""
from __future__ import annotations

from tinyaot.errors import TinyaotError
from tinyaot.ir import Graph, Node
from tinyaot.ops.registry import get_op, int16_form, int16_forms, ops_with, traits_of
from tinyaot.ops.requantize import conversion_node, is_conversion

ALIAS_OPS = ops_with(alias=True)  # keep their input's width
# Data movement without a 16-bit form (the layout pass's Transpose): it moves values, so converting before or after
# it is the same conversion.
MOVE_OPS_AT_8 = tuple(op for op in ops_with(layout="move") if op not in ALIAS_OPS and int16_form(op) is None)


def supported_ops() -> list[str]:
    return sorted(set(int16_forms()) | set(ALIAS_OPS))


def layer_names(graph: Graph) -> list[str]:
    """The nodes whose width can be chosen (every node but the reshapes), in schedule order."""
    return [n.name for n in graph.nodes if not traits_of(n.op).alias]


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
        if want[node.name] == 16 and int16_form(node.op) is None and node.op not in ALIAS_OPS:
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
            nodes.append(conversion_node(name, tensor, out, to))
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
                get_op(int16_form(node.op)).adopt(node)
            node.attrs["activation_bits"] = w
        nodes.append(node)
        for o in node.outputs:
            width[o] = get_op(node.op).output_bits or w
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
            nodes.append(conversion_node(name, inner, out, 8))
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
    nodes = {n.name: n for n in graph.nodes if n.op not in ALIAS_OPS}
    bits = {k: layer_bits(graph, n) for k, n in nodes.items()}
    # the conversions and the data movement kept at int8 (MOVE_OPS_AT_8) do not make a model "mixed"
    widths = {v for k, v in bits.items() if not is_conversion(nodes[k]) and nodes[k].op not in MOVE_OPS_AT_8} or {8}
    out = {"mode": widths.pop() if len(widths) == 1 else "mixed",
           "layers_16": [k for k, v in bits.items() if v == 16 and not is_conversion(nodes[k])],
           "conversions": [n.name for n in graph.nodes if is_conversion(n)]}
    if "mixed_precision" in graph.meta:
        out["search"] = graph.meta["mixed_precision"]
    return out


__all__ = ["apply_precision", "supported_ops", "layer_names", "layer_bits", "precision_report"]
