"""Compile-time bounds on the int32 intermediates of every kernel, for any int8 input.

The C kernels (templates/kernels/) accumulate in int32, where an overflow is undefined behaviour, while the numpy
references compute in int64. They agree for every input only if no int32 intermediate of the C can leave
[-2**31, 2**31 - 1]. `check_graph` proves that for a quantized graph from its integer parameters alone: for each
node it bounds every intermediate the node's kernel computes (below, per op) and stops compilation with a
TinyaotError naming the node, its op and the bound when one exceeds int32. No kernel here splits a reduction
(an int64 or chunked accumulator), so refusing is the answer to a layer too wide for int32; quantization
(compress/quantize.py, `fit_channel_scales`) raises a channel's weight scale when its bias alone would push it
past the limit, so a bias never forces a refusal.

It runs at the end of `quantize_graph` and again at the end of compression's `storage_step`, which changes weights
(clustering, refitting) and biases (bias correction) after quantization; the last run's figures are kept in
`graph.meta["accumulator_bounds"]` (node name -> largest bound).

Notation: an int8 input x is in [-128, 127] and io = -zero_point is the kernel's input offset, so
|x + io| <= max(128 - io, 127 + io). Some kernels fold the offset out (io * sum(w) + sum(x * w): the compressed
depthwise kernel's long windows), whose partial sums are bounded by sum|w| * (128 + |io|); `input_magnitude`
is that, which also covers |x + io|, so one bound serves every form.

Bounds, per kernel family (every partial sum in any order is bounded by the same total, since each term is
added at most once):
- Conv, depthwise, grouped, ConvTranspose, FullyConnected, dense and compressed (the kernels decode the final
  int8 values in `Tensor.data`): per output channel c
      A_c = |bias_c| + (sum_i |w_c,i| + n * |fo|) * (128 + |io|)
  with n the row length and fo the fully connected filter offset (0 elsewhere; the kernel adds
  fo * sum(x + io) to the bias first, bounded by n * |fo| * (128 + |io|)). ConvTranspose gathers each tap at most
  once per output pixel, so the same row sum bounds it. The 4-bit fully connected kernel on DSP cores also sums
  16 * w * (x + io) in a lane accumulator without the bias: 16 * sum|w| * (128 + |io|).
- Requantization epilogue (tinyaot_requantize_s8, shared by every requantizing kernel): requantize(acc) is
  monotone in acc, so its magnitude is largest at acc = +-A; that plus |output_offset| must fit int32 (it only
  fails for absurd scale ratios, where a saturated left shift gives ~2**31).
- Average pooling: the window sum io * kh * kw + sum(x) is at most (128 + |io|) * kh * kw (plain average pooling
  sums x alone: 128 * kh * kw); ReduceMean is the same over the whole H x W plane.
- Add / Sub: each operand (x + io) << left_shift is at most 255 * 2**left_shift; each is rescaled by a multiplier
  <= 1/2 (twice the larger input scale), and the two terms' sum (or difference) must fit.
- Mul: (x1 + io1) * (x2 + io2), at most 255 * 255.
- Concat and PRelu: (x + io) << left_shift, then requantized (PRelu adds its offset itself).
- Softmax: the sum of exponentials in Q12.19, each term at most 2**19 (rounded from Q0.31), so row * 2**19.
Table lookups, clamps, max pooling, moves, padding and resizing compute no int32 values from the data.
"""
from __future__ import annotations

import numpy as np

from tinyaot.compress.storage import rows
from tinyaot.core.fixedpoint import multiply_by_quantized_multiplier
from tinyaot.core.quant import INT32_MAX, input_magnitude, refusal_message  # noqa: F401  (re-exported)
from tinyaot.errors import TinyaotError
from tinyaot.ops.registry import get_op

SOFTMAX_TERM_MAX = 1 << 19  # rdbpot(2**31 - 1, 12): the largest Q12.19 exponential


def offset_input_max(input_offset: int) -> int:
    """max |x + input_offset| over int8 x: the exact largest offset input (add, sub, mul, concat, prelu)."""
    io = int(input_offset)
    return max(abs(-128 + io), abs(127 + io))


def channel_bounds(rows: np.ndarray, bias, input_offset: int, filter_offset: int = 0) -> np.ndarray:
    """A_c = |bias_c| + (sum|w_c| + n * |fo|) * (128 + |io|) per output channel, as Python ints in an object array
    (exact beyond int64, though no real layer gets near). rows: [out_ch, n] integer weights."""
    r = np.asarray(rows, np.int64)
    n = r.shape[1] if r.ndim == 2 else 0
    wsum = np.abs(r).sum(axis=1) if r.size else np.zeros(r.shape[0], np.int64)
    b = np.zeros(r.shape[0], np.int64) if bias is None else np.asarray(bias, np.int64).reshape(-1)
    m = input_magnitude(input_offset)
    return np.array([abs(int(bc)) + (int(ws) + n * abs(int(filter_offset))) * m for bc, ws in zip(b, wsum)],
                    dtype=object)


def requantized_max(acc_bound: int, mult: int, shift: int) -> int:
    """max |requantize(acc)| over |acc| <= acc_bound (TFLite's MultiplyByQuantizedMultiplier as the C computes it:
    saturating left shift, rounding doubling high multiply, rounding right shift; monotone in acc)."""
    a = min(int(acc_bound), INT32_MAX)  # callers check acc_bound itself against int32 first
    v = multiply_by_quantized_multiplier(np.array([a, -a], np.int64), int(mult), int(shift))
    return int(np.abs(v).max())


def _weight_rows(node, graph) -> np.ndarray:
    w = np.asarray(graph.tensors[node.inputs[1]].data)
    return rows(w, bool(node.attrs.get("depthwise"))) if node.op == "Conv" else w.reshape(w.shape[0], -1)


def _per_channel(values, channels: int) -> list[int]:
    v = np.asarray(values, np.int64).reshape(-1)
    return [int(x) for x in (np.broadcast_to(v, (channels,)) if v.size == 1 else v)]


def _epilogue(items: list, acc_bounds, mults, shifts, offset: int) -> None:
    """The requantization epilogue of each channel: |requantize(acc)| + |output_offset|."""
    n = len(acc_bounds)
    for c, a, m, s in zip(range(n), acc_bounds, _per_channel(mults, n), _per_channel(shifts, n)):
        if a <= INT32_MAX:
            items.append((f"requantized output of channel {c} plus the output offset",
                          requantized_max(a, m, s) + abs(int(offset))))


def _layer(node, graph) -> list[tuple[str, int]]:
    a = node.attrs
    rows = _weight_rows(node, graph)
    bias = graph.tensors[node.inputs[2]].data if len(node.inputs) > 2 and node.inputs[2] else None
    io, fo = int(a["input_offset"]), int(a.get("filter_offset", 0))
    bounds = channel_bounds(rows, bias, io, fo)
    m = input_magnitude(io)
    items = []
    for c, bound in enumerate(bounds):
        b = 0 if bias is None else abs(int(np.asarray(bias).reshape(-1)[c]))
        items.append((f"accumulator of output channel {c} (|bias| {b:,} + (sum|w| "
                      f"{int(np.abs(rows[c].astype(np.int64)).sum()):,}"
                      + (f" + {rows.shape[1]} x |filter offset| {abs(fo)}" if fo else "")
                      + f") x max|x - zp| {m})", int(bound)))
    st = graph.tensors[node.inputs[1]].storage
    if node.op == "FullyConnected" and st is not None and st.kind == "int4" and rows.shape[1] < 65000:
        # the DSP path of tinyaot_fully_connected_s4 (taken only for depth < 65000, where 16 * 8 * 256 * depth
        # < 2**31 anyway) sums 16 * w * (x + io) before adding it to the accumulator
        lanes = 16 * int(np.abs(rows.astype(np.int64)).sum(axis=1).max(initial=0)) * m
        items.append(("4-bit lane sum 16 x sum|w| x max|x - zp|", lanes))
    _epilogue(items, [int(b) for b in bounds], a["output_mult"], a["output_shift"], a["output_offset"])
    return items


def _pool(node, graph) -> list[tuple[str, int]]:
    a = node.attrs
    if node.op == "MaxPool":
        return []
    k, _, _ = get_op(node.op)._geometry(node, graph)
    taps = int(k[0]) * int(k[1])
    if a.get("requantize") or get_op(node.op)._counts_pad(node, graph):
        # the offset is added once per tap (avgpool_requant: per window, io * kh * kw; count_pad likewise)
        io = int(a.get("input_offset", -graph.tensors[node.inputs[0]].quant.zp))
        s = input_magnitude(io) * taps
    else:
        s = 128 * taps  # plain average pooling sums the int8 values themselves
    items = [(f"window sum of {taps} taps", s)]
    if a.get("requantize"):
        _epilogue(items, [s], a["output_mult"], a["output_shift"], a["output_offset"])
    return items


def _reduce_mean(node, graph) -> list[tuple[str, int]]:
    a = node.attrs
    _, h, w, _ = graph.tensors[node.inputs[0]].shape
    s = input_magnitude(a["input_offset"]) * int(h) * int(w)
    items = [(f"sum over {h} x {w} values", s)]
    _epilogue(items, [s], a["output_mult"], a["output_shift"], a["output_offset"])
    return items


def _binary(node, graph) -> list[tuple[str, int]]:
    a = node.attrs
    x1, x2 = offset_input_max(a["input1_offset"]), offset_input_max(a["input2_offset"])
    if node.op == "Mul":
        prod = x1 * x2
        items = [("product (x1 - zp1) * (x2 - zp2)", prod)]
        _epilogue(items, [prod], a["output_mult"], a["output_shift"], a["output_offset"])
        return items
    ls = int(a["left_shift"])
    v1, v2 = x1 << ls, x2 << ls
    items = [(f"input 1 shifted left by {ls}", v1), (f"input 2 shifted left by {ls}", v2)]
    if max(v1, v2) > INT32_MAX:
        return items
    t = requantized_max(v1, a["input1_mult"], a["input1_shift"]) + requantized_max(v2, a["input2_mult"],
                                                                                    a["input2_shift"])
    items.append(("sum of the two rescaled inputs", t))
    if t <= INT32_MAX:
        _epilogue(items, [t], a["output_mult"], a["output_shift"], a["output_offset"])
    return items


def _concat(node, graph) -> list[tuple[str, int]]:
    items = []
    for k, p in enumerate(node.attrs["parts"]):
        if not p["requantize"]:
            continue
        v = offset_input_max(p["input_offset"]) << int(p["left_shift"])
        items.append((f"input {k} shifted left by {p['left_shift']}", v))
        if v <= INT32_MAX:
            _epilogue(items, [v], p["mult"], p["shift"], node.attrs["output_offset"])
    return items


def _prelu(node, graph) -> list[tuple[str, int]]:
    a = node.attrs
    v = offset_input_max(a["input_offset"]) << int(a["left_shift"])
    items = [(f"input shifted left by {a['left_shift']}", v)]
    if v <= INT32_MAX:
        mults = [int(a["pos_mult"])] + [abs(int(m)) for m in np.asarray(a["neg_mult"]).reshape(-1)]
        shifts = [int(a["pos_shift"])] + [int(s) for s in np.asarray(a["neg_shift"]).reshape(-1)]
        worst = max(requantized_max(v, m, s) for m, s in zip(mults, shifts))
        items.append(("rescaled input plus the output offset", worst + abs(int(a["output_offset"]))))
    return items


def _softmax(node, graph) -> list[tuple[str, int]]:
    x = graph.tensors[node.inputs[0]].shape
    axis = int(node.attrs.get("axis", -1)) % len(x)
    row = int(np.prod(x[axis:]))
    return [(f"sum of {row} exponentials in Q12.19", row * SOFTMAX_TERM_MAX)]


BOUNDS = {"Conv": _layer, "FullyConnected": _layer, "ConvTranspose": _layer, "AveragePool": _pool,
          "GlobalAveragePool": _pool, "MaxPool": _pool, "ReduceMean": _reduce_mean, "Add": _binary,
          "Sub": _binary, "Mul": _binary, "Concat": _concat, "PRelu": _prelu, "Softmax": _softmax}


def node_bounds(node, graph) -> list[tuple[str, int]]:
    """(what, bound) for every int32 intermediate the node's kernel computes; [] for ops that compute none."""
    fn = BOUNDS.get(node.op)
    if fn is None:  # an op that states its own bounds (the s16 ops: (what, bound[, limit]), ops/s16.py)
        fn = getattr(get_op(node.op), "int_bounds", None)
    return fn(node, graph) if fn is not None else []


def refusal(node, what: str, bound: int) -> TinyaotError:
    return TinyaotError(refusal_message(f"{node.op} node {node.name!r}", what, bound))


def check_graph(graph) -> dict[str, int]:
    """Bound every int32 intermediate of every node; raise TinyaotError at the first one past int32. Returns and
    stores graph.meta["accumulator_bounds"]: node name -> its largest bound (nodes with arithmetic only)."""
    found = {}
    for node in graph.nodes:
        items = node_bounds(node, graph)
        for what, bound, *limit in items:
            if limit and bound > limit[0]:  # a wider intermediate (the s16 kernels' int64 accumulator)
                raise TinyaotError(f"{node.op} node {node.name!r}: its {what} can reach {bound:,} for some input, "
                                   f"past the {limit[0]:,} its kernel computes exactly; the layer is refused")
            if not limit and bound > INT32_MAX:
                raise refusal(node, what, bound)
        if items:
            found[node.name] = max(b for _, b, *_ in items)
    graph.meta["accumulator_bounds"] = found
    return found


__all__ = ["INT32_MAX", "input_magnitude", "offset_input_max", "channel_bounds", "requantized_max",
           "node_bounds", "check_graph", "refusal", "refusal_message"]
