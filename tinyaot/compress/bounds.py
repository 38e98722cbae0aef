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

Bounds, per kernel family (each op file's `int_bounds` computes its own, with the helpers of ops/intbounds.py;
every partial sum in any order is bounded by the same total, since each term is added at most once):
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

from tinyaot.core.quant import INT32_MAX, input_magnitude, refusal_message  # noqa: F401  (re-exported)
from tinyaot.errors import TinyaotError
from tinyaot.ops.intbounds import (SOFTMAX_TERM_MAX, channel_bounds, offset_input_max,  # noqa: F401  (re-exported)
                                   requantized_max)
from tinyaot.ops.registry import get_op


def node_bounds(node, graph) -> list[tuple[str, int]]:
    """(what, bound) for every int32 intermediate the node's kernel computes (its op's int_bounds: (what, bound,
    limit) for a wider intermediate, the s16 ops' int64 accumulator); [] for ops that compute none."""
    return get_op(node.op).int_bounds(node, graph)


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
