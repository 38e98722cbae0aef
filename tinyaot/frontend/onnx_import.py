"""ONNX -> IR. Every shape must be static: a dynamic dimension is an error naming the `--input-shape` fix."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference

from tinyaot.errors import TinyaotError
from tinyaot.ir import Graph, Node, Tensor
from tinyaot.ops.registry import get_op, is_registered, registered_ops

from .fold_constants import fold_constant_subgraphs
from .normalize import check_dtype, dtype_name, float16_to_float32, unique_node_names


def load_onnx(path: Path) -> onnx.ModelProto:
    path = Path(path)
    if not path.exists():
        raise TinyaotError(f"model file not found: {path}")
    if path.is_dir():
        raise TinyaotError(f"model path is a directory, not an ONNX file: {path}")
    try:
        model = onnx.load(str(path))
    except Exception as exc:  # onnx raises DecodeError, google.protobuf errors, ValueError...
        raise TinyaotError(f"{path} is not a valid ONNX model ({type(exc).__name__})") from None
    if not model.graph.node:
        raise TinyaotError(f"{path} is not a valid ONNX model (its graph has no nodes)")
    try:
        onnx.checker.check_model(model)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TinyaotError(f"{path} is not a valid ONNX model: {first}") from None
    return model


def _static_model(model: onnx.ModelProto, input_shapes: dict[str, tuple[int, ...]]) -> onnx.ModelProto:
    """Pins the graph inputs' shapes (user overrides first) and runs ONNX shape inference."""
    init_names = {i.name for i in model.graph.initializer}
    real_inputs = [i for i in model.graph.input if i.name not in init_names]
    unknown = set(input_shapes) - {i.name for i in real_inputs}
    if unknown:
        raise TinyaotError(f"--input-shape names unknown input(s) {sorted(unknown)}; model inputs are "
                           f"{[i.name for i in real_inputs]}")
    for inp in real_inputs:
        dims = inp.type.tensor_type.shape.dim
        if inp.name in input_shapes:
            shape = input_shapes[inp.name]
            if len(shape) != len(dims):
                raise TinyaotError(f"--input-shape {inp.name}: model input has rank {len(dims)}, got {len(shape)}")
            for d, v in zip(dims, shape):
                d.ClearField("dim_param")
                d.dim_value = v
            continue
        zero = [i for i, d in enumerate(dims) if d.HasField("dim_value") and d.dim_value == 0]
        if zero:
            raise TinyaotError(f"input {inp.name!r} has shape {_dims_text(dims)}: a zero-size dimension at axis "
                               f"{zero} (no data to compute on); tinyaot needs every dimension >= 1")
        dyn = [i for i, d in enumerate(dims) if not d.HasField("dim_value") or d.dim_value <= 0]
        if dyn:
            example = ",".join(str(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else "N"
                               for d in dims)
            raise TinyaotError(f"input {inp.name!r} has dynamic dimension(s) at axis {dyn}; give a static shape "
                               f"with --input-shape {inp.name}:{example} (N replaced by a number)")
    def infer(m: onnx.ModelProto) -> onnx.ModelProto:
        try:
            return shape_inference.infer_shapes(m, check_type=True, strict_mode=True, data_prop=True)
        except Exception as exc:
            first = str(exc).strip().splitlines()[0]
            raise TinyaotError(f"ONNX shape inference failed: {first}") from None

    # every constant subgraph (shape arithmetic included) evaluated by onnxruntime, then inferred again
    # (frontend/fold_constants.py)
    return fold_constant_subgraphs(infer(model), infer)


def is_prequantized(graph) -> bool:
    """The imported model carries its own quantization, so it needs no calibration: QuantizeLinear/DequantizeLinear
    pairs (a QDQ model; passes/absorb_qdq.py takes them in), or an importer marked it (an int8 TFLite model)."""
    return bool(graph.meta.get("prequantized")) or any(n.op in ("QuantizeLinear", "DequantizeLinear")
                                                       for n in graph.nodes)


def import_onnx_model(path: Path, input_shapes: dict[str, tuple[int, ...]] | None = None
                      ) -> tuple[Graph, onnx.ModelProto]:
    """The IR graph and the checked, shape-inferred float ONNX model it came from (calibration runs the latter in
    onnxruntime). The graph does not hold the ModelProto: the IR is plain data."""
    path = Path(path)
    model = load_onnx(path)
    # float16 (and mixed-precision) models compute as the float32 model with the same values; done first so the
    # float16 Casts an exporter adds become Identities before the operator check below.
    float16 = float16_to_float32(model)
    for n in model.graph.node:
        # onnxruntime writes 16-bit (and 4-bit) QDQ with its own com.microsoft Q/DQ ops: name the real problem.
        if n.op_type in ("QuantizeLinear", "DequantizeLinear") and n.domain not in ("", "ai.onnx"):
            raise TinyaotError(f"{n.op_type} node {n.name!r} is from domain {n.domain!r} (onnxruntime's 16-bit or "
                               "4-bit QDQ); tinyaot deploys int8 (or uint8) QDQ models")
    init_names = {i.name for i in model.graph.initializer}
    # Element types first: shape inference's complaint about an unsupported type would not say which tensor.
    for init in model.graph.initializer:
        check_dtype(init.name, init.data_type, init.dims, "constant")
    for n in model.graph.node:
        for a in n.attribute:
            if n.op_type == "Constant" and a.type == onnx.AttributeProto.TENSOR:
                check_dtype(n.output[0], a.t.data_type, a.t.dims, "constant")
    for inp in model.graph.input:
        if inp.name in init_names:
            continue
        tt = inp.type.tensor_type if inp.type.HasField("tensor_type") else None
        if tt is None or tt.elem_type != onnx.TensorProto.FLOAT:
            what = dtype_name(tt.elem_type) if tt is not None else f"a {inp.type.WhichOneof('value')}, not a tensor"
            shape = _dims_text(tt.shape.dim) if tt is not None and tt.HasField("shape") else "unknown"
            raise TinyaotError(f"input {inp.name!r} (shape {shape}) is {what}; tinyaot takes float32 (or float16) "
                               "model inputs")
    # Operators of other domains first (nothing can fold them); the standard ones only once every constant
    # subgraph is folded: an op that only computes constants (Div on shapes) is no reason to refuse a model.
    # Names are taken before folding, which drops nodes.
    # (nodes are named by their place in the model as given: an unnamed one as '#<index>')
    names = {tuple(n.output): n.name or f"#{k}" for k, n in enumerate(model.graph.node)}
    if any(n.domain not in ("", "ai.onnx") for n in model.graph.node):
        _check_supported(model, names)
    model = _static_model(model, input_shapes or {})
    _check_supported(model, names)
    g = model.graph

    tensors: dict[str, Tensor] = {}
    for init in g.initializer:  # element types checked above
        arr = numpy_helper.to_array(init)
        tensors[init.name] = Tensor(init.name, tuple(arr.shape), _dtype_name(arr.dtype), arr)

    def add_value_info(vi) -> None:
        if vi.name in tensors:
            return
        if not vi.type.HasField("tensor_type"):
            raise TinyaotError(f"value {vi.name!r} is not a tensor (ONNX type {vi.type.WhichOneof('value')}); "
                               "tinyaot compiles graphs of tensors only")
        tt = vi.type.tensor_type
        dtype = check_dtype(vi.name, tt.elem_type, _dims_list(tt.shape.dim))
        dims = []
        for d in tt.shape.dim:
            if d.HasField("dim_value") and d.dim_value == 0:
                raise TinyaotError(f"tensor {vi.name!r} ({dtype_name(tt.elem_type)}) has shape "
                                   f"{_dims_text(tt.shape.dim)} after shape inference: a zero-size dimension "
                                   "(an empty tensor); tinyaot needs every activation to hold data")
            if not d.HasField("dim_value") or d.dim_value <= 0:
                raise TinyaotError(f"tensor {vi.name!r} has a dynamic shape after shape inference; "
                                   f"give static input shapes with --input-shape NAME:D1,D2,...")
            dims.append(d.dim_value)
        tensors[vi.name] = Tensor(vi.name, tuple(dims), dtype)

    init_names = {i.name for i in g.initializer}
    inputs = [i.name for i in g.input if i.name not in init_names]
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if vi.name not in init_names:
            add_value_info(vi)
    for name in inputs:
        if tensors[name].dtype != "float32":
            raise TinyaotError(f"input {name!r} (shape {list(tensors[name].shape)}) is {tensors[name].dtype}; "
                               "tinyaot takes float32 (or float16) model inputs")

    nodes: list[Node] = []
    ops = [n for n in g.node if n.op_type != "Constant"]
    # Exporters may leave names empty or repeat them; every IR node gets its own (ir.verify checks it).
    names = dict(zip(map(id, ops), unique_node_names(ops)))
    for n in g.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        attrs = {key: (v.decode() if isinstance(v, bytes) else v) for key, v in attrs.items()}
        if n.op_type == "Constant":
            value = _constant_value(n, attrs)
            tensors[n.output[0]] = Tensor(n.output[0], tuple(value.shape), _dtype_name(value.dtype), value)
            continue
        name = names[id(n)]
        outputs = list(n.output)
        while outputs and not outputs[-1]:  # trailing optional outputs left out: the same node without them
            outputs.pop()
        for o in outputs:
            if o and o not in tensors:
                raise TinyaotError(f"shape inference gave no shape for {o!r} (node {name!r})")
        nodes.append(Node(n.op_type, name, list(n.input), outputs, attrs))

    graph = Graph(name=_model_name(path), tensors=tensors, nodes=nodes, inputs=inputs,
                  outputs=[o.name for o in g.output])
    graph.meta.update(
        opset=next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13),
        path=str(path), sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        inputs=[{"name": i, "shape": list(tensors[i].shape), "dtype": "float32"} for i in inputs],
        outputs=[{"name": o, "shape": list(tensors[o].shape), "dtype": "float32"} for o in graph.outputs],
    )
    if float16:
        graph.meta["converted_from_float16"] = len(float16)
    return graph, model


def _check_supported(model: onnx.ModelProto, names: dict[tuple, str]) -> None:
    """One error naming every operator tinyaot has no op for (and up to three of its nodes). Constant nodes are
    not ops: they become constant tensors."""
    unsupported = [(n.op_type, names.get(tuple(n.output), n.name or f"#{k}")) for k, n in enumerate(model.graph.node)
                   if n.domain not in ("", "ai.onnx") or not (is_registered(n.op_type) or n.op_type == "Constant")]
    if unsupported:
        by_op: dict[str, list[str]] = {}
        for op, name in unsupported:
            by_op.setdefault(op, []).append(name)
        listed = "; ".join(f"{op} (node{'s' if len(names) > 1 else ''} "
                           f"{', '.join(repr(n) for n in names[:3])}{', ...' if len(names) > 3 else ''})"
                           for op, names in by_op.items())
        raise TinyaotError(f"unsupported operator(s): {listed}. Supported: {', '.join(_onnx_ops())}")


def _onnx_ops() -> list[str]:
    return [op for op in registered_ops() if not getattr(get_op(op), "internal", False)]


def _dims_list(dims) -> list:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]


def _dims_text(dims) -> str:
    return "[" + ", ".join(str(v) for v in _dims_list(dims)) + "]"


def _model_name(path: Path) -> str:
    return path.stem


def _dtype_name(dtype: np.dtype) -> str:
    return {"float32": "float32", "float64": "float64", "int64": "int64", "int32": "int32", "int8": "int8",
            "uint8": "uint8", "bool": "bool"}.get(np.dtype(dtype).name, np.dtype(dtype).name)


def _constant_value(node, attrs) -> np.ndarray:
    if "value" in attrs:
        t = attrs["value"]
        check_dtype(node.output[0], t.data_type, t.dims, "constant")
        return numpy_helper.to_array(t)
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                       ("value_ints", np.int64)):
        if key in attrs:
            return np.asarray(attrs[key], dtype)
    raise TinyaotError(f"Constant node {node.name!r} has an unsupported value attribute {sorted(attrs)}")
