"""`--calibrate auto`: each tensor's range chosen by what it does to the model's output, not to the tensor itself.

Every clipping method lowers its own tensor's squared error, but a clipped value is a biased error, and biased
errors add up through the layers (README "Calibration methods": mse lowers each tensor's error by up to 2.2x and
still costs pt_mbv3_se 2.5 points). So `auto` judges a tensor's candidate ranges (min/max, percentile, mse,
entropy: compress/ranges.candidate_ranges) by the model's output on the calibration samples, with every chosen
tensor fake-quantized:

    error = sum over samples of sum((output with these ranges - float output)^2)

Tensors are visited once, from the inputs to the outputs, each taking the candidate with the least error given
the choices made before it (a greedy pass: the tensors a choice affects all lie after it, so one pass sees each
choice's whole effect at the time it is made). A candidate must lower the error by more than TIE_TOLERANCE of it
to replace min/max: a range is clipped only when the clipping measurably helps.

The fake quantization is the float model with, after each scored tensor, x -> (clip(floor(x / s + 1/2) + zp,
-128, 127) - zp) * s: tinyaot's activation_qparams of the candidate range. Rounding is half up where tinyaot's
kernels round half away from zero or to even; a tie is a measure-zero event for float data, so the error judged
is the one the int8 model makes, not the weights' (they are the same in every candidate). The scale and zero
point are graph inputs of the one onnxruntime session, so each candidate costs only the runs, no rebuild. A tensor
cross-layer equalization rescales (compress/equalize.py `transforms`) is fake-quantized in its equalized units:
divided by the per-channel factor (less the absorbed offset) before, and restored after.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tinyaot.core.quant import QMAX, QMIN, activation_qparams

TIE_TOLERANCE = 1e-3  # relative error drop a clipped candidate needs to replace min/max


def _const(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


def fake_quant_model(model: onnx.ModelProto, tensors: list[str], ranks: dict[str, int],
                     transforms: dict | None = None) -> onnx.ModelProto:
    """`model` with each of `tensors` fake-quantized by a scale `<t>__fq_s` and zero point `<t>__fq_zp` fed as
    float scalars. A node output is renamed and the quantizing nodes write the original name, so every consumer
    and a graph output see the quantized value; a graph input's consumers are pointed at its quantized copy."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inputs = {i.name for i in g.input}
    inits = {i.name for i in g.initializer}
    new_nodes: dict[str, list[onnx.NodeProto]] = {}
    g.initializer.extend([_const("__fq_qmin", float(QMIN)), _const("__fq_qmax", float(QMAX)),
                          _const("__fq_half", 0.5)])
    for t in tensors:
        src, dst = (t, f"{t}__fq") if t in inputs else (f"{t}__fq_raw", t)
        p = f"{t}__fq"
        nodes = []
        x = src
        shape = [1] * ranks.get(t, 1)
        if len(shape) >= 2:
            shape[1] = -1
        tr = (transforms or {}).get(t)
        if tr is not None:  # into CLE's units (compress/calibrate._transform)
            div, off = tr
            g.initializer.append(_const(f"{p}_d", np.asarray(div, np.float64).reshape(shape)))
            nodes.append(helper.make_node("Div", [x, f"{p}_d"], [f"{p}_x0"]))
            x = f"{p}_x0"
            if off is not None:
                g.initializer.append(_const(f"{p}_o", np.asarray(off, np.float64).reshape(shape)))
                nodes.append(helper.make_node("Sub", [x, f"{p}_o"], [f"{p}_x1"]))
                x = f"{p}_x1"
        nodes += [helper.make_node("Div", [x, f"{p}_s"], [f"{p}_a"]),
                  helper.make_node("Add", [f"{p}_a", "__fq_half"], [f"{p}_b"]),
                  helper.make_node("Floor", [f"{p}_b"], [f"{p}_c"]),
                  helper.make_node("Add", [f"{p}_c", f"{p}_zp"], [f"{p}_e"]),
                  helper.make_node("Max", [f"{p}_e", "__fq_qmin"], [f"{p}_f"]),
                  helper.make_node("Min", [f"{p}_f", "__fq_qmax"], [f"{p}_g"]),
                  helper.make_node("Sub", [f"{p}_g", f"{p}_zp"], [f"{p}_h"])]
        last = f"{p}_y"
        nodes.append(helper.make_node("Mul", [f"{p}_h", f"{p}_s"], [last if tr is not None else dst]))
        if tr is not None:  # back to the model's units
            div, off = tr
            if off is not None:
                nodes.append(helper.make_node("Add", [last, f"{p}_o"], [f"{p}_y1"]))
                last = f"{p}_y1"
            nodes.append(helper.make_node("Mul", [last, f"{p}_d"], [dst]))
        g.input.extend([helper.make_tensor_value_info(f"{p}_s", TensorProto.FLOAT, []),
                        helper.make_tensor_value_info(f"{p}_zp", TensorProto.FLOAT, [])])
        new_nodes[t] = nodes
        if t in inputs:
            for n in g.node:
                for k, name in enumerate(n.input):
                    if name == t:
                        n.input[k] = dst
        elif t not in inits:
            for n in g.node:
                for k, name in enumerate(n.output):
                    if name == t:
                        n.output[k] = src
    # each tensor's quantizing nodes right after its producer (graph inputs' first), so the order stays topological
    ordered = [n for t in tensors if t in inputs for n in new_nodes[t]]
    for n in g.node:
        ordered.append(n)
        for o in n.output:
            if o.endswith("__fq_raw"):
                ordered.extend(new_nodes[o[:-len("__fq_raw")]])
    del g.node[:]
    g.node.extend(ordered)
    # value_info of renamed tensors would now describe the wrong thing: shapes are not needed to run
    del g.value_info[:]
    return m


def _feeds(choice: dict[str, tuple[float, float]]) -> dict[str, np.ndarray]:
    out = {}
    for t, (lo, hi) in choice.items():
        qp = activation_qparams(lo, hi)
        out[f"{t}__fq_s"] = np.asarray(qp.scale, np.float32)
        out[f"{t}__fq_zp"] = np.asarray(qp.zp, np.float32)
    return out


def choose_by_output(session, samples: list[dict[str, np.ndarray]], float_outputs: list[list[np.ndarray]],
                     order: list[str], candidates: dict[str, dict[str, tuple[float, float]]],
                     ) -> tuple[dict[str, tuple[float, float]], dict[str, str]]:
    """The greedy pass (module docstring): ranges, and the method that set each. `session` runs the
    fake_quant_model; `candidates[t]` maps method -> range, min/max first."""
    choice = {t: next(iter(candidates[t].values())) for t in order}
    method = {t: next(iter(candidates[t])) for t in order}
    outs = [o.name for o in session.get_outputs()]

    def error() -> float:
        feeds = _feeds(choice)
        total = 0.0
        for feed, ref in zip(samples, float_outputs):
            got = session.run(outs, {**feed, **feeds})
            total += sum(float(np.sum((np.asarray(a, np.float64) - b) ** 2)) for a, b in zip(got, ref))
        return total

    best = error()
    for t in order:
        seen = {choice[t]}
        current = choice[t]
        for name, rng in candidates[t].items():
            if rng in seen:
                continue
            seen.add(rng)
            choice[t] = rng
            e = error()
            if e < best * (1.0 - TIE_TOLERANCE):
                best, current, method[t] = e, rng, name
        choice[t] = current
    return choice, method
