"""Shared pieces of op files: quantized-weight replacement, conv/pool geometry, oracle wrapping in NHWC, float
evaluation helpers."""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from tinyaot.core.errors import TinyaotError
from tinyaot.core.fixedpoint import requantize_to_int8
from tinyaot.core.quant import activation_clamp, activation_qparams
from tinyaot.ir import Graph, Node, QuantParams, Tensor


def set_const(graph: Graph, base: str, data: np.ndarray, dtype: str, quant: QuantParams | None = None) -> str:
    name = graph.fresh_name(base)
    graph.tensors[name] = Tensor(name, tuple(data.shape), dtype, data, quant)
    return name


def output_qparams(graph: Graph, name: str, ranges: dict[str, tuple[float, float]]) -> QuantParams:
    given = graph.tensors[name].quant
    if given is not None:  # the pre-quantized model's own QuantizeLinear parameters for this tensor
        return given
    if graph.meta.get("prequantized"):
        raise TinyaotError(f"tensor {name!r} has no QuantizeLinear/DequantizeLinear pair in the pre-quantized "
                           "model; tinyaot needs the int8 parameters of every activation (partly float QDQ "
                           "models are not supported)")
    if name not in ranges:
        raise TinyaotError(f"calibration produced no range for tensor {name!r}")
    return activation_qparams(*ranges[name])


def record_raised(graph, node, raised: np.ndarray) -> None:
    """Keep which channels of `node` had their weight scale raised (graph.meta, for reports and ci figures)."""
    if np.size(raised):
        graph.meta.setdefault("raised_weight_scales", {})[node.name] = [int(c) for c in raised]


def dequantized_const(name: str, q: np.ndarray, qp: QuantParams) -> tuple[list, list, str]:
    """A constant stored as integers and dequantized in the graph, exactly as a QDQ model stores weights."""
    qt = numpy_helper.from_array(q, name + "_q")
    scale = numpy_helper.from_array(np.asarray(qp.scale, np.float32), name + "_scale")
    zero = numpy_helper.from_array(np.asarray(qp.zero_point, q.dtype), name + "_zp")
    attrs = {"axis": qp.axis} if qp.axis is not None else {}
    node = helper.make_node("DequantizeLinear", [qt.name, scale.name, zero.name], [name + "_f"], **attrs)
    return [node], [qt, scale, zero], name + "_f"


def out_params(node: Node, graph: Graph, ranges) -> tuple[QuantParams, int, int]:
    """Calibrated output parameters of the node and the int8 clamp of its fused activation."""
    out = graph.tensors[node.outputs[0]]
    out.quant = output_qparams(graph, out.name, ranges)
    return (out.quant, *fused_clamp(node, out.quant))


def fused_clamp(node: Node, qp: QuantParams) -> tuple[int, int]:
    """The int8 clamp of the node's fused activation under output parameters `qp`. A TFLite model's layer carries
    the clamp its interpreter computes (`act_range`, frontend/tflite_import.py: TFLite's own rounding of the
    bounds); anything else is clamped at its real bounds `activation` (core/quant.activation_clamp)."""
    given = node.attrs.get("act_range")
    if given is not None:
        return int(given[0]), int(given[1])
    return activation_clamp(qp, node.attrs.get("activation"))


def spatial_out(in_hw, kernel_hw, stride_hw, pads, dilation_hw=(1, 1), ceil_mode=False) -> tuple[int, int]:
    """Output H, W with pads [top, left, bottom, right] (ONNX begin/end order). With ceil_mode a last window
    that would start in the end padding is dropped, as onnxruntime and PyTorch do."""
    out = []
    for a in range(2):
        span = in_hw[a] + pads[a] + pads[a + 2] - dilation_hw[a] * (kernel_hw[a] - 1) - 1
        o = (-(-span // stride_hw[a]) if ceil_mode else span // stride_hw[a]) + 1
        if ceil_mode and (o - 1) * stride_hw[a] >= in_hw[a] + pads[a]:
            o -= 1
        out.append(int(o))
    return out[0], out[1]


def nhwc_oracle(graph: Graph, node: Node, core) -> tuple[list, list, str]:
    """Wrap float NCHW ONNX nodes built by `core(x_nchw_names) -> (nodes, inits, out)` with NHWC<->NCHW
    transposes, so the layer can be fed the IR's physical (NHWC) tensors."""
    nodes, ins = [], []
    for i in [x for x in node.inputs if x and not graph.tensors[x].is_const]:
        if len(graph.tensors[i].shape) == 4:
            nodes.append(helper.make_node("Transpose", [i], [i + "_nchw"], perm=[0, 3, 1, 2]))
            ins.append(i + "_nchw")
        else:
            ins.append(i)
    core_nodes, inits, out = core(ins)
    nodes += core_nodes
    if len(graph.tensors[node.outputs[0]].shape) == 4:
        nodes.append(helper.make_node("Transpose", [out], [out + "_nhwc"], perm=[0, 2, 3, 1]))
        out = out + "_nhwc"
    return nodes, inits, out


def activation_nodes(node: Node, x: str) -> tuple[list, list, str]:
    """Float Relu/Clip for a fused activation, so the oracle clamps where tinyaot does."""
    act = node.attrs.get("activation")
    if act is None:
        return [], [], x
    lo, hi = act
    inits = [numpy_helper.from_array(np.asarray(lo if np.isfinite(lo) else -3.4e38, np.float32), x + "_lo"),
             numpy_helper.from_array(np.asarray(hi if np.isfinite(hi) else 3.4e38, np.float32), x + "_hi")]
    return [helper.make_node("Clip", [x, x + "_lo", x + "_hi"], [x + "_act"])], inits, x + "_act"


def fold_input_offset(bias: np.ndarray | None, weights: np.ndarray, input_offset: int) -> np.ndarray:
    """bias'[o] = bias[o] + input_offset * sum(w[o]) as int32, weights with output channels on axis 0 (any shape
    after it). A kernel given bias' multiplies raw int8 activations by the weights:
    bias[o] + sum (x + input_offset) * w = bias'[o] + sum x * w; a padded tap must then hold the input zero point
    (-input_offset), which takes back its share of the folded term. |bias'| <= |bias| + 128 * sum|w[o]|, within the
    accumulator bound |bias| + sum|w| * (128 + |input_offset|) that compress/bounds.py checks against int32; it is
    checked here again so that a layer past it fails by name instead of wrapping."""
    w = np.asarray(weights).astype(np.int64)
    w = w.reshape(w.shape[0], -1)
    b = np.zeros(w.shape[0], np.int64) if bias is None else np.asarray(bias, np.int64).reshape(-1)
    folded = b + int(input_offset) * w.sum(axis=1)
    if folded.size and (folded.min() < -2**31 or folded.max() > 2**31 - 1):
        raise TinyaotError(f"folding the input offset {input_offset} into the bias leaves int32 "
                           f"(range {int(folded.min())}..{int(folded.max())})")
    return folded.astype(np.int32)


def fold_requant_table(bias, weights, input_offset: int, mult, shift, output_offset: int):
    """The constants of the fold kernels (templates/kernels/tinyaot_fold_support.h): (bias', mr, e), or None when a
    channel falls outside the bounds that make the kernels' short requantization exact.

    bias' is the folded bias (fold_input_offset); mr the pairs {mult, radd} with radd = 2^(e-1) + output_offset * 2^e
    and e = -shift, as int32; e packed four per int32 word (channel o in bits 8 * (o % 4) of word o // 4). Exact
    when per channel e >= 1 (a right shift), B = |bias| + sum|w| * (128 + |input_offset|) < 2^30 and
    B + 2^(e-1) + 128 * 2^e < 2^31. A channel whose weights are all zero (per-channel quantization of a dead filter: its
    bias is often near 2^31 and its shift anything), or whose B is below 2^(e-1) (the rounding division then gives 0 for
    every input), has a constant output v = requant(bias) + output_offset: it gets bias' 0, mult 0, e 1 and radd 2v (the
    kernel computes (0 + 2v + 0) >> 1 = v, then the same clamp). mult/shift per channel, or per tensor (length 1: one
    pair, the bound checked against the largest B, no constant channels)."""
    w = np.asarray(weights).astype(np.int64)
    w = np.abs(w.reshape(w.shape[0], -1))
    folded = fold_input_offset(bias, weights, input_offset).astype(np.int64)
    b = np.zeros(w.shape[0], np.int64) if bias is None else np.asarray(bias, np.int64).reshape(-1)
    m = np.asarray(mult, np.int64).reshape(-1).copy()
    e = -np.asarray(shift, np.int64).reshape(-1)
    if m.size != e.size or m.size not in (1, w.shape[0]):
        return None
    bound = np.abs(b) + w.sum(axis=1) * (128 + abs(int(input_offset)))
    # constant channels: no weights, or every reachable |acc| <= B below 2^(e-1), where SRDHM (|h| <= |acc|) and the
    # rounding division give 0 whatever the input
    dead = np.zeros(1, bool)
    if m.size == w.shape[0]:
        dead = (w.sum(axis=1) == 0) | ((e >= 1) & (e <= 62) & (bound < (np.int64(1) << np.clip(e - 1, 0, 61))))
    if dead.any():
        const = requantize_to_int8(b[dead], m[dead], -e[dead], int(output_offset), -128, 127).astype(np.int64)
        folded[dead], m[dead], e[dead] = 0, 0, 1
    bound = np.where(dead, 0, bound) if m.size == w.shape[0] else bound.max(initial=0).reshape(1)
    if e.min() < 1 or e.max() > 30 or bound.max(initial=0) >= 2**30 or np.any(
            bound + (1 << (e - 1)) + 128 * (1 << e) >= 2**31):
        return None
    radd = (np.int64(1) << (e - 1)) + int(output_offset) * (np.int64(1) << e)
    if m.size == w.shape[0] and dead.any():
        radd[dead] = 2 * const
    packed = np.zeros(-(-e.size // 4) * 4, np.int64)  # e <= 30: four per int32 word, channel o in byte o % 4
    packed[:e.size] = e
    packed = (packed.reshape(-1, 4) << np.array([0, 8, 16, 24])).sum(axis=1)
    return (folded.astype(np.int32), np.stack([m, radd], axis=1).reshape(-1).astype(np.int32),
            packed.astype(np.int32))


__all__ = ["set_const", "output_qparams", "record_raised", "out_params", "fused_clamp", "spatial_out", "nhwc_oracle",
           "activation_nodes", "dequantized_const", "oracle_operands", "fold_input_offset",
           "fold_requant_table", "im2col_patches", "FLOAT_CHUNK", "fused_activation", "float_const", "float_bias",
           "new_int64_const", "new_float32_const", "lift_window_1d", "NHWC", "identity_perm"]


def oracle_operands(graph: Graph, node: Node, prefix: str) -> tuple[list, list, list[str]]:
    """The float operands of a layer's onnxruntime equivalent: activations by name, constant operands stored as
    their int8 values and dequantized in the graph (as a QDQ model stores them). Returns (nodes, inits, names)."""
    nodes, inits, names = [], [], []
    for k, name in enumerate(node.inputs):
        t = graph.tensors[name]
        if t.is_const:
            n, i, f = dequantized_const(f"{node.name}_{prefix}{k}", t.data, t.quant)
            nodes, inits, names = nodes + n, inits + i, names + [f]
        else:
            names.append(name)
    return nodes, inits, names


def _window_index(in_hw, kernel_hw, stride_hw, pad_top_left, dilation_hw, output_hw):
    """(rows [OH, KH] and columns [OW, KW] each window reads in the padded input, (top, bottom, left, right)
    padding that input needs)."""
    h, w = in_hw
    kh, kw = kernel_hw
    sh, sw = stride_hw
    pt, pl = pad_top_left
    dh, dw = dilation_hw
    oh, ow = output_hw
    # rows/cols the windows reach, relative to the unpadded input
    iy = np.arange(oh)[:, None] * sh + np.arange(kh)[None, :] * dh - pt  # [OH, KH]
    ix = np.arange(ow)[:, None] * sw + np.arange(kw)[None, :] * dw - pl  # [OW, KW]
    lo_y = max(0, -int(iy.min()))
    lo_x = max(0, -int(ix.min()))
    hi_y = max(0, int(iy.max()) - (h - 1))
    hi_x = max(0, int(ix.max()) - (w - 1))
    return iy + lo_y, ix + lo_x, (lo_y, hi_y, lo_x, hi_x)


def im2col_patches(xo: np.ndarray, kernel_hw, stride_hw, pad_top_left, dilation_hw, output_hw) -> np.ndarray:
    """Gather im2col patches [N, OH, OW, KH, KW, C] from an offset-applied int64 NHWC tensor, padded with 0."""
    iy, ix, (lo_y, hi_y, lo_x, hi_x) = _window_index(xo.shape[1:3], kernel_hw, stride_hw, pad_top_left,
                                                     dilation_hw, output_hw)
    padded = np.pad(xo, ((0, 0), (lo_y, hi_y), (lo_x, hi_x), (0, 0)))
    return padded[:, iy[:, None, :, None], ix[None, :, None, :], :]  # [N, OH, OW, KH, KW, C]


def tap_slices(in_hw, kernel_hw, stride_hw, pad_top_left, dilation_hw, output_hw):
    """((top, bottom, left, right) padding, [(i, j, rows, columns)]): for each kernel tap (i, j) the slices of the
    padded input that tap reads across all windows (a strided view: the windows step by the stride)."""
    iy, ix, pads = _window_index(in_hw, kernel_hw, stride_hw, pad_top_left, dilation_hw, output_hw)
    sh, sw = stride_hw
    taps = [(i, j, slice(int(iy[0, i]), int(iy[-1, i]) + 1, sh), slice(int(ix[0, j]), int(ix[-1, j]) + 1, sw))
            for i in range(kernel_hw[0]) for j in range(kernel_hw[1])]
    return pads, taps


def window_taps(x: np.ndarray, kernel_hw, stride_hw, pad_top_left, dilation_hw, output_hw):
    """(i, j, the input values kernel tap (i, j) of every window reads [N, OH, OW, C], a view) for each tap: the
    im2col patches one tap at a time, without their KH x KW copy (depthwise layers)."""
    (lo_y, hi_y, lo_x, hi_x), taps = tap_slices(x.shape[1:3], kernel_hw, stride_hw, pad_top_left, dilation_hw,
                                                output_hw)
    padded = np.pad(x, ((0, 0), (lo_y, hi_y), (lo_x, hi_x), (0, 0)))
    for i, j, sy, sx in taps:
        yield i, j, padded[:, sy, sx]


def col2im_patches(gp: np.ndarray, in_hw, kernel_hw, stride_hw, pad_top_left, dilation_hw) -> np.ndarray:
    """The adjoint of im2col_patches (a backward pass's input gradient): patch values [N, OH, OW, KH, KW, C]
    scatter-added back onto the unpadded input [N, H, W, C]; what fell on the padding is dropped."""
    n, oh, ow, _, _, c = gp.shape
    return tap_scatter(n, in_hw, c, kernel_hw, stride_hw, pad_top_left, dilation_hw, (oh, ow),
                       lambda i, j: gp[:, :, :, i, j, :])


def tap_scatter(n: int, in_hw, c: int, kernel_hw, stride_hw, pad_top_left, dilation_hw, output_hw,
                part) -> np.ndarray:
    """col2im_patches with the patch values given per tap, part(i, j) -> [N, OH, OW, C] (a depthwise layer's
    input gradient needs no patches). One tap at a time: within a tap the windows read distinct positions (the
    stride is at least 1), so an add through the tap's strided view cannot lose a collision."""
    (lo_y, hi_y, lo_x, hi_x), taps = tap_slices(in_hw, kernel_hw, stride_hw, pad_top_left, dilation_hw, output_hw)
    h, w = in_hw
    padded = None
    for i, j, sy, sx in taps:
        p = part(i, j)
        if padded is None:
            padded = np.zeros((n, h + lo_y + hi_y, w + lo_x + hi_x, c), p.dtype)
        padded[:, sy, sx] += p
    return padded[:, lo_y:lo_y + h, lo_x:lo_x + w]


# ---- layout (OpSpec.layout, passes/to_nhwc.py) ---------------------------------------------------------------
NHWC = (0, 2, 3, 1)  # the physical permutation of an NCHW image


def batch_reshape(x: np.ndarray, shape) -> np.ndarray:
    """`x` reshaped to the graph's `shape`, or, when `x` holds a batch of several samples stacked along axis 0
    (OpSpec.batches_reference), to each sample's shape stacked the same way."""
    x = np.asarray(x)
    shape = tuple(shape)
    if not shape or x.size == int(np.prod(shape)):
        return x.reshape(shape)
    return x.reshape((-1, *shape[1:]))


def identity_perm(rank: int) -> tuple[int, ...]:
    return tuple(range(rank))


# ---- 1-D layers run as 2-D ones (OpSpec.lift_1d, passes/lower_1d.py) -----------------------------------------
def new_int64_const(graph: Graph, name: str, values) -> str:
    """A fresh int64 constant tensor named after `name`; returns its name."""
    name = graph.fresh_name(name)
    arr = np.asarray(values, np.int64)
    graph.tensors[name] = Tensor(name, tuple(arr.shape), "int64", arr)
    return name


def new_float32_const(graph: Graph, name: str, values) -> str:
    """A fresh float32 constant tensor named after `name`; returns its name."""
    name = graph.fresh_name(name)
    arr = np.asarray(values, np.float32)
    graph.tensors[name] = Tensor(name, tuple(arr.shape), "float32", arr)
    return name


def lift_window_1d(node: Node, graph: Graph, weighted: bool) -> None:
    """A 1-D window (conv, transposed conv, pooling) as a 1 x k 2-D one: pads [b, e] become [0, b, 0, e],
    strides/dilations gain a leading 1, a weight [O, I/g, k] becomes [O, I/g, 1, k] (the same bytes)."""
    a = node.attrs
    where = f"{node.op} node {node.name!r}"
    if weighted:
        w = graph.tensors[node.inputs[1]]
        if not w.is_const:
            raise TinyaotError(f"{where}: the weight must be a constant")
        new = graph.add_const(node.inputs[1] + "_2d", w.data.reshape(w.data.shape[:2] + (1,) + w.data.shape[2:]))
        graph.tensors[new].quant = w.quant  # per output channel (axis 0 or 1): unchanged by the new axis
        node.inputs[1] = new
        a.setdefault("kernel_shape", [int(w.data.shape[2])])
    if len(a.get("kernel_shape", [])) != 1:
        raise TinyaotError(f"{where}: kernel_shape {a.get('kernel_shape')} for a 1-D input")
    a["kernel_shape"] = [1, int(a["kernel_shape"][0])]
    for key in ("strides", "dilations"):
        if key in a:
            a[key] = [1, int(a[key][0])]
    if "pads" in a:
        b, e = (int(v) for v in a["pads"])
        a["pads"] = [0, b, 0, e]
    if "output_padding" in a:
        a["output_padding"] = [0, int(a["output_padding"][0])]
    if "output_shape" in a:
        a["output_shape"] = [1, int(a["output_shape"][-1])]


# ---- float evaluation (OpSpec.evaluate_float, pre_activation) ------------------------------------------------
FLOAT_CHUNK = 16  # samples per block when a layer is evaluated in float (bounds the im2col memory)


def fused_activation(node: Node, y: np.ndarray) -> np.ndarray:
    """`y` through the node's fused activation clamp (attrs["activation"]: (lo, hi) in real units), if it has one."""
    lo, hi = node.attrs.get("activation") or (-np.inf, np.inf)
    return np.clip(y, lo, hi)


def activation_grad(node: Node, y: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """The gradient before the node's fused activation clamp from the one after it: it passes where the clamped
    output `y` lies strictly inside the clamp's range (a subgradient of 0 at the edges)."""
    act = node.attrs.get("activation")
    if not act:
        return grad
    lo, hi = act
    return np.where((y > lo) & (y < hi), grad, 0.0)


def unbroadcast(grad: np.ndarray, shape) -> np.ndarray:
    """`grad` of a broadcast result summed back to an operand of `shape` (numpy broadcasting rules)."""
    while grad.ndim > len(shape):
        grad = grad.sum(axis=0)
    axes = tuple(k for k, (g, s) in enumerate(zip(grad.shape, shape)) if s == 1 and g != 1)
    return grad.sum(axis=axes, keepdims=True) if axes else grad


def float_const(graph: Graph, node: Node, k: int, like: np.ndarray | None = None) -> np.ndarray | None:
    """Constant input k of `node` in float64 (float32 when the activations `like` are float32: distillation trains
    in float32, compress/distill.py), None when the node has no input k."""
    name = node.inputs[k] if len(node.inputs) > k else ""
    dtype = np.float32 if like is not None and like.dtype == np.float32 else np.float64
    return np.asarray(graph.tensors[name].data, dtype) if name else None


def float_bias(graph: Graph, node: Node, channels: int) -> np.ndarray:
    """A weighted layer's bias (input 2) as a flat float64 array, zeros when it has none."""
    if len(node.inputs) > 2 and node.inputs[2]:
        return np.asarray(graph.tensors[node.inputs[2]].data, np.float64).reshape(-1)
    return np.zeros(channels)
