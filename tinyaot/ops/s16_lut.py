"""Sigmoid and Tanh at 16 bits (see s16_common.py for the scheme): integer-only, a 513-entry table with linear
interpolation; bit-exact numpy reference, quantization, C kernel call and onnxruntime equivalent.

The output parameters are TFLite's fixed int16 ones, scale 1/32768 and zero point 0 (sigmoid's 1.0 and tanh's +1.0
saturate to 32767). Both functions are symmetric (sigmoid(-x) = 1 - sigmoid(x), tanh(-x) = -tanh(x)), so the table
covers |x| in [0, L] only, in 512 segments of h = L / 512, with T[k] = f(k h) * 2**30 rounded (output LSBs in Q15),
and |x| >= L takes T[512]. Each entry is raised by half the midpoint error of the chords beside it (make_table),
which halves the interpolation error. L is where the rounded output stops changing: L = 11.5 for sigmoid (32768
sigmoid(11.5) = 32767.67 rounds to 32768, saturating to 32767, and 32768 (1 - sigmoid(11.5)) = 0.33 rounds to 0),
6.0 for tanh (32768 tanh(6) = 32767.6).

Input q (int16, any scale s) reaches its table position as P = |q| * K in Q32 segments, K = s * 512 / L * 2**32
rounded (capped at 2**41, past which every q != 0 saturates: |q| * K <= 2**56); the segment is P >> 32, the fraction
its next 16 bits, and V = T[i] * 2**16 + (T[i+1] - T[i]) * frac (|V| <= 2**46) is the output in Q31; the magnitude
is V / 2**31 rounded half up, negated (tanh) or taken from 32768 (sigmoid) for q < 0.

Error before the final rounding, in output LSBs: linear interpolation about h**2 / 16 * max|f''| * 32768 with the
raised entries (sigmoid 0.10, tanh 0.21; 0.20 and 0.43 without), K's rounding (at most 2**-18 of a segment) and the
dropped fraction bits (2**-16 of a segment) below 0.01, the table's rounding 2**-15. The total stays below 1, so the
result is within 1 LSB of round(f(x) * 32768) for every int16 input (tests/s16/test_s16_lut.py checks all 65,536 at
several scales).
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.core.quant import QuantParams
from tinyaot.ops.registry import IN0, OUT0, ConstArray, KernelCall, OpSpec, OracleLayer, Traits, register
from tinyaot.ops.s16_common import TEMPLATE, ptr, require16

SEGMENTS = 512
POS_BITS = 32  # P's fraction bits
FRAC_BITS = 16  # the interpolation fraction's bits
K_CAP = SEGMENTS << POS_BITS  # K at or past this saturates every q != 0
DOMAIN = {"sigmoid": 11.5, "tanh": 6.0}
OUT_SCALE = 1.0 / 32768


def _f(kind: str, x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x)) if kind == "sigmoid" else np.tanh(x)


def make_table(kind: str) -> np.ndarray:
    """T[k] = f(k * L / 512) in Q15 output LSBs (f * 2**30), k = 0..512 (int32: at most 2**30)."""
    h = DOMAIN[kind] / SEGMENTS
    y = _f(kind, np.arange(SEGMENTS + 1, dtype=np.float64) * h)
    # Each entry is raised by half the midpoint error of the chords beside it (e_k = f((k + 1/2) h) minus the
    # chord's midpoint; the mean of its two neighbours, which differ little): a chord then errs by about +-e_k / 2
    # instead of 0..e_k, halving the interpolation error (tanh 0.43 -> 0.22 LSB).
    e = _f(kind, (np.arange(SEGMENTS, dtype=np.float64) + 0.5) * h) - (y[:-1] + y[1:]) / 2
    shift = np.concatenate([[e[0] / 2], (e[:-1] + e[1:]) / 4, [e[-1] / 2]])
    return np.rint((y + shift) * 2.0 ** 30).astype(np.int32)


def position_scale(kind: str, s_in: float) -> int:
    """K: one input LSB in Q32 table segments, capped where every q != 0 saturates."""
    k = int(round(float(s_in) * SEGMENTS / DOMAIN[kind] * 2.0 ** POS_BITS))
    return min(k, K_CAP)


def lut_interp_s16(q, table, k_pos: int, odd: int) -> np.ndarray:
    """The interpolated table at |q| (module docstring), mirrored for q < 0: odd (tanh) negates, otherwise
    (sigmoid) 32768 - magnitude; saturated to int16."""
    q = np.asarray(q, np.int64)
    t = np.asarray(table, np.int64)
    p = np.abs(q) * np.int64(k_pos)  # <= 2**15 * 2**41
    seg = p >> POS_BITS
    frac = (p >> (POS_BITS - FRAC_BITS)) & ((1 << FRAC_BITS) - 1)
    # past the table: T[511] plus the whole last segment, i.e. T[512]
    frac = np.where(seg >= SEGMENTS, 1 << FRAC_BITS, frac)
    seg = np.minimum(seg, SEGMENTS - 1)
    v = (t[seg] << FRAC_BITS) + (t[seg + 1] - t[seg]) * frac
    mag = (v + (1 << 30)) >> 31
    out = np.where(q >= 0, mag, -mag if odd else 32768 - mag)
    return np.clip(out, -32768, 32767).astype(np.int16)


class _LutS16(OpSpec):
    internal = True
    alias_output_to_input = True  # element i is read before it is written
    kind = ""

    def infer_shapes(self, node, graph):
        return [graph.tensors[node.inputs[0]].shape]

    def quantize(self, node, graph, ranges):
        x = require16(graph, node)
        graph.tensors[node.outputs[0]].quant = QuantParams(np.asarray(OUT_SCALE, np.float64), np.asarray(0, np.int64),
                                                           None, 16)
        node.attrs.update(table=make_table(self.kind), k_pos=position_scale(self.kind, x.quant.s))

    def reference(self, node, graph, inputs):
        return [lut_interp_s16(inputs[0], node.attrs["table"], node.attrs["k_pos"], int(self.kind == "tanh"))]

    def int_bounds(self, node, graph):
        return [("table position |q| * K", 32768 * int(node.attrs["k_pos"]), (1 << 63) - 1),
                ("interpolated value in Q31", (1 << 46) + (1 << 30), (1 << 63) - 1)]

    def params_bytes(self, node, graph):
        return 4 * (SEGMENTS + 1) + 16

    def render(self, node, graph, cname):
        a = node.attrs
        return KernelCall("tinyaot_lut_interp_s16", files=["tinyaot_lut_interp_s16.c", "tinyaot_s16_support.h"],
                          consts=[ConstArray("int32_t", f"{cname}_table", a["table"]),
                                  ConstArray("int64_t", f"{cname}_params",
                                             np.asarray([a["k_pos"], int(self.kind == "tanh")], np.int64))],
                          template=TEMPLATE,
                          params={"args": [ptr("const int16_t *", IN0), str(graph.tensors[node.outputs[0]].size),
                                           f"{cname}_table", f"{cname}_params", ptr("int16_t *", OUT0)]})

    def oracle(self, node, graph):
        op = "Sigmoid" if self.kind == "sigmoid" else "Tanh"
        return OracleLayer([helper.make_node(op, [node.inputs[0]], ["lut_out"])], [], "lut_out")


@register("SigmoidS16", traits=Traits(int16_form_of=("Sigmoid",), kernels=("tinyaot_lut_interp_s16",)))
class SigmoidS16(_LutS16):
    """Sigmoid at 16 bits, output scale 1/32768."""

    kind = "sigmoid"


@register("TanhS16", traits=Traits(int16_form_of=("Tanh",), kernels=("tinyaot_lut_interp_s16",)))
class TanhS16(_LutS16):
    """Tanh at 16 bits, output scale 1/32768."""

    kind = "tanh"
