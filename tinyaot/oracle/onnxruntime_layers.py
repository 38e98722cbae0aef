"""The outside oracle, layer by layer: each layer runs in onnxruntime as its QDQ equivalent
(DequantizeLinear -> float op -> QuantizeLinear) on the very int8 input tinyaot's layer received.

onnxruntime rescales with float scales and rounds half to even; TFLite's fixed point rounds twice, half away
from zero; so ties may differ by one LSB. A layer that differs by more is a bug, except in an op whose integer
algorithm approximates and whose file states `oracle_tolerance`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from tinyaot.ir import Graph, QuantParams
from tinyaot.ops.registry import get_op
from tinyaot.oracle.sessions import session_options


@dataclass
class LayerCheck:
    node: str
    op: str
    max_abs_diff: int
    tolerance: int
    elements: int
    differing: int


def qparam_inits(prefix: str, qp: QuantParams) -> tuple[list, str, str]:
    scale = numpy_helper.from_array(np.asarray(qp.scale, np.float32), prefix + "_scale")
    zp = numpy_helper.from_array(np.asarray(qp.zero_point, np.int16 if qp.bits == 16 else np.int8), prefix + "_zp")
    return [scale, zp], scale.name, zp.name


def layer_model(graph: Graph, node) -> onnx.ModelProto | None:
    layer = get_op(node.op).oracle(node, graph)
    if layer is None:
        return None
    nodes, inits, inputs = [], list(layer.initializers), []
    for i in dict.fromkeys(x for x in node.inputs if x and not graph.tensors[x].is_const):
        t = graph.tensors[i]
        inputs.append(helper.make_tensor_value_info("q_" + i, _elem(t), list(t.shape)))
        qi, s, z = qparam_inits("in_" + i, t.quant)
        inits += qi
        nodes.append(helper.make_node("DequantizeLinear", ["q_" + i, s, z], [i]))
    nodes += layer.nodes
    out = graph.tensors[node.outputs[0]]
    qo, s, z = qparam_inits("out", out.quant)
    inits += qo
    nodes.append(helper.make_node("QuantizeLinear", [layer.output, s, z], ["q_out"]))
    outputs = [helper.make_tensor_value_info("q_out", _elem(out), list(out.shape))]
    g = helper.make_graph(nodes, "layer", inputs, outputs, inits)
    # int16 QuantizeLinear/DequantizeLinear (the 16x8 layers) need opset 21
    wide = any(graph.tensors[x].dtype == "int16" for x in [*node.inputs, *node.outputs] if x)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21 if wide else 13)])


def _elem(t) -> int:
    return onnx.TensorProto.INT16 if t.dtype == "int16" else onnx.TensorProto.INT8


def _session(model: onnx.ModelProto, fused: bool = True) -> ort.InferenceSession:
    opts = session_options()
    opts.log_severity_level = 4  # fatal only: a failed run raises, and _run may recover from it quietly
    # Lets int8 DQ->Conv->Q fuse into QLinearConv on x86, the path a deployed QDQ model takes.
    opts.add_session_config_entry("session.qdqisint8allowed", "1")
    # int16 layers run unfused, as DequantizeLinear -> float op -> QuantizeLinear (the QDQ definition):
    # onnxruntime's fused path for an int16 input and int8 weights (MatMul) was measured 20+ LSB off it
    if not fused or any(v.type.tensor_type.elem_type == onnx.TensorProto.INT16 for v in model.graph.input):
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def _run(sess: ort.InferenceSession, model: onnx.ModelProto, feed: dict) -> tuple[np.ndarray, ort.InferenceSession]:
    """One run, and the session to use next. Some fused int8 kernels refuse scale ratios tinyaot's kernels
    handle (QLinearGlobalAveragePool: "parameter out of computation range" for a tanh feeding a pool whose
    calibrated output range is tiny); the layer then runs unfused, DequantizeLinear -> float op ->
    QuantizeLinear, which is the QDQ model's definition."""
    try:
        return sess.run(None, feed)[0], sess
    except ort.capi.onnxruntime_pybind11_state.RuntimeException:
        unfused = _session(model, fused=False)
        return unfused.run(None, feed)[0], unfused


def check_layers(graph: Graph, values_per_sample: list[dict[str, np.ndarray]]) -> list[LayerCheck]:
    """Compare every layer's int8 output with onnxruntime's on the same int8 inputs, over all samples."""
    checks = []
    for node in graph.nodes:
        model = layer_model(graph, node)
        if model is None:
            continue
        sess = _session(model)
        names = [i.name for i in sess.get_inputs()]
        worst, differing, elements = 0, 0, 0
        for values in values_per_sample:
            feed = {n: values[n[2:]] for n in names}
            got, sess = _run(sess, model, feed)
            got = got.astype(np.int32)
            ours = values[node.outputs[0]].astype(np.int32)
            d = np.abs(got - ours)
            worst = max(worst, int(d.max()) if d.size else 0)
            differing += int((d != 0).sum())
            elements += d.size
        tol = int(getattr(get_op(node.op), "oracle_tolerance", 1))
        checks.append(LayerCheck(node.name, node.op, worst, tol, elements, differing))
    return checks


def run_chain(graph: Graph, x, cache: dict | None = None) -> dict[str, np.ndarray]:
    """The whole network in onnxruntime as a QDQ model would run it unfused: each layer's QDQ equivalent fed
    onnxruntime's own int8 output of the layer before (aliases reshape). For end-to-end figures only. `x`: the
    int8 inputs by name (or a single-input model's input alone).

    `cache` (node name -> session and model) is the caller's, reused across samples; the graph never holds
    onnxruntime sessions (it is plain data)."""
    cache = {} if cache is None else cache
    feed = x if isinstance(x, dict) else {graph.inputs[0]: x}
    values = {name: np.asarray(feed[name]).reshape(graph.tensors[name].shape) for name in graph.inputs}
    for node in graph.nodes:
        spec = get_op(node.op)
        if spec.is_alias(node, graph):
            values[node.outputs[0]] = values[node.inputs[0]].reshape(graph.tensors[node.outputs[0]].shape)
            continue
        if node.name not in cache:
            model = layer_model(graph, node)
            cache[node.name] = (_session(model), model)
        sess, model = cache[node.name]
        feed = {i.name: values[i.name[2:]] for i in sess.get_inputs()}
        values[node.outputs[0]], sess = _run(sess, model, feed)
        cache[node.name] = (sess, model)
    return values
