"""Small int8 .tflite models written for the tests with the `tflite` package's generated flatbuffer builder (the
schema's own writer functions, the format TFLite's converter writes): the corners of TFLite's int8 arithmetic the
six shared files do not reach (RELU6 and RELU_N1_TO_1 clamps, SAME padding with the odd pixel at the end, dilation,
a depth multiplier, average pooling over windows cut by padding, per-channel fully connected weights, an ADD of two
activations and one of a broadcast constant, softmax's beta, keep_num_dims), and models tinyaot must refuse. Weights
and biases are random (fixed seeds); TFLite Micro's interpreter is the oracle the tests hold them to."""
from __future__ import annotations

import importlib

import flatbuffers
import numpy as np
from tflite.ActivationFunctionType import ActivationFunctionType as Act
from tflite.BuiltinOperator import BuiltinOperator as Op
from tflite.BuiltinOptions import BuiltinOptions as Opt
from tflite.Padding import Padding
from tflite.TensorType import TensorType


def _m(name: str):
    """The generated module `tflite.<name>` (the package's namespace holds the class of the same name)."""
    return importlib.import_module(f"tflite.{name}")


class TFLiteBuilder:
    """Tensors, buffers and operators of one subgraph, written out as a TFLite flatbuffer by `build`."""

    def __init__(self):
        self.tensors: list[dict] = []
        self.buffers: list[bytes] = [b""]  # buffer 0 is the empty one, as TFLite's converter writes
        self.ops: list[tuple] = []
        self.codes: list[int] = []

    def tensor(self, name: str, shape, scale=None, zero_point=0, data=None, dtype=TensorType.INT8,
               axis: int = 0) -> int:
        buffer = 0
        if data is not None:
            self.buffers.append(np.ascontiguousarray(data).tobytes())
            buffer = len(self.buffers) - 1
        scale = None if scale is None else np.atleast_1d(np.asarray(scale, np.float32))
        zp = None if scale is None else np.broadcast_to(np.asarray(zero_point, np.int64), scale.shape).copy()
        self.tensors.append(dict(name=name, shape=list(shape), type=dtype, buffer=buffer, scale=scale, zp=zp,
                                 axis=axis))
        return len(self.tensors) - 1

    def op(self, code: int, inputs, outputs, options_type: int = 0, options=None) -> None:
        """`options`: (module name, {field: value}) of the builtin options table."""
        if code not in self.codes:
            self.codes.append(code)
        self.ops.append((self.codes.index(code), list(inputs), list(outputs), options_type, options))

    def build(self, inputs, outputs) -> bytes:
        b = flatbuffers.Builder(1024)

        def ints(values, start):
            start(b, len(values))
            for v in reversed(values):
                b.PrependInt32(int(v))
            return b.EndVector()

        buffers = []
        for data in self.buffers:
            vec = None
            if data:
                b.StartVector(1, len(data), 16)  # 16-byte aligned, as the converter aligns constant data
                for byte in reversed(data):
                    b.PrependUint8(byte)
                vec = b.EndVector()
            B = _m("Buffer")
            B.BufferStart(b)
            if vec is not None:
                B.BufferAddData(b, vec)
            buffers.append(B.BufferEnd(b))
        tensors = []
        for t in self.tensors:
            T, Q = _m("Tensor"), _m("QuantizationParameters")
            name = b.CreateString(t["name"])
            shape = ints(t["shape"], T.TensorStartShapeVector)
            quant = None
            if t["scale"] is not None:
                scale = b.CreateNumpyVector(t["scale"])
                zp = b.CreateNumpyVector(t["zp"])
                Q.QuantizationParametersStart(b)
                Q.QuantizationParametersAddScale(b, scale)
                Q.QuantizationParametersAddZeroPoint(b, zp)
                Q.QuantizationParametersAddQuantizedDimension(b, t["axis"])
                quant = Q.QuantizationParametersEnd(b)
            T.TensorStart(b)
            T.TensorAddShape(b, shape)
            T.TensorAddType(b, t["type"])
            T.TensorAddBuffer(b, t["buffer"])
            T.TensorAddName(b, name)
            if quant is not None:
                T.TensorAddQuantization(b, quant)
            tensors.append(T.TensorEnd(b))
        ops = []
        for index, ins, outs, otype, options in self.ops:
            O = _m("Operator")
            opts = None
            if options is not None:
                module, fields = options
                M = _m(module)
                getattr(M, f"{module}Start")(b)
                for field, value in fields.items():
                    getattr(M, f"{module}Add{field}")(b, value)
                opts = getattr(M, f"{module}End")(b)
            vin, vout = ints(ins, O.OperatorStartInputsVector), ints(outs, O.OperatorStartOutputsVector)
            O.OperatorStart(b)
            O.OperatorAddOpcodeIndex(b, index)
            O.OperatorAddInputs(b, vin)
            O.OperatorAddOutputs(b, vout)
            if opts is not None:
                O.OperatorAddBuiltinOptionsType(b, otype)
                O.OperatorAddBuiltinOptions(b, opts)
            ops.append(O.OperatorEnd(b))
        S = _m("SubGraph")

        def table_vector(start, items):
            start(b, len(items))
            for x in reversed(items):
                b.PrependUOffsetTRelative(x)
            return b.EndVector()

        vt = table_vector(S.SubGraphStartTensorsVector, tensors)
        vi, vo = ints(inputs, S.SubGraphStartInputsVector), ints(outputs, S.SubGraphStartOutputsVector)
        vops = table_vector(S.SubGraphStartOperatorsVector, ops)
        S.SubGraphStart(b)
        S.SubGraphAddTensors(b, vt)
        S.SubGraphAddInputs(b, vi)
        S.SubGraphAddOutputs(b, vo)
        S.SubGraphAddOperators(b, vops)
        sub = S.SubGraphEnd(b)
        C = _m("OperatorCode")
        codes = []
        for code in self.codes:
            C.OperatorCodeStart(b)
            C.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
            C.OperatorCodeAddBuiltinCode(b, code)
            C.OperatorCodeAddVersion(b, 1)
            codes.append(C.OperatorCodeEnd(b))
        M = _m("Model")
        vcodes = table_vector(M.ModelStartOperatorCodesVector, codes)
        vsubs = table_vector(M.ModelStartSubgraphsVector, [sub])
        vbufs = table_vector(M.ModelStartBuffersVector, buffers)
        desc = b.CreateString("tinyaot test model")
        M.ModelStart(b)
        M.ModelAddVersion(b, 3)
        M.ModelAddOperatorCodes(b, vcodes)
        M.ModelAddSubgraphs(b, vsubs)
        M.ModelAddDescription(b, desc)
        M.ModelAddBuffers(b, vbufs)
        b.Finish(M.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())


# --- layers with plausible random parameters ----------------------------------------------------------------------
class _Net:
    """A builder with helpers that give each layer random int8 weights and an output scale that spreads its values
    over the int8 range (so clamps and rounding are exercised, not a saturated output)."""

    def __init__(self, seed: int):
        self.b = TFLiteBuilder()
        self.rng = np.random.default_rng(seed)
        self.scale: dict[int, float] = {}
        self.zp: dict[int, int] = {}

    def act(self, name, shape, scale, zp) -> int:
        t = self.b.tensor(name, shape, scale, zp)
        self.scale[t], self.zp[t] = float(np.float32(scale)), int(zp)
        return t

    def _out_scale(self, s_in, s_w, depth) -> float:
        # the accumulator of `depth` products of int8-spread values, spread over about 2/3 of the int8 range
        return float(s_in * np.mean(s_w) * np.sqrt(depth) * 74 * 60 / 85)

    def weights(self, name, shape, axis, per_channel=True):
        w = self.rng.integers(-127, 128, size=shape).astype(np.int8)
        n = shape[axis]
        s = self.rng.uniform(0.002, 0.01, size=n if per_channel else 1).astype(np.float32)
        return w, s

    def conv(self, x, out_c, k, stride=(1, 1), padding=Padding.SAME, act=Act.NONE, dilation=(1, 1),
             depthwise=False, mult=1, out_zp=3, name="conv"):
        n, h, w, c = self.b.tensors[x]["shape"]
        eff = [(k[a] - 1) * dilation[a] + 1 for a in range(2)]
        hw = [-(-d // s) if padding == Padding.SAME else (d - e) // s + 1
              for d, e, s in zip((h, w), eff, stride)]
        if depthwise:
            out_c = c * mult
            wq, ws = self.weights(f"{name}/w", (1, *k, out_c), 3)
            depth = k[0] * k[1]
        else:
            wq, ws = self.weights(f"{name}/w", (out_c, *k, c), 0)
            depth = k[0] * k[1] * c
        s_in = self.scale[x]
        wt = self.b.tensor(f"{name}/w", wq.shape, ws, 0, wq, axis=3 if depthwise else 0)
        bias = self.rng.integers(-3000, 3000, size=out_c).astype(np.int32)
        bt = self.b.tensor(f"{name}/b", (out_c,), (np.float32(s_in) * ws).astype(np.float32), 0, bias,
                           dtype=TensorType.INT32)
        y = self.act(f"{name}/out", (n, *hw, out_c), self._out_scale(s_in, ws, depth), out_zp)
        fields = dict(Padding=padding, StrideH=stride[0], StrideW=stride[1], FusedActivationFunction=act,
                      DilationHFactor=dilation[0], DilationWFactor=dilation[1])
        if depthwise:
            fields["DepthMultiplier"] = mult
            self.b.op(Op.DEPTHWISE_CONV_2D, [x, wt, bt], [y], Opt.DepthwiseConv2DOptions,
                      ("DepthwiseConv2DOptions", fields))
        else:
            self.b.op(Op.CONV_2D, [x, wt, bt], [y], Opt.Conv2DOptions, ("Conv2DOptions", fields))
        return y

    def pool(self, x, k, stride, padding, act=Act.NONE, max_pool=False, name="pool"):
        n, h, w, c = self.b.tensors[x]["shape"]
        hw = [-(-d // s) if padding == Padding.SAME else (d - kk) // s + 1 for d, kk, s in zip((h, w), k, stride)]
        y = self.act(f"{name}/out", (n, *hw, c), self.scale[x], self.zp[x])
        self.b.op(Op.MAX_POOL_2D if max_pool else Op.AVERAGE_POOL_2D, [x], [y], Opt.Pool2DOptions,
                  ("Pool2DOptions", dict(Padding=padding, StrideH=stride[0], StrideW=stride[1], FilterHeight=k[0],
                                         FilterWidth=k[1], FusedActivationFunction=act)))
        return y

    def reshape(self, x, shape, name="reshape"):
        y = self.act(f"{name}/out", shape, self.scale[x], self.zp[x])
        shape_t = self.b.tensor(f"{name}/shape", (len(shape),), data=np.asarray(shape, np.int32),
                                dtype=TensorType.INT32)
        self.b.op(Op.RESHAPE, [x, shape_t], [y])
        return y

    def fc(self, x, out_c, act=Act.NONE, per_channel=False, bias=True, keep_num_dims=False, out_shape=None,
           name="fc"):
        shape = self.b.tensors[x]["shape"]
        depth = shape[-1]
        wq, ws = self.weights(f"{name}/w", (out_c, depth), 0, per_channel)
        s_in = self.scale[x]
        ins = [x, self.b.tensor(f"{name}/w", wq.shape, ws, 0, wq, axis=0)]
        if bias:
            bq = self.rng.integers(-3000, 3000, size=out_c).astype(np.int32)
            ins.append(self.b.tensor(f"{name}/b", (out_c,), (np.float32(s_in) * ws).astype(np.float32), 0, bq,
                                     dtype=TensorType.INT32))
        else:
            ins.append(-1)
        shape_out = out_shape or ([*shape[:-1], out_c] if keep_num_dims else [int(np.prod(shape[:-1])), out_c])
        y = self.act(f"{name}/out", shape_out, self._out_scale(s_in, ws, depth), -7)
        self.b.op(Op.FULLY_CONNECTED, ins, [y], Opt.FullyConnectedOptions,
                  ("FullyConnectedOptions", dict(FusedActivationFunction=act, KeepNumDims=keep_num_dims)))
        return y

    def add(self, a, b, scale, zp, act=Act.NONE, name="add"):
        y = self.act(f"{name}/out", self.b.tensors[a]["shape"], scale, zp)
        self.b.op(Op.ADD, [a, b], [y], Opt.AddOptions, ("AddOptions", dict(FusedActivationFunction=act)))
        return y

    def const(self, name, values, scale, zp):
        q = np.asarray(values, np.int8)
        t = self.b.tensor(name, q.shape, scale, zp, q)
        self.scale[t], self.zp[t] = float(np.float32(scale)), int(zp)
        return t

    def softmax(self, x, beta=1.0, name="softmax"):
        y = self.act(f"{name}/out", self.b.tensors[x]["shape"], 1.0 / 256, -128)
        self.b.op(Op.SOFTMAX, [x], [y], Opt.SoftmaxOptions, ("SoftmaxOptions", dict(Beta=beta)))
        return y


def mixed_ops(seed: int = 0) -> bytes:
    """Every TFLite builtin tinyaot reads, with the options where its arithmetic differs from an ONNX reading."""
    n = _Net(seed)
    x = n.act("input", (1, 11, 9, 3), 0.05, -10)
    c1 = n.conv(x, 8, (3, 3), (2, 2), Padding.SAME, Act.RELU6, name="conv_s2_relu6", out_zp=-100)  # odd padding
    c2 = n.conv(c1, 0, (3, 3), (1, 1), Padding.SAME, Act.RELU_N1_TO_1, dilation=(2, 2), depthwise=True, mult=2,
                name="dw_mult2_dil2_relu_n1")
    c3 = n.conv(c2, 16, (1, 1), name="pw")
    c4 = n.conv(c2, 16, (3, 3), act=Act.RELU, name="conv3x3_relu")
    s = n.add(c3, c4, 0.9 * max(n.scale[c3], n.scale[c4]), 5, Act.RELU, name="residual_add")
    p1 = n.pool(s, (3, 3), (2, 2), Padding.SAME, name="avgpool_same")  # windows cut by the end padding
    p2 = n.pool(p1, (2, 2), (1, 1), Padding.VALID, Act.RELU, max_pool=True, name="maxpool_relu")
    shape = n.b.tensors[p2]["shape"]
    r = n.reshape(p2, (1, int(np.prod(shape))))
    f1 = n.fc(r, 12, Act.RELU, per_channel=True, bias=False, name="fc_per_channel_no_bias")
    k = n.const("offsets", n.rng.integers(-128, 128, size=12), 0.02, 4)
    a2 = n.add(f1, k, 1.1 * n.scale[f1], -20, name="add_broadcast_const")
    f2 = n.fc(a2, 10, name="fc")
    y = n.softmax(f2, beta=0.7)
    return n.b.build([x], [y])


def fc_keep_dims(seed: int = 1) -> bytes:
    """FULLY_CONNECTED on a 3-D input with keep_num_dims (the rows are all leading axes)."""
    n = _Net(seed)
    x = n.act("frames", (1, 4, 6), 0.1, 2)
    y = n.fc(x, 5, Act.RELU6, keep_num_dims=True, name="fc_keep")
    return n.b.build([x], [y])


def unsupported_op() -> bytes:
    """A CONV_2D followed by TANH, which tinyaot does not read."""
    n = _Net(2)
    x = n.act("input", (1, 4, 4, 2), 0.05, 0)
    c = n.conv(x, 4, (3, 3), name="conv")
    y = n.act("tanh_out", (1, 4, 4, 4), 1.0 / 128, 0)
    n.b.op(Op.TANH, [c], [y])
    return n.b.build([x], [y])


def float_model() -> bytes:
    """A float32 FULLY_CONNECTED: not a full-integer model."""
    b = TFLiteBuilder()
    x = b.tensor("x", (1, 4), dtype=TensorType.FLOAT32)
    w = b.tensor("w", (2, 4), data=np.ones((2, 4), np.float32), dtype=TensorType.FLOAT32)
    y = b.tensor("y", (1, 2), dtype=TensorType.FLOAT32)
    b.op(Op.FULLY_CONNECTED, [x, w, -1], [y], Opt.FullyConnectedOptions, ("FullyConnectedOptions", {}))
    return b.build([x], [y])


def relu6_on_a_tie(seed: int = 3) -> bytes:
    """A CONV_2D with RELU6 whose output scale is float32(2.4): 6 / scale in float32 is exactly 2.5, so TFLite's
    clamp is round-half-away(2.5) = 3 where a float64, half-to-even rounding gives 2. Large biases push outputs
    past it."""
    n = _Net(seed)
    x = n.act("input", (1, 5, 5, 2), 0.05, 0)
    wq, ws = n.weights("conv/w", (4, 3, 3, 2), 0)
    wt = n.b.tensor("conv/w", wq.shape, ws, 0, wq)
    acc_scale = (np.float32(0.05) * ws).astype(np.float32)
    bias = np.round(np.array([1.0, 7.0, 8.0, -3.0]) / acc_scale).astype(np.int32)  # real biases of 1, 7, 8, -3
    bt = n.b.tensor("conv/b", (4,), acc_scale, 0, bias, dtype=TensorType.INT32)
    y = n.act("conv/out", (1, 5, 5, 4), 2.4, 0)
    n.b.op(Op.CONV_2D, [x, wt, bt], [y], Opt.Conv2DOptions,
           ("Conv2DOptions", dict(Padding=Padding.SAME, StrideH=1, StrideW=1, FusedActivationFunction=Act.RELU6,
                                  DilationHFactor=1, DilationWFactor=1)))
    return n.b.build([x], [y])
