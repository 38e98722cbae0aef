"""A small model deployed on mps3-an547 (Cortex-M55): the cost model picks the Helium conv and fully connected
variants (mve_conv's column path for 3 input channels and its direct path for 16, mve_1x1, mve_fc), the firmware
== the numpy reference under QEMU and every layer within tolerance of onnxruntime; with --optimize size the same
layers keep the generic kernels and the arena is the same."""
from __future__ import annotations

import numpy as np
from onnx import helper

from op_models import calibration, const, save_model
from tinyaot.api import compile_model, deploy
from tinyaot.boards import load_board

from mve.mve_harness import needs_arm


def _model(path):
    rng = np.random.default_rng(7)
    w = lambda *shape: const(f"w{len(shape)}_{shape}", rng.standard_normal(shape) * 0.3)  # noqa: E731
    inits = [w(16, 3, 3, 3), w(16, 16, 3, 3), w(20, 16, 1, 1), w(10, 20),
             const("b0", rng.standard_normal(16)), const("b1", rng.standard_normal(16)),
             const("b2", rng.standard_normal(20)), const("b3", rng.standard_normal(10))]
    n = [t.name for t in inits[:4]]
    nodes = [helper.make_node("Conv", ["x", n[0], "b0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", n[1], "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", n[2], "b2"], ["c2"]),
             helper.make_node("GlobalAveragePool", ["c2"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", n[3], "b3"], ["y"], transB=1)]
    return save_model(path, nodes, (1, 3, 9, 10), (1, 10), inits)


@needs_arm
def test_small_model_picks_helium_variants_and_verifies_on_m55(tmp_path):
    model = _model(tmp_path / "mve_small.onnx")
    cal = calibration(tmp_path / "cal.npz", (3, 9, 10))
    report = deploy(model, "mps3-an547", cal, tmp_path / "speed", verify_samples=4).report
    v = report["verify"]
    assert v["ran"] and v["exit_code"] == 0 and v["outputs_match"] and v["max_abs_diff_vs_reference"] == 0, v
    for layer in v["layers_vs_onnxruntime"]:
        assert layer["max_abs_diff"] <= layer["tolerance"], layer
    variants = [(layer["op"], layer["variant"]) for layer in report["layers"] if layer["op"] in ("Conv",
                                                                                                "FullyConnected")]
    assert variants == [("Conv", "mve_conv"), ("Conv", "mve_conv"), ("Conv", "mve_1x1"),
                        ("FullyConnected", "mve_fc")], variants
    assert any((tmp_path / "speed").rglob("tinyaot_mve_gemm.h"))  # the kernels' headers are vendored too
    # the generic kernels on the same layers (what --optimize size keeps): the Helium variants add no arena
    generic = compile_model(model, cal, target=load_board("mps3-an547").target("size"))
    assert {n.attrs.get("variant", "generic") for n in generic.graph.nodes} == {"generic"}
    assert report["memory"]["arena_bytes"] == generic.plan.arena_bytes
