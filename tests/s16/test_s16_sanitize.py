"""Every 16x8 kernel under AddressSanitizer and UndefinedBehaviorSanitizer (tinyaot/toolchain/sanitize.py): a small
mixed 8/16 graph that reaches each *_s16 kernel file (padded and grouped conv, depthwise with stride, residual Add,
padded and global average pooling, max pooling, fully connected, softmax, HardSwish, HardSigmoid, Mul broadcast and
by a constant, Concat, Sigmoid, Tanh, conversions both ways), built for the host with every
report fatal and fed random and extreme int8 inputs (all -128, all 127, alternating) over arenas of 0x00 and 0xFF;
outputs == the numpy reference; then the same model under QEMU on a Cortex-M4 (== reference, 1 LSB of
onnxruntime per layer)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tinyaot.api import compile_model, deploy
from tinyaot.codegen.emit import emit_model
from tinyaot.paths import TEMPLATES
from tinyaot.toolchain.sanitize import check_model

S16_KERNEL_FILES = {p.stem for p in (TEMPLATES / "kernels").glob("*.c") if "s16" in p.stem}


def _model(path, rng):
    def w(name, shape, scale):
        return numpy_helper.from_array(rng.normal(0, scale, shape).astype(np.float32), name)

    inits = [w("w1", (6, 3, 3, 3), 0.4), w("b1", (6,), 0.2), w("wg", (6, 2, 3, 3), 0.4), w("bg", (6,), 0.1),
             w("wd", (6, 1, 3, 3), 0.5), w("bd", (6,), 0.1), w("wp", (6, 6, 1, 1), 0.4), w("bp", (6,), 0.1),
             w("wf", (12, 5), 0.5), w("bf", (5,), 0.1), w("ws", (6, 6, 1, 1), 0.5), w("bs", (6,), 0.2),
             numpy_helper.from_array(rng.uniform(0.5, 2.0, (1, 12, 1, 1)).astype(np.float32), "wm")]
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["r1"]),
             n("Conv", ["r1", "wg", "bg"], ["cg"], pads=[0, 1, 2, 1], group=3),
             n("Conv", ["cg", "wd", "bd"], ["d1"], pads=[1, 1, 1, 1], strides=[2, 2], group=6),
             n("Conv", ["d1", "wp", "bp"], ["p1"]),
             n("Add", ["d1", "p1"], ["a1"]),
             # squeeze-and-excitation with HardSwish / HardSigmoid (broadcast Mul), a concat of two scales, a Mul by
             # a constant
             n("HardSwish", ["a1"], ["hs"]), n("GlobalAveragePool", ["hs"], ["sq"]),
             n("Conv", ["sq", "ws", "bs"], ["se"]), n("HardSigmoid", ["se"], ["hg"], alpha=0.25, beta=0.4),
             n("Mul", ["hs", "hg"], ["ex"]), n("Concat", ["ex", "a1"], ["cat"], axis=1),
             n("Mul", ["cat", "wm"], ["cm"]),
             n("AveragePool", ["cm"], ["ap"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             n("Tanh", ["ap"], ["th"]), n("MaxPool", ["th"], ["mp"], kernel_shape=[2, 2], pads=[0, 0, 1, 1]),
             n("GlobalAveragePool", ["mp"], ["gp"]), n("Sigmoid", ["gp"], ["sg"]), n("Flatten", ["sg"], ["fl"]),
             n("Gemm", ["fl", "wf", "bf"], ["z"]), n("Softmax", ["z"], ["y"], axis=1)]
    g = helper.make_graph(nodes, "s16_all", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 9, 7])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 5])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]), path)  # HardSwish: opset 14


def test_every_s16_kernel_clean_under_sanitizers(tmp_path):
    rng = np.random.default_rng(16)
    _model(tmp_path / "s16_all.onnx", rng)
    # the first three samples (those QEMU runs below) are extremes: the calibrated range's ends everywhere, and
    # alternating, so the int16 layers see values near +-32767 (the DSP paths' SMLAD lanes included)
    alt = np.where(np.arange(3 * 9 * 7).reshape(1, 3, 9, 7) % 2 == 0, -4.0, 4.0)
    extremes = np.stack([np.full((1, 3, 9, 7), 4.0), np.full((1, 3, 9, 7), -4.0), alt])
    x = np.concatenate([extremes, rng.normal(0, 1, (13, 1, 3, 9, 7))]).astype(np.float32)
    np.savez(tmp_path / "cal.npz", x=x)
    base = compile_model(tmp_path / "s16_all.onnx", tmp_path / "cal.npz")
    # every layer at 16 bits but the global pool (int8 between two conversions)
    at8 = next(n.name for n in base.graph.nodes if n.op == "GlobalAveragePool" or (
        n.op == "AveragePool" and n.attrs.get("kernel_shape") != [3, 3]))
    bits = {n.name: 8 if n.name == at8 else 16 for n in base.graph.nodes if n.op not in ("Reshape", "Transpose")}
    c = compile_model(tmp_path / "s16_all.onnx", tmp_path / "cal.npz", activation_bits=bits)
    assert {n.attrs["out_bits"] for n in c.graph.nodes if n.op == "Requantize"} == {8, 16}
    used = set(emit_model(c.graph, c.plan.offsets, c.plan.arena_bytes, c.lower_bound, "host", tmp_path / "e").kernels)
    assert S16_KERNEL_FILES and S16_KERNEL_FILES <= used, sorted(S16_KERNEL_FILES - used)
    assert check_model(c, tmp_path / "san", n_random=3, seed=2, extra_inputs=c.samples[c.input][:3]) == 13
    # the same graph on a Cortex-M4 under QEMU: every s16 kernel and both conversions == the numpy reference there
    r = deploy(tmp_path / "s16_all.onnx", "mps2-an386", tmp_path / "cal.npz", tmp_path / "dep", activation_bits=bits,
               verify_samples=3).report
    assert r["verify"]["outputs_match"] and r["verify"]["max_abs_diff_vs_onnxruntime"] <= 1
    assert r["quantization"]["activation_bits"]["mode"] == "mixed"
