"""GRU: the ONNX op (forward, reverse or bidirectional; initial state given as a constant or zero; static sequence
length; linear_before_reset 0 or 1), integer-only in the formats of the LSTM (tinyaot/ops/lstm.py): int8 x, W, R
and h (scale 1/128), Q3.12 int16 pre-activations, Q0.15 sigmoid/tanh from the fixed-point exp and reciprocal.

ONNX gate order in W, R, B: z (update), r (reset), h (candidate).
- z, r = sigmoid(sat16(requant(W x) + requant(R h) + Wb + Rb))                               Q0.15
- linear_before_reset=1 (PyTorch's): n = tanh(sat16(a + rdbpot(r * sat16(requant(Rh h) + Rbh), 15)))
  linear_before_reset=0 (ONNX's default): n = tanh(sat16(a + requant(Rh (r . h)))), r . h = rdbpot(r h, 15) (int8,
  |r| <= 1 keeps it in range); a = requant(Wh x) + Wbh (+ Rbh when linear_before_reset=0)
- h = clamp(rdbpot((32768 - z) n + z (h_prev << 8), 23), -128, 127): the convex combination in Q0.30 (the two
  weights sum to 2^15, so its magnitude is at most 2^30), then to units of 1/128.
Kernel: templates/kernels/tinyaot_gru_s8.c (W and R read from flash at every step; the previous h is read back from
Y; scratch: one batch row's gates). Per-layer bound against onnxruntime's float GRU on the dequantized input: see
`oracle_tolerance` (measured, as the LSTM's).
"""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from tinyaot.core.errors import TinyaotError
from tinyaot.core.fixedpoint import multiply_by_quantized_multiplier, quantize_multiplier_array, rounding_divide_by_pot
from tinyaot.ir import QuantParams
from tinyaot.ops.common import set_const
from tinyaot.ops.lstm import GATE_BITS, H_SCALE, row_quant, sigmoid_q15, tanh_q15
from tinyaot.ops.registry import IN0, OUT0, SCRATCH, ConstArray, KernelCall, OpSpec, OracleLayer, Traits, register

KERNEL = "tinyaot_gru_s8"


def gru_s8(x, w, r, bias, mult_x, shift_x, mult_h, shift_h, h0, *, x_offset: int, reverse: int = 0,
           linear_before_reset: int = 1) -> np.ndarray:
    """x int8 [T, B, I]; w int8 [D, 3H, I]; r int8 [D, 3H, H]; bias int32 [D, 6H] (Wb then Rb, Q3.12);
    mult/shift int32 [D, 3H]; h0 int8 [D, B, H] -> Y int8 [T, D, B, H]."""
    x = np.asarray(x, np.int64) + int(x_offset)
    steps, batch = x.shape[:2]
    dirs, three_h = np.asarray(w).shape[:2]
    hd = three_h // 3
    y = np.zeros((steps, dirs, batch, hd), np.int8)
    for d in range(dirs):
        wd, rd = np.asarray(w[d], np.int64), np.asarray(r[d], np.int64)
        wb, rb = np.asarray(bias[d][:three_h], np.int64), np.asarray(bias[d][three_h:], np.int64)
        mx, sx, mh, sh = (np.asarray(v[d], np.int64) for v in (mult_x, shift_x, mult_h, shift_h))
        h = np.asarray(h0[d], np.int64)
        for s in range(steps):
            t = steps - 1 - s if (d == 1 or reverse) else s
            ax = multiply_by_quantized_multiplier(x[t] @ wd.T, mx, sx)  # [B, 3H]
            zr_h = multiply_by_quantized_multiplier(h @ rd[:2 * hd].T, mh[:2 * hd], sh[:2 * hd])
            zr = np.clip(ax[:, :2 * hd] + zr_h + wb[:2 * hd] + rb[:2 * hd], -32768, 32767)
            z, rr = sigmoid_q15(zr[:, :hd]), sigmoid_q15(zr[:, hd:])
            a = ax[:, 2 * hd:] + wb[2 * hd:]
            if linear_before_reset:
                b = np.clip(multiply_by_quantized_multiplier(h @ rd[2 * hd:].T, mh[2 * hd:], sh[2 * hd:])
                            + rb[2 * hd:], -32768, 32767)
                pre = a + rounding_divide_by_pot(rr * b, 15)
            else:
                rh = np.clip(rounding_divide_by_pot(rr * h, 15), -128, 127)
                pre = a + rb[2 * hd:] + multiply_by_quantized_multiplier(rh @ rd[2 * hd:].T, mh[2 * hd:],
                                                                           sh[2 * hd:])
            n = tanh_q15(np.clip(pre, -32768, 32767) << 14)
            h = np.clip(rounding_divide_by_pot((32768 - z) * n + z * (h << 8), 23), -128, 127)
            y[t, d] = h
    return y


@register("GRU", traits=Traits(scratch=True, kernels=(KERNEL,)))
class GRU(OpSpec):
    # Per-layer bound against onnxruntime's float GRU on the dequantized input, in output steps (1/128), measured:
    # 1 over random layers (8 and 16 steps; forward / reverse / bidirectional; linear_before_reset 0 and 1; 3 seeds
    # x 6 inputs), 3 over all 300 samples of tests/models/pt_frames_gru (16 steps, 20 units). As for the LSTM, the
    # float oracle keeps h exact between steps while the int8 layer re-rounds it to 1/128 at every step.
    oracle_tolerance = 3

    def _dims(self, node, graph):
        t, b, i = graph.tensors[node.inputs[0]].shape
        dirs = 2 if node.attrs.get("direction", "forward") == "bidirectional" else 1
        return t, b, i, int(node.attrs["hidden_size"]), dirs

    def infer_shapes(self, node, graph):
        name = f"GRU node {node.name!r}"
        if len(graph.tensors[node.inputs[0]].shape) != 3:
            raise TinyaotError(f"{name}: X must be [seq_length, batch, input_size]")
        used = {i for n in graph.nodes for i in n.inputs} | set(graph.outputs)
        outs = list(node.outputs) + [""] * (2 - len(node.outputs))
        if outs[0] and outs[0] in used and outs[1] and outs[1] in used:
            raise TinyaotError(f"{name}: one output only, Y or Y_h")
        t, b, _, h, dirs = self._dims(node, graph)
        if "last_only" not in node.attrs:  # decided once, at import; unused (often nameless) outputs are dropped
            node.attrs["last_only"] = int(not (outs[0] and outs[0] in used))
            node.outputs[:] = [outs[node.attrs["last_only"]]]
        return [(dirs, b, h)] if node.attrs["last_only"] else [(t, dirs, b, h)]

    def _check(self, node, graph):
        name = f"GRU node {node.name!r}"
        a = node.attrs
        if int(a.get("layout", 0)) != 0 or "clip" in a:
            raise TinyaotError(f"{name}: layout=1 and clip are not supported")
        acts = [s.decode() if isinstance(s, bytes) else s for s in a.get("activations", [])]
        if acts and [x.lower() for x in acts] != ["sigmoid", "tanh"] * (len(acts) // 2):
            raise TinyaotError(f"{name}: only the default activations (Sigmoid, Tanh) are supported")
        ins = list(node.inputs) + [""] * (6 - len(node.inputs))
        for k, what in ((1, "W"), (2, "R"), (3, "B"), (4, "sequence_lens"), (5, "initial_h")):
            if ins[k] and not graph.tensors[ins[k]].is_const:
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
        bias = (np.asarray(graph.tensors[ins[3]].data, np.float64).reshape(dirs, 6 * h) if ins[3]
                else np.zeros((dirs, 6 * h)))
        wq, sw = row_quant(w)
        rq, sr = row_quant(r)
        bq = np.clip(np.round(bias * 2**GATE_BITS), -2**31, 2**31 - 1).astype(np.int32)
        mx, sx = quantize_multiplier_array((np.float64(xq.s) * sw * 2**GATE_BITS).ravel())
        mh, sh = quantize_multiplier_array((H_SCALE * sr * 2**GATE_BITS).ravel())
        h0 = np.asarray(graph.tensors[ins[5]].data, np.float64) if ins[5] else np.zeros((dirs, b, h))
        h0q = np.clip(np.round(h0 / H_SCALE), -128, 127).astype(np.int8)
        names = [set_const(graph, f"{node.name}_{k}", v, dt) for k, v, dt in
                 (("w", wq, "int8"), ("r", rq, "int8"), ("bias", bq, "int32"), ("h0", h0q, "int8"))]
        node.inputs = [node.inputs[0], *names]
        graph.tensors[node.outputs[0]].quant = QuantParams.per_tensor(H_SCALE, 0)
        shape = (dirs, 3 * h)
        node.attrs.update(x_offset=-xq.zp, reverse=int(node.attrs.get("direction", "forward") == "reverse"),
                          lbr=int(node.attrs.get("linear_before_reset", 0)), mult_x=mx.reshape(shape),
                          shift_x=sx.reshape(shape), mult_h=mh.reshape(shape), shift_h=sh.reshape(shape),
                          w_scale=sw, r_scale=sr)

    def reference(self, node, graph, inputs):
        a = node.attrs
        x, w, r, bias, h0 = inputs
        y = gru_s8(x, w, r, bias, a["mult_x"], a["shift_x"], a["mult_h"], a["shift_h"], h0, x_offset=a["x_offset"],
                   reverse=a["reverse"], linear_before_reset=a["lbr"])
        if a["last_only"]:  # Y_h: each direction's last step
            y = np.stack([y[0 if (d == 1 or a["reverse"]) else -1, d] for d in range(y.shape[1])])
        return [y]

    def scratch_bytes(self, node, graph):
        t, b, i, h, dirs = self._dims(node, graph)
        return 4 * 3 * h + 4 * h  # one row's int32 gate sums [3H], then r . h (int8 [H], padded)

    def macs(self, node, graph):
        t, b, i, h, dirs = self._dims(node, graph)
        return int(t * dirs * b * 3 * h * (i + h))

    def weights_bytes(self, node, graph):
        return int(graph.tensors[node.inputs[1]].nbytes + graph.tensors[node.inputs[2]].nbytes)

    def params_bytes(self, node, graph):
        return int(graph.tensors[node.inputs[3]].nbytes + graph.tensors[node.inputs[4]].nbytes
                   + 8 * graph.tensors[node.inputs[3]].size)

    def render(self, node, graph, cname):
        a = node.attrs
        t, b, i, h, dirs = self._dims(node, graph)
        w, r, bias, h0 = (graph.tensors[n].data for n in node.inputs[1:])
        consts = [ConstArray("int8_t", f"{cname}_w", w.ravel()), ConstArray("int8_t", f"{cname}_r", r.ravel()),
                  ConstArray("int32_t", f"{cname}_bias", bias.ravel()),
                  ConstArray("int32_t", f"{cname}_mx", np.asarray(a["mult_x"]).ravel()),
                  ConstArray("int32_t", f"{cname}_sx", np.asarray(a["shift_x"]).ravel()),
                  ConstArray("int32_t", f"{cname}_mh", np.asarray(a["mult_h"]).ravel()),
                  ConstArray("int32_t", f"{cname}_sh", np.asarray(a["shift_h"]).ravel()),
                  ConstArray("int8_t", f"{cname}_h0", h0.ravel())]
        args = [IN0, OUT0, SCRATCH, t, b, i, h, dirs, a["reverse"], a["last_only"], a["lbr"], a["x_offset"]]
        return KernelCall(KERNEL, args + [c.name for c in consts], [KERNEL + ".c"], consts=consts)

    def oracle(self, node, graph):
        a = node.attrs
        w, r, bias, h0 = (graph.tensors[n].data for n in node.inputs[1:])
        inits = [numpy_helper.from_array(np.asarray(v, np.float32), f"{node.name}_oracle_{k}") for k, v in (
            ("W", w * a["w_scale"][..., None]), ("R", r * a["r_scale"][..., None]),
            ("B", bias.astype(np.float64) / 2**GATE_BITS), ("h0", h0.astype(np.float64) * H_SCALE))]
        names = [x.name for x in inits]
        outs = ["", "gru_out"] if a["last_only"] else ["gru_out"]
        gru = helper.make_node("GRU", [node.inputs[0], *names[:3], "", names[3]], outs,
                               hidden_size=int(a["hidden_size"]), direction=a.get("direction", "forward"),
                               linear_before_reset=a["lbr"])
        return OracleLayer([gru], inits, "gru_out")
