"""The compression steps compile_model runs when asked, and what they report.

    passes -> prune_step (float: channels, then magnitude; marks 4-bit layers) -> quantize_graph
           -> storage_step (int8: fitting, clustering, then the storage of each layer's weights, smallest by bytes)

`prune_step` runs before quantization because pruning decides which float weights exist; `storage_step` after it
because clustering works on the int8 values (so per-channel scales stay exact) and storage is about bytes.

Fitting: with calibration samples, storage_step runs them through the int8 reference layer by layer, and each
pruned, 4-bit or clustered layer's int8 values are chosen against the inputs it really receives from the
already-compressed layers before it (compress/hessian.py, cluster.error_feedback_assign). Measured on
ic_resnet8 against plain rounding: --weight-bits 4 went from 54 % to 88 % top-1 (ic01 images 100-199) and
--prune 0.5 from 64 % to 81.5 % (all 200 ic01 images). Scales and requantization parameters are never changed by
it. Biases are: after a fitted layer's weights are final, the mean shift of its output that their error causes over
the calibration inputs it receives is added to its int32 bias (`correct_bias`, Nagel et al.'s bias correction;
biases are counted in params, not weights bytes, so it costs no weight bytes). Measured by the noise-to-signal
ratio of the pre-softmax logits (each sample's mean over classes removed) against the plain int8 model's, numpy
reference, on calibration samples 64-99 (the fitting uses 0-63, hessian.MAX_SAMPLES): --clusters 16 from 0.0075 to
0.0061 on kws_dscnn and from 0.0155 to 0.0101 on ic_resnet8; --weight-bits 4 from 0.024 to 0.021 and from 0.037 to
0.026; --prune 0.5 from 0.45 to 0.43 and from 0.083 to 0.074.

Storage choice per layer, by measured bytes (WeightStorage.nbytes), among the kinds the layer's options make
possible: dense always; int4 for a 4-bit layer (and for a layer --clusters K <= 16 puts on an evenly spaced grid,
`grid_layers`: one that uses each weight once); int5 for a fully connected layer --clusters 16 < K <= 32 puts on
the 5-bit grid; clustered for a clustered layer (its values become the clustered
ones only if this storage is chosen); sparse_bitmap, sparse_rle and (not depthwise) sparse_block for a pruned layer
(not for a pre-quantized fully connected layer with a filter offset, whose zeros are not real zeros). Ties go to
the simpler kind, in that order. Without compression options nothing here runs and weights stay dense (storage None).

Everything the report needs is kept in graph.meta["compression"].
"""
from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np

from tinyaot.compress.bounds import INT32_MAX, channel_bounds, check_graph
from tinyaot.compress.channel_budget import allocate_channels
from tinyaot.compress.distill import Target, _path, distill, logits_tensor
from tinyaot.compress.cluster import InputHessian, allocate, cluster_layer, error_feedback_assign, output_energy
from tinyaot.compress.encode import (INT5_PER_WORD, assign_storage, encode_clustered, encode_int4, encode_int5,
                                     encode_sparse_bitmap, encode_sparse_block, encode_sparse_rle, index_bits,
                                     sparse_block_nbytes, sparse_rle_nbytes)
from tinyaot.compress.hessian import MAX_SAMPLES, SampleRunner, cross_moments, layer_hessian, layer_statistics
from tinyaot.compress.options import CompressionOptions, LayerSettings
from tinyaot.compress.prune import (asked_groups, channel_group, group_scores, layer_kind, layer_nodes,
                                    magnitude_prune, prune_channels)
from tinyaot.compress.reconstruct import (STEP, UNSTRUCTURED, Pattern, augmented_moments, clip_search, damped,
                                          gptq_round, greedy_prune, magnitude_keep, masked_solve, objective,
                                          obs_channels, refit_target)
from tinyaot.core.quant import weight_qmax
from tinyaot.compress.refit import refit_consumers, refittable_after, run_node, snapshot
from tinyaot.compress.storage import WeightStorage, rows
from tinyaot.ir import Graph
from tinyaot.ops.compressed import conv_estimate
from tinyaot.ops.registry import FloatUnsupported, get_op, traits_of

ORDER = ("dense", "int4", "int5", "clustered", "sparse_bitmap", "sparse_rle", "sparse_block")


def prune_step(graph: Graph, options: CompressionOptions, samples=None, start: dict | None = None) -> Graph:
    """Structured then magnitude pruning of the float graph, and the 4-bit marks quantization reads. With float
    calibration `samples` ({input name: [N, *input shape]}) the layers that lost input channels are refitted to
    their unpruned outputs (compress/refit.py), and with prune_method "obs" the channels are chosen and the masks
    left to storage_step, which chooses them on the calibration data (compress/reconstruct.py). `start`: for
    prune_method "distill", what an "obs" compression of the same model made of each pruned layer
    (`fitted_layers`): distillation starts from those weights and keeps their masks."""
    layers = layer_nodes(graph)
    settings = {n.name: options.for_layer(n.name, layer_kind(n)) for n in layers}
    grid = grid_layers(graph, layers, settings, options)
    for name, g in grid.items():  # from here on such a layer is a 4-bit (or 5-bit) one: int4's path
        settings[name] = replace(settings[name], clusters=None, weight_bits=g["bits"])
    info = {"options": options, "settings": settings, "grid": grid,
            "dense_before": {n.name: graph.tensors[n.inputs[1]].size for n in layers},
            "unmatched_patterns": options.unmatched([(n.name, layer_kind(n)) for n in layers]),
            "channels_removed": {}, "layers": {}, "kept_channels": {}, "pruned_masks": {},
            # the dense float layers, what reconstruction fits every compressed layer's output to
            "dense_rows": {n.name: _float_layer(graph, n) for n in layers if _is_float(graph, n)}}
    graph.meta["compression"] = info
    distilling = samples is not None and options.prune_method == "distill"
    teacher = snapshot(graph) if distilling else None  # the dense float model: what distillation matches
    channels = {name: s.channels for name, s in settings.items() if s.channels > 0}
    if channels:
        before = snapshot(graph) if samples is not None else None
        consumers = set()
        choose = _channel_chooser(graph, channels, samples) if samples is not None and \
            options.prune_method != "magnitude" else None
        if choose is not None:
            channels = _channel_fractions(graph, channels, samples, info)
        info["channels_removed"] = prune_channels(graph, channels, info["kept_channels"], consumers, choose)
        if before is not None and consumers:
            info["refit"] = refit_consumers(before, graph, samples, refittable_after(graph, consumers),
                                            info["kept_channels"])
    if distilling:
        info["distill"] = _distill(graph, teacher, samples, settings, info, start)
        info["distilled"] = "skipped" not in info["distill"]
        if info["distilled"]:  # the layers' int8 fit now aims at the distilled model (distilled_reference)
            info["dense_rows"] = {n.name: _float_layer(graph, n) for n in layer_nodes(graph) if _is_float(graph, n)}
    # the float layers before magnitude pruning: what the int8 values approximate (storage_step)
    info["float_layers"] = {n.name: _float_layer(graph, n) for n in layer_nodes(graph) if _is_float(graph, n)}
    info["float_weights"] = {name: w for name, (w, _) in info["float_layers"].items()
                             if settings[name].sparsity > 0 or settings[name].weight_bits < 8
                             or settings[name].clusters}
    sparsity = {name: s.sparsity for name, s in settings.items() if s.sparsity > 0}
    # obs, or distill where distillation could not run: masks chosen by storage_step on the calibration data
    info["masks_by_data"] = samples is not None and options.prune_method != "magnitude" and not info.get("distilled")
    if sparsity and not info["masks_by_data"] and not info.get("distilled"):
        pooled = {name for name, s in settings.items() if s.sparsity > 0 and s.shared_threshold}
        magnitude_prune(graph, sparsity, pooled, {name: s.prune_pattern for name, s in settings.items()})
    for n in layer_nodes(graph):
        if n.name in info["float_weights"] and settings[n.name].sparsity > 0 and not info["masks_by_data"] \
                and n.name not in info["pruned_masks"]:
            info["pruned_masks"][n.name] = np.asarray(graph.tensors[n.inputs[1]].data) == 0
        if settings[n.name].weight_bits < 8:
            # read by Conv/FullyConnected.quantize: symmetric scales with qmax 7 (4-bit) or 15 (a 5-bit grid)
            n.attrs["weight_bits"] = settings[n.name].weight_bits
        if n.name in grid and grid[n.name]["qmax"] < 2 ** (grid[n.name]["bits"] - 1) - 1:
            n.attrs["weight_qmax"] = grid[n.name]["qmax"]  # K < 16 levels: a narrower symmetric grid (weight_qmax)
    return graph


GRID_MAX_K = 16  # int4 holds the symmetric grid [-7, 7]: 15 levels, the most a 4-bit grid layer takes
GRID5_MAX_K = 32  # int5 holds [-15, 15]: 31 levels, for fully connected layers (tinyaot_fully_connected_s5.c)


def grid_layers(graph: Graph, layers, settings: dict[str, LayerSettings],
                options: CompressionOptions) -> dict[str, dict]:
    """The layers --clusters K puts on an evenly spaced grid instead of a codebook (cluster_fc "grid", the
    default): float layers asked K = 3..16 clusters that use each weight once per inference, i.e. with one output
    pixel (a fully connected layer at batch 1, a convolution on a 1x1 output). Each output channel's weights take
    the 2 * qmax + 1 levels of its own scale, qmax = min(7, (K - 1) // 2) (K = 16: int4's [-7, 7]), fitted and
    reconstructed as --weight-bits 4 fits them and stored and run as int4 (the kernels unpack nibbles in
    registers, no lookup).

    Why: a codebook costs a lookup per weight use, which the decoded kernels amortise over a layer's output
    pixels; with one pixel nothing amortises it. Measured on ad_fc_autoencoder (fully connected only, int8
    423,042 / 77,709 instructions on mps2-an386 / mps3-an547): codebooks at K = 16 ran 2.622x / 1.445x int8, the
    grid runs as int4 does (see the README's compression table). K = 2 keeps its codebook (a symmetric grid has an
    odd number of levels, and {-1, 0, 1} would be more than asked). A fully connected layer asked 16 < K <= 32
    takes the 5-bit grid, qmax = (K - 1) // 2 (K = 32: [-15, 15], 31 levels), fitted the same way (weight_bits 5)
    and stored as int5 (three 16-bit lane pairs per word, unpacked by masks); a convolution with one output pixel
    keeps its codebook there (no 5-bit convolution kernel), as does K > 32.
    Returns name -> {"k": K, "qmax": qmax, "bits": 4 or 5}."""
    if options.cluster_fc != "grid":
        return {}
    out = {}
    for n in layers:
        s = settings[n.name]
        if s.excluded or not s.clusters or not 3 <= s.clusters <= GRID5_MAX_K or not _is_float(graph, n):
            continue
        if s.clusters > GRID_MAX_K and layer_kind(n) != "fully_connected":  # the 5-bit kernels are fully connected
            continue
        if int(np.prod(graph.tensors[n.outputs[0]].shape[:-1])) == 1:
            bits = 4 if s.clusters <= GRID_MAX_K else 5
            out[n.name] = {"k": int(s.clusters), "qmax": min(2 ** (bits - 1) - 1, (int(s.clusters) - 1) // 2),
                           "bits": bits}
    return out


def _distill(graph: Graph, teacher: Graph, samples, settings: dict[str, LayerSettings], info: dict,
             start: dict | None = None) -> dict:
    """--prune-method distill: the whole float model distilled to the dense one's logits (compress/distill.py),
    the pruned layers starting from `start` ({layer: (weights, bias, pruned mask)}, the masks and fit an "obs"
    compression chose on the same data) with those masks fixed. Measured against the "obs" compression alone
    (kws_dscnn, host C, 900 held-out samples; calibration on the first 100): --prune 0.6 --prune-pattern block2x1
    77.89 -> 81.56 % top-1 (ci/compression_benchmark.py; 83.00 % when the inputs were shifted along their last two
    axes, W and C, i.e. W only for kws's [49, 10, 1], instead of H and W). With those former shifts: the output's
    noise-to-signal ratio against dense int8 0.262 -> 0.175; --prune 0.5 87.78 -> 87.22 %; with half the
    calibration samples (50, scored on the other 50) it overfits: 80 -> 80 % and 84 -> 76 % (NSR 0.284 -> 0.283,
    0.194 -> 0.249). Without `start` (no layer the "obs" fit reached), the
    masks are chosen by gradual magnitude pruning during the distillation; with --prune-channels alone, the kept
    weights of the refitted model distilled to the dense model's logits and feature maps (_distill_features). On
    every path the calibration inputs are shifted along the axes the first convolution slides over
    (distill.spatial_axes).
    Layers sharing the default --prune remove that fraction of all their weights together, at one
    fraction each among those their pattern applies to (under "block", depthwise layers stay dense and the others
    take their share, as _allocate_sparsity does). Returns distill's report without the masks, which go into
    info["pruned_masks"]."""
    layers = [n for n in layer_nodes(graph) if _is_float(graph, n)]
    pruned = [n for n in layers if settings[n.name].sparsity > 0 and not settings[n.name].excluded]
    given = {n.name: start[n.name] for n in pruned if start and n.name in start
             and start[n.name][0].shape == graph.tensors[n.inputs[1]].shape}
    if given:
        for n in pruned:
            if n.name in given:
                w, b, _ = given[n.name]
                n.inputs[1] = graph.add_const(n.name + "_obs_weights", w.astype(np.float32))
                while len(n.inputs) < 3:
                    n.inputs.append("")
                n.inputs[2] = graph.add_const(n.name + "_obs_bias", b.astype(np.float32))
        report = distill(graph, teacher, samples, keep={name: ~m for name, (_, _, m) in given.items()})
        report.pop("masks", None)
        if "skipped" not in report:
            for name, (_, _, m) in given.items():
                info["pruned_masks"][name] = m
        report["masks_from"] = "obs"
        return report
    if not pruned:  # --prune-channels alone: the refitted layers distilled to the dense ones' outputs too
        features = _distill_features(graph, teacher, info["kept_channels"])
        report = distill(graph, teacher, samples, features=features)
        report.pop("masks", None)
        report["features"] = len(features)
        return report
    shared = [n for n in pruned if settings[n.name].shared_threshold]
    takers = [n for n in shared if pattern_of(graph, n, settings[n.name]) is not None]
    size = {n.name: int(graph.tensors[n.inputs[1]].size) for n in pruned}
    targets = {}
    if takers:
        frac = settings[shared[0].name].sparsity * sum(size[n.name] for n in shared) / sum(size[n.name] for n in takers)
        for n in takers:
            targets[n.name] = Target(min(frac, MAX_LAYER_SPARSITY), pattern_of(graph, n, settings[n.name]))
    for n in pruned:
        pattern = pattern_of(graph, n, settings[n.name])
        if n not in shared and pattern is not None:
            targets[n.name] = Target(settings[n.name].sparsity, pattern)
    report = distill(graph, teacher, samples, targets)
    if "masks" in report:
        masks = report.pop("masks")
        for name in targets:
            info["pruned_masks"][name] = ~masks[name]
    return report


def _distill_features(graph: Graph, teacher: Graph, kept: dict[str, np.ndarray]) -> dict[str, tuple[str, object]]:
    """What distillation after --prune-channels matches besides the logits: the output of every weighted layer and
    of every join (a node adding two activations, a residual Add) on the way to the logits, each against the dense
    model's same tensor at the channels its group kept ({tensor: (teacher tensor, kept channels or None)}).
    The logits alone are 10 numbers a sample for 100 samples: trained on them the kept weights learn the samples
    (ic_resnet8 at 0.25, float: calibration logits error 0.24 -> 0.03, held-out NSR 0.198 -> 0.225); the feature
    maps constrain every layer with thousands of values a sample (held-out NSR 0.159, see the README)."""
    channels = {}  # tensor -> kept channels, from the dense model's groups
    for name, keep in kept.items():
        node = next((n for n in teacher.nodes if n.name == name), None)
        group = channel_group(teacher, node) if node is not None else None
        if group is None:
            continue
        for t in group.tensors:
            if teacher.tensors[t].shape[-1] == group.channels:
                channels[t] = np.asarray(keep)
    head = logits_tensor(graph)
    out = {}
    for node in _path(graph, head):
        t = node.outputs[0] if node.outputs else None
        if t is None or t == head or t not in teacher.tensors:
            continue
        joins = sum(1 for i in node.inputs if i and not graph.tensors[i].is_const) >= 2
        if not (traits_of(node.op).weighted_layer or joins):
            continue
        if tuple(graph.tensors[t].shape) == tuple(teacher.tensors[t].shape):
            out[t] = (t, None)
        elif t in channels and graph.tensors[t].shape[-1] == len(channels[t]):
            out[t] = (t, channels[t])
    return out


def fitted_layers(graph: Graph) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """After storage_step: each pruned layer's (weights, bias) as float values of its int8 ones (weights x their
    per-channel scales, bias x input scale x weight scales) in its weights' layout, and its pruned mask (True where
    pruned), what prune_step's `start` takes."""
    info = graph.meta["compression"]
    out = {}
    for n in layer_nodes(graph):
        mask = info["pruned_masks"].get(n.name)
        w = graph.tensors[n.inputs[1]]
        if mask is None or w.quant is None or len(n.inputs) < 3 or not n.inputs[2]:
            continue
        depthwise = bool(n.attrs.get("depthwise"))
        scale = np.asarray(w.quant.scale, np.float64).reshape(-1)
        r = rows(np.asarray(w.data), depthwise) * scale[:, None]
        b = np.asarray(graph.tensors[n.inputs[2]].data, np.float64).reshape(-1) * graph.tensors[n.inputs[0]].quant.s
        out[n.name] = (_back_rows(r, w.shape, depthwise), b * scale, np.asarray(mask, bool))
    return out


def distilled_reference(graph: Graph) -> Graph:
    """The float graph after prune_step as storage_step's dense reference when it was distilled: each compressed
    layer's int8 values are then fitted to the distilled layer's output (its masks already chosen), not to the
    original model's, which distillation moved away from on purpose."""
    info = graph.meta.pop("compression")
    try:
        ref = copy.deepcopy(graph)
    finally:
        graph.meta["compression"] = info
    for n in ref.nodes:
        n.attrs.pop("weight_bits", None)
        n.attrs.pop("weight_qmax", None)
    return ref


def _channel_fractions(graph: Graph, channels: dict[str, float], samples, info: dict) -> dict[str, float]:
    """The fraction each layer's channel group loses: when every eligible group is asked the same fraction (the
    plain --prune-channels F), spread by measured sensitivity within the MACs uniform removal leaves
    (compress/channel_budget.py; info["channel_allocation"] says what was measured and chosen); else as asked."""
    heads, asked = [], set()
    for node, _, f in asked_groups(graph, channels):
        heads.append(node.name)
        asked.add(f)
    if len(asked) != 1:
        return channels
    got = allocate_channels(graph, heads, asked.pop(), samples, lambda s: _channel_chooser(graph, channels, s))
    info["channel_allocation"] = got
    return got.get("fractions", channels)


# Damping of the consumers' input moments in the channel choice, relative to their mean diagonal (reconstruct.damped;
# the masks' DAMP is 0.01). OBS credits a channel with what its correlated neighbours can take over once it is gone;
# from 100 images that credit is too generous, and a stronger damping keeps channels the refit cannot stand in for.
# Measured on ic_resnet8 --prune-channels 0.25, 4 folds of the 100 calibration images (75 fit, 25 scored; never the
# held-out split): logits NSR vs dense int8 0.2102 -> 0.1969 pooled, lower on 4 of 4 folds (ci/calibration_folds.py),
# top-1 68 -> 75 %; in float (allocation fixed) damping 0.001 / 0.01 / 0.1 / 0.3 / 1.0 gave 0.219 / 0.217 / 0.211 /
# 0.219 / 0.233, and the greedy choice is already a local optimum of its objective (single swaps gain < 1 %).
# kws_dscnn --prune-channels 0.25, same folds: 0.0321 -> 0.0311, top-1 94 -> 95 %.
CHANNEL_DAMP = 0.1


def _channel_chooser(graph: Graph, fraction: dict[str, float], samples: np.ndarray):
    """prune_group's `choose` by data: the channels whose removal the group's consumers feel least
    (reconstruct.obs_channels), from the second moments of the consumers' input patches in the unpruned float
    model over the calibration `samples` (one float pass, compress/refit.run_node), damped by CHANNEL_DAMP.
    Measured on ic_resnet8 --prune-channels 0.25 against the L1 choice (ic01 images 100-199): see the README's
    compression table."""
    wanted = set()
    for node in layer_nodes(graph):
        if fraction.get(node.name, 0.0) > 0:
            group = channel_group(graph, node)
            if group is not None:
                wanted.update(c.name for c in group.consumers)
    moments = _float_moments(graph, samples, wanted)

    def choose(g: Graph, group, count: int) -> np.ndarray:
        consumers = []
        for c in group.consumers:
            if c.name not in moments:
                return np.argsort(group_scores(g, group), kind="stable")[:count]
            h, kappa = moments[c.name]
            w, b = _float_layer(g, c)
            consumers.append((np.concatenate([rows(w, False), b[:, None] / kappa], axis=1),
                              damped(h[None], CHANNEL_DAMP)[0][0]))
        return obs_channels(consumers, group.channels, count)

    return choose


def _float_moments(graph: Graph, samples: np.ndarray, names: set[str]) -> dict[str, tuple[np.ndarray, float]]:
    """For the layers named: (E[x~ x~^T] of their augmented float input patches, kappa), kappa the root mean
    square of the patches' entries (the bias column's constant, as reconstruct.augmented_moments). Layers whose
    inputs are not patches of their rows, or that the float runner cannot reach, are left out."""
    if not isinstance(samples, dict):
        samples = {graph.inputs[0]: samples}
    values = {name: np.asarray(samples[name], np.float64).reshape((-1, *graph.tensors[name].shape[1:]))
              for name in graph.inputs}
    count_all = len(values[graph.inputs[0]])
    out = {}
    last = max((k for k, n in enumerate(graph.nodes) if n.name in names), default=-1)
    try:
        for node in graph.nodes[:last + 1]:
            if node.name in names:
                xx, mean, count = None, None, 0
                for s in range(0, count_all, REFIT_CHUNK):
                    p = get_op(node.op).weight_row_inputs(node, graph, values[node.inputs[0]][s:s + REFIT_CHUNK])
                    if p is None or p.ndim != 2:
                        break
                    xx = p.T @ p if xx is None else xx + p.T @ p
                    mean = p.sum(axis=0) if mean is None else mean + p.sum(axis=0)
                    count += len(p)
                else:
                    if count:
                        xx, mean = xx / count, mean / count
                        kappa = float(np.sqrt(max(np.mean(np.diag(xx)), np.finfo(np.float64).tiny)))
                        n = len(mean)
                        h = np.empty((n + 1, n + 1))
                        h[:n, :n], h[:n, n], h[n, :n], h[n, n] = xx, kappa * mean, kappa * mean, kappa * kappa
                        out[node.name] = (h, kappa)
            run_node(graph, node, values)
    except FloatUnsupported:
        pass
    return out


REFIT_CHUNK = 16  # samples per block of float patches


def _is_float(graph: Graph, node) -> bool:
    return graph.tensors[node.inputs[1]].quant is None


def _float_layer(graph: Graph, node) -> tuple[np.ndarray, np.ndarray]:
    """(weights in the layer's layout, bias [out_ch]) as float64; a layer without a bias has zeros."""
    w = np.array(graph.tensors[node.inputs[1]].data, np.float64)
    out = w.shape[-1] if node.attrs.get("depthwise") else w.shape[0]
    b = np.zeros(out) if len(node.inputs) < 3 or not node.inputs[2] else \
        np.array(graph.tensors[node.inputs[2]].data, np.float64).reshape(-1)
    return w, b


def _candidates(w, s: LayerSettings, depthwise: bool, filter_offset: int, hessian, target=None,
                group_size: int | None = None, blocks: bool = False, block=(4, 4), pixels: int = 0):
    """(kind, storage or None for dense, values, bytes) for every kind this layer may use; `group_size`: the
    codebook grouping the budget allocation gave the layer (None: the per-layer rule); `blocks`: whether a block
    kernel can run the layer (one group, not depthwise); `block`: the block shape its pattern gives it; `pixels`:
    its output pixels (a 2x1 convolution is stored in 2x1 blocks where that runs faster than dense, else dense)."""
    q = np.asarray(w.data)
    out = [("dense", None, q, q.size)]
    if s.weight_bits == 4:
        st = encode_int4(q, depthwise)
        out.append(("int4", st, q, st.nbytes(q)))
    if s.weight_bits == 5:  # a 5-bit grid layer (grid_layers)
        st = encode_int5(q, depthwise)
        out.append(("int5", st, q, st.nbytes(q)))
    if s.clusters:
        # a pruned layer keeps its zeros exact; elsewhere 0 is a value like any other
        best, _ = cluster_layer(q, np.asarray(w.quant.scale).reshape(-1), s.clusters, depthwise,
                                keep_zero=s.sparsity > 0, hessian=hessian, target=target,
                                group_sizes=None if group_size is None else [group_size])
        if best.nbytes < q.size:  # only encode what can win
            st = encode_clustered(best.values, best.codebooks, best.group_size, depthwise)
            out.append(("clustered", st, best.values, st.nbytes(best.values)))
    if s.sparsity > 0 and filter_offset == 0:
        if s.prune_pattern in ("block", "block2x1") and (blocks or s.prune_pattern == "block2x1"):
            # pruned for speed: the block kernels or dense, never the slower bitmap / run-length kernels (their
            # bytes win when the int8 rounding zeroes much of the kept blocks too); under block2x1 a depthwise
            # layer's zeros run on the dense kernels
            if blocks and block == (2, 1) and KERNELS_2X1 and pixels:
                # the speed form: 2x1 blocks where the estimate says they run faster than dense
                # (ops/compressed.conv_estimate; the allocation priced its levels the same way, _faster_picks)
                k = int(np.prod(q.shape[1:]))
                if conv_estimate(pixels, k, q.shape[0], _kept_2x1(q)) < conv_estimate(pixels, k, q.shape[0]):
                    st = encode_sparse_block(q, block=block)
                    out = [c for c in out if c[0] != "dense"] + [("sparse_block", st, q, st.nbytes(q))]
                return out
            if blocks and block != (2, 1) and sparse_block_nbytes(q, block) < min(c[3] for c in out):
                st = encode_sparse_block(q, block=block)
                out.append(("sparse_block", st, q, st.nbytes(q)))
            return out
        st = encode_sparse_bitmap(q, depthwise)
        out.append(("sparse_bitmap", st, q, st.nbytes(q)))
        if sparse_rle_nbytes(q, depthwise) < min(c[3] for c in out):
            st = encode_sparse_rle(q, depthwise)
            out.append(("sparse_rle", st, q, st.nbytes(q)))
        if blocks and sparse_block_nbytes(q) < min(c[3] for c in out):  # zeros in whole 4x4 blocks
            st = encode_sparse_block(q)
            out.append(("sparse_block", st, q, st.nbytes(q)))
    return out


def storage_step(graph: Graph, inputs: list | None = None, dense: Graph | None = None,
                 ranges: dict | None = None) -> Graph:
    """Reconstruct, cluster and choose each layer's weight storage (quantized graph). Needs prune_step's
    graph.meta entry.

    With `inputs` (int8 graph inputs: the quantized calibration samples), `dense` (the same model quantized without
    compression) and `ranges` (the calibrated activation ranges) the layers are visited in schedule order while the
    numpy reference runs those samples through both graphs, and every compressed layer is refitted to the dense
    layer's output from the inputs the compressed layers before it give it (compress/reconstruct.py): its mask
    chosen, its grid set and its values rounded against that fit. Without them (or where a layer's inputs are not
    patches of its rows: grouped convolutions), the older fit: int8 values re-rounded against the layer's own float
    weights (compress/hessian.py, cluster.error_feedback_assign), then bias correction."""
    info = graph.meta["compression"]
    settings = info["settings"]
    layers = {n.name: n for n in layer_nodes(graph)}
    recon = inputs is not None and dense is not None and ranges is not None
    dense_nodes = {n.name: n for n in dense.nodes} if recon else {}
    recon = recon and all(n.name in dense_nodes for n in graph.nodes)
    fitted = {name for name, s in settings.items()
              if not s.excluded and name in layers and (s.clusters or name in info.get("float_weights", {})
                                                       or (recon and name in info["float_layers"]
                                                           and (s.sparsity > 0 or s.channels > 0)))}
    info["layer_sparsity"] = {name: s.sparsity for name, s in settings.items() if s.sparsity > 0 and not s.excluded}
    if recon and info.get("masks_by_data"):
        info["layer_sparsity"] = _allocate_sparsity(dense, inputs, info)
    info["cluster_groups"] = _plan_clusters(graph, inputs, info) if any(
        s.clusters and not s.excluded for s in settings.values()) else {}
    limit = RECONSTRUCTION_SAMPLES if recon else MAX_SAMPLES
    runner = SampleRunner(graph, inputs, limit) if inputs and fitted else None
    dense_runner = SampleRunner(dense, inputs, limit) if recon and runner is not None else None
    info["reconstructed"] = {}
    for node in list(graph.nodes):
        if node.name in layers:
            s = settings[node.name]
            fit = None
            if dense_runner is not None and node.name in fitted and node.name in info["float_layers"]:
                dn = dense_nodes[node.name]
                fit = _reconstruct(graph, node, dense, dn, runner.inputs_of(node), dense_runner.inputs_of(dn),
                                   info, ranges)
            if fit is not None:
                hl, t = fit
                n = t.shape[1] - 1
                _store_layer(graph, node, s, hl[:, :n, :n] if hl.shape[0] > 1 else hl[0, :n, :n], info,
                             t[:, :n] if s.clusters else None)
                if info["layers"][node.name]["storage"] == "clustered":  # the bias takes what clustering moved
                    _refit_bias(graph, node, hl, t, info)
            else:
                stats, goal, hessian, target = _fit_old(graph, node, s, runner if node.name in fitted else None,
                                                        info)
                _store_layer(graph, node, s, hessian, info, target)
                if stats is not None:
                    # the weights' own mean shift only, on the inputs the layer really gets (see correct_bias)
                    correct_bias(graph, node, np.asarray(goal, np.float64), stats[1], info)
        if runner is not None:
            runner.run(node)
        if dense_runner is not None:
            dense_runner.run(dense_nodes[node.name])
    graph.remove_unused_tensors()
    check_graph(graph)  # the weights and biases changed: bound every int32 intermediate again (compress/bounds.py)
    return graph


# Calibration samples reconstruction fits with (all of a usual calibration set). More than the older fit's
# MAX_SAMPLES: the refit estimates whole rows, not only their rounding, and a layer after global pooling sees one
# patch per sample (ic_resnet8 --prune-channels 0.25: 54 % top-1 with 64 samples, 61 % with 100).
RECONSTRUCTION_SAMPLES = 128


def _fit_old(graph: Graph, node, s: LayerSettings, runner, info: dict):
    """The fit without a dense reference: a pruned or 4-bit layer's int8 values re-rounded against its own float
    weights through its input Hessian (clustered layers are fitted against it in _store_layer). Returns (input
    statistics or None, the rows the int8 values approximate, the Hessian and target clustering uses)."""
    float_w = info.get("float_weights", {})
    if s.sparsity > 0 and node.name not in info["pruned_masks"] and node.name in float_w:
        # masks by data, but this layer cannot be reconstructed: its smallest int8 weights by magnitude
        w = graph.tensors[node.inputs[1]]
        depthwise = bool(node.attrs.get("depthwise"))
        r = rows(np.asarray(w.data), depthwise).astype(np.float64)
        keep = magnitude_keep(np.concatenate([r, np.zeros((len(r), 1))], axis=1), r.shape[1],
                              info["layer_sparsity"].get(node.name, s.sparsity))[:, :-1]
        info["pruned_masks"][node.name] = _back_rows(~keep, w.shape, depthwise)
        w.data = np.where(info["pruned_masks"][node.name], 0, w.data).astype(np.int8)
    stats = None if runner is None else layer_statistics(node, graph, runner.inputs_of(node))
    goal = _float_rows(graph, node, info) if node.name in float_w else \
        rows(np.asarray(graph.tensors[node.inputs[1]].data), bool(node.attrs.get("depthwise")))
    if stats is None:
        return None, goal, None, None
    target = None
    if node.name in float_w:
        if s.sparsity > 0 or s.weight_bits < 8:
            _reround(graph, node, stats[0], info)  # clustering then starts from these values
        else:
            target = goal
    return stats, goal, stats[0], target


def _refit_bias(graph: Graph, node, hl: np.ndarray, t: np.ndarray, info: dict) -> None:
    """The bias that best completes the stored weights: the last (free) column of the fit,
    b = t_b - H_bw (q_w - t_w) / H_bb, in accumulator units."""
    w = graph.tensors[node.inputs[1]]
    n = t.shape[1] - 1
    q = rows(np.asarray(w.data), bool(node.attrs.get("depthwise"))).astype(np.float64)
    h = hl[np.zeros(len(q), np.int64)] if hl.shape[0] == 1 else hl
    b = t[:, n] - np.einsum("ri,ri->r", h[:, n, :n], q - t[:, :n]) / h[:, n, n]
    s_in = graph.tensors[node.inputs[0]].quant.s
    _set_bias(graph, node, np.rint(b * info["kappa"][node.name] / s_in).astype(np.int64), info)


def _back_rows(r: np.ndarray, shape, depthwise: bool) -> np.ndarray:
    return np.ascontiguousarray(r.T).reshape(shape) if depthwise else r.reshape(shape)


def pattern_of(graph: Graph, node, s: LayerSettings) -> Pattern | None:
    """The group shape a layer's mask is made of (compress/reconstruct.Pattern), or None when its pattern cannot
    apply to it: "block" (4 output channels x 4 row elements, the kernels' skippable unit) needs rows that are
    output channels reading the same inputs (its op's out_channel_axis; not a depthwise or grouped convolution,
    which no kernel skips), so such a layer stays dense and the others take its share. Under "block2x1" (see
    compress/pattern.py) convolutions take 2x1 blocks, fully connected layers 4x4 ones, and the others are pruned
    unstructured (stored dense: _candidates)."""
    name = getattr(s, "prune_pattern", "unstructured")  # compress/pattern.py (h20b) names the patterns
    if name not in BLOCK_PATTERNS:
        return UNSTRUCTURED
    if get_op(node.op).out_channel_axis(node, graph) is None:
        return UNSTRUCTURED if name == "block2x1" else None
    if name == "block2x1" and layer_kind(node) == "fully_connected":
        return BLOCK_PATTERNS["block"]
    return BLOCK_PATTERNS[name]


# the block patterns' group shapes (output channels x consecutive row positions), as compress/pattern.py defines them
BLOCK_PATTERNS = {"block": Pattern(4, 4), "block4x4": Pattern(4, 4), "block4x2": Pattern(4, 2),
                  "block2x1": Pattern(2, 1)}
# patterns whose allocation is measured at the logits rather than taken from the knapsack (_allocate_sparsity): the
# 4-row ones. For 2x1 the knapsack wins (kws_dscnn, 900 held-out: --prune 0.5 86.22 % against 83.22 % uniform;
# --prune 0.6 75.33 % against 67.33 %)
PROBED = {Pattern(4, 4), Pattern(4, 2)}
KERNELS_2X1 = True  # the 2x1 block kernels are in (until then 2x1-pruned layers are stored dense)
# greedy_prune's round size for the masks of every layer under block2x1 (2x1 convolutions, 4x4 fully connected,
# unstructured depthwise; the allocation's curves keep reconstruct.STEP). kws_dscnn, 900 held-out, host C, masks at
# step 0.04 / 0.01 / 0.005 / 0.0025: --prune 0.5 85.78 / 87.78 / 86.00 / 85.78 %, --prune 0.6 77.11 / 77.89 / 74.33 /
# 77.33 %; 0.01 on the 2x1 layers alone 86.22 / 73.78 %, on the curves too 84.89 / 73.56 %. Much of the spread is the
# evaluation's noise (2 points either way); 0.01 was the best of those on both.
STEP_2X1 = 0.01
def _kept_2x1(q: np.ndarray) -> float:
    """The fraction of a layer's 2x1 blocks that hold a nonzero weight (rows view, channel pairs x positions)."""
    r = rows(np.asarray(q), False)
    pairs = np.zeros((-(-r.shape[0] // 2) * 2, r.shape[1]), bool)
    pairs[:r.shape[0]] = r != 0
    return float(pairs.reshape(-1, 2, r.shape[1]).any(axis=1).mean()) if r.size else 0.0


def _allocate_sparsity(dense: Graph, inputs, info: dict) -> dict[str, float]:
    """Each pruned layer's sparsity. The layers sharing the default --prune with the global scope get theirs from
    one budget, by measured sensitivity: for each layer, its output noise-to-signal ratio along a greedy OBS
    pruning path (reconstruct.greedy_prune on the dense model's inputs, up to MAX_LAYER_SPARSITY) times its gain
    to the model's output (`_output_gains`, probed with the layer at the asked sparsity); the levels are chosen
    to minimise the sum with the asked fraction of those layers' weights removed (cluster.allocate, the knapsack
    the clustering budget uses). A layer its pattern cannot apply to (depthwise under "block") stays dense, and
    the others remove its share. Other pruned layers keep their own fraction."""
    settings = info["settings"]
    out = {name: s.sparsity for name, s in settings.items() if s.sparsity > 0 and not s.excluded}
    pooled = [name for name, s in settings.items() if s.sparsity > 0 and s.shared_threshold and not s.excluded
              and name in info["float_layers"]]
    if not pooled:
        return out
    target = settings[pooled[0]].sparsity
    runner = SampleRunner(dense, inputs, RECONSTRUCTION_SAMPLES)
    names, options, sizes, probes, levels, total, blocks, fine = [], [], [], [], [], 0, False, False
    speed = []  # per layer: level -> estimated instructions (2x1 convolutions; None for the others)
    for pos, node in enumerate(list(dense.nodes)):
        if node.name in pooled:
            size = int(np.prod(info["float_layers"][node.name][0].shape))
            total += size
            pattern = pattern_of(dense, node, settings[node.name])
            if pattern is None:
                out[node.name] = 0.0
            else:
                got = _pruning_curve(dense, node, runner.inputs_of(node), info, pattern, target)
                if got is None:
                    total -= size  # pruned on its own (by magnitude, storage_step's fallback)
                else:
                    curve, probe, at = got
                    names.append(node.name)
                    options.append([(size * (1 - lv), e) for lv, e in curve])
                    sizes.append(size)
                    probes.append((pos, *probe))
                    levels.append(at)
                    blocks |= pattern in PROBED
                    fine |= pattern == Pattern(2, 1)
                    speed.append(_conv_speed(dense, node) if pattern == Pattern(2, 1) else None)
        runner.run(node)
    if not names:
        return out
    gains = _output_gains(dense, runner, probes)
    options = [[(b, g * e) for b, e in opt] for opt, g in zip(options, gains)]
    picks = allocate(options, sum(sizes) - target * total)
    if fine:
        picks = _faster_picks(options, sizes, speed, sum(sizes) - target * total, picks, info)
    info["sensitivity"] = {n: {"gain": g, "curve": [(1 - b / sz, e) for b, e in opt]}
                           for n, g, opt, sz in zip(names, gains, options, sizes)}
    chosen = np.array([1 - opt[k][0] / size for opt, size, k in zip(options, sizes, picks)])
    if blocks and not fine:
        # Under a block pattern the knapsack (each layer's noise added as if it were pruned alone) can lose to one
        # fraction everywhere, or win by far: kws_dscnn, 4x4 blocks, --prune 0.5, 900 held-out samples: knapsack
        # 54.44 % top-1 (the last pointwise layer at 86 %), uniform 58.67 %; ic_resnet8, 100 held-out images:
        # knapsack 72 % (the two largest layers at 48 and 80 %, the small ones dense), uniform 54 %. So both are
        # put in (every layer at its level, masks from its path, rounded at its scales) and measured at the
        # model's output over the calibration samples; the one with less noise is kept.
        uniform = np.full(len(names), min(target * total / sum(sizes), MAX_LAYER_SPARSITY))
        measured = {k: _output_nsr(dense, runner, {p[0]: at(lv) for p, at, lv in zip(probes, levels, v)})
                    for k, v in (("knapsack", chosen), ("uniform", uniform))}
        info["allocation"] = {"measured": measured, "chosen": min(measured, key=measured.get)}
        if measured["uniform"] < measured["knapsack"]:
            chosen = uniform
    for name, level in zip(names, chosen):
        out[name] = float(level)
    return out


MAX_LAYER_SPARSITY = 0.95
# Under block2x1 (the speed form) the allocation keeps its fewest-noise picks unless the 2x1 convolutions would run
# above SPEED_TARGET of their dense instructions (estimated, ops/compressed.conv_estimate); it then prices
# instructions in, as far as the target or up to SPEED_SLACK more estimated output noise (_faster_picks).
# ic_resnet8 --prune 0.5 (100 held-out): the fewest-noise picks keep the first two stages' convolutions at or below
# 20 % sparsity (a weight there serves 1024 or 256 output pixels, in the last stage 64), stored dense: 0.871 of the
# estimate, 0.876x int8's instructions on mps2-an386, 86 % top-1; at +8.2 % noise conv2d_1 44 %, conv2d_4 32 %:
# 0.824 estimated, 86-88 % top-1. kws_dscnn's fewest-noise picks are at 0.737 already (87.78 %; priced to +3 and
# +7 % noise it moved sparsity from the depthwise layers, which run dense, to the pointwise ones: 85.00 / 85.67 %).
SPEED_TARGET = 0.80
SPEED_SLACK = 0.10


def _conv_speed(dense: Graph, node):
    """level -> the estimated instructions of a convolution pruned to that level in 2x1 blocks, or dense where
    that is faster (ops/compressed.conv_estimate; the storage choice is the same, _candidates)."""
    w = dense.tensors[node.inputs[1]].shape  # OHWI
    pixels = int(np.prod(dense.tensors[node.outputs[0]].shape[:-1]))
    k, out_c = int(np.prod(w[1:])), int(w[0])
    full = conv_estimate(pixels, k, out_c)
    return lambda level: min(full, conv_estimate(pixels, k, out_c, 1.0 - level))


def _faster_picks(options, sizes, speed, budget: float, picks: list[int], info: dict) -> list[int]:
    """The knapsack's picks again with each level's estimated instructions priced in (error + lam * instructions,
    Lagrangian) when `picks` leave the 2x1 convolutions above SPEED_TARGET of their dense estimate: the smallest lam
    on a grid of steps of sqrt(2) that reaches the target, or else the fastest picks within SPEED_SLACK more summed
    noise than `picks` (ic_resnet8: lam at 2^1.5 noise units per average instruction +8.2 % noise, 2^2 +10.9 %)."""
    def noise(p):
        return sum(opt[k][1] for opt, k in zip(options, p))

    def cost(p):
        return sum(sp(1 - opt[k][0] / sz) for opt, k, sz, sp in zip(options, p, sizes, speed) if sp is not None)

    full = sum(sp(0.0) for sp in speed if sp is not None)
    base, best = noise(picks), picks
    unit = base / max(full, 1e-30)  # noise per instruction, on average
    for step in range(-4, 19):
        if cost(best) <= SPEED_TARGET * full:
            break
        lam = unit * 2.0 ** (step / 2)
        priced = [[(b, e + lam * sp(1 - b / sz)) for b, e in opt] if sp is not None else opt
                  for opt, sz, sp in zip(options, sizes, speed)]
        p = allocate(priced, budget)
        if noise(p) > (1 + SPEED_SLACK) * base:
            break
        if cost(p) < cost(best):
            best = p
    info["speed_allocation"] = {"noise": [base, noise(best)],
                                "estimate_vs_dense": [cost(picks) / max(full, 1e-30), cost(best) / max(full, 1e-30)]}
    return best


def _pruning_curve(dense: Graph, node, xs, info: dict, pattern: Pattern, probe_at: float):
    """([(sparsity, output noise-to-signal ratio)] of one layer along its greedy OBS pruning path on the dense
    model's inputs, (int8 weights of the layer pruned at `probe_at` at its current scales, their ratio), a function
    level -> the int8 weights pruned at that level) or None when its inputs are not patches of its rows."""
    mom = cross_moments(node, dense, xs, node, dense, xs)
    if mom is None:
        return None
    m = augmented_moments(*mom)
    w, b = info["float_layers"][node.name]
    depthwise = bool(node.attrs.get("depthwise"))
    r = np.concatenate([rows(w, depthwise), b[:, None] / m.kappa], axis=1)
    hl, _ = damped(m.h, count=m.count)
    energy = float(max(np.sum(objective(r, np.zeros_like(r), hl)), 1e-30))
    n = r.shape[1] - 1
    path = []
    greedy_prune(r, hl, n, MAX_LAYER_SPARSITY, pattern, curve=path)
    curve = [(lv, e / energy) for lv, e, _ in path]
    wt = dense.tensors[node.inputs[1]]
    scale = np.asarray(wt.quant.scale, np.float64).reshape(-1)

    def at(level: float) -> tuple[np.ndarray, np.ndarray]:
        # the layer at `level` (the path's nearest point), refitted, rounded at its scales: (int8 values, rows)
        keep = min(path, key=lambda p: abs(p[0] - level))[2]
        u = masked_solve(r, hl, keep)
        q = np.clip(np.rint(u[:, :n] / scale[:, None]), -weight_qmax(node), weight_qmax(node))
        return _back_rows(q, wt.shape, depthwise).astype(np.int8), np.concatenate([q * scale[:, None], r[:, n:]], 1)

    values, probe = at(probe_at)  # the probe: the layer at the asked sparsity
    return curve, (values, float(np.sum(objective(probe, r, hl))) / energy), lambda level: at(level)[0]


def _reconstruct(graph: Graph, node, dense: Graph, dense_node, xs, dense_xs, info: dict, ranges: dict):
    """Refit one layer to the dense layer's output (compress/reconstruct.py), choose its mask, set its grid from
    the fitted weights (the op's own quantize() on them, so scales, bias scale and requantization stay what
    quantization makes of any float layer), round its values, and set its bias. Returns (H, the fitted rows in
    grid units) for clustering, or None when its inputs are not patches of its rows (grouped convolution),
    leaving it untouched."""
    name = node.name
    s = info["settings"][name]
    depthwise = bool(node.attrs.get("depthwise"))
    # a distilled reference has the pruned model's channels already
    kept = None if info.get("distilled") else info["kept_channels"].get(name)
    mom = cross_moments(node, graph, xs, dense_node, dense, dense_xs, kept if depthwise else None)
    if mom is None:
        return None
    m = augmented_moments(*mom)
    wd, bd = info["dense_rows"][name]
    rd = rows(wd, depthwise)
    if kept is not None:
        rd, bd = rd[kept], bd[kept]
    w0, b0 = info["float_layers"][name]
    r0 = np.concatenate([rows(w0, depthwise), b0[:, None] / m.kappa], axis=1)
    rd = np.concatenate([rd, bd[:, None] / m.kappa], axis=1)
    rstar, hl = refit_target(rd, r0, m)
    n = r0.shape[1] - 1
    keep, u = None, rstar
    sparsity = info["layer_sparsity"].get(name, 0.0)
    if name in info["pruned_masks"]:  # magnitude masks, chosen before quantization
        keep = np.concatenate([~rows(info["pruned_masks"][name], depthwise), np.ones((len(r0), 1), bool)], axis=1)
        u = masked_solve(rstar, hl, keep)
    elif sparsity > 0 and pattern_of(graph, node, s) is not None:
        pattern = pattern_of(graph, node, s)
        step = STEP_2X1 if getattr(s, "prune_pattern", "") == "block2x1" else STEP
        keep, u = greedy_prune(rstar, hl, n, sparsity, pattern, step)
        info["pruned_masks"][name] = _back_rows(~keep[:, :n], w0.shape, depthwise)
    qmax = weight_qmax(node)
    wr = u[:, :n]
    if qmax < 127:
        amax = np.abs(wr).max(axis=1, keepdims=True) * clip_search(u, hl, qmax, keep)[:, None]
        wr = np.clip(wr, -amax, amax)
    _requantize(graph, node, _back_rows(wr, w0.shape, depthwise), u[:, n] * m.kappa, ranges)
    w = graph.tensors[node.inputs[1]]
    scale = np.asarray(w.quant.scale, np.float64).reshape(-1)
    t = u / scale[:, None]
    q = gptq_round(t, hl, qmax, keep)
    w.data = _back_rows(np.rint(q[:, :n]), w.shape, depthwise).astype(np.int8)
    s_in = graph.tensors[node.inputs[0]].quant.s
    _set_bias(graph, node, np.rint(q[:, n] * m.kappa / s_in).astype(np.int64), info)
    info.setdefault("kappa", {})[name] = m.kappa
    info["reconstructed"][name] = {"sparsity": float(np.mean(w.data == 0)),
                                   "error": float(np.sum(objective(q * scale[:, None], rstar, hl)))
                                   / float(max(np.sum(objective(rstar, np.zeros_like(rstar), hl)), 1e-30))}
    return hl, t


def _requantize(graph: Graph, node, w: np.ndarray, b: np.ndarray, ranges: dict) -> None:
    """Quantize the layer again from float weights `w` (its layout) and bias `b`, by its op's quantize()."""
    node.inputs[1] = graph.add_const(node.name + "_fitted_weights", np.asarray(w, np.float32))
    while len(node.inputs) < 3:
        node.inputs.append("")
    node.inputs[2] = graph.add_const(node.name + "_fitted_bias", np.asarray(b, np.float32))
    get_op(node.op).quantize(node, graph, ranges)


def _set_bias(graph: Graph, node, bias: np.ndarray, info: dict) -> None:
    """Store a fitted int32 bias, each channel kept within what its accumulator bound leaves (compress/bounds.py):
    |bias| <= 2**31 - 1 - sum|w| * (128 + |io|) - n * |fo| * (128 + |io|)."""
    w = graph.tensors[node.inputs[1]]
    now = rows(np.asarray(w.data), bool(node.attrs.get("depthwise"))).astype(np.int64)
    weights_share = channel_bounds(now, np.zeros(len(bias), np.int64), int(node.attrs["input_offset"]),
                                   int(node.attrs.get("filter_offset", 0))).astype(np.int64)
    room = np.maximum(INT32_MAX - weights_share, 0)
    b = graph.tensors[node.inputs[2]]
    b.data = np.clip(bias, -room, room).astype(np.int32)


def correct_bias(graph: Graph, node, goal: np.ndarray, mean: np.ndarray, info: dict) -> None:
    """Empirical bias correction (Nagel et al. 2019, "Data-free quantization through weight equalization and bias
    correction", section 4.2, with measured input means): the mean shift the layer's weight error puts on its
    accumulator over the calibration inputs it really receives, (W_goal - W_stored) . E[x], rounded, is added to
    the int32 bias (accumulator units s_in * s_w[c], the units the kernels add it in). `goal`: [out_ch, row_len]
    in int8 units; `mean`: the offset-applied int8 input patch mean ([row_len], or [C, kh*kw] for depthwise).

    Also taking back the shift the layers before pass on (a reference mean from a second run with every fitted
    layer at its rounded goal weights) was measured worse: the logits' noise-to-signal ratio against plain int8 on
    calibration samples 64-99 with --clusters 16 went 0.0061 -> 0.0064 (kws_dscnn), 0.0101 -> 0.0104 (ic_resnet8),
    and with --weight-bits 4 on ic_resnet8 0.026 -> 0.39, since there the rounded goal is plain 4-bit rounding, a
    poor model to aim at. The stored weights, scales and requantization are unchanged; the bias is data that the
    numpy reference and the C both read."""
    now, shift = correction_shift(graph, node, goal, mean)
    if not shift.any():
        return
    # The corrected bias must leave its channel's accumulator within int32 for any input (compress/bounds.py):
    # |bias| <= 2**31 - 1 - sum|w| * (128 + |io|) - n * |fo| * (128 + |io|). Only a channel whose scale was raised
    # to fit its bias sits near that limit (quantize.RAISED_TARGET leaves it 1/64 of int32, far more than a
    # correction of a few units per weight), so this limit is a guard, not a clamp that is expected to act.
    old = np.zeros(len(shift), np.int64)
    weights_share = channel_bounds(np.asarray(now, np.int64), old, int(node.attrs["input_offset"]),
                                   int(node.attrs.get("filter_offset", 0))).astype(np.int64)
    apply_bias_shift(graph, node, shift, np.maximum(INT32_MAX - weights_share, 0), np.int32, info)


def correction_shift(graph: Graph, node, goal: np.ndarray, mean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the layer's stored weights as rows [out_ch, row_len], the rounded accumulator shift (goal - stored) . mean
    per output channel) for bias correction; depthwise: one row of taps per channel, each with its own input
    mean."""
    w = graph.tensors[node.inputs[1]]
    now = rows(np.asarray(w.data), bool(node.attrs.get("depthwise"))).astype(np.float64)
    diff = goal - now
    acc = np.sum(diff * mean, axis=1) if mean.ndim == 2 else diff @ mean
    return now, np.rint(acc).astype(np.int64)


def apply_bias_shift(graph: Graph, node, shift: np.ndarray, room: np.ndarray, dtype, info: dict) -> None:
    """Adds `shift` to the layer's bias, each channel clipped to +-room, and never moves a bias that is already
    past its room; the change is recorded in info["bias_shift"]."""
    b = graph.tensors[node.inputs[2]]
    old = np.asarray(b.data, np.int64)
    new = np.where(np.abs(old) > room, old, np.clip(old + shift, -room, room))
    b.data = new.astype(dtype)
    info.setdefault("bias_shift", {})[node.name] = new - old


CLUSTERS_MARGIN = 0.1  # default budget: the codebooks may add 10 % to the bits of the indices


def _plan_clusters(graph: Graph, inputs, info: dict) -> dict[str, int]:
    """Codebook grouping of every clustered layer under one bytes budget (compress/cluster.py, "Budget"): each
    layer's candidate groupings are measured by bytes and output noise-to-signal ratio on the int8 model's
    calibration inputs, weighted by the layer's measured gain to the model's output (`_output_gains`), and
    `allocate` picks one per layer. Returns layer name -> group size."""
    settings, opts = info["settings"], info["options"]
    runner = SampleRunner(graph, inputs) if inputs else None
    names, options, groups, probes, budget = [], [], [], [], 0.0
    layers = {n.name for n in layer_nodes(graph)}
    for pos, node in enumerate(list(graph.nodes)):
        s = settings.get(node.name)
        if node.name in layers and s.clusters and not s.excluded:
            w = graph.tensors[node.inputs[1]]
            q, depthwise = np.asarray(w.data), bool(node.attrs.get("depthwise"))
            scales = np.asarray(w.quant.scale).reshape(-1)
            hessian = layer_hessian(node, graph, runner.inputs_of(node)) if runner is not None else None
            target = None
            if hessian is not None and node.name in info.get("float_weights", {}) and not (
                    s.sparsity > 0 or s.weight_bits < 8):
                target = _float_rows(graph, node, info)
            _, cands = cluster_layer(q, scales, s.clusters, depthwise, keep_zero=s.sparsity > 0, hessian=hessian,
                                     target=target)
            # only groupings that can be stored: one with no fewer bytes than dense int8 would lose to it
            cands = [c for c in cands if c.nbytes < q.size] or [min(cands, key=lambda c: c.nbytes)]
            signal = output_energy(q, scales, depthwise, hessian, target)
            opt = [(c.nbytes, c.error / signal) for c in cands]
            grp = [c.group_size for c in cands]
            bits = opts.clusters_budget if opts.clusters_budget else (1 + CLUSTERS_MARGIN) * index_bits(s.clusters)
            budget += q.size * bits / 8
            names.append(node.name)
            options.append(opt)
            groups.append(grp)
            coarse = min(range(len(cands)), key=lambda i: (cands[i].nbytes, -cands[i].group_size))
            probes.append((pos, cands[coarse].values, opt[coarse][1]))
        elif node.name in info.get("grid", {}):
            # a grid layer's int4 (int5) bytes count in the budget: what its K's bits per weight allow beyond
            # them goes to the codebook layers (or what it takes beyond them comes out of theirs)
            size = graph.tensors[node.inputs[1]].size
            k = info["grid"][node.name]["k"]
            bits = opts.clusters_budget if opts.clusters_budget else (1 + CLUSTERS_MARGIN) * index_bits(k)
            stored = (size + 1) // 2 if info["grid"][node.name]["bits"] == 4 else 4 * -(-size // INT5_PER_WORD)
            budget += size * bits / 8 - stored
        if runner is not None:
            runner.run(node)
    if runner is not None:
        gains = _output_gains(graph, runner, probes)
        options = [[(b, g * e) for b, e in opt] for opt, g in zip(options, gains)]
    picks = allocate(options, budget)
    return {n: g[i] for n, g, i in zip(names, groups, picks)}


def _output_gains(graph: Graph, runner: SampleRunner, probes) -> list[float]:
    """How much of a layer's output noise-to-signal ratio reaches the model's output, measured: the layer's
    coarsest clustering is put in alone, the graph is run on from that layer over the calibration samples, and the
    gain is the output's noise-to-signal ratio (against the unchanged int8 model, at the logits: `_logits`) over
    the layer's own. Residual branches, pooling and the requantization of later layers make it differ from 1 by an
    order of magnitude either way (ic_resnet8: 0.3 and 0.5 for the 1x1 shortcut convolutions, 2.6 for the final
    fully connected layer, 3 and 4.4 for the first two convolutions). Measured at the logits instead of the
    softmax output, the plan's logits noise-to-signal ratio against plain int8 (calibration samples 64-99, with
    --clusters 16, before bias correction) went from 0.0083 to 0.0075 on kws_dscnn; ic_resnet8's plan did not
    change. A layer whose probe changes nothing (layer ratio 0) gets gain 1."""
    return [1.0 if layer_nsr <= 0 else max(_output_nsr(graph, runner, {pos: values}) / layer_nsr, 1e-6)
            for pos, values, layer_nsr in probes]


def _output_nsr(graph: Graph, runner: SampleRunner, values: dict[int, np.ndarray]) -> float:
    """The model's output noise-to-signal ratio (at the logits, `_logits`, against the unchanged graph whose
    values `runner` holds after running every node) with the int8 weights of the layers at the positions given
    replaced by `values` ({node position: int8 weights}), over the runner's samples. The graph is left as it
    was."""
    nodes = list(graph.nodes)
    heads = _logits(graph)

    def logits_of(vals):
        out = []
        for t, centre in heads:
            zp = graph.tensors[t].quant.zp if graph.tensors[t].quant is not None else 0
            v = np.stack([np.asarray(v[t], np.float64).reshape(-1) for v in vals]) - zp
            out.append(v - v.mean(axis=1, keepdims=True) if centre else v)
        return out

    if not values:
        return 0.0
    tail = SampleRunner.__new__(SampleRunner)
    tail.graph, tail.values = graph, [dict(v) for v in runner.values]
    kept = {pos: graph.tensors[nodes[pos].inputs[1]].data for pos in values}
    try:
        for pos, v in values.items():
            graph.tensors[nodes[pos].inputs[1]].data = np.asarray(v, np.int8)
        for node in nodes[min(values):]:
            tail.run(node)
    finally:
        for pos, v in kept.items():
            graph.tensors[nodes[pos].inputs[1]].data = v
    # a model of several outputs: the noise summed over them, each relative to its own signal, so a layer that
    # feeds only one head is weighed by that head (single output: that output's ratio)
    return sum(float(np.mean((g - b) ** 2)) / max(float(np.mean(b ** 2)), 1e-12)
               for g, b in zip(logits_of(tail.values), logits_of(runner.values)))


def _logits(graph: Graph) -> list[tuple[str, bool]]:
    """Where the model's output noise is measured, per graph output: the output, or the input of a final Softmax
    (the logits) with each sample's mean over classes removed (softmax does not see it). An int8 softmax output is
    probabilities in steps of 1/256, mostly 0 and one value near 1, so its noise is mostly the flips of the
    top class and its rounding, not how much the logits moved."""
    heads = []
    for out in graph.outputs:
        producer = next((n for n in graph.nodes if out in n.outputs), None)
        if producer is not None and get_op(producer.op).logits_input and \
                graph.tensors[producer.inputs[0]].quant is not None:
            heads.append((producer.inputs[0], True))
        else:
            heads.append((out, False))
    return heads


def _reround(graph: Graph, node, hessian: np.ndarray, info: dict) -> None:
    """Re-round a pruned or 4-bit layer's int8 values against its inputs: the target is the float weights before
    pruning in units of the final per-channel scales (unchanged), the pruned positions are held at 0 and every
    other weight absorbs, through the inverse input Hessian, the output error of those before it (the OBS update
    that SparseGPT and GPTQ use, here with the magnitude mask fixed). Scales are untouched; storage_step corrects
    the bias once the layer's values are final."""
    w = graph.tensors[node.inputs[1]]
    depthwise = bool(node.attrs.get("depthwise"))
    qmax = weight_qmax(node)
    target = _float_rows(graph, node, info)
    mask = info["pruned_masks"].get(node.name)
    new = error_feedback_assign(target, None, InputHessian(hessian), None if mask is None else rows(mask, depthwise),
                                qmax=qmax)
    w.data = (np.ascontiguousarray(new.T).reshape(w.shape) if depthwise else new.reshape(w.shape)).astype(np.int8)


def _float_rows(graph: Graph, node, info: dict) -> np.ndarray:
    """The layer's float weights (before magnitude pruning) as [out_ch, row_len] rows in units of the final
    per-channel scales: what its int8 values approximate."""
    w = graph.tensors[node.inputs[1]]
    scale = np.asarray(w.quant.scale, np.float64).reshape(-1)
    return rows(info["float_weights"][node.name], bool(node.attrs.get("depthwise"))) / scale[:, None]


def _store_layer(graph: Graph, node, s: LayerSettings, hessian, info: dict, target=None) -> None:
    w = graph.tensors[node.inputs[1]]
    depthwise = bool(node.attrs.get("depthwise"))
    # one group: each output channel's row spans all the input's channels (conv OHWI and fully connected alike)
    blocks = not depthwise and w.shape[-1] == graph.tensors[node.inputs[0]].shape[-1]
    pattern = pattern_of(graph, node, s) if blocks else None
    block = (pattern.rows, pattern.cols) if pattern in (Pattern(2, 1), Pattern(4, 4)) else (4, 4)
    pixels = int(np.prod(graph.tensors[node.outputs[0]].shape[:-1]))
    cands = [] if s.excluded else _candidates(w, s, depthwise, int(node.attrs.get("filter_offset", 0)), hessian,
                                              target, info.get("cluster_groups", {}).get(node.name), blocks, block,
                                              pixels)
    kind, st, values, _ = min(cands, key=lambda c: (c[3], ORDER.index(c[0]))) if cands else \
        ("dense", None, w.data, w.size)
    w.data = np.asarray(values, np.int8)
    assign_storage(w, st if st is not None else WeightStorage("dense"))
    clustered = {"form": "codebook", "k": st.meta["k"], "bits": st.meta["bits"], "group_size": st.meta["group_size"],
                 "groups": int(st.arrays["codebooks"].shape[0])} if kind == "clustered" else None
    grid = info.get("grid", {}).get(node.name)
    if grid is not None:  # --clusters K on an evenly spaced grid (grid_layers): K asked, 2 * qmax + 1 levels
        clustered = {"form": "grid", "k": grid["k"], "levels": 2 * grid["qmax"] + 1, "bits": grid["bits"]}
    info["layers"][node.name] = {
        "storage": kind, "weights_bytes": w.storage.nbytes(w.data),
        "weights_bytes_dense": info["dense_before"].get(node.name, w.size),
        "sparsity": float(np.mean(w.data == 0)) if w.size else 0.0,
        "weight_bits": int(node.attrs.get("weight_bits", 8)), "clusters": clustered,
        "channels_removed": info["channels_removed"].get(node.name, 0)}


def layer_report(graph: Graph, node) -> dict:
    """Per-layer compression fields for report.json's `layers` (empty for layers without weights)."""
    # the 16-bit layers (ops/conv_s16.py, fully_connected_s16.py) have dense int8 weights as well
    if not traits_of(node.op).weighted_layer or len(node.inputs) < 2 \
            or not node.inputs[1]:
        return {}
    w = graph.tensors[node.inputs[1]]
    if not w.is_const:
        return {}
    entry = graph.meta.get("compression", {}).get("layers", {}).get(node.name)
    if entry is not None:
        return dict(entry)
    return {"storage": w.storage.kind if w.storage is not None else "dense", "weights_bytes_dense": w.size}


def compression_report(graph: Graph) -> dict:
    """report.json `compression`: achieved sparsity over all weights, clusters (K or None), weight bits (8, 4, or
    the average bits per weight as stored), totals before and after, and what was asked."""
    layers = layer_nodes(graph)
    tensors = [graph.tensors[n.inputs[1]] for n in layers]
    total = sum(t.size for t in tensors)
    zeros = sum(int((np.asarray(t.data) == 0).sum()) for t in tensors)
    stored = sum(t.storage.nbytes(t.data) if t.storage is not None else t.size for t in tensors)
    info = graph.meta.get("compression")
    kinds = sorted({t.storage.kind if t.storage is not None else "dense" for t in tensors})
    if kinds == ["int4"]:
        bits = 4.0
    elif kinds == ["dense"] or not total:
        bits = 8.0
    else:
        bits = round(8.0 * stored / total, 3)
    out = {"sparsity": float(zeros / total) if total else 0.0, "clusters": None, "weight_bits": bits,
           "weights_bytes": int(stored), "weights_bytes_dense": int(total), "storage_kinds": kinds}
    if info is None:
        return out
    opts: CompressionOptions = info["options"]
    dense_before = int(sum(info["dense_before"].values()))
    out.update({
        "clusters": max([s.clusters for s in info["settings"].values() if s.clusters]
                        + [g["k"] for g in info.get("grid", {}).values()], default=None),
        "weights_bytes_dense": dense_before,
        "ratio_vs_int8": round(stored / dense_before, 4) if dense_before else None,
        "channels_removed": dict(info["channels_removed"]),
        # the least-squares refit after channel pruning: relative output error left per refitted layer, or why
        # it was skipped (compress/refit.py); None when no channels were removed or there was no calibration
        "refit": info.get("refit"),
        # how --prune-channels was spread over the channel groups by measured sensitivity (compress/
        # channel_budget.py): fractions per layer, MACs (dense, uniform budget, allocated), summed held-out logits
        # NSRs (uniform, allocated); or why not; None when not asked or without calibration data
        "channel_allocation": info.get("channel_allocation"),
        "unmatched_patterns": list(info["unmatched_patterns"]),
        # the layers --clusters put on an evenly spaced grid, stored and run as int4 or int5 (grid_layers)
        "grid_layers": sorted(info.get("grid", {})),
        "options": opts.to_json(),
    })
    return out


__all__ = ["prune_step", "grid_layers", "storage_step", "fitted_layers", "distilled_reference", "layer_report",
           "compression_report"]
