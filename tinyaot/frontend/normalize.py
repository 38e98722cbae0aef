"""Valid but unusual ONNX, made ordinary at import: float16 models become float32 models, nodes get unique names,
and tensor element types tinyaot cannot represent are refused with an error naming the tensor, its type and shape.

float16 -> float32 is exact (every float16 value is a float32 value), and tinyaot quantizes to int8 from float
calibration ranges anyway, so a float16 model deploys like the float32 model with the same weights. What changes:
the float model the calibration and the onnxruntime checks run is that float32 model, which rounds its
intermediate results to float32 instead of float16; int8 quantization error is orders of magnitude larger.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper, shape_inference

from tinyaot.errors import TinyaotError

# Element types the IR can hold. float16 never reaches it (converted below); float64 and the integer types appear
# as constants (Reshape shapes, Clip bounds, pre-quantized weights and zero points) and are refused later, per op,
# where unusable: a 16-bit QDQ model's int16 zero points get absorb_qdq's error about 16-bit activations.
SUPPORTED = {TensorProto.FLOAT: "float32", TensorProto.DOUBLE: "float64", TensorProto.INT64: "int64",
             TensorProto.INT32: "int32", TensorProto.INT16: "int16", TensorProto.UINT16: "uint16",
             TensorProto.INT8: "int8", TensorProto.UINT8: "uint8", TensorProto.BOOL: "bool"}


def dtype_name(elem_type: int) -> str:
    """ONNX's own name of an element type: FLOAT16, BFLOAT16, STRING, COMPLEX64..."""
    try:
        return TensorProto.DataType.Name(elem_type)
    except ValueError:
        return f"element type {elem_type}"


def check_dtype(name: str, elem_type: int, shape, what: str = "tensor") -> str:
    """The IR dtype of an ONNX element type, or a TinyaotError that says which tensor, which type, which shape."""
    if elem_type in SUPPORTED:
        return SUPPORTED[elem_type]
    dims = list(shape) if shape is not None else "unknown"
    raise TinyaotError(f"{what} {name!r} (shape {dims}) has element type {dtype_name(elem_type)}, which tinyaot "
                       "does not support; tinyaot compiles float32 (or float16) models, with int64/int32/int16/int8/"
                       "uint16/uint8/bool constants")


def float16_to_float32(model: onnx.ModelProto) -> list[str]:
    """Rewrite a float16 (or mixed-precision) model in place as the float32 model with the same values.

    float16 initializers, Constant values, graph inputs/outputs and value_info become float32; `Cast(to=FLOAT16)`
    becomes `Cast(to=FLOAT)`; then every Cast from float32 to float32 (the casts a float16 exporter puts around
    float32 inputs and outputs, and the ones just rewritten) becomes an Identity, which the passes drop. A Cast from
    another type (int to float16) stays a Cast, which tinyaot then refuses as an unsupported operator. Returns the
    names of what was converted (empty for a float32 model, which is left untouched)."""
    g = model.graph
    converted: list[str] = []
    for init in g.initializer:
        if init.data_type == TensorProto.FLOAT16:
            arr = numpy_helper.to_array(init).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(arr, init.name))
            converted.append(init.name)
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.elem_type == TensorProto.FLOAT16:
            tt.elem_type = TensorProto.FLOAT
            converted.append(vi.name)
    casts = []
    for node in g.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == TensorProto.FLOAT16:
                arr = numpy_helper.to_array(attr.t).astype(np.float32)
                attr.t.CopyFrom(numpy_helper.from_array(arr, attr.t.name))
                converted.append(node.output[0] if node.output else node.name)
            elif (node.op_type == "Cast" and attr.name == "to" and attr.type == onnx.AttributeProto.INT
                  and attr.i == TensorProto.FLOAT16):
                attr.i = TensorProto.FLOAT
                converted.append(node.name or node.output[0])
        if node.op_type == "Cast" and node.domain in ("", "ai.onnx"):
            casts.append(node)
    if not converted:
        return converted
    # The Casts' input types: from the (now float32) declarations, and shape inference for intermediate tensors.
    types = {i.name: i.data_type for i in g.initializer}
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.HasField("tensor_type"):
            types[vi.name] = vi.type.tensor_type.elem_type
    try:
        inferred = shape_inference.infer_shapes(model)
        for vi in inferred.graph.value_info:
            types.setdefault(vi.name, vi.type.tensor_type.elem_type)
    except Exception:  # noqa: BLE001 - a model shape inference cannot handle is reported later, with its message
        pass
    for node in casts:
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        if to == TensorProto.FLOAT and types.get(node.input[0]) == TensorProto.FLOAT:
            node.op_type = "Identity"
            del node.attribute[:]
    return converted


def unique_node_names(nodes) -> list[str]:
    """One name per node, all different: a node keeps its own name if it is non-empty and no earlier node has it;
    otherwise an unnamed node is `<op>_<index>` and a repeated name `<name>_<k>`, with a further `_<k>` (smallest
    k) if a node of the model already uses that. Passes key layers by name (compression settings, refits, report
    rows), so two layers must never share one."""
    nodes = list(nodes)
    real = {n.name for n in nodes if n.name}
    taken: set[str] = set()
    names = []
    for index, n in enumerate(nodes):
        name = n.name
        if not name or name in taken:
            base = name or f"{n.op_type}_{index}"
            name, k = base, 0
            while name in real or name in taken:
                k += 1
                name = f"{base}_{k}"
        taken.add(name)
        names.append(name)
    return names


def float32_model_file(path, folder) -> Path:
    """`path` itself for a float32 model; for a float16 one, its float32 rewrite (float16_to_float32) saved in
    `folder`, so onnxruntime's float baseline runs the same float32 model tinyaot compiled."""
    model = onnx.load(str(path))
    if not float16_to_float32(model):
        return Path(path)
    out = Path(folder) / f"{Path(path).stem}.float32.onnx"
    onnx.save(model, str(out))
    return out


def flatten_gemm_biases(model: onnx.ModelProto) -> bool:
    """Give every Gemm with a constant [1, N] bias a [N] bias instead; returns whether anything changed.

    quant_pre_process fuses MatMul + Add into Gemm and keeps the Add's [1, N] constant as the bias. onnxruntime's
    per-channel int32-bias scale adjustment (`_adjust_weight_scale_for_int32_bias`) assumes a 1-D bias and raises
    "truth value of an array ... is ambiguous" on it (onnxruntime issue #24815, fix pending in PR #29747): this
    breaks mnist8. Gemm broadcasts C to [M, N] either way, so the model computes exactly the same thing.
    """
    inits = {t.name: t for t in model.graph.initializer}
    users: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            users[name] = users.get(name, 0) + 1
    for out in model.graph.output:  # an initializer exposed as a graph output must stay
        users[out.name] = users.get(out.name, 0) + 1
    flat_of: dict[str, str] = {}  # [1, N] bias name -> its [N] copy, shared by Gemms that share the bias
    changed = False
    for node in model.graph.node:
        if node.op_type != "Gemm" or len(node.input) < 3 or node.input[2] not in inits:
            continue
        bias = inits[node.input[2]]
        if len(bias.dims) != 2 or bias.dims[0] != 1:
            continue
        if bias.name not in flat_of:
            name = bias.name + "_1d"
            while name in inits:  # never collide with a tensor already in the model
                name += "_"
            flat = numpy_helper.from_array(numpy_helper.to_array(bias).reshape(-1), name)
            model.graph.initializer.append(flat)
            inits[name] = flat
            flat_of[bias.name] = name
        node.input[2] = flat_of[bias.name]
        users[bias.name] -= 1
        if users[bias.name] == 0:  # keep the graph free of unused initializers
            model.graph.initializer.remove(bias)
        changed = True
    return changed
