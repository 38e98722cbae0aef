"""Cross-layer equalization (CLE) with high-bias absorption, on the float graph after the passes, and bias
correction of every quantized layer (Nagel et al. 2019, "Data-free quantization through weight equalization and
bias correction"; written for tinyaot's IR, not taken from any implementation).

CLE. Two weighted layers joined by a tensor T that only the second reads, with no activation or a plain ReLU
(lo 0, hi inf) fused into the first: ReLU(z / s) = ReLU(z) / s for s > 0, so dividing output channel k of the
first layer (weights and bias) by s_k and multiplying input channel k of the second by s_k leaves the float
function unchanged. s_k = sqrt(r1_k / r2_k) (r1_k: max |w| of the first layer's channel k, r2_k: of the second
layer's input channel k) makes both ranges sqrt(r1_k r2_k): per-tensor-friendly weights for depthwise layers
whose channels differ by orders of magnitude. Pairs: Conv (groups 1) or depthwise (multiplier 1) or
FullyConnected, into Conv (groups 1) / depthwise (multiplier 1) / FullyConnected, T of the same channel count.
ReLU6 (and any other finite clamp) is not equalized: clip(z, 0, 6) / s is clip(z / s, 0, 6 / s), a per-channel
clamp no int8 kernel has, so the function would change. The sweep over all pairs repeats SWEEPS times, since a
layer in a chain (dw -> pw -> dw) is rescaled from both sides.

T's values change by the exact per-channel factor 1/S_k, so calibration does not run the equalized graph: it
runs the original ONNX model and divides T's channels (ONNX axis 1) by S (compress/calibrate.collect_ranges
`transforms`).

High-bias absorption. Where the first layer has a ReLU and, over every calibration sample, channel k of T never
goes below c_k > 0, then ReLU(z - c_k) = ReLU(z) - c_k on all that data: c_k leaves the first layer's bias, and
the second layer's bias gains W2[:, k] . c_k (summed over its taps). Only when the second layer has no zero
padding (padding would feed it 0 where the absorbed term assumes c_k). T's range then shrinks to what varies.
"""
from __future__ import annotations

import numpy as np

from tinyaot.compress.bounds import check_graph
from tinyaot.compress.calibrate import channel_extremes
from tinyaot.compress.hessian import SampleRunner, layer_statistics
from tinyaot.compress.pipeline import apply_bias_shift, correct_bias, correction_shift
from tinyaot.compress.storage import rows
from tinyaot.core.quant16 import ACC64_LIMIT
from tinyaot.ir import Graph, Node
from tinyaot.ops.registry import get_op, traits_of

SWEEPS = 4
S_MIN, S_MAX = 1e-4, 1e4  # bounds of a channel's overall factor
DEAD_W = 1e-3  # a channel whose max |w| is below this fraction of its layer's widest is not equalized


def _weights(graph: Graph, node: Node) -> np.ndarray | None:
    if not traits_of(node.op).weighted_layer or len(node.inputs) < 2 or not node.inputs[1]:
        return None
    t = graph.tensors[node.inputs[1]]
    return None if not t.is_const or t.data is None else np.asarray(t.data, np.float64)


def _kind(graph: Graph, node: Node) -> str | None:
    """'fc', 'conv' (groups 1) or 'dw' (multiplier 1), or None when CLE does not handle the layer."""
    w = _weights(graph, node)
    if w is None:
        return None
    kind = get_op(node.op).compression_kind(node)  # as compression specs name it
    if kind == "fully_connected":
        return kind if w.ndim == 2 else None
    cin = graph.tensors[node.inputs[0]].shape[-1]
    if node.attrs.get("depthwise"):
        return kind if w.shape[-1] == cin else None  # 1HWC, multiplier 1
    return "conv" if w.ndim == 4 and w.shape[3] == cin else None  # OHWI, groups 1


def _out_range(w: np.ndarray, kind: str) -> np.ndarray:
    return np.abs(w).reshape(-1, w.shape[-1]).max(axis=0) if kind == "depthwise" else \
        np.abs(w).reshape(w.shape[0], -1).max(axis=1)


def _in_range(w: np.ndarray, kind: str) -> np.ndarray:
    if kind == "fully_connected":
        return np.abs(w).max(axis=0)
    return np.abs(w).reshape(-1, w.shape[-1]).max(axis=0)  # conv OHWI and dw 1HWC: input channel last


def _relu_or_identity(node: Node) -> bool:
    act = node.attrs.get("activation")
    if act is None:
        return True
    lo, hi = act
    return lo == 0.0 and not np.isfinite(hi)


def equalizable_pairs(graph: Graph) -> list[tuple[Node, Node, str, str]]:
    """(first, second, kind1, kind2) for every pair CLE handles, in schedule order."""
    consumers: dict[str, list[Node]] = {}
    for n in graph.nodes:
        for i in n.inputs:
            if i:
                consumers.setdefault(i, []).append(n)
    weight_users = {}
    for n in graph.nodes:
        for i in n.inputs[1:]:
            if i:
                weight_users[i] = weight_users.get(i, 0) + 1
    pairs = []
    for a in graph.nodes:
        k1 = _kind(graph, a)
        if k1 is None or not _relu_or_identity(a) or len(a.outputs) != 1:
            continue
        t = a.outputs[0]
        users = consumers.get(t, [])
        if t in graph.outputs or len(users) != 1:
            continue
        b = users[0]
        k2 = _kind(graph, b)
        if k2 is None or b.inputs[0] != t:
            continue
        if k1 == "fully_connected" and graph.tensors[t].shape[-1] != _weights(graph, a).shape[0]:
            continue
        if k2 == "fully_connected" and len(graph.tensors[t].shape) != 2:
            continue
        if any(weight_users.get(n.inputs[k], 0) != 1 for n in (a, b) for k in (1, 2) if len(n.inputs) > k and
               n.inputs[k]):
            continue  # a weight or bias shared with another node cannot be rescaled for one of them
        pairs.append((a, b, k1, k2))
    return pairs


def _scale_out(graph: Graph, node: Node, kind: str, s: np.ndarray) -> None:
    """Output channel k of `node` divided by s_k (weights and bias)."""
    w = _weights(graph, node)
    graph.tensors[node.inputs[1]].data = (w / (s if kind == "depthwise" else s.reshape(-1, *[1] * (w.ndim - 1)))
                                          ).astype(np.float32)
    if len(node.inputs) > 2 and node.inputs[2]:
        b = graph.tensors[node.inputs[2]]
        b.data = (np.asarray(b.data, np.float64) / s).astype(np.float32)


def _scale_in(graph: Graph, node: Node, s: np.ndarray) -> None:
    """Input channel k of `node` multiplied by s_k (its last weight axis for every kind)."""
    w = _weights(graph, node)
    graph.tensors[node.inputs[1]].data = (w * s).astype(np.float32)


def equalize(graph: Graph, known: set[str] | None = None, only: set[str] | None = None) -> dict[str, np.ndarray]:
    """Cross-layer equalization in place. Returns tensor -> the per-channel factor S its values were divided by.
    `known`: the tensors calibration can see (the ONNX model's); a pair joined by another tensor is left alone.
    `only`: when given, just the pairs joined by these tensors (auto CLE's choice, `spread_tensors`)."""
    pairs = [p for p in equalizable_pairs(graph) if (known is None or p[0].outputs[0] in known)
             and (only is None or p[0].outputs[0] in only)]
    total: dict[str, np.ndarray] = {}
    for _ in range(SWEEPS):
        for a, b, k1, k2 in pairs:
            r1 = _out_range(_weights(graph, a), k1)
            r2 = _in_range(_weights(graph, b), k2)
            if r1.shape != r2.shape:
                continue
            # A channel whose weights on either side are (nearly) zero is left alone: its values are its bias (or
            # nothing), which the weight ranges do not see, and s = sqrt(r1 / r2) would multiply that constant by
            # up to S_MAX per sweep (vww_mobilenetv1_025 had a channel grown 2e12-fold, which swamped the tensor's
            # int8 range). The factor is bounded over all sweeps, not per sweep.
            ok = (r1 > DEAD_W * r1.max()) & (r2 > DEAD_W * r2.max())
            s = np.ones_like(r1)
            s[ok] = np.sqrt(r1[ok] / r2[ok])
            t = a.outputs[0]
            prev = total.get(t, np.ones_like(s))
            s = np.clip(prev * s, S_MIN, S_MAX) / prev
            _scale_out(graph, a, k1, s)
            _scale_in(graph, b, s)
            total[t] = prev * s
    return total


def _no_padding(node: Node) -> bool:
    return not any(node.attrs.get("pads", (0, 0, 0, 0)))  # a fully connected layer has none


def absorption_candidates(graph: Graph) -> list[str]:
    """Tensors T of CLE pairs where high-bias absorption may apply (ReLU first layer, unpadded second layer)."""
    return [a.outputs[0] for a, b, _, _ in equalizable_pairs(graph)
            if a.attrs.get("activation") is not None and _no_padding(b)
            and len(a.inputs) > 2 and a.inputs[2]]


def absorb_high_bias(graph: Graph, channel_min: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Moves c_k = max(0, min over the calibration data of T's channel k, in the equalized graph's units) from the
    first layer's bias into the second's. `channel_min`: tensor -> per-channel minimum. Returns tensor -> c (the
    offset T's values are lowered by)."""
    done = {}
    pairs = {a.outputs[0]: (a, b, k2) for a, b, _, k2 in equalizable_pairs(graph)}
    for t in absorption_candidates(graph):
        if t not in channel_min:
            continue
        a, b, k2 = pairs[t]
        c = np.maximum(np.asarray(channel_min[t], np.float64), 0.0)
        if not c.any():
            continue
        ba = graph.tensors[a.inputs[2]]
        ba.data = (np.asarray(ba.data, np.float64) - c).astype(np.float32)
        w2 = _weights(graph, b)
        # every output of the second layer sums W2 over its taps and input channels: the absorbed constant input
        # c contributes sum_taps W2[o, ..., k] * c_k
        add = w2 @ c if k2 == "fully_connected" else (
            (w2.reshape(-1, w2.shape[-1]) * c).sum(axis=0) if k2 == "depthwise" else
            (w2.reshape(w2.shape[0], -1, w2.shape[-1]) * c).sum(axis=(1, 2)))
        if len(b.inputs) > 2 and b.inputs[2]:
            bb = graph.tensors[b.inputs[2]]
            bb.data = (np.asarray(bb.data, np.float64) + add).astype(np.float32)
        else:
            name = graph.add_const(b.name + "_absorbed_bias", add.astype(np.float32))
            while len(b.inputs) < 3:
                b.inputs.append("")
            b.inputs[2] = name
        done[t] = c
    return done


def channel_minimums(graph: Graph, model, samples: dict[str, np.ndarray], scales: dict[str, np.ndarray]
                     ) -> dict[str, np.ndarray]:
    """Per-channel minimum over the calibration samples of each absorption candidate, in the equalized graph's
    units (the ONNX tensor's channel axis 1 divided by CLE's factor)."""
    names = [t for t in absorption_candidates(graph) if t in scales]
    if not names:
        return {}
    return channel_extremes(model, samples, names, {t: (scales[t], None) for t in names})[0]


def correct_biases(graph: Graph, float_weights: dict[str, np.ndarray], inputs: list[np.ndarray]) -> list[str]:
    """Bias correction of every quantized layer with a bias (the quantized graph; no compression that fits the
    weights, which corrects its own layers, compress/pipeline.storage_step; --prune-channels fits none): layer by
    layer in schedule order, while the reference runs the quantized calibration samples, the mean shift its weight
    rounding puts on its accumulator, (W_float / s_w - W_int8) . E[x] over the integer inputs it really receives, is
    taken back in its bias (compress/pipeline.correct_bias, which compression's fitted layers use, for the int8
    layers' int32 biases; `_correct_bias16` for the 16-bit layers' int64 biases, compress/precision.py). The
    reference runs every node, the int8 <-> int16 conversions of a mixed graph included, so each layer sees the
    integers the deployed model gives it. Only biases change, so the numpy reference and the C stay bit-exact.
    Returns the corrected layers."""
    runner = SampleRunner(graph, inputs)
    info: dict = {}
    for node in list(graph.nodes):
        if (node.name in float_weights and len(node.inputs) > 2 and node.inputs[2]
                and graph.tensors[node.inputs[1]].quant is not None):
            s16 = graph.tensors[node.inputs[0]].quant.bits == 16  # a 16-bit layer (compress/precision.py)
            if s16:
                mean = _mean_patch16(node, graph, runner.inputs_of(node))
            else:  # the int8 layers keep the statistics compression's fitting uses (same figures as before)
                stats = layer_statistics(node, graph, runner.inputs_of(node))
                mean = None if stats is None else stats[1]
            if mean is not None:
                scale = np.asarray(graph.tensors[node.inputs[1]].quant.scale, np.float64).reshape(-1)
                goal = rows(float_weights[node.name], bool(node.attrs.get("depthwise"))) / scale[:, None]
                (_correct_bias16 if s16 else correct_bias)(graph, node, goal, mean, info)
        runner.run(node)
    check_graph(graph)
    return sorted(info.get("bias_shift", {}))


def _mean_patch16(node: Node, graph: Graph, xs: list[np.ndarray]) -> np.ndarray | None:
    """E[x] of the int16 input patches a 16-bit layer's weight rows multiply ([row_len], or [C, kh*kw] for
    depthwise with multiplier 1), from its inputs `xs` (one array per sample; its op's weight_row_inputs). int16
    zero points are 0 and the s16 kernels pad with 0, so the integers themselves are what the weights multiply;
    summed exactly in int64 (|sum| <= 32768 * patches, far inside int64). None for grouped convolutions and
    depthwise with a multiplier (rows are not input channels), as hessian.layer_statistics gives for the int8
    layers."""
    xt = graph.tensors[node.inputs[0]]
    x = np.stack([np.asarray(v, np.int64) for v in xs]).reshape((-1, *xt.shape[1:]))
    p = get_op(node.op).weight_row_inputs(node, graph, x)
    if p is None:
        return None
    if p.ndim == 3:  # depthwise: [M, kh*kw, C]
        return np.ascontiguousarray((p.sum(axis=0) / p.shape[0]).T)
    return p.sum(axis=0) / p.shape[0]


def _correct_bias16(graph: Graph, node: Node, goal: np.ndarray, mean: np.ndarray, info: dict) -> None:
    """`correct_bias` (compress/pipeline.py) for a 16-bit layer: the mean shift (goal - W_int8) . E[x] in the
    accumulator's units s_in * s_w[c], rounded, added to the int64 bias. The s16 requantization needs
    |acc| < 2**47 (core/quant16.ACC64_LIMIT; compress/bounds.py checks |bias| + sum|w| * 32768 per channel), so the
    corrected bias is kept within 2**47 - 1 - sum|w| * 32768; quant16.layer_weights16 raises a channel's scale until
    that sum is below 2**46 (RAISED16_TARGET), so a correction of a few units per weight never reaches it, and the
    limit is a guard. A bias already past it is left as it is."""
    now, shift = correction_shift(graph, node, goal, mean)
    if not shift.any():
        return
    share = np.abs(now).sum(axis=1).astype(np.int64) * 32768  # |x| <= 32768 for int16 inputs
    apply_bias_shift(graph, node, shift, np.maximum(ACC64_LIMIT - 1 - share, 0), np.int64, info)


# By measurement (README "Calibration methods"): "auto" CLE, no bias correction. CLE of every pair (--cle) loses
# top-1 on ResNets whose channels already share a range (ic_resnet8 89 -> 88 %), while a depthwise layer whose
# channels span orders of magnitude needs it (pt_mbv3_se, min/max ranges: 85 -> 91 %); "auto" equalizes only those.
DEFAULT_CLE = "auto"
DEFAULT_BIAS_CORRECTION = False
# auto CLE equalizes a pair when a live channel of the tensor joining it spans less than 1/CLE_SPREAD of the tensor's
# range: under one per-tensor int8 scale such a channel keeps fewer than 256 / 32 = 8 levels (3 bits). Set a priori,
# not fitted to a top-1: the labelled models' pairs measure at most 16 (kws_dscnn) where CLE changes nothing useful,
# and 40 to 1,100 where a channel is starved (sww_dscnn's last depthwise layers, pt_mbv3_se's first)
CLE_SPREAD = 32.0
LIVE = 1e-6  # a channel narrower than this fraction of the tensor's range is dead (a ReLU that never fires)


def channel_spread(lo: np.ndarray, hi: np.ndarray) -> float:
    """The tensor's range over its narrowest live channel's range (per-channel min/max over calibration)."""
    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    total = float(max(hi.max(), 0.0) - min(lo.min(), 0.0))
    width = hi - lo
    live = width[width > LIVE * total]
    return float(total / live.min()) if total > 0 and live.size else 1.0


def spread_tensors(graph: Graph, model, samples: dict[str, np.ndarray], known: set[str]) -> dict[str, float]:
    """Tensor joining each equalizable pair -> its channel_spread over the calibration samples (one onnxruntime
    pass, only when the graph has such pairs)."""
    names = [a.outputs[0] for a, _, _, _ in equalizable_pairs(graph) if a.outputs[0] in known]
    if not names:
        return {}
    lo, hi = channel_extremes(model, samples, names)
    return {t: channel_spread(lo[t], hi[t]) for t in names}


def equalize_for_calibration(graph: Graph, model, samples: dict[str, np.ndarray] | None,
                             mode: bool | str = True) -> dict:
    """CLE, then (with calibration samples) high-bias absorption, on the float graph after the passes. Returns the
    `transforms` for compress/calibrate.collect_ranges (tensor -> (divisor, offset)); the record of what was done
    is kept in graph.meta["equalization"]. `mode`: True equalizes every pair, "auto" only the pairs whose joining
    tensor has a channel spread above CLE_SPREAD (measured on `samples`; none without them)."""
    known = {o for n in model.graph.node for o in n.output}
    only, spreads = None, {}
    if mode == "auto":
        spreads = spread_tensors(graph, model, samples, known) if samples is not None else {}
        only = {t for t, v in spreads.items() if v > CLE_SPREAD}
    scales = equalize(graph, known, only) if only is None or only else {}
    offsets = {}
    if samples is not None and scales:
        offsets = absorb_high_bias(graph, channel_minimums(graph, model, samples, scales))
    graph.meta["equalization"] = {"mode": "auto" if mode == "auto" else "all", "pairs": len(scales),
                                  "tensors": sorted(scales), "absorbed": sorted(offsets),
                                  "spread": {t: round(v, 1) for t, v in spreads.items()}}
    return {t: (scales[t], offsets.get(t)) for t in scales}
