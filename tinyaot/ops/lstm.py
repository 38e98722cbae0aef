"""LSTM: the ONNX op (forward, reverse or bidirectional; initial states given as constants or zero; static sequence
length), integer-only as CMSIS-NN / TFLite's integer LSTM: int8 inputs and weights, int16 gates and cell state.

Fixed-point formats (all roundings are round-half-away-from-zero divides by a power of two, `rdbpot`):
- x: int8, calibrated (scale s_x, zero point z_x). h (the output Y and the recurrent input): int8, scale 1/128,
  zero point 0 (h = o * tanh(c) lies in (-1, 1)); 1.0 saturates to 127/128.
- W [D, 4H, I] and R [D, 4H, H]: int8, symmetric, one scale per row (per gate unit). B: Wb + Rb in Q3.12 (int32).
- gate pre-activation z (Q3.12 int16, |z| < 8): z = sat16(requant(sum W (x - z_x)) + requant(sum R h) + b), the two
  int32 accumulators rescaled per row by s_x s_w 2^12 and s_r 2^-7 2^12 (quantize_multiplier, as every layer).
- sigmoid, tanh: Q3.12 -> Q0.15 int16 with integer arithmetic only: z << 14 is Q5.26, sigmoid(v) = 1 / (1 + exp(-|v|))
  (or 1 minus it for v < 0) from the fixed-point exp and reciprocal the softmax uses (Q0.31), tanh(v) =
  2 sigmoid(2v) - 1. Both are within 2^-15 + 1e-6 of the real functions.
- cell c: Q4.11 int16, saturated to [-32767, 32767] (|c| < 16; -32768 is excluded so that 2c in Q5.26 fits int32):
  c = sat(rdbpot(f c, 15) + rdbpot(i g, 19)), products of two Q0.15 / Q4.11 values are below 2^30.
- h = clamp(rdbpot(o * tanh(c), 23), -128, 127): Q0.15 * Q0.15 = Q0.30 -> units of 2^-7.
ONNX gate order in W, R, B: i, o, f, c. The C kernel (templates/kernels/tinyaot_lstm_s8.c) unrolls nothing by
hand but runs the static sequence step by step, reading W and R from flash at every step; its scratch is the cell
state (2 B H bytes) and one batch row's gates (8 H bytes). The previous h is read back from Y itself.

Accuracy against the float op on the dequantized inputs (onnxruntime's LSTM, the per-layer oracle): the gates' and
cell's fixed-point steps (2^-12, 2^-15, 2^-11) compound over the steps, so the per-layer bound is not 1 LSB but the
`oracle_tolerance` below (6 output steps, measured; one step on small random layers).
"""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from tinyaot.core.errors import TinyaotError
from tinyaot.core.fixedpoint import (
    exp_on_negative_values,
    multiply_by_quantized_multiplier,
    one_over_one_plus_x_for_x_in_0_1,
    quantize_multiplier_array,
    rounding_divide_by_pot,
)
from tinyaot.ir import QuantParams
from tinyaot.ops.common import set_const
from tinyaot.ops.registry import IN0, OUT0, SCRATCH, ConstArray, KernelCall, OpSpec, OracleLayer, Traits, register

KERNEL = "tinyaot_lstm_s8"
H_SCALE = 1.0 / 128
GATE_BITS = 12  # Q3.12 pre-activations
CELL_BITS = 11  # Q4.11 cell state
INT32_MIN = -(2**31)


def _sigmoid_q31(v: np.ndarray) -> np.ndarray:
    """Q5.26 int -> sigmoid in Q0.31 (int64 array holding int32 values)."""
    v = np.asarray(v, np.int64)
    s = one_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(-np.abs(v)))  # 1/(1+exp(-|v|)) in (1/2, 1]
    return np.where(v >= 0, s, 2**31 - s)


def sigmoid_q15(z: np.ndarray) -> np.ndarray:
    """Q3.12 -> Q0.15 in [0, 32767]."""
    return np.minimum(rounding_divide_by_pot(_sigmoid_q31(np.asarray(z, np.int64) << 14), 16), 32767)


def tanh_q15(v26: np.ndarray) -> np.ndarray:
    """Q5.26 value with |2 v| < 2^31 -> tanh in Q0.15, [-32768, 32767]."""
    t = rounding_divide_by_pot(_sigmoid_q31(np.asarray(v26, np.int64) * 2) - 2**30, 15)
    return np.clip(t, -32768, 32767)


def lstm_s8(x, w, r, bias, mult_x, shift_x, mult_h, shift_h, h0, c0, *, x_offset: int,
            reverse: int = 0) -> np.ndarray:
    """x int8 [T, B, I]; w int8 [D, 4H, I]; r int8 [D, 4H, H]; bias int32 [D, 4H]; mult/shift int32 [D, 4H];
    h0 int8 [D, B, H]; c0 int16 [D, B, H] -> Y int8 [T, D, B, H]. Direction 1 runs backwards in time, and so does
    direction 0 when `reverse` (ONNX direction="reverse")."""
    x = np.asarray(x, np.int64) + int(x_offset)
    steps, batch = x.shape[:2]
    dirs, four_h = np.asarray(w).shape[:2]
    hidden = four_h // 4
    y = np.zeros((steps, dirs, batch, hidden), np.int8)
    for d in range(dirs):
        wd, rd = np.asarray(w[d], np.int64), np.asarray(r[d], np.int64)
        h = np.asarray(h0[d], np.int64)
        c = np.asarray(c0[d], np.int64)
        for s in range(steps):
            t = steps - 1 - s if (d == 1 or reverse) else s
            z = (multiply_by_quantized_multiplier(x[t] @ wd.T, mult_x[d], shift_x[d])
                 + multiply_by_quantized_multiplier(h @ rd.T, mult_h[d], shift_h[d]) + np.asarray(bias[d], np.int64))
            z = np.clip(z, -32768, 32767)
            gi, go, gf = (sigmoid_q15(z[:, k * hidden:(k + 1) * hidden]) for k in range(3))
            gc = tanh_q15(z[:, 3 * hidden:] << 14)
            c = np.clip(rounding_divide_by_pot(gf * c, 15) + rounding_divide_by_pot(gi * gc, 19), -32767, 32767)
            h = np.clip(rounding_divide_by_pot(go * tanh_q15(c << 15), 23), -128, 127)
            y[t, d] = h
    return y


def row_quant(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per row of the last axis: (int8 data, float64 scale per row)."""
    amax = np.abs(w).max(axis=-1)
    scale = np.where(amax > 0, amax / 127.0, 1.0)
    return np.clip(np.round(w / scale[..., None]), -127, 127).astype(np.int8), scale


@register("LSTM", traits=Traits(scratch=True, kernels=(KERNEL,)))
class LSTM(OpSpec):
    # The per-layer bound against onnxruntime's float LSTM on the dequantized input, in output steps (1/128),
    # measured (figures in tests/ops/test_lstm.py's and tests/e2e/test_sequence_models.py's docstrings): 1 over
    # random layers (8 and 16 steps, forward / reverse / bidirectional, 4 seeds x 6 inputs), 6 over all 300 samples
    # of tests/models/pt_frames_lstm (16 steps, 20 units). The float oracle keeps h and c exact between steps while
    # the int8 layer re-rounds h to 1/128 and c to 2^-11 at every step; those errors compound over the sequence.
    # The model-level figure is what matters: the int8 top-1 equals the float one there.
    oracle_tolerance = 6

    def _dims(self, node, graph):
        t, b, i = graph.tensors[node.inputs[0]].shape
        dirs = 2 if node.attrs.get("direction", "forward") == "bidirectional" else 1
        return t, b, i, int(node.attrs["hidden_size"]), dirs

    def infer_shapes(self, node, graph):
        name = f"{node.op} node {node.name!r}"
        if len(graph.tensors[node.inputs[0]].shape) != 3:
            raise TinyaotError(f"{name}: X must be [seq_length, batch, input_size]")
        used = {i for n in graph.nodes for i in n.inputs} | set(graph.outputs)
        outs = list(node.outputs) + [""] * (3 - len(node.outputs))
        if len(node.inputs) > 7 and node.inputs[7]:
            p = graph.tensors[node.inputs[7]]
            if not p.is_const or np.any(np.asarray(p.data) != 0):  # all-zero peepholes are no peepholes
                raise TinyaotError(f"{name}: peepholes (P) are not supported")
        if outs[2] in used and outs[2] or (outs[0] in used and outs[0] and outs[1] in used and outs[1]):
            raise TinyaotError(f"{name}: one output only, Y or Y_h (Y_c, the last cell state, is not supported)")
        t, b, _, h, dirs = self._dims(node, graph)
        # The unused outputs (often named "") are dropped here, where the IR first meets the node, so no pass has
        # to handle nameless outputs. Y_h alone: the kernel keeps h in the output buffer itself (last_only).
        if "last_only" not in node.attrs:  # decided once, at import
            node.attrs["last_only"] = int(not (outs[0] and outs[0] in used))
            node.outputs[:] = [outs[node.attrs["last_only"]]]
        return [(dirs, b, h)] if node.attrs["last_only"] else [(t, dirs, b, h)]

    def _check(self, node, graph):
        name = f"LSTM node {node.name!r}"
        a = node.attrs
        if int(a.get("layout", 0)) != 0:
            raise TinyaotError(f"{name}: layout=1 (batch first) is not supported")
        if "clip" in a or int(a.get("input_forget", 0)):
            raise TinyaotError(f"{name}: clip and input_forget are not supported")
        acts = [s.decode() if isinstance(s, bytes) else s for s in a.get("activations", [])]
        if acts and [x.lower() for x in acts] != ["sigmoid", "tanh", "tanh"] * (len(acts) // 3):
            raise TinyaotError(f"{name}: only the default activations (Sigmoid, Tanh, Tanh) are supported")
        if a.get("direction", "forward") not in ("forward", "reverse", "bidirectional"):
            raise TinyaotError(f"{name}: unknown direction {a.get('direction')!r}")
        ins = list(node.inputs) + [""] * (8 - len(node.inputs))
        for k in (1, 2, 3, 4, 5, 6, 7):
            if ins[k] and not graph.tensors[ins[k]].is_const:
                what = {1: "W", 2: "R", 3: "B", 4: "sequence_lens", 5: "initial_h", 6: "initial_c", 7: "P"}[k]
                raise TinyaotError(f"{name}: {what} must be a constant")
        t = graph.tensors[node.inputs[0]].shape[0]
        if ins[4] and np.any(np.asarray(graph.tensors[ins[4]].data) != t):
            raise TinyaotError(f"{name}: sequence_lens must equal the static sequence length {t}")
        return ins

    def quantize(self, node, graph, ranges):
        ins = self._check(node, graph)
        t, b, i, h, dirs = self._dims(node, graph)
        xq = graph.tensors[node.inputs[0]].quant
        w, r = (np.asarray(graph.tensors[ins[k]].data, np.float64) for k in (1, 2))
        bias = (np.asarray(graph.tensors[ins[3]].data, np.float64).reshape(dirs, 8 * h) if ins[3]
                else np.zeros((dirs, 8 * h)))
        wq, sw = row_quant(w)
        rq, sr = row_quant(r)
        bq = np.round((bias[:, :4 * h] + bias[:, 4 * h:]) * 2**GATE_BITS).astype(np.int64)
        mx, sx = quantize_multiplier_array((np.float64(xq.s) * sw * 2**GATE_BITS).ravel())
        mh, sh = quantize_multiplier_array((H_SCALE * sr * 2**GATE_BITS).ravel())
        h0 = np.asarray(graph.tensors[ins[5]].data, np.float64) if ins[5] else np.zeros((dirs, b, h))
        c0 = np.asarray(graph.tensors[ins[6]].data, np.float64) if ins[6] else np.zeros((dirs, b, h))
        h0q = np.clip(np.round(h0 / H_SCALE), -128, 127).astype(np.int8)
        c0q = np.clip(np.round(c0 * 2**CELL_BITS), -32767, 32767).astype(np.int16)
        consts = [("w", wq, "int8", None), ("r", rq, "int8", None),
                  ("bias", np.clip(bq, -2**31, 2**31 - 1).astype(np.int32), "int32", None),
                  ("h0", h0q, "int8", None), ("c0", c0q.astype(np.int32), "int32", None)]  # int16 in C
        names = [set_const(graph, f"{node.name}_{k}", v, dt, q) for k, v, dt, q in consts]
        node.inputs = [node.inputs[0], *names]
        graph.tensors[node.outputs[0]].quant = QuantParams.per_tensor(H_SCALE, 0)
        shape = (dirs, 4 * h)
        node.attrs.update(x_offset=-xq.zp, reverse=int(node.attrs.get("direction", "forward") == "reverse"),
                          mult_x=mx.reshape(shape), shift_x=sx.reshape(shape), mult_h=mh.reshape(shape),
                          shift_h=sh.reshape(shape), w_scale=sw, r_scale=sr)

    def reference(self, node, graph, inputs):
        a = node.attrs
        x, w, r, bias, h0, c0 = inputs
        y = lstm_s8(x, w, r, bias, a["mult_x"], a["shift_x"], a["mult_h"], a["shift_h"], h0, c0,
                    x_offset=a["x_offset"], reverse=a["reverse"])
        if a["last_only"]:  # Y_h: each direction's last step (step 0 of a direction that runs backwards)
            y = np.stack([y[0 if (d == 1 or a["reverse"]) else -1, d] for d in range(y.shape[1])])
        return [y]

    def scratch_bytes(self, node, graph):
        t, b, i, h, dirs = self._dims(node, graph)
        return 2 * (b * h + (b * h) % 2) + 2 * 4 * h  # cell state (padded to 4 bytes), one row's gates

    def macs(self, node, graph):
        t, b, i, h, dirs = self._dims(node, graph)
        return int(t * dirs * b * 4 * h * (i + h))

    def weights_bytes(self, node, graph):
        return int(graph.tensors[node.inputs[1]].nbytes + graph.tensors[node.inputs[2]].nbytes)

    def params_bytes(self, node, graph):
        return int(sum(graph.tensors[n].nbytes for n in node.inputs[3:]) + 16 * graph.tensors[node.inputs[3]].size)

    def render(self, node, graph, cname):
        a = node.attrs
        t, b, i, h, dirs = self._dims(node, graph)
        data = {k: graph.tensors[n].data for k, n in zip(("w", "r", "bias", "h0", "c0"), node.inputs[1:])}
        consts = [ConstArray("int8_t", f"{cname}_w", data["w"].ravel()),
                  ConstArray("int8_t", f"{cname}_r", data["r"].ravel()),
                  ConstArray("int32_t", f"{cname}_bias", data["bias"].ravel()),
                  ConstArray("int32_t", f"{cname}_mx", np.asarray(a["mult_x"]).ravel()),
                  ConstArray("int32_t", f"{cname}_sx", np.asarray(a["shift_x"]).ravel()),
                  ConstArray("int32_t", f"{cname}_mh", np.asarray(a["mult_h"]).ravel()),
                  ConstArray("int32_t", f"{cname}_sh", np.asarray(a["shift_h"]).ravel()),
                  ConstArray("int8_t", f"{cname}_h0", data["h0"].ravel()),
                  ConstArray("int16_t", f"{cname}_c0", data["c0"].astype(np.int16).ravel())]
        args = ([IN0, OUT0, SCRATCH, t, b, i, h, dirs, a["reverse"], a["last_only"], a["x_offset"]]
                + [c.name for c in consts])
        return KernelCall(KERNEL, args, [KERNEL + ".c"], consts=consts)

    def oracle(self, node, graph):
        a = node.attrs
        t, b, i, h, dirs = self._dims(node, graph)
        w, r, bias, h0, c0 = (graph.tensors[n].data for n in node.inputs[1:])
        inits = [numpy_helper.from_array(np.asarray(v, np.float32), f"{node.name}_oracle_{k}") for k, v in (
            ("W", w * a["w_scale"][..., None]), ("R", r * a["r_scale"][..., None]),
            ("B", np.concatenate([bias.astype(np.float64) / 2**GATE_BITS, np.zeros((dirs, 4 * h))], axis=1)),
            ("h0", h0.astype(np.float64) * H_SCALE), ("c0", c0.astype(np.float64) / 2**CELL_BITS))]
        names = [x.name for x in inits]
        direction = node.attrs.get("direction", "forward")
        outs = ["", "lstm_out"] if a["last_only"] else ["lstm_out"]
        lstm = helper.make_node("LSTM", [node.inputs[0], *names[:3], "", *names[3:]], outs, hidden_size=h,
                                direction=direction)
        return OracleLayer([lstm], inits, "lstm_out")
