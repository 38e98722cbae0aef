"""Fully connected: bit-exact numpy int8 reference kernel (TFLite/CMSIS-NN semantics).

`acc[b, o] = sum_d (x[b, d] + input_offset) * (w[o, d] + filter_offset) + bias[o]`, then requantized per tensor
(mult/shift of length 1) or per output channel. CMSIS conventions: offsets are negated zero points for input and
filter, the plain zero point for the output. The C kernel accumulates in int32: the bound
|bias| + (sum|w| + depth * |filter_offset|) * (128 + |input_offset|) of every output channel is checked against
int32 at compile time (tinyaot/compress/bounds.py), and a layer past it is refused by name.
"""
from __future__ import annotations

import numpy as np

from tinyaot.core.fixedpoint import exact_matmul, requantize_to_int8
from onnx import helper
from tinyaot.core.quant import layer_weights, weight_qmax
from tinyaot.ops.common import (FLOAT_CHUNK, activation_grad, activation_nodes, dequantized_const, float_bias,
                                float_const, fold_input_offset, fold_requant_table, fused_activation, identity_perm,
                                out_params, record_raised, set_const)
from tinyaot.ops.compressed import (MVE_BLOCK, block_cost, block_scratch_bytes, compressed_filter, is_compressed,
                                    mve_block_cost, mve_block_ok)
from tinyaot.ops.intbounds import layer_bounds
from tinyaot.core.quant import input_magnitude
from tinyaot.core.fixedpoint import quantize_multiplier_array
from tinyaot.ops.registry import ConstArray, KernelCall, OpSpec, OracleLayer, register, Traits, Variant, variant_of
from tinyaot.ops import mve  # Helium variant (mve-mac)
from tinyaot.ops import decoded  # int4 weights unpacked by masks (tinyaot_fully_connected_s4_fold.c)

# The "fold" variant (templates/kernels/tinyaot_fully_connected_s8_fold.c): input offset folded into the bias,
# weights rearranged for blocks of eight output channels (interleave_fc), a requantization table.
FOLD = "fold"
# Cost model, instructions under QEMU: per multiply-accumulate and per output value, keyed by target.has_dsp;
# generic fitted to ad_fc_autoencoder's 640 -> 128 and 128 -> 128 layers (1.96 / 2.29 per MAC on mps2-an386, 4.84 /
# 5.18 on mps2-an385); fold (eight-channel block, requantization table) to the same layers (1.44 / 1.62 and 2.71 /
# 2.91; its 8 -> 128 layer 5.11 / 6.72). Fewer than four output channels never fill a block (vww's 256 -> 2 layer
# ran 2.40 -> 2.98), so fold is offered from four channels on.
_FOLD_COST = {True: (1.40, 29.0), False: (2.66, 32.0)}
_GENERIC_COST = {True: (1.88, 53.0), False: (4.76, 54.0)}
_S4_FOLD_COST = {True: (1.50, 30.0), False: (3.0, 32.0)}  # tinyaot_fully_connected_s4_fold (int4 weights)
# tinyaot_fully_connected_s5_fold (int5 weights): 68 instructions per 48 multiply-adds with the loop against int4's
# 46 per 32, counted from the kernel's groups; on mps2-an386 ad_fc_autoencoder --clusters 32 ran 482,967 against
# int4's 457,047 (1.057x: 1.58 per MAC at int4's per-output figure). Without DSP (the C path, not measured): int4's
# figure with a shift and a mask more per pair of weights, estimated
_S5_FOLD_COST = {True: (1.58, 30.0), False: (3.2, 32.0)}
# the storage kinds a fold kernel unpacks by masks in registers -> (its accumulator bound, its cost): int4 in
# tinyaot_fully_connected_s4_fold.c (per MAC about the int8 fold kernel's cost: 46 against 43 instructions per 32),
# int5 in tinyaot_fully_connected_s5_fold.c (three lane pairs per word)
_MASKED_FOLD = {"int4": (decoded.s4_fold_bound, _S4_FOLD_COST), "int5": (decoded.s5_fold_bound, _S5_FOLD_COST)}


def interleave_quads(rows: np.ndarray) -> np.ndarray:
    """[out, depth] int8 -> the fold kernel's flat layout: per block of four channels, per group of four inputs the
    four bytes of each channel in turn, then the depth % 4 last values of each channel in turn; the channels after
    the last whole block in order. A permutation of the same bytes (flash does not grow)."""
    rows = np.asarray(rows)
    out_c, d = rows.shape
    d4 = d - d % 4
    nb = out_c // 4
    blocks = rows[:4 * nb].reshape(nb, 4, d)
    head = blocks[:, :, :d4].reshape(nb, 4, d4 // 4, 4).transpose(0, 2, 1, 3).reshape(nb, 4 * d4)
    tail = blocks[:, :, d4:].reshape(nb, 4 * (d - d4))
    return np.concatenate([np.concatenate([head, tail], axis=1).reshape(-1), rows[4 * nb:].reshape(-1)])


def interleave_fc(rows: np.ndarray) -> np.ndarray:
    """[out, depth] int8 -> the fold FC kernel's flat layout: per block of eight channels, per group of four inputs
    the four bytes of each channel in turn, then the depth % 4 last values of each channel in turn; then one block of
    four the same way if four or more channels are left (interleave_quads); the last out % 4 rows in order. A
    permutation of the same bytes (flash does not grow)."""
    rows = np.asarray(rows)
    out_c, d = rows.shape
    d4 = d - d % 4
    nb = out_c // 8
    blocks = rows[:8 * nb].reshape(nb, 8, d)
    head = blocks[:, :, :d4].reshape(nb, 8, d4 // 4, 4).transpose(0, 2, 1, 3).reshape(nb, 8 * d4)
    tail = blocks[:, :, d4:].reshape(nb, 8 * (d - d4))
    return np.concatenate([np.concatenate([head, tail], axis=1).reshape(-1), interleave_quads(rows[8 * nb:])])


def fully_connected_s8(
    input: np.ndarray,
    weights: np.ndarray,
    bias: np.ndarray | None,
    output_mult,
    output_shift,
    *,
    input_offset: int,
    filter_offset: int = 0,
    output_offset: int,
    act_min: int = -128,
    act_max: int = 127,
) -> np.ndarray:
    """input int8 [batches, depth]; weights int8 [out, depth]; bias int32 [out] or None -> int8 [batches, out]."""
    x = np.asarray(input).astype(np.int64) + int(input_offset)
    wt = np.asarray(weights).astype(np.int64) + int(filter_offset)
    if x.ndim != 2 or wt.ndim != 2 or x.shape[1] != wt.shape[1]:
        raise ValueError(f"fully_connected_s8: input {x.shape} and weights {wt.shape} do not match")
    out_ch = wt.shape[0]
    acc = exact_matmul(x, wt.T)
    if bias is not None:
        acc = acc + np.asarray(bias, dtype=np.int64)
    mult = np.asarray(output_mult, dtype=np.int64).reshape(-1)
    shift = np.asarray(output_shift, dtype=np.int64).reshape(-1)
    if mult.size not in (1, out_ch) or shift.size != mult.size:
        raise ValueError(f"fully_connected_s8: expected 1 or {out_ch} multipliers/shifts, got {mult.size}/{shift.size}")
    return requantize_to_int8(acc, mult, shift, output_offset, act_min, act_max)


# ---- the operator: shape inference, quantization, reference, C kernel call, onnxruntime equivalent ----
def fc_weight_row_inputs(node, graph, x: np.ndarray) -> np.ndarray:
    """OpSpec.weight_row_inputs of a fully connected layer (int8 or 16-bit): its input rows, [M, depth]."""
    return x.reshape(-1, graph.tensors[node.inputs[1]].shape[1])


@register("FullyConnected", traits=Traits(fuses_activation=True, weighted_layer=True, absorbs_column_order=True,
                                            scratch=True, kernels=(
                     "tinyaot_fully_connected_s8", "tinyaot_fully_connected_s4", "tinyaot_fully_connected_s5",
                     "tinyaot_fully_connected_s8_clustered",
                     "tinyaot_fully_connected_s8_sparse", "tinyaot_fully_connected_s8_rle",
                     "tinyaot_fully_connected_s8_block")))
class FullyConnected(OpSpec):
    """tinyaot's fully connected op: Y[M,N] = X[M,K] @ W[N,K].T + B[N], made by `fuse_fully_connected` from ONNX
    MatMul (+ Add) and Gemm. Weights are stored [out, in] (CMSIS's layout), per-output-channel int8."""

    internal = True  # not an ONNX op type; listed under MatMul and Gemm

    def infer_shapes(self, node, graph):
        m = graph.tensors[node.inputs[0]].shape[0]
        return [(m, graph.tensors[node.inputs[1]].shape[0])]

    def quantize(self, node, graph, ranges):
        x = graph.tensors[node.inputs[0]]
        qo, lo, hi = out_params(node, graph, ranges)
        # float weights are quantized here; a pre-quantized model's int8 weights (one zero point, which the
        # kernel's filter offset subtracts) and int32 bias are kept as given
        qw, wq, qb, bias_q, filter_offset, raised = layer_weights(
            graph.tensors[node.inputs[1]], graph.tensors[node.inputs[2]], 0, x.quant.s,
            f"MatMul/Gemm node {node.name!r}", input_offset=-x.quant.zp, allow_filter_offset=True,
            qmax=weight_qmax(node))
        record_raised(graph, node, raised)
        node.inputs[1:] = [set_const(graph, node.name + "_weights", qw, "int8", wq),
                           set_const(graph, node.name + "_bias", qb, "int32", bias_q)]
        mult, shift = quantize_multiplier_array(np.float64(x.quant.s) * wq.scale / np.float64(qo.s))
        node.attrs.update(output_mult=mult, output_shift=shift, input_offset=-x.quant.zp, output_offset=qo.zp,
                          act_min=lo, act_max=hi, filter_offset=filter_offset)

    def reference(self, node, graph, inputs):
        a = node.attrs
        return [fully_connected_s8(inputs[0], inputs[1], inputs[2], a["output_mult"], a["output_shift"],
                                   input_offset=a["input_offset"], filter_offset=a.get("filter_offset", 0),
                                   output_offset=a["output_offset"],
                                   act_min=a["act_min"], act_max=a["act_max"])]

    def batches_reference(self, node, graph):
        return True  # fully_connected_s8 takes [batches, depth], one row at a time

    def macs(self, node, graph):
        m = graph.tensors[node.inputs[0]].shape[0]
        return int(m * graph.tensors[node.inputs[1]].size)

    def weights_bytes(self, node, graph):
        w = graph.tensors[node.inputs[1]]  # as stored in flash: compression may pack it (compress/storage.py)
        return w.storage.nbytes(w.data) if w.storage is not None else w.nbytes

    def params_bytes(self, node, graph):
        return graph.tensors[node.inputs[2]].nbytes + 8 * graph.tensors[node.inputs[1]].shape[0]

    def scratch_bytes(self, node, graph):
        w = graph.tensors[node.inputs[1]]
        if w.storage is not None and w.storage.kind == "sparse_block":  # the int16 column of two input rows
            if variant_of(node) == MVE_BLOCK:  # int8 columns unless the depth is a multiple of 4
                return 0 if w.shape[1] % 4 == 0 else 2 * (-(-w.shape[1] // 4) * 4)
            one_row = graph.tensors[node.inputs[0]].shape[0] == 1 and w.shape[1] % 4 == 0  # read in place
            return 0 if one_row else block_scratch_bytes(w.shape[1])
        return int(node.attrs.get("scratch_bytes", 0))

    def variants(self, node, graph, target):
        w = graph.tensors[node.inputs[1]]
        if w.storage is not None and w.storage.kind == "sparse_block":  # block kernels (DSP/C and Helium)
            rows = graph.tensors[node.inputs[0]].shape[0]
            column = not (rows == 1 and w.shape[1] % 4 == 0)
            listed = [Variant("generic", block_cost(w, rows, bool(target.has_dsp), column))]
            if mve_block_ok(w, target):
                listed.append(Variant(MVE_BLOCK, mve_block_cost(w, rows, w.shape[1] % 4 != 0)))
            return tuple(listed)
        masked = _MASKED_FOLD.get(w.storage.kind) if w.storage is not None else None
        if (target.core != "generic" and masked is not None and node.attrs.get("filter_offset", 0) == 0
                and np.size(node.attrs["output_mult"]) == w.shape[0]
                and masked[0](w.data, graph.tensors[node.inputs[2]].data, node.attrs["input_offset"]) < 2**31):
            # int4 / int5 unpacked by masks in registers (the kind's fold kernel, _MASKED_FOLD)
            rows = graph.tensors[node.inputs[0]].shape[0]
            per_mac, per_out = masked[1][bool(target.has_dsp)]
            return (Variant("generic"), Variant(FOLD, self.macs(node, graph) * per_mac + rows * w.shape[0] * per_out),
                    *mve.nibble_variants(node, graph, target, self.macs(node, graph)))
        if target.core == "generic" or is_compressed(w) or node.attrs.get("filter_offset", 0) != 0:
            return (Variant("generic"), *mve.nibble_variants(node, graph, target, self.macs(node, graph)))
        macs, outs = self.macs(node, graph), graph.tensors[node.inputs[0]].shape[0] * w.shape[0]

        def cost(table):
            per_mac, per_out = table[bool(target.has_dsp)]
            return macs * per_mac + outs * per_out

        listed = [Variant("generic", cost(_GENERIC_COST))]
        # fold only from four output channels on (fewer never fill its block) and where its table is exact; the
        # Helium variant pads its blocks of four with zero rows instead, so it stays offered below four channels
        if w.shape[0] >= 4 and self._fold_table(node, graph) is not None:
            listed.append(Variant(FOLD, cost(_FOLD_COST)))
        return (*listed, *mve.fc_variants(node, graph, target, macs))

    def _fold_table(self, node, graph):
        """The fold kernel's requantization table for this layer (ops/common.py), None where it is not exact."""
        a = node.attrs
        return fold_requant_table(graph.tensors[node.inputs[2]].data, graph.tensors[node.inputs[1]].data,
                                  a["input_offset"], a["output_mult"], a["output_shift"], a["output_offset"])

    def render(self, node, graph, cname):
        a = node.attrs
        m, k = graph.tensors[node.inputs[0]].shape
        n = graph.tensors[node.inputs[1]].shape[0]
        # compressed weights: that kind's kernel, the storage's arrays as constants (tinyaot/ops/compressed.py)
        cf = compressed_filter(graph.tensors[node.inputs[1]], cname, "fc",
                               layer=dict(bias=graph.tensors[node.inputs[2]].data, input_offset=a["input_offset"],
                                          mult=a["output_mult"], shift=a["output_shift"],
                                          output_offset=a["output_offset"]),
                               helium=variant_of(node) == MVE_BLOCK)
        kernel = cf.kernel if cf is not None else "tinyaot_fully_connected_s8"
        weights = cf.consts if cf is not None else [ConstArray("int8_t", f"{cname}_weights",
                                                               graph.tensors[node.inputs[1]].data)]
        bias = graph.tensors[node.inputs[2]].data
        if variant_of(node) == FOLD and cf is not None:  # int4 / int5: biased fields in words, unpacked by masks
            five = graph.tensors[node.inputs[1]].storage.kind == "int5"
            kernel = f"tinyaot_fully_connected_s{5 if five else 4}_fold" + (
                "" if self._fold_table(node, graph) is not None else "_rq")
            layout = decoded.s5_fold_layout if five else decoded.s4_fold_layout
            weights = [ConstArray("uint32_t", f"{cname}_weights", layout(graph.tensors[node.inputs[1]].data))]
            cf = None
        if variant_of(node) == FOLD and cf is None and not kernel.startswith(("tinyaot_fully_connected_s4_fold",
                                                                              "tinyaot_fully_connected_s5_fold")):
            # input offset folded into the bias, weights rearranged for the kernel's eight-channel block
            kernel = "tinyaot_fully_connected_s8_fold"
            wd = graph.tensors[node.inputs[1]].data
            # (bias: the folded one of _fold_table, below)
            weights = [ConstArray("int8_t", f"{cname}_weights", interleave_fc(wd))]
        mult, shift = a["output_mult"], a["output_shift"]
        if kernel in ("tinyaot_fully_connected_s8_fold", "tinyaot_fully_connected_s4_fold",
                      "tinyaot_fully_connected_s5_fold"):  # fold_support.h table
            bias, mult, shift = self._fold_table(node, graph)
        if kernel in ("tinyaot_fully_connected_s4_fold_rq", "tinyaot_fully_connected_s5_fold_rq"):
            # folded bias, one multiplier and shift per channel
            bias = fold_input_offset(bias, graph.tensors[node.inputs[1]].data, a["input_offset"])
        if cf is not None and cf.requant is not None:  # block kernels: folded bias, their requantization
            bias, mult, shift = cf.requant
        consts = weights + [ConstArray("int32_t", f"{cname}_bias", bias),
                            ConstArray("int32_t", f"{cname}_mult", mult),
                            ConstArray("int32_t", f"{cname}_shift", shift)]
        params = {"input_offset": a["input_offset"], "filter_offset": a.get("filter_offset", 0),
                  "output_offset": a["output_offset"], "activation": [a["act_min"], a["act_max"]],
                  "mult": f"{cname}_mult", "shift": f"{cname}_shift", "input_dims": [m, 1, 1, k],
                  "filter_dims": [k, 1, 1, n], "bias_dims": [1, 1, 1, n], "output_dims": [m, 1, 1, n],
                  "filter": cf.arg if cf is not None else f"{cname}_weights", "bias": f"{cname}_bias"}
        files = cf.files if cf is not None else [kernel + ".c"]
        if kernel.startswith(("tinyaot_fully_connected_s4_fold", "tinyaot_fully_connected_s5_fold")):
            files = ["tinyaot_fold_support.h", "tinyaot_fc_fold_groups.h", kernel.removesuffix("_rq") + ".c"]
        elif kernel == "tinyaot_fully_connected_s8_fold":
            files = ["tinyaot_fold_support.h"] + files
        if variant_of(node) == mve.MVE_FC:
            return mve.render_fc(node, graph, cname, params)
        if variant_of(node) == mve.MVE_NIBBLE:
            return mve.render_fc_nibble(node, graph, cname, params)
        return KernelCall(kernel, files=files, consts=consts, template="layers/fully_connected.c.j2", params=params)

    def int_bounds(self, node, graph):
        w = np.asarray(graph.tensors[node.inputs[1]].data)
        rows = w.reshape(w.shape[0], -1)
        extra = []
        st = graph.tensors[node.inputs[1]].storage
        if st is not None and st.kind == "int4" and rows.shape[1] < 65000:
            # the DSP path of tinyaot_fully_connected_s4 (taken only for depth < 65000, where 16 * 8 * 256 * depth
            # < 2**31 anyway) sums 16 * w * (x + io) before adding it to the accumulator
            m = input_magnitude(int(node.attrs["input_offset"]))
            lanes = 16 * int(np.abs(rows.astype(np.int64)).sum(axis=1).max(initial=0)) * m
            extra.append(("4-bit lane sum 16 x sum|w| x max|x - zp|", lanes))
        return layer_bounds(node, graph, rows, extra)

    def layer_class(self, node):
        return "fully connected"

    def layout(self, node, ctx):
        """Input and output in ONNX's order; a flattened input left in NHWC byte order (ctx.column_order) is read
        through weights whose columns are permuted to match."""
        x = node.inputs[0]
        src = ctx.column_order(x)
        if src is not None:
            w = ctx.graph.tensors[node.inputs[1]].data
            w2 = np.empty_like(w)
            w2[:, src] = w
            quant = ctx.graph.tensors[node.inputs[1]].quant  # per output row: unchanged by a column permutation
            node.inputs[1] = ctx.graph.add_const(node.inputs[1] + "_nhwc", w2)
            ctx.graph.tensors[node.inputs[1]].quant = quant
        elif ctx.perm[x] != identity_perm(len(ctx.logical[x])):
            node.inputs[0] = ctx.ensure(x, identity_perm(len(ctx.logical[x])), node)
        out = node.outputs[0]
        ctx.set_out(out, ctx.graph.tensors[out].shape, identity_perm(2))
        ctx.emit(node)
        return True

    # ---- compression, refitting and float evaluation (compress/prune.py, compress/refit.py) ----
    def compression_kind(self, node):
        return "fully_connected"

    def pre_activation(self, node, graph, x):
        w, b = float_const(graph, node, 1, x), float_const(graph, node, 2, x)

        def block(xs):
            y = xs.reshape(len(xs), -1) @ w.T
            return y if b is None else y + b

        return np.concatenate([block(x[s:s + FLOAT_CHUNK]) for s in range(0, len(x), FLOAT_CHUNK)])

    def evaluate_float(self, node, graph, inputs):
        return [fused_activation(node, self.pre_activation(node, graph, inputs[0]))]

    def backward_float(self, node, graph, inputs, outputs, grad_out):
        x = inputs[0]
        w = float_const(graph, node, 1, x)
        g = activation_grad(node, outputs[0], grad_out[0]).reshape(len(x), -1)
        params = {1: g.T @ x.reshape(len(x), -1)}
        if len(node.inputs) > 2 and node.inputs[2]:
            params[2] = g.sum(axis=0).reshape(graph.tensors[node.inputs[2]].shape)
        return [(g @ w).reshape(x.shape)] + [None] * (len(inputs) - 1), params

    def weight_row_inputs(self, node, graph, x):
        return fc_weight_row_inputs(node, graph, x)

    def out_channel_axis(self, node, graph):
        return 0  # weights [out, in]

    def input_channels_prunable(self, node, graph, t, channels):
        shape = graph.tensors[t].shape
        return len(shape) == 2 and graph.tensors[node.inputs[1]].shape[1] == shape[-1]

    def prune_input_channels(self, node, graph, channels, keep, gone, value):
        cw = np.asarray(graph.tensors[node.inputs[1]].data, np.float64)
        out_c = cw.shape[0]
        cw3 = cw.reshape(out_c, -1, channels)  # [out, positions * channels], channels innermost
        cb = float_bias(graph, node, out_c) + cw3[:, :, gone].sum(axis=1) @ value
        return cw3[:, :, keep].reshape(out_c, -1), cb

    def oracle(self, node, graph):
        w = graph.tensors[node.inputs[1]]
        b = graph.tensors[node.inputs[2]]
        wq = type(w.quant)(w.quant.scale, w.quant.zero_point, 1)  # W.T is [K, N]: channels on axis 1
        n1, i1, wf = dequantized_const(node.name + "_w", np.ascontiguousarray(w.data.T), wq)
        n2, i2, bf = dequantized_const(node.name + "_b", b.data, b.quant)
        mm = helper.make_node("MatMul", [node.inputs[0], wf], ["mm_out"])
        add = helper.make_node("Add", ["mm_out", bf], ["fc_out"])
        n3, i3, out = activation_nodes(node, "fc_out")
        return OracleLayer(n1 + n2 + [mm, add] + n3, i1 + i2 + i3, out)
