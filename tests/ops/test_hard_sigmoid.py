"""HardSigmoid (alpha, beta attributes) as a 256-entry table with calibrated output parameters: every table entry
against onnxruntime's QDQ HardSigmoid for the defaults and for other attributes, and a deploy verified under QEMU."""
from __future__ import annotations

from onnx import helper

from op_models import deploy_after_conv, layer_ops, lut_exhaustive


def test_hard_sigmoid_tables_against_onnxruntime_on_every_input(tmp_path):
    default, c1 = lut_exhaustive(tmp_path, helper.make_node("HardSigmoid", ["x"], ["y"]), cal_scale=4.0)
    other, c2 = lut_exhaustive(tmp_path, helper.make_node("HardSigmoid", ["x"], ["y"], alpha=0.5, beta=0.25),
                               cal_scale=4.0)
    assert default <= 1 and other <= 1
    # the attributes reach the table
    assert (c1.graph.nodes[0].attrs["table"] != c2.graph.nodes[0].attrs["table"]).any()


def test_hard_sigmoid_deploys_after_conv(tmp_path):
    r = deploy_after_conv(tmp_path, "HardSigmoid", alpha=1.0 / 6, beta=0.5)
    assert ("HardSigmoid", "tinyaot_lut_s8") in layer_ops(r)
