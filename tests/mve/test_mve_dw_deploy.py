"""A small model deployed on mps3-an547 (Cortex-M55) takes the Helium depthwise, add and pooling variants
(mve_dw with 20 channels: a 16-channel block plus a predicated tail, stride 1 and 2, padding; mve_add on a
residual connection; mve_pool for a max pool and the requantizing global average pool): the firmware == the numpy
reference under QEMU and every layer within tolerance of onnxruntime; with --optimize size the same layers keep
the generic kernels and the arena is the same."""
from __future__ import annotations

import numpy as np
from onnx import helper

from op_models import calibration, const, save_model
from tinyaot.api import compile_model, deploy
from tinyaot.boards import load_board

from mve.mve_harness import needs_arm

C = 20


def _model(path):
    rng = np.random.default_rng(11)
    inits = [const("w_in", rng.standard_normal((C, 1, 1, 1)) * 0.5), const("b_in", rng.standard_normal(C) * 0.1),
             const("w_dw1", rng.standard_normal((C, 1, 3, 3)) * 0.4), const("b_dw1", rng.standard_normal(C) * 0.1),
             const("w_dw2", rng.standard_normal((C, 1, 3, 3)) * 0.4), const("b_dw2", rng.standard_normal(C) * 0.1)]
    nodes = [helper.make_node("Conv", ["x", "w_in", "b_in"], ["c0"]),  # 1 -> 20 channels
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w_dw1", "b_dw1"], ["d1"], group=C, pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["d1"], ["r1"]),
             helper.make_node("Add", ["r1", "r0"], ["a1"]),  # residual
             helper.make_node("MaxPool", ["a1"], ["m1"], kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1]),
             helper.make_node("Conv", ["m1", "w_dw2", "b_dw2"], ["d2"], group=C, pads=[1, 0, 1, 1], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["d2"], ["y"])]
    return save_model(path, nodes, (1, 1, 9, 8), (1, C, 1, 1), inits)


@needs_arm
def test_small_model_picks_helium_dw_add_pool_and_verifies_on_m55(tmp_path):
    model = _model(tmp_path / "mve_dw_small.onnx")
    cal = calibration(tmp_path / "cal.npz", (1, 9, 8))
    report = deploy(model, "mps3-an547", cal, tmp_path / "out", verify_samples=4).report
    v = report["verify"]
    assert v["ran"] and v["exit_code"] == 0 and v["outputs_match"] and v["max_abs_diff_vs_reference"] == 0, v
    for layer in v["layers_vs_onnxruntime"]:
        assert layer["max_abs_diff"] <= layer["tolerance"], layer
    chosen = {(layer["op"], layer["kernel"], layer["variant"]) for layer in report["layers"]}
    assert {("Conv", "tinyaot_depthwise_conv_s8_mve", "mve_dw"), ("Add", "tinyaot_elementwise_add_s8_mve", "mve_add"),
            ("MaxPool", "tinyaot_max_pool_s8_mve", "mve_pool"),
            ("GlobalAveragePool", "tinyaot_avgpool_requant_s8_mve", "mve_pool")} <= chosen, chosen
    assert sum(1 for layer in report["layers"] if layer["variant"] == "mve_dw") == 2
    generic = compile_model(model, cal, target=load_board("mps3-an547").target("size"))
    assert {n.attrs.get("variant", "generic") for n in generic.graph.nodes} == {"generic"}
    assert report["memory"]["arena_bytes"] == generic.plan.arena_bytes
