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
from tinyaot.core.quant import activation_qparams

TIE_TOLERANCE = 1e-3  # relative error drop a clipped candidate needs to replace min/max


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
