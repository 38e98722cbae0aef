"""HardSwish (ONNX opset 14) as a 256-entry table with calibrated output parameters: every table entry against
onnxruntime's QDQ HardSwish, and a deploy after a Conv verified under QEMU."""
from __future__ import annotations

import numpy as np
from onnx import helper

from op_models import deploy_after_conv, layer_ops, lut_exhaustive


def test_hard_swish_table_against_onnxruntime_on_every_input(tmp_path):
    worst, compiled = lut_exhaustive(tmp_path, helper.make_node("HardSwish", ["x"], ["y"]), cal_scale=4.0,
                                     opset=14)
    assert worst <= 1
    g = compiled.graph
    qi, qo = g.tensors[compiled.input].quant, g.tensors[compiled.output].quant
    table = g.nodes[0].attrs["table"].astype(int)
    # x <= -3 gives exactly 0: those entries hold the output zero point
    x = (np.arange(-128, 128) - qi.zp) * qi.s
    assert np.all(table[x <= -3.0] == qo.zp)


def test_hard_swish_deploys_after_conv(tmp_path):
    assert ("HardSwish", "tinyaot_lut_s8") in layer_ops(deploy_after_conv(tmp_path, "HardSwish", opset=14))
