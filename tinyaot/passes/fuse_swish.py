"""Exporters spell the same activation differently; the same network must compile to the same kernels:
`x * HardSigmoid(x)` with ONNX's HardSwish constants (alpha 1/6, beta 1/2: the TorchScript exporter's hardswish
below opset 14) becomes HardSwish, and `x * Sigmoid(x)` (SiLU / Swish, EfficientNet's activation) becomes Swish:
one table lookup instead of two layers and the tensor between them. Assumes the gate (the HardSigmoid or Sigmoid
output) is read by that Mul only and is no graph output; the Mul's output tensor, with its calibrated range, is the
fused node's."""
import numpy as np

from tinyaot.ir import Graph

from ._util import single_consumer

HARD_SWISH = (np.float32(1.0 / 6.0), np.float32(0.5))


def _gate_op(node) -> str | None:
    if node.op == "Sigmoid":
        return "Swish"
    if node.op == "HardSigmoid":
        ab = (np.float32(node.attrs.get("alpha", 0.2)), np.float32(node.attrs.get("beta", 0.5)))
        return "HardSwish" if ab == HARD_SWISH else None
    return None


def fuse_swish(graph: Graph) -> Graph:
    if graph.meta.get("prequantized"):  # an int8 .tflite model: its own ops' arithmetic, bit for bit
        return graph
    for mul in [n for n in graph.nodes if n.op == "Mul"]:
        for k in (0, 1):
            gate, x = mul.inputs[k], mul.inputs[1 - k]
            prod = graph.producer(gate)
            fused = _gate_op(prod) if prod is not None else None
            if fused is None or prod.inputs[0] != x or single_consumer(graph, gate) is not mul:
                continue
            if graph.tensors[gate].shape != graph.tensors[mul.outputs[0]].shape:
                continue  # the gate broadcast against x: not the elementwise pattern
            graph.nodes.remove(prod)
            mul.op, mul.inputs, mul.attrs = fused, [x], {}
            break
    graph.remove_unused_tensors()
    return graph
