"""Full-integer (int8) TFLite -> IR, the same IR a pre-quantized (QDQ) ONNX model becomes (passes/absorb_qdq.py):
a float-shaped graph whose every activation carries its given scale and zero point, int8 weights and int32 biases
kept bit for bit as quantized constants. The ops' `quantize()` then use those parameters as they are and derive only
the requantization multipliers, in TFLite's own arithmetic (double precision from the float32 scales,
QuantizeMultiplier, the double rounding of MultiplyByQuantizedMultiplier).

The file is read with the `tflite` package: the Python reader flatc generates from TFLite's schema
(schema.fbs), not hand-decoded bytes.

Layout. TFLite tensors are NHWC. Each one keeps its TFLite shape in the IR; an op with image semantics (CONV_2D,
DEPTHWISE_CONV_2D, the pools) reads an NCHW view of its input and writes an NCHW tensor, given by a Transpose on
either side, exactly as an ONNX model exported from TensorFlow looks. The layout pass (passes/to_nhwc.py) makes
every such Transpose an alias, so no byte moves at run time; RESHAPE, FULLY_CONNECTED, ADD and SOFTMAX see the
NHWC order TFLite gives them. The model's inputs and outputs keep TFLite's names, shapes and order.

TFLite's arithmetic where it differs from an ONNX reading of the same op:
- padding SAME puts the odd pixel at the end: pads (floor(total / 2), total - floor(total / 2)), total from the
  output size the file states (TFLite's ComputePaddingHeightWidth);
- a fused activation clamps at zero_point + round(bound / scale) computed in float32 with ties away from zero
  (core/quant.tflite_activation_range), stored on the node as `act_range`;
- AVERAGE_POOL_2D averages the raw int8 values of the window's real pixels and rounds half away from zero, keeping
  the input's parameters (ops/pool.py avgpool_s8; a TFLite model gives no calibrated range, so the requantizing
  form is never chosen);
- SOFTMAX keeps its beta (ops/softmax.py);
- FULLY_CONNECTED reads its input as [batch, weights' depth] whatever its rank, and its bias integers are added
  to the accumulator as they are (TFLite ignores the bias tensor's scale), so the bias is given the accumulator
  scale s_in * s_w.
An operator, tensor type or option outside these is refused with one line naming the operator's index and kind.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import tflite
from tflite.ActivationFunctionType import ActivationFunctionType
from tflite.BuiltinOperator import BuiltinOperator
from tflite.Padding import Padding
from tflite.TensorType import TensorType

from tinyaot.core.quant import tflite_activation_range
from tinyaot.errors import TinyaotError
from tinyaot.ir import Graph, Node, QuantParams, Tensor

TFLITE_IDENTIFIER = b"TFL3"
_BUILTIN_NAMES = {v: k for k, v in vars(BuiltinOperator).items() if not k.startswith("_")}
_TYPE_NAMES = {v: k.lower() for k, v in vars(TensorType).items() if not k.startswith("_")}
# Fused activations with an int8 clamp: their real bounds (TFLite's ActivationFunctionType)
_ACTIVATIONS = {ActivationFunctionType.NONE: None, ActivationFunctionType.RELU: (0.0, float("inf")),
                ActivationFunctionType.RELU6: (0.0, 6.0), ActivationFunctionType.RELU_N1_TO_1: (-1.0, 1.0)}
_NCHW, _NHWC = (0, 3, 1, 2), (0, 2, 3, 1)


def is_tflite(path: Path) -> bool:
    """A .tflite file, by its name or by the flatbuffer identifier TFLite writes at bytes 4..8."""
    path = Path(path)
    if path.suffix.lower() == ".tflite":
        return True
    try:
        with open(path, "rb") as f:
            return f.read(8)[4:8] == TFLITE_IDENTIFIER
    except OSError:
        return False


def import_tflite(path: Path, input_shapes: dict | None = None) -> Graph:
    path = Path(path)
    if not path.exists():
        raise TinyaotError(f"model file not found: {path}")
    if path.is_dir():
        raise TinyaotError(f"model path is a directory, not a TFLite file: {path}")
    if input_shapes:
        raise TinyaotError(f"--input-shape is not used with a TFLite model ({path.name}): its shapes are static")
    buf = path.read_bytes()
    if len(buf) < 8 or buf[4:8] != TFLITE_IDENTIFIER:
        raise TinyaotError(f"{path} is not a TFLite model (no 'TFL3' flatbuffer identifier)")
    try:
        graph = _Importer(buf, path).run()
    except TinyaotError:
        raise
    except Exception as exc:  # a truncated or corrupt flatbuffer: struct/index errors from the reader
        why = " ".join(f"{type(exc).__name__}: {exc}".split())[:100]
        raise TinyaotError(f"{path} is not a valid TFLite model (truncated or corrupt flatbuffer; {why})") from None
    graph.meta.update(path=str(path), sha256=hashlib.sha256(buf).hexdigest())
    return graph


class _Importer:
    def __init__(self, buf: bytes, path: Path):
        self.buf = buf
        self.path = path
        self.model = tflite.Model.GetRootAsModel(buf, 0)
        if self.model.SubgraphsLength() != 1:
            raise TinyaotError(f"{path.name}: {self.model.SubgraphsLength()} subgraphs; tinyaot compiles TFLite "
                               "models with one subgraph (no control flow)")
        self.sg = self.model.Subgraphs(0)
        self.tensors: dict[str, Tensor] = {}
        self.nodes: list[Node] = []
        self.names: dict[int, str] = {}  # TFLite tensor index -> IR name of its NHWC (TFLite-shaped) form
        self.nchw: dict[int, str] = {}  # TFLite tensor index -> IR name of its NCHW view (4-D only)
        self.written_nchw: set[int] = set()  # tensors an image op writes in NCHW (their NHWC form is a Transpose)
        self.where = ""

    # --- reading the flatbuffer ----------------------------------------------------------------------------------
    def op_name(self, op) -> str:
        oc = self.model.OperatorCodes(op.OpcodeIndex())
        code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())  # TFLite's GetBuiltinCode
        if code == BuiltinOperator.CUSTOM:
            return f"CUSTOM '{(oc.CustomCode() or b'').decode(errors='replace')}'"
        return _BUILTIN_NAMES.get(code, f"builtin {code}")

    def tensor_name(self, ti: int) -> str:
        if ti not in self.names:
            raw = (self.sg.Tensors(ti).Name() or b"").decode(errors="replace") or f"tensor_{ti}"
            name, k = raw, 0
            while name in self.tensors or name in self.names.values():
                k += 1
                name = f"{raw}_{k}"
            self.names[ti] = name
        return self.names[ti]

    def shape(self, ti: int) -> tuple[int, ...]:
        t = self.sg.Tensors(ti)
        return tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()

    def dtype(self, ti: int) -> str:
        return _TYPE_NAMES.get(self.sg.Tensors(ti).Type(), f"type {self.sg.Tensors(ti).Type()}")

    def quant(self, ti: int) -> QuantParams | None:
        q = self.sg.Tensors(ti).Quantization()
        if q is None or q.ScaleLength() == 0:
            return None
        scale = q.ScaleAsNumpy().astype(np.float32).astype(np.float64)  # float32, as TFLite holds them
        zp = q.ZeroPointAsNumpy().astype(np.int64) if q.ZeroPointLength() else np.zeros(scale.shape, np.int64)
        if zp.size == 1 and scale.size > 1:
            zp = np.full(scale.shape, int(zp[0]), np.int64)
        if scale.size == 1:
            return QuantParams(scale.reshape(()), zp.reshape(()))
        return QuantParams(scale, zp, int(q.QuantizedDimension()))

    def data(self, ti: int) -> np.ndarray | None:
        t = self.sg.Tensors(ti)
        if t.Sparsity() is not None:
            raise TinyaotError(f"{self.where}: tensor {self.tensor_name(ti)!r} is stored sparse; tinyaot reads "
                               "dense TFLite tensors")
        b = self.model.Buffers(t.Buffer())
        if b is None:
            return None
        if b.Offset() > 1:  # stored after the flatbuffer (models over 2 GB)
            raw = np.frombuffer(self.buf, np.uint8, count=b.Size(), offset=b.Offset())
        elif b.DataLength():
            raw = b.DataAsNumpy()
        else:
            return None
        dt = {"int8": np.int8, "int32": np.int32, "int64": np.int64, "float32": np.float32, "int16": np.int16,
              "uint8": np.uint8}.get(self.dtype(ti))
        if dt is None:
            raise TinyaotError(f"{self.where}: constant {self.tensor_name(ti)!r} is {self.dtype(ti)}; tinyaot reads "
                               "int8 weights and int32 biases")
        return np.frombuffer(raw.tobytes(), dt).reshape(self.shape(ti)).copy()

    def options(self, op, cls):
        table = op.BuiltinOptions()
        opts = cls()
        if table is None:
            return None
        opts.Init(table.Bytes, table.Pos)
        return opts

    # --- building the graph --------------------------------------------------------------------------------------
    def refuse(self, why: str):
        raise TinyaotError(f"{self.where}: {why}")

    def activation(self, ti: int) -> str:
        """The IR name of activation `ti` in its TFLite (NHWC) shape, created with its given parameters."""
        name = self.tensor_name(ti)
        if name not in self.tensors:
            if self.data(ti) is not None:
                self.refuse(f"input {name!r} is a constant where tinyaot expects an activation")
            if self.dtype(ti) != "int8":
                self.refuse(f"tensor {name!r} is {self.dtype(ti)}; tinyaot compiles full-integer models with int8 "
                            "activations (convert with inference_input_type/inference_output_type tf.int8, "
                            "and no 16x8 or float layers)")
            qp = self.quant(ti)
            if qp is None or qp.axis is not None:
                self.refuse(f"activation {name!r} has {'no' if qp is None else 'per-channel'} quantization "
                            "parameters; tinyaot takes one scale and zero point per activation")
            self.tensors[name] = Tensor(name, self.shape(ti), "float32", quant=qp)
        if ti in self.written_nchw and name not in self._produced():  # an image op wrote it: its NHWC form
            self.add("Transpose", f"{name}_to_nhwc", [self.nchw[ti]], [name], perm=list(_NHWC))
        return name

    def _produced(self) -> set[str]:
        return {o for n in self.nodes for o in n.outputs}

    def nchw_view(self, ti: int) -> str:
        """The NCHW view of 4-D activation `ti` (a Transpose of its TFLite form, made once)."""
        if ti not in self.nchw:
            x = self.activation(ti)
            if len(self.tensors[x].shape) != 4:
                self.refuse(f"input {x!r} has shape {list(self.tensors[x].shape)}; this operator takes 4-D NHWC "
                            "images")
            self.nchw[ti] = self.view(x, f"{x}_nchw", _NCHW)
            self.add("Transpose", f"{x}_to_nchw", [x], [self.nchw[ti]], perm=list(_NCHW))
        return self.nchw[ti]

    def nchw_output(self, ti: int) -> str:
        """A new NCHW tensor for output `ti` of an image op; its TFLite form is made from it when read."""
        name = self.tensor_name(ti)
        if name in self.tensors:
            self.refuse(f"tensor {name!r} is written twice")
        if self.dtype(ti) != "int8":
            self.refuse(f"output {name!r} is {self.dtype(ti)}; tinyaot compiles int8 activations")
        qp = self.quant(ti)
        if qp is None or qp.axis is not None:
            self.refuse(f"activation {name!r} needs one scale and zero point")
        self.tensors[name] = Tensor(name, self.shape(ti), "float32", quant=qp)
        self.nchw[ti] = self.view(name, f"{name}_nchw", _NCHW)
        self.written_nchw.add(ti)
        return self.nchw[ti]

    def io_entry(self, name: str) -> dict:
        """report.json's (and load_samples') description of a model input or output: int8 with its parameters;
        sample files may hold these integers (int8 arrays) or real values, which are quantized with them."""
        t = self.tensors[name]
        return {"name": name, "shape": list(t.shape), "dtype": "int8", "scale": t.quant.s,
                "zero_point": t.quant.zp}

    def activation_output(self, ti: int) -> str:
        """Output `ti` of a non-image op, in its TFLite shape (each tensor is written once)."""
        if self.tensor_name(ti) in self.tensors:
            self.refuse(f"tensor {self.tensor_name(ti)!r} is written twice")
        return self.activation(ti)

    def reshaped(self, src: str, shape) -> str:
        """A new tensor holding the bytes of `src` under `shape` (for a Reshape alias)."""
        name = self.fresh(f"{src}_{'x'.join(map(str, shape))}")
        self.tensors[name] = Tensor(name, tuple(shape), "float32", quant=self.tensors[src].quant)
        return name

    def view(self, src: str, name: str, perm) -> str:
        name = self.fresh(name)
        t = self.tensors[src]
        self.tensors[name] = Tensor(name, tuple(t.shape[p] for p in perm), "float32", quant=t.quant)
        return name

    def fresh(self, name: str) -> str:
        """`name`, or `name_1`, ...: one no IR tensor and no TFLite tensor named so far has."""
        base, k = name, 0
        while name in self.tensors or name in self.names.values():
            k += 1
            name = f"{base}_{k}"
        return name

    def const(self, name: str | int, data: np.ndarray, dtype: str, qp: QuantParams | None) -> str:
        """A constant named `name`, or after TFLite tensor `name` (an index: its own name, unless already used)."""
        if isinstance(name, int):
            name = self.tensor_name(name)
            name = name if name not in self.tensors else self.fresh(name)
        else:
            name = self.fresh(name)
        self.tensors[name] = Tensor(name, tuple(data.shape), dtype, np.ascontiguousarray(data), qp)
        return name

    def add(self, op: str, name: str, inputs, outputs, **attrs) -> Node:
        taken = {n.name for n in self.nodes}
        base, k = name, 0
        while name in taken:
            k += 1
            name = f"{base}_{k}"
        node = Node(op, name, list(inputs), list(outputs), attrs)
        self.nodes.append(node)
        return node

    def fused(self, node: Node, fn: int, out_ti: int) -> None:
        if fn not in _ACTIVATIONS:
            self.refuse(f"fused activation {_act_name(fn)} is not supported (NONE, RELU, RELU6 and RELU_N1_TO_1 "
                        "are)")
        bounds = _ACTIVATIONS[fn]
        qp = self.quant(out_ti)
        lo, hi = bounds if bounds is not None else (-np.inf, np.inf)
        node.attrs["act_range"] = tflite_activation_range(qp.s, qp.zp, lo, hi)
        if bounds is not None:
            node.attrs["activation"] = bounds  # for the onnxruntime per-layer oracle (a float Clip)

    def weights(self, ti: int, what: str, axis: int) -> tuple[np.ndarray, QuantParams]:
        w = self.data(ti)
        name = self.tensor_name(ti)
        if w is None:
            self.refuse(f"{what} {name!r} is not a constant; tinyaot compiles constant weights")
        if self.dtype(ti) != "int8":
            self.refuse(f"{what} {name!r} are {self.dtype(ti)}; tinyaot reads int8 weights (a float, int4 or "
                        "hybrid-quantized model is not full-integer int8)")
        qp = self.quant(ti)
        if qp is None:
            self.refuse(f"{what} {name!r} have no quantization parameters")
        if qp.axis is not None and qp.axis != axis:
            self.refuse(f"{what} {name!r} are quantized along axis {qp.axis}; TFLite's kernels (and tinyaot's) "
                        f"take one scale per output channel (axis {axis})")
        return w, qp

    def bias(self, ti: int, s_in: float, wq: QuantParams, out_c: int, base: str) -> str:
        """The int32 bias as accumulator units: TFLite adds its integers as they are, so the IR gives it the scale
        s_in * s_w[c] (the float32 scales' product in double, as TFLite's multipliers use them)."""
        s_acc = np.float64(s_in) * np.broadcast_to(np.asarray(wq.scale, np.float64).reshape(-1), (out_c,))
        qp = QuantParams(s_acc.copy(), np.zeros(out_c, np.int64), 0)
        if ti < 0:
            return self.const(f"{base}_bias", np.zeros(out_c, np.int32), "int32", qp)
        b = self.data(ti)
        if b is None or self.dtype(ti) != "int32":
            self.refuse(f"bias {self.tensor_name(ti)!r} is {self.dtype(ti) if b is not None else 'not a constant'};"
                        " tinyaot reads int32 biases of int8 layers (int64 biases are TFLite's 16x8 scheme)")
        if b.size != out_c:
            self.refuse(f"bias {self.tensor_name(ti)!r} has {b.size} values for {out_c} output channels")
        return self.const(ti, b.reshape(out_c).astype(np.int32), "int32", qp)

    def run(self) -> Graph:
        sg = self.sg
        inputs = [int(sg.Inputs(j)) for j in range(sg.InputsLength())]
        outputs = [int(sg.Outputs(j)) for j in range(sg.OutputsLength())]
        for ti in inputs:
            self.where = f"{self.path.name}: model input {self.tensor_name(ti)!r}"
            self.activation(ti)
        kinds = []
        for k in range(sg.OperatorsLength()):
            op = sg.Operators(k)
            kind = self.op_name(op)
            kinds.append(kind)
            outs = [int(op.Outputs(j)) for j in range(op.OutputsLength())]
            first = self.tensor_name(outs[0]) if outs else "-"
            self.where = f"{self.path.name}: operator {k} ({kind}, output {first!r})"
            convert = _CONVERTERS.get(kind)
            if convert is None:
                raise TinyaotError(f"{self.where} is not supported; tinyaot reads the TFLite builtins "
                                   f"{', '.join(sorted(_CONVERTERS))}")
            ins = [int(op.Inputs(j)) for j in range(op.InputsLength())]
            convert(self, op, ins, outs, f"{kind.lower()}_{k}")
        self.where = f"{self.path.name}"
        out_names = []
        for ti in outputs:
            name = self.activation(ti)
            if name not in self._produced() and name not in [self.names[i] for i in inputs]:
                self.refuse(f"model output {name!r} is produced by no operator")
            out_names.append(name)
        in_names = [self.names[ti] for ti in inputs]
        graph = Graph(name=self.path.stem, tensors=self.tensors, nodes=self.nodes, inputs=in_names, outputs=out_names)
        desc = self.model.Description()
        graph.meta.update(
            opset=13, prequantized=True, format="tflite",
            inputs=[self.io_entry(n) for n in in_names], outputs=[self.io_entry(n) for n in out_names],
            tflite={"schema_version": int(self.model.Version()), "operators": kinds,
                    "description": desc.decode(errors="replace") if desc else ""})
        graph.remove_unused_tensors()
        return graph


def _act_name(fn: int) -> str:
    return next((k for k, v in vars(ActivationFunctionType).items() if v == fn), str(fn))


# --- one converter per TFLite builtin ---------------------------------------------------------------------------
def _same_or_valid(imp: _Importer, padding: int, in_hw, out_hw, kernel_hw, stride_hw, dilation_hw) -> list[int]:
    """ONNX pads [top, left, bottom, right] for TFLite's padding, checked against the output size the file states."""
    pads_b, pads_e = [], []
    for a in range(2):
        eff = (kernel_hw[a] - 1) * dilation_hw[a] + 1
        if padding == Padding.SAME:
            expect = -(-in_hw[a] // stride_hw[a])
        elif padding == Padding.VALID:
            expect = (in_hw[a] - eff) // stride_hw[a] + 1
        else:
            imp.refuse(f"padding {padding} is neither SAME nor VALID")
        if expect != out_hw[a]:
            imp.refuse(f"output size {out_hw[a]} along axis {a + 1} is not what "
                       f"{'SAME' if padding == Padding.SAME else 'VALID'} padding gives ({expect})")
        total = (out_hw[a] - 1) * stride_hw[a] + eff - in_hw[a]
        before = max(0, total // 2) if padding == Padding.SAME else 0
        pads_b.append(before)
        pads_e.append(max(0, total - before) if padding == Padding.SAME else 0)
    return pads_b + pads_e


def _conv(imp: _Importer, op, ins, outs, name, depthwise: bool) -> None:
    opts = imp.options(op, tflite.DepthwiseConv2DOptions if depthwise else tflite.Conv2DOptions)
    x_ti, w_ti = ins[0], ins[1]
    b_ti = ins[2] if len(ins) > 2 else -1
    x_shape = imp.shape(x_ti)
    x = imp.nchw_view(x_ti)
    w, wq = imp.weights(w_ti, "weights", 3 if depthwise else 0)
    if w.ndim != 4:
        imp.refuse(f"weights of shape {list(w.shape)}; expected 4-D")
    c_in = x_shape[3]
    if depthwise:  # [1, kh, kw, C * m] -> ONNX [C * m, 1, kh, kw], group C
        if w.shape[0] != 1 or w.shape[3] % c_in:
            imp.refuse(f"depthwise weights {list(w.shape)} do not fit {c_in} input channels")
        w_onnx, group = w.transpose(3, 0, 1, 2), c_in  # the depth multiplier is w.shape[3] / C, as the kernels take it
    else:  # OHWI -> OIHW
        if c_in % w.shape[3]:
            imp.refuse(f"weights {list(w.shape)} do not fit {c_in} input channels")
        w_onnx, group = w.transpose(0, 3, 1, 2), c_in // w.shape[3]
    out_c = w_onnx.shape[0]
    wq_onnx = QuantParams(wq.scale, wq.zero_point, None if wq.axis is None else 0)
    if np.any(np.asarray(wq.zero_point) != 0):
        imp.refuse("weights with a non-zero zero point; TFLite's int8 convolutions take symmetric weights")
    s_in = imp.tensors[imp.tensor_name(x_ti)].quant.s
    wname = imp.const(w_ti, w_onnx, "int8", wq_onnx)
    bname = imp.bias(b_ti, s_in, wq_onnx, out_c, name)
    stride = (int(opts.StrideH()), int(opts.StrideW())) if opts is not None else (1, 1)
    dil = (int(opts.DilationHFactor()), int(opts.DilationWFactor())) if opts is not None else (1, 1)
    out_shape = imp.shape(outs[0])
    pads = _same_or_valid(imp, opts.Padding() if opts is not None else Padding.SAME, x_shape[1:3], out_shape[1:3],
                          w_onnx.shape[2:], stride, dil)
    y = imp.nchw_output(outs[0])
    node = imp.add("Conv", name, [x, wname, bname], [y], kernel_shape=list(w_onnx.shape[2:]), strides=list(stride),
                   dilations=list(dil), pads=pads, group=group)
    imp.fused(node, opts.FusedActivationFunction() if opts is not None else 0, outs[0])


def _conv_2d(imp, op, ins, outs, name):
    _conv(imp, op, ins, outs, name, depthwise=False)


def _depthwise_conv_2d(imp, op, ins, outs, name):
    _conv(imp, op, ins, outs, name, depthwise=True)


def _pool(imp: _Importer, op, ins, outs, name, onnx_op: str) -> None:
    opts = imp.options(op, tflite.Pool2DOptions)
    x_shape = imp.shape(ins[0])
    x = imp.nchw_view(ins[0])
    qi, qo = imp.tensors[imp.tensor_name(ins[0])].quant, imp.quant(outs[0])
    if qo is None or not (np.float32(qi.s) == np.float32(qo.s) and qi.zp == qo.zp):
        imp.refuse("input and output quantization differ; TFLite's int8 pooling keeps its input's scale and zero "
                   "point")
    k = (int(opts.FilterHeight()), int(opts.FilterWidth()))
    stride = (int(opts.StrideH()), int(opts.StrideW()))
    out_shape = imp.shape(outs[0])
    pads = _same_or_valid(imp, opts.Padding(), x_shape[1:3], out_shape[1:3], k, stride, (1, 1))
    y = imp.nchw_output(outs[0])
    attrs = dict(kernel_shape=list(k), strides=list(stride), pads=pads)
    if onnx_op == "AveragePool":
        attrs["count_include_pad"] = 0  # TFLite divides by the window's real pixels
    node = imp.add(onnx_op, name, [x], [y], **attrs)
    imp.fused(node, opts.FusedActivationFunction(), outs[0])


def _average_pool_2d(imp, op, ins, outs, name):
    _pool(imp, op, ins, outs, name, "AveragePool")


def _max_pool_2d(imp, op, ins, outs, name):
    _pool(imp, op, ins, outs, name, "MaxPool")


def _fully_connected(imp: _Importer, op, ins, outs, name) -> None:
    opts = imp.options(op, tflite.FullyConnectedOptions)
    if opts is not None and opts.WeightsFormat() != 0:
        imp.refuse("shuffled weights (weights_format SHUFFLED4x16INT8) are not supported")
    x = imp.activation(ins[0])
    w, wq = imp.weights(ins[1], "weights", 0)
    if w.ndim != 2:
        imp.refuse(f"weights of shape {list(w.shape)}; expected [out, depth]")
    if np.any(np.asarray(wq.zero_point) != np.asarray(wq.zero_point).reshape(-1)[0]):
        imp.refuse("weights with different zero points per channel")
    out_c, depth = w.shape
    size = imp.tensors[x].size
    if size % depth:
        imp.refuse(f"input of {size} values is not a whole number of rows of {depth}")
    rows = (size // depth, depth)
    if tuple(imp.tensors[x].shape) != rows:  # TFLite reads the input as [batch, depth]: an alias
        flat = imp.reshaped(x, rows)
        imp.add("Reshape", f"{name}_flatten", [x], [flat])
        x = flat
    s_in = imp.tensors[x].quant.s
    wname = imp.const(ins[1], w, "int8", QuantParams(wq.scale, wq.zero_point,
                                                                         None if wq.axis is None else 0))
    bname = imp.bias(ins[2] if len(ins) > 2 else -1, s_in, wq, out_c, name)
    y = imp.activation_output(outs[0])
    two_d = (rows[0], out_c)
    fc_out = y if tuple(imp.tensors[y].shape) == two_d else imp.reshaped(y, two_d)
    node = imp.add("FullyConnected", name, [x, wname, bname], [fc_out])
    imp.fused(node, opts.FusedActivationFunction() if opts is not None else 0, outs[0])
    if fc_out != y:  # keep_num_dims: the same bytes under the output's own shape
        imp.add("Reshape", f"{name}_shape", [fc_out], [y])


def _add(imp: _Importer, op, ins, outs, name) -> None:
    opts = imp.options(op, tflite.AddOptions)
    operands = []
    for ti in ins[:2]:
        data = imp.data(ti)
        if data is None:
            operands.append(imp.activation(ti))
            continue
        if imp.dtype(ti) != "int8" or imp.quant(ti) is None or imp.quant(ti).axis is not None:
            imp.refuse(f"constant operand {imp.tensor_name(ti)!r} is not per-tensor int8")
        operands.append(imp.const(ti, data, "int8", imp.quant(ti)))
    y = imp.activation_output(outs[0])
    node = imp.add("Add", name, operands, [y])
    imp.fused(node, opts.FusedActivationFunction() if opts is not None else 0, outs[0])


def _reshape(imp: _Importer, op, ins, outs, name) -> None:
    x = imp.activation(ins[0])
    y = imp.activation_output(outs[0])
    if imp.tensors[x].size != imp.tensors[y].size:
        imp.refuse(f"reshape of {imp.tensors[x].size} values into shape {list(imp.tensors[y].shape)}")
    imp.add("Reshape", name, [x], [y])


def _softmax(imp: _Importer, op, ins, outs, name) -> None:
    opts = imp.options(op, tflite.SoftmaxOptions)
    x = imp.activation(ins[0])
    y = imp.activation_output(outs[0])
    qo = imp.tensors[y].quant
    if not (np.float32(qo.s) == np.float32(1.0 / 256) and qo.zp == -128):
        imp.refuse(f"int8 softmax output with scale {qo.s:.6g}, zero point {qo.zp}; TFLite's int8 softmax writes "
                   "scale 1/256, zero point -128")
    imp.add("Softmax", name, [x], [y], axis=-1, beta=float(np.float32(opts.Beta())) if opts is not None else 1.0)


_CONVERTERS = {
    "CONV_2D": _conv_2d, "DEPTHWISE_CONV_2D": _depthwise_conv_2d, "FULLY_CONNECTED": _fully_connected,
    "AVERAGE_POOL_2D": _average_pool_2d, "MAX_POOL_2D": _max_pool_2d, "ADD": _add, "RESHAPE": _reshape,
    "SOFTMAX": _softmax,
}
