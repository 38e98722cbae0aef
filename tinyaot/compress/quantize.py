"""int8 quantization per the numerics contract (TFLite/CMSIS-NN scheme).

Activations: int8, asymmetric, per tensor, from calibrated ranges widened to include 0 (so zero padding and
ReLU's zero are exact). Weights: int8, symmetric (zero point 0), per output channel, in [-127, 127] (the
symmetric range keeps -128 out, as TFLite does, so |w| <= 127 bounds every accumulator). Bias: int32 with scale
s_in * s_w[c], never saturated: a channel whose bias would not fit beside its weights' share of the int32
accumulator gets a larger weight scale (`fit_channel_scales`). Each op file sets its own integer parameters from
these in its `quantize()`; `quantize_graph` then bounds every kernel's int32 intermediates (compress/bounds.py).

A pre-quantized model (QDQ: see passes/absorb_qdq.py) arrives with `Tensor.quant` already set on its activations
and integer weights/biases: those parameters are used as given, never recomputed; only the effective
requantization multipliers are derived from them.
"""
from __future__ import annotations

import numpy as np

from tinyaot.compress.bounds import check_graph
from tinyaot.core.fixedpoint import ScaleError
from tinyaot.errors import TinyaotError
from tinyaot.ir import Graph, QuantParams, verify
from tinyaot.ops.common import output_qparams
from tinyaot.ops.registry import get_op, infer_shapes, traits_of


def quantize_graph(graph: Graph, ranges: dict[str, tuple[float, float]]) -> Graph:
    """Assign int8 parameters to every tensor and integer parameters to every node, in schedule order."""
    given = {}
    if graph.meta.get("prequantized"):
        share_quant_across_moves(graph)
        given = {n: graph.tensors[n].quant for n in graph.activations() if graph.tensors[n].quant is not None}
    for name in graph.inputs:
        graph.tensors[name].quant = output_qparams(graph, name, ranges)
        graph.tensors[name].dtype = "int8"
    for node in graph.nodes:
        try:
            get_op(node.op).quantize(node, graph, ranges)
        except ScaleError as e:  # degenerate calibrated ranges: say which node, as a user error
            raise TinyaotError(f"{node.op} node {node.name!r}: {e}") from None
        for o in node.outputs:
            q = graph.tensors[o].quant  # 16-bit activations: ops/*_s16.py, compress/precision.py
            graph.tensors[o].dtype = "int16" if q is not None and q.bits == 16 else "int8"
    if graph.meta.get("prequantized"):
        graph.meta["quantization_notes"] = _check_given(graph, given)
    graph.quantized = True
    graph = verify(graph, "quantize", infer=infer_shapes)
    check_graph(graph)  # every kernel's int32 intermediates bounded for any int8 input, or a refusal
    return graph


def share_quant_across_moves(graph: Graph) -> None:
    """A pre-quantized model quantizes a tensor where its QuantizeLinear sits, e.g. after the Reshape or Transpose
    that follows the graph input, or a tensor the passes created (an NHWC copy) has no QuantizeLinear at all. A
    move does not change values, so a tensor without parameters takes those of its other side (repeatedly)."""
    moves = [(n.inputs[0], n.outputs[0]) for n in graph.nodes if traits_of(n.op).layout == "move"]
    changed = True
    while changed:
        changed = False
        for a, b in moves:
            for src, dst in ((a, b), (b, a)):
                ts, td = graph.tensors[src], graph.tensors[dst]
                if ts.quant is not None and td.quant is None and not td.is_const:
                    td.quant = ts.quant
                    changed = True


def _same(a: QuantParams, b: QuantParams) -> bool:
    return (a.axis == b.axis and np.array_equal(np.float32(a.scale), np.float32(b.scale))
            and np.array_equal(a.zero_point, b.zero_point))


def _check_given(graph: Graph, given: dict[str, QuantParams]) -> list[dict]:
    """Every activation keeps the parameters the pre-quantized model gives it, or compilation stops. The one
    exception is Softmax, whose int8 kernel (TFLite's) only produces scale 1/256, zero point -128: a model giving
    another output scale is deployed with the fixed one, and the note says so (it is a probability either way).
    Ops that keep their input's parameters (max pooling, Relu, moves) cannot honour a different output scale."""
    notes = []
    for name, want in given.items():
        got = graph.tensors[name].quant
        if _same(want, got):
            continue
        prod = graph.producer(name)
        op = prod.op if prod is not None else "input"
        entry = {"tensor": name, "op": op, "given": {"scale": float(want.scale), "zero_point": int(want.zero_point)},
                 "used": {"scale": float(got.scale), "zero_point": int(got.zero_point)}}
        note = get_op(op).fixed_output_note if prod is not None else None
        if note is not None:  # the kernel's fixed output parameters (softmax's), a probability either way
            notes.append({**entry, "why": note})
            continue
        raise TinyaotError(f"{op} node {prod.name if prod else name!r}: the model quantizes its output {name!r} with "
                           f"scale {float(want.scale):.6g}, zero point {int(want.zero_point)}, but tinyaot's int8 "
                           f"{op} can only produce scale {float(got.scale):.6g}, zero point {int(got.zero_point)} "
                           "(its input's, or its kernel's fixed ones); re-quantize the model with those "
                           "(onnxruntime: TensorQuantOverrides)")
    return notes
