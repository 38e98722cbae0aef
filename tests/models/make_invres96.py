"""Build invres96: a MobileNetV2-style inverted-residual network on a 96x96x3 image (the input size of visual wake
words and person detection), the memory case of patch-based execution (tinyaot/plan/patch.py). Its first layers'
feature maps (48x48 with 64 channels) need more arena layer by layer than the stm32's 128 KB of RAM; the rest of
the network needs a fraction of it.

Written with onnx.helper and numpy (no training, no torch): the weights are random with a fixed seed, He-scaled so
the activations neither vanish nor explode through the ReLU6 layers. Run by hand:

    .venv/bin/python tests/models/make_invres96.py     # writes tests/models/invres96.onnx

The network (NCHW in ONNX, opset 13, batch 1, input `x` [1,3,96,96] in [0, 1], output `probs` [1,2]):
    stem      Conv 3x3 stride 2 (3->16), ReLU6                                        -> 48x48x16
    block 1   expand 1x1 (16->64), ReLU6; depthwise 3x3, ReLU6; project 1x1 (64->16); residual Add
    block 2   expand 1x1 (16->64), ReLU6; depthwise 3x3 stride 2, ReLU6; project (64->24)  -> 24x24x24
    block 3   expand 1x1 (24->96), ReLU6; depthwise 3x3, ReLU6; project (96->24); residual Add
    block 4   expand 1x1 (24->96), ReLU6; depthwise 3x3 stride 2, ReLU6; project (96->32)  -> 12x12x32
    head      GlobalAveragePool, Gemm (32->2), Softmax
ReLU6 is Clip(0, 6); every convolution has a bias. The tests build their calibration images themselves (smooth
random images, numpy seeds), so no data file is needed.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = Path(__file__).resolve().parent / "invres96.onnx"
SEED = 96


def build() -> onnx.ModelProto:
    rng = np.random.default_rng(SEED)
    nodes, inits = [], []
    inits += [numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
              numpy_helper.from_array(np.array(6.0, np.float32), "six")]

    def conv(x: str, name: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1,
             relu6: bool = True) -> str:
        fan_in = cin // group * k * k
        w = rng.normal(0.0, np.sqrt(2.0 / fan_in), (cout, cin // group, k, k)).astype(np.float32)
        b = rng.normal(0.0, 0.05, cout).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"{name}_w"), numpy_helper.from_array(b, f"{name}_b")])
        p = k // 2
        nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [f"{name}_out"], name=name,
                                      kernel_shape=[k, k], strides=[stride, stride], pads=[p, p, p, p], group=group))
        if not relu6:
            return f"{name}_out"
        nodes.append(helper.make_node("Clip", [f"{name}_out", "zero", "six"], [f"{name}_relu6"], name=f"{name}_relu6"))
        return f"{name}_relu6"

    def block(x: str, name: str, cin: int, cout: int, stride: int) -> str:
        mid = 4 * cin  # expansion 4
        h = conv(x, f"{name}_expand", cin, mid, 1)
        h = conv(h, f"{name}_dw", mid, mid, 3, stride=stride, group=mid)
        h = conv(h, f"{name}_project", mid, cout, 1, relu6=False)
        if stride == 1 and cin == cout:
            nodes.append(helper.make_node("Add", [x, h], [f"{name}_add"], name=f"{name}_add"))
            return f"{name}_add"
        return h

    h = conv("x", "stem", 3, 16, 3, stride=2)
    for name, cin, cout, stride in [("b1", 16, 16, 1), ("b2", 16, 24, 2), ("b3", 24, 24, 1), ("b4", 24, 32, 2)]:
        h = block(h, name, cin, cout, stride)
    nodes.append(helper.make_node("GlobalAveragePool", [h], ["pooled"], name="pool"))
    nodes.append(helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten"))
    w = rng.normal(0.0, np.sqrt(1.0 / 32), (2, 32)).astype(np.float32)
    inits += [numpy_helper.from_array(w, "fc_w"), numpy_helper.from_array(np.zeros(2, np.float32), "fc_b")]
    nodes.append(helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1))
    nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1))
    graph = helper.make_graph(nodes, "invres96",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 96, 96])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 2])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="tinyaot tests")
    model.ir_version = 7
    onnx.checker.check_model(model)
    return model


def calibration_images(n: int, seed: int = 0) -> np.ndarray:
    """n smooth random images [n, 3, 96, 96] in [0, 1]: 12x12 noise upsampled 8x (nearest), plus fine noise, so the
    activations have structure at several scales."""
    rng = np.random.default_rng(seed)
    coarse = rng.uniform(0.0, 1.0, (n, 3, 12, 12)).repeat(8, axis=2).repeat(8, axis=3)
    return np.clip(coarse + rng.normal(0.0, 0.08, (n, 3, 96, 96)), 0.0, 1.0).astype(np.float32)


if __name__ == "__main__":
    onnx.save(build(), OUT)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")
