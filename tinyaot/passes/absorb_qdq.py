"""Absorb the QuantizeLinear/DequantizeLinear nodes of a pre-quantized (QDQ) model into the IR's quantization.

QDQ models (onnxruntime's `quantize_static`, PyTorch and TensorFlow quantization-aware training exports) carry
their int8 parameters as Q/DQ nodes around float ops. This pass leaves the ordinary float-shaped graph, with the
parameters "given" on its tensors, which the later passes carry along and the ops' `quantize()` use as they are:

- DequantizeLinear of an integer constant (weights, int32 biases) becomes that constant: Tensor.data keeps the
  integers bit for bit, Tensor.quant the stored scale, zero point and axis.
- QuantizeLinear(x) -> DequantizeLinear on an activation is removed; x.quant records the pair's scale and zero
  point, and the DequantizeLinear's readers read x.

uint8 (QUInt8) maps exactly onto int8: q - 128 with zero point zp - 128 denotes the same real value, with the
same rounding and saturation. What tinyaot's int8 kernels cannot honour (per-channel or 16-bit activations,
blocked quantization, a quantized value read by anything but its DequantizeLinear) is refused with one line.
A float model has none of these nodes and passes through untouched. Runs after `fold_constants`, which turns a
QuantizeLinear of a constant (a weight quantized at run time) into the integer constant it produces.
"""
from __future__ import annotations

import numpy as np
import onnx

from tinyaot.errors import TinyaotError
from tinyaot.ir import Graph, QuantParams, Tensor
from tinyaot.ops.registry import ops_with

from ._util import replace_uses
from .fold_constants import evaluate_node

QDQ = ("QuantizeLinear", "DequantizeLinear")
# Integer types each role may hold: int8/uint8 weights and activations, int32 biases (dequantized only).
_CONST_TYPES = ("int8", "uint8", "int32")
_ACT_TYPES = ("int8", "uint8")
# Ops that read a constant input's Tensor.quant (dequantizing it or keeping its integers): only these may take a
# quantized constant. Anything else would read the integers as real values, so it is refused instead.
QUANT_CONST_READERS = ops_with(quantized_constants=True)  # their op files say so (Traits.quantized_constants)


def absorb_qdq(graph: Graph) -> Graph:
    if not any(n.op in QDQ for n in graph.nodes):
        return graph
    graph.meta["prequantized"] = True
    for qn in [n for n in graph.nodes if n.op == "QuantizeLinear" and graph.tensors[n.inputs[0]].is_const]:
        # A weight quantized at run time (fold_constants does this too, unless disabled): the integers ONNX's
        # QuantizeLinear gives, which the DequantizeLinear below then absorbs.
        (value,) = evaluate_node(qn, {i: graph.tensors[i].data for i in qn.inputs if i})
        graph.tensors[qn.outputs[0]] = Tensor(qn.outputs[0], tuple(value.shape), value.dtype.name, value)
        graph.nodes.remove(qn)
    absorbed: set[str] = set()
    for dq in [n for n in graph.nodes if n.op == "DequantizeLinear" and graph.tensors[n.inputs[0]].is_const]:
        q, qp = _params(graph, dq, graph.tensors[dq.inputs[0]].data, _CONST_TYPES)
        out = dq.outputs[0]
        graph.tensors[out] = Tensor(out, tuple(q.shape), q.dtype.name, q, qp)
        graph.nodes.remove(dq)
        absorbed.add(out)
    for qn in [n for n in graph.nodes if n.op == "QuantizeLinear"]:
        _absorb_pair(graph, qn)
    for n in graph.nodes:
        if n.op == "DequantizeLinear":
            raise TinyaotError(f"DequantizeLinear node {n.name!r} reads {n.inputs[0]!r}, which no QuantizeLinear "
                               "produces: tinyaot takes float model inputs and Q/DQ pairs")
        moved = [i for i in n.inputs if i in absorbed]
        if moved and n.op not in QUANT_CONST_READERS:
            raise TinyaotError(f"{n.op} node {n.name!r} reads the quantized constant {moved[0]!r}; tinyaot takes "
                               f"quantized constants only as direct inputs of {', '.join(QUANT_CONST_READERS)}")
    graph.remove_unused_tensors()
    return graph


def _absorb_pair(graph: Graph, qn) -> None:
    x, y = qn.inputs[0], qn.outputs[0]
    _, qp = _params(graph, qn, None, _ACT_TYPES)
    if qp.axis is not None:
        raise TinyaotError(f"QuantizeLinear node {qn.name!r}: per-channel activation quantization (axis "
                           f"{qp.axis}) is not supported; int8 kernels take one scale and zero point per activation")
    if y in graph.outputs:
        raise TinyaotError(f"QuantizeLinear node {qn.name!r}: the model outputs integers ({y!r}); tinyaot needs "
                           "a DequantizeLinear after it (float-shaped graph outputs)")
    t = graph.tensors[x]
    if t.quant is not None and not _equal(t.quant, qp):
        raise TinyaotError(f"tensor {x!r} is quantized twice with different parameters (QuantizeLinear node "
                           f"{qn.name!r}); tinyaot keeps one scale and zero point per tensor")
    t.quant = qp
    for dq in graph.consumers(y):
        if dq.op != "DequantizeLinear":
            raise TinyaotError(f"{dq.op} node {dq.name!r} reads the quantized value {y!r} directly; tinyaot needs "
                               "QuantizeLinear -> DequantizeLinear pairs around float ops")
        _, dqp = _params(graph, dq, None, _ACT_TYPES)
        if not _equal(dqp, qp):
            raise TinyaotError(f"DequantizeLinear node {dq.name!r} uses other parameters than its QuantizeLinear "
                               f"{qn.name!r}; a requantizing Q/DQ pair is not supported")
        graph.nodes.remove(dq)
        replace_uses(graph, dq.outputs[0], x)
        x = qn.inputs[0]  # replace_uses renames x (qn's input too) when the DequantizeLinear was a graph output
    graph.nodes.remove(qn)


def _params(graph: Graph, node, q: np.ndarray | None, allowed: tuple[str, ...]):
    """(integers as int8/int32, QuantParams) of a Q or DQ node; `q` are the integers of a DQ'd constant."""
    ins = node.inputs + [""] * (3 - len(node.inputs))
    if int(node.attrs.get("block_size", 0)):
        raise TinyaotError(f"{node.op} node {node.name!r}: blocked quantization is not supported")
    for k in (1, 2):
        if ins[k] and not graph.tensors[ins[k]].is_const:
            raise TinyaotError(f"{node.op} node {node.name!r}: scale and zero point must be constants")
    scale = np.asarray(graph.tensors[ins[1]].data, np.float64)
    zp = graph.tensors[ins[2]].data if ins[2] else None
    qtype = _qtype(node, q, zp)
    if qtype not in allowed:
        role = "weights/biases" if q is not None else "activations"
        raise TinyaotError(f"{node.op} node {node.name!r}: {qtype} {role} are not supported; tinyaot deploys int8 "
                           "weights and activations (uint8 is converted) with int32 biases")
    zp = np.zeros(scale.shape, np.int64) if zp is None else np.asarray(zp, np.int64)
    if qtype == "uint8":  # exact: q_u8 - 128 with zero point zp - 128 is the same real value
        zp = zp - 128
        q = None if q is None else (q.astype(np.int16) - 128).astype(np.int8)
    axis = _axis(node, q) if scale.size > 1 else None  # a 1-element scale is per tensor, whatever its rank
    if axis is None:
        scale, zp = scale.reshape(()), zp.reshape(())
    return q, QuantParams(scale.astype(np.float32).astype(np.float64), zp, axis)


def _axis(node, q: np.ndarray | None) -> int:
    axis = int(node.attrs.get("axis", 1))
    return axis % q.ndim if q is not None and q.ndim else axis


def _qtype(node, q: np.ndarray | None, zp: np.ndarray | None) -> str:
    """The integer type: the constant's, else the zero point's, else output_dtype (ONNX's default is uint8)."""
    if q is not None:
        return np.asarray(q).dtype.name
    if zp is not None:
        return np.asarray(zp).dtype.name
    if "output_dtype" in node.attrs and int(node.attrs["output_dtype"]):
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(node.attrs["output_dtype"]))).name
    return "uint8"


def _equal(a: QuantParams, b: QuantParams) -> bool:
    return (a.axis == b.axis and np.array_equal(a.scale, b.scale) and np.array_equal(a.zero_point, b.zero_point))
