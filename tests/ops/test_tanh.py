"""Tanh as a 256-entry table with TFLite's fixed output parameters (scale 1/128, zero point 0): every table entry
against onnxruntime's QDQ Tanh, and a deploy after a Conv verified under QEMU."""
from __future__ import annotations

import numpy as np
from onnx import helper

from op_models import deploy_after_conv, layer_ops, lut_exhaustive


def test_tanh_table_against_onnxruntime_on_every_input(tmp_path):
    worst, compiled = lut_exhaustive(tmp_path, helper.make_node("Tanh", ["x"], ["y"]), cal_scale=3.0)
    assert worst <= 1
    out = compiled.graph.tensors[compiled.output].quant
    assert (out.s, out.zp) == (1.0 / 128, 0)
    table = compiled.graph.nodes[0].attrs["table"].astype(int)
    assert np.all(np.diff(table) >= 0) and table[0] < -100 and table[-1] > 100  # saturates at both ends


def test_tanh_deploys_after_conv(tmp_path):
    r = deploy_after_conv(tmp_path, "Tanh")
    assert ("Tanh", "tinyaot_lut_s8") in layer_ops(r)
    assert r["quantization"]["output"] == {"scale": 1.0 / 128, "zero_point": 0}
