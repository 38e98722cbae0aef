"""Float models with some tensors quantized and dequantized in place, for onnxruntime to run: how calibration
(`--calibrate auto`, compress/output_ranges.py) and the per-layer analysis (pipeline/analyze.py) see what int8
does to a tensor without building the int8 model. ONNX graph surgery only: no tinyaot IR here."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tinyaot.core.quant import QMAX, QMIN


def _const(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


def fake_quant_model(model: onnx.ModelProto, tensors: list[str], ranks: dict[str, int],
                     transforms: dict | None = None) -> onnx.ModelProto:
    """`model` with each of `tensors` fake-quantized by a scale `<t>__fq_s` and zero point `<t>__fq_zp` fed as
    float scalars. A node output is renamed and the quantizing nodes write the original name, so every consumer
    and a graph output see the quantized value; a graph input's consumers are pointed at its quantized copy."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inputs = {i.name for i in g.input}
    inits = {i.name for i in g.initializer}
    new_nodes: dict[str, list[onnx.NodeProto]] = {}
    g.initializer.extend([_const("__fq_qmin", float(QMIN)), _const("__fq_qmax", float(QMAX)),
                          _const("__fq_half", 0.5)])
    for t in tensors:
        src, dst = (t, f"{t}__fq") if t in inputs else (f"{t}__fq_raw", t)
        p = f"{t}__fq"
        nodes = []
        x = src
        shape = [1] * ranks.get(t, 1)
        if len(shape) >= 2:
            shape[1] = -1
        tr = (transforms or {}).get(t)
        if tr is not None:  # into CLE's units (compress/calibrate._transform)
            div, off = tr
            g.initializer.append(_const(f"{p}_d", np.asarray(div, np.float64).reshape(shape)))
            nodes.append(helper.make_node("Div", [x, f"{p}_d"], [f"{p}_x0"]))
            x = f"{p}_x0"
            if off is not None:
                g.initializer.append(_const(f"{p}_o", np.asarray(off, np.float64).reshape(shape)))
                nodes.append(helper.make_node("Sub", [x, f"{p}_o"], [f"{p}_x1"]))
                x = f"{p}_x1"
        nodes += [helper.make_node("Div", [x, f"{p}_s"], [f"{p}_a"]),
                  helper.make_node("Add", [f"{p}_a", "__fq_half"], [f"{p}_b"]),
                  helper.make_node("Floor", [f"{p}_b"], [f"{p}_c"]),
                  helper.make_node("Add", [f"{p}_c", f"{p}_zp"], [f"{p}_e"]),
                  helper.make_node("Max", [f"{p}_e", "__fq_qmin"], [f"{p}_f"]),
                  helper.make_node("Min", [f"{p}_f", "__fq_qmax"], [f"{p}_g"]),
                  helper.make_node("Sub", [f"{p}_g", f"{p}_zp"], [f"{p}_h"])]
        last = f"{p}_y"
        nodes.append(helper.make_node("Mul", [f"{p}_h", f"{p}_s"], [last if tr is not None else dst]))
        if tr is not None:  # back to the model's units
            div, off = tr
            if off is not None:
                nodes.append(helper.make_node("Add", [last, f"{p}_o"], [f"{p}_y1"]))
                last = f"{p}_y1"
            nodes.append(helper.make_node("Mul", [last, f"{p}_d"], [dst]))
        g.input.extend([helper.make_tensor_value_info(f"{p}_s", TensorProto.FLOAT, []),
                        helper.make_tensor_value_info(f"{p}_zp", TensorProto.FLOAT, [])])
        new_nodes[t] = nodes
        if t in inputs:
            for n in g.node:
                for k, name in enumerate(n.input):
                    if name == t:
                        n.input[k] = dst
        elif t not in inits:
            for n in g.node:
                for k, name in enumerate(n.output):
                    if name == t:
                        n.output[k] = src
    # each tensor's quantizing nodes right after its producer (graph inputs' first), so the order stays topological
    ordered = [n for t in tensors if t in inputs for n in new_nodes[t]]
    for n in g.node:
        ordered.append(n)
        for o in n.output:
            if o.endswith("__fq_raw"):
                ordered.extend(new_nodes[o[:-len("__fq_raw")]])
    del g.node[:]
    g.node.extend(ordered)
    # value_info of renamed tensors would now describe the wrong thing: shapes are not needed to run
    del g.value_info[:]
    return m


def qdq_model(model: onnx.ModelProto, tensor: str, scale: float, zp: int, transform=None,
              ndim: int = 4) -> onnx.ModelProto:
    """The float model with `tensor` quantized and dequantized where it is produced: the producer writes
    `<tensor>__float`, and Q/DQ nodes give `<tensor>` back, so consumers and graph outputs are untouched. A
    tensor CLE changed (`transform`: per-channel divisor and offset, channels on axis 1 of `ndim`) is quantized in
    CLE's units, as the int8 model holds it: Div, Sub, Q, DQ, Add, Mul."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    raw, q = tensor + "__float", tensor + "__q"
    nodes = list(g.node)
    at = next(i for i, n in enumerate(nodes) if tensor in n.output)
    out = list(nodes[at].output)
    out[out.index(tensor)] = raw
    del nodes[at].output[:]
    nodes[at].output.extend(out)
    g.initializer.extend([numpy_helper.from_array(np.asarray(scale, np.float32), tensor + "__scale"),
                          numpy_helper.from_array(np.asarray(zp, np.int8), tensor + "__zp")])
    qdq = [helper.make_node("QuantizeLinear", [raw, tensor + "__scale", tensor + "__zp"], [q]),
           helper.make_node("DequantizeLinear", [q, tensor + "__scale", tensor + "__zp"], [tensor])]
    if transform is not None:
        divisor, offset = transform
        shape = [1, -1] + [1] * (ndim - 2)
        d = np.asarray(divisor, np.float32).reshape(shape)
        o = np.zeros_like(d) if offset is None else np.asarray(offset, np.float32).reshape(shape)
        g.initializer.extend([numpy_helper.from_array(d, tensor + "__cle_d"),
                              numpy_helper.from_array(o, tensor + "__cle_o")])
        n = [tensor + s for s in ("__cle_div", "__cle_sub", "__cle_dq", "__cle_add")]
        qdq = [helper.make_node("Div", [raw, tensor + "__cle_d"], [n[0]]),
               helper.make_node("Sub", [n[0], tensor + "__cle_o"], [n[1]]),
               helper.make_node("QuantizeLinear", [n[1], tensor + "__scale", tensor + "__zp"], [q]),
               helper.make_node("DequantizeLinear", [q, tensor + "__scale", tensor + "__zp"], [n[2]]),
               helper.make_node("Add", [n[2], tensor + "__cle_o"], [n[3]]),
               helper.make_node("Mul", [n[3], tensor + "__cle_d"], [tensor])]
    del g.node[:]
    g.node.extend(nodes[:at + 1] + qdq + nodes[at + 1:])
    return m


__all__ = ["fake_quant_model", "qdq_model"]
