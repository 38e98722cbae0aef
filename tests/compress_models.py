"""Small float ONNX models built with onnx.helper for the compression tests, and a float numpy forward pass of
the NHWC IR for the one structure the channel-pruning tests use."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def conv_relu_conv_gap_gemm(path: Path, *, seed: int = 0, c1: int = 8, c2: int = 8, classes: int = 4,
                            dead_channels: tuple[int, ...] = (), dead_channels2: tuple[int, ...] = (), k2: int = 1,
                            residual: bool = False, pool: bool = True) -> Path:
    """input [1,3,8,8] -> Conv 3x3 (c1, pad 1) -> Relu -> Conv k2 x k2 (c2) -> Relu -> GlobalAveragePool -> Flatten
    -> Gemm (classes). `dead_channels` of the first conv and `dead_channels2` of the second get all-zero weights
    and a constant bias (constant channels); `residual` adds the first conv's output to the second's (needs
    c1 == c2), so the two convs' channels can only be pruned together; `pool=False` flattens the 8x8 feature map
    straight into the Gemm."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, 0.3, (c1, 3, 3, 3)).astype(np.float32)
    b1 = rng.normal(0.1, 0.1, c1).astype(np.float32)
    for c in dead_channels:
        w1[c] = 0.0
        b1[c] = 0.5 + 0.1 * c
    w2 = rng.normal(0, 0.3, (c2, c1, k2, k2)).astype(np.float32)
    b2 = rng.normal(0.0, 0.1, c2).astype(np.float32)
    for c in dead_channels2:
        w2[c] = 0.0
        b2[c] = -0.2 + 0.1 * c
    w3 = rng.normal(0, 0.3 if pool else 0.05, (classes, c2 * (1 if pool else 64))).astype(np.float32)  # [N, K]
    b3 = rng.normal(0, 0.1, classes).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"),
                                                         (w3, "w3"), (b3, "b3"))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", kernel_shape=[k2, k2],
                              pads=[k2 // 2] * 4)]
    last = "c2"
    if residual:
        nodes.append(helper.make_node("Add", ["c2", "r1"], ["s2"], name="add"))
        last = "s2"
    nodes.append(helper.make_node("Relu", [last], ["r2"], name="relu2"))
    if pool:
        nodes.append(helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"))
    nodes += [helper.make_node("Flatten", ["g" if pool else "r2"], ["f"], name="flatten"),
              helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], name="dense", transB=1)]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, classes])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def conv_dw_conv(path: Path, *, seed: int = 0, c: int = 8, dead_channels: tuple[int, ...] = ()) -> Path:
    """input [1,3,8,8] -> Conv 1x1 (c) -> Relu -> depthwise Conv 3x3 (no padding) -> Relu -> Conv 1x1 (c) -> Relu
    -> GlobalAveragePool -> Flatten -> Gemm (4): a depthwise-separable block. `dead_channels` of the first conv get
    zero weights and a positive bias (constant channels)."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, 0.4, (c, 3, 1, 1)).astype(np.float32)
    b1 = rng.normal(0.1, 0.1, c).astype(np.float32)
    for k in dead_channels:
        w1[k] = 0.0
        b1[k] = 0.4 + 0.1 * k
    wd = rng.normal(0, 0.4, (c, 1, 3, 3)).astype(np.float32)
    bd = rng.normal(0.0, 0.1, c).astype(np.float32)
    w3 = rng.normal(0, 0.3, (c, c, 1, 1)).astype(np.float32)
    b3 = rng.normal(0.0, 0.1, c).astype(np.float32)
    w4 = rng.normal(0, 0.3, (4, c)).astype(np.float32)
    b4 = rng.normal(0, 0.1, 4).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (wd, "wd"), (bd, "bd"), (w3, "w3"),
                                                         (b3, "b3"), (w4, "w4"), (b4, "b4"))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="pw1", kernel_shape=[1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "wd", "bd"], ["cd"], name="dw", kernel_shape=[3, 3], group=c),
             helper.make_node("Relu", ["cd"], ["rd"], name="relud"),
             helper.make_node("Conv", ["rd", "w3", "b3"], ["c3"], name="pw2", kernel_shape=[1, 1]),
             helper.make_node("Relu", ["c3"], ["r3"], name="relu3"),
             helper.make_node("GlobalAveragePool", ["r3"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "w4", "b4"], ["y"], name="dense", transB=1)]
    graph = helper.make_graph(nodes, "dwblock", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def calibration(path: Path, n: int = 32, seed: int = 1) -> Path:
    x = np.random.default_rng(seed).uniform(-1, 1, (n, 1, 3, 8, 8)).astype(np.float32)
    np.savez(path, x=x)
    return path


def _conv_nhwc(x: np.ndarray, w_ohwi: np.ndarray, b: np.ndarray, pad: int) -> np.ndarray:
    n, h, wd, c = x.shape
    o, kh, kw, _ = w_ohwi.shape
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    out = np.zeros((n, h, wd, o))
    for dy in range(kh):
        for dx in range(kw):
            out += np.einsum("nhwc,oc->nhwo", xp[:, dy:dy + h, dx:dx + wd, :], w_ohwi[:, dy, dx, :])
    return out + b


def float_forward(graph, x_nchw: np.ndarray) -> np.ndarray:
    """Float forward pass of conv_relu_conv_gap_gemm's (also residual) and conv_dw_conv's IR after the passes (and
    after pruning, before quantization): weights OHWI (depthwise 1HWC), activations NHWC, activations fused into the
    nodes."""
    x = np.transpose(np.asarray(x_nchw, np.float64), (0, 2, 3, 1))
    feats = {}
    values = {}  # tensor name -> value, for an Add's second operand
    for node in graph.nodes:
        t = graph.tensors
        if node.op != "Transpose":
            x = values.get(node.inputs[0], x)
        if node.op == "Conv" and node.attrs.get("depthwise"):  # 1HWC, no padding in these models
            w = np.asarray(t[node.inputs[1]].data, np.float64)[0]
            kh, kw, _ = w.shape
            oh, ow = x.shape[1] - kh + 1, x.shape[2] - kw + 1
            x = sum(x[:, dy:dy + oh, dx:dx + ow, :] * w[dy, dx] for dy in range(kh) for dx in range(kw)) + \
                np.asarray(t[node.inputs[2]].data, np.float64)
            lo, hi = node.attrs.get("activation") or (-np.inf, np.inf)
            x = np.clip(x, lo, hi)
        elif node.op == "Conv":
            w = np.asarray(t[node.inputs[1]].data, np.float64)
            b = np.asarray(t[node.inputs[2]].data, np.float64)
            x = _conv_nhwc(x, w, b, w.shape[1] // 2)
            lo, hi = node.attrs.get("activation") or (-np.inf, np.inf)
            x = np.clip(x, lo, hi)
            feats[node.name] = x
        elif node.op == "GlobalAveragePool":
            x = x.mean(axis=(1, 2), keepdims=True)
        elif node.op == "Reshape":
            x = x.reshape(x.shape[0], -1)
        elif node.op == "FullyConnected":
            x = x @ np.asarray(t[node.inputs[1]].data, np.float64).T + np.asarray(t[node.inputs[2]].data)
        elif node.op == "Add":
            lo, hi = node.attrs.get("activation") or (-np.inf, np.inf)
            x = np.clip(values[node.inputs[0]] + values[node.inputs[1]], lo, hi)
        elif node.op == "Transpose":
            pass  # the input was made NHWC above
        else:
            raise NotImplementedError(f"float_forward does not cover {node.op}")
        values[node.outputs[0]] = x
    return x
