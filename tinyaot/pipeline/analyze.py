"""`tinyaot analyze`: which layer's int8 quantization costs accuracy.

For every layer of the quantized graph whose output tensor is also a tensor of the float ONNX model:

- `sqnr_db`: signal-to-quantization-noise ratio of the layer's output in the int8 model as deployed (the numpy
  int8 reference, bit-exact with the C, dequantized) against the float model's same tensor (onnxruntime), over
  the first SQNR_SAMPLES data samples: 10 log10(sum f^2 / sum (f - q)^2). It includes the noise every earlier
  layer passed on.
- `sqnr_db_this_layer`: the same for the float tensor quantized alone with its int8 parameters (only this
  layer's own rounding and clipping).
- `top1_only_this_layer`: top-1 of the float model (onnxruntime) with only this tensor fake-quantized: a
  QuantizeLinear/DequantizeLinear pair with tinyaot's scale and zero point inserted after its producer.

Writes DIR/report.json (`layers`, worst first: lowest top1_only_this_layer, then lowest sqnr_db_this_layer),
DIR/report.md and DIR/sqnr.png.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tinyaot.compress.calibrate import float_session, load_samples
from tinyaot.compress.equalize import DEFAULT_CLE, equalize_for_calibration
from tinyaot.compress.ort_baseline import is_probability, top1
from tinyaot.compress.ranges import DEFAULT_METHOD
from tinyaot.core.quant import dequantize_values, quantize_values
from tinyaot import __version__
from tinyaot.errors import TinyaotError
from tinyaot.files import check_output_folder, output_folder
from tinyaot.frontend import ImportedModel, import_model
from tinyaot.options import Options, silent
from tinyaot.toolchain.versions import versions
from tinyaot.oracle.fake_quant import qdq_model
from tinyaot.oracle.reference import run_reference_many
from tinyaot.passes import run_passes

from .compile import compile_model
from .labelled import label_output as label_output_of, load_labelled, take

SQNR_SAMPLES = 100  # samples for the SQNR columns (the int8 reference runs in numpy, per sample)
PNG_NAME = "sqnr.png"


def _sqnr_db(f: np.ndarray, q: np.ndarray) -> float:
    signal = float(np.sum(np.square(f, dtype=np.float64)))
    noise = float(np.sum(np.square(np.asarray(f, np.float64) - q)))
    if noise == 0.0:
        return float("inf")
    if signal == 0.0:
        return float("-inf")
    return 10.0 * np.log10(signal / noise)


def _to_onnx_layout(value: np.ndarray, onnx_shape: tuple[int, ...], perm=None) -> np.ndarray | None:
    """The IR tensor's values in the ONNX tensor's layout. With `perm` (to_nhwc's physical = logical.transpose(perm),
    graph.meta["nhwc_perm"]) the values are put back in logical order, then reshaped if the ONNX tensor has another
    rank (a 1-D layer runs as a 2-D one); without it (a tensor made after to_nhwc): the same shape, a reshape, or
    NHWC -> NCHW (tensor names survive the passes)."""
    if perm is not None and len(perm) == value.ndim:
        logical = np.transpose(value, np.argsort(perm))
        return logical.reshape(onnx_shape) if logical.size == int(np.prod(onnx_shape)) else None
    if value.shape == onnx_shape:
        return value
    if value.ndim == len(onnx_shape) and value.ndim >= 3:
        perm = (0, value.ndim - 1, *range(1, value.ndim - 1))
        t = np.transpose(value, perm)
        if t.shape == onnx_shape:
            return t
    if value.size == int(np.prod(onnx_shape)) and value.ndim <= 2:
        return value.reshape(onnx_shape)
    return None


def _cle_units(v: np.ndarray, transform) -> np.ndarray:
    """A float tensor (ONNX layout, channels on axis 1) in the units CLE gave the int8 tensor: divided by the
    per-channel factor, less the absorbed bias (compress/equalize.py; calibration measures it the same way)."""
    divisor, offset = transform
    shape = [1] * v.ndim
    shape[1] = -1
    out = np.asarray(v, np.float64) / np.asarray(divisor, np.float64).reshape(shape)
    return out if offset is None else out - np.asarray(offset, np.float64).reshape(shape)


def _cle_transforms(model: ImportedModel, calibration, options: Options, compiled) -> dict:
    """{tensor: (divisor, offset)} of the tensors CLE changed in `compiled`, made again as compile_model made them
    (the same passes, samples and mode: deterministic; compile_model keeps only their names)."""
    eq = compiled.graph.meta.get("equalization")
    if not eq or not eq.get("tensors"):
        return {}
    samples = load_samples(Path(calibration), model.inputs)
    graph = run_passes(model.fresh_graph(), set(options.compile.disable_passes), set(), silent)
    cle = options.quantization.cle
    transforms = equalize_for_calibration(graph, model.onnx_model, samples, DEFAULT_CLE if cle is None else cle)
    if sorted(transforms) != sorted(eq["tensors"]):
        raise TinyaotError("analyze could not reproduce the model's cross-layer equalization; run it with --no-cle")
    return transforms


def _predict(sess, xs: dict[str, np.ndarray], output: str) -> np.ndarray:
    """The float session's `output` for every sample of `xs` ({input name: [N, *shape]})."""
    count = len(next(iter(xs.values())))
    return np.stack([np.asarray(sess.run([output], {n: a[k] for n, a in xs.items()})[0]) for k in range(count)])


def analyze(model: str | Path | ImportedModel, calibration: str | Path, data: str | Path, out_dir: str | Path,
            options: Options | None = None) -> dict:
    """The per-layer table for `model` quantized as `tinyaot deploy` would with the same `options` (calibration
    method, CLE, bias correction), on the first `verification.limit` samples of `data`, written to `out_dir`
    (report.json, report.md, sqnr.png) only once all of it is measured: a failure leaves no half-written folder and
    an existing one untouched, as deploy's --out (an output folder tinyaot owns: one holding other files is refused,
    tinyaot/files.py)."""
    options = Options() if options is None else options
    out = Path(out_dir)
    check_output_folder(out)  # before the minutes of measuring, not after
    imported = import_model(model, options.compile.input_shapes)
    model, onnx_model = imported.path, imported.onnx_model
    compiled = compile_model(imported, calibration, options)
    if compiled.graph.meta.get("format") == "tflite":
        raise TinyaotError("analyze needs a float ONNX model: an int8 .tflite model has no float tensors to compare "
                           "(`tinyaot evaluate` holds it to TFLite Micro's interpreter)")
    if compiled.prequantized:
        raise TinyaotError("analyze needs a float model (a pre-quantized model has no float tensors to compare)")
    g = compiled.graph
    limit = options.verification.limit
    scored = label_output_of(g.outputs, options.verification.label_output)
    xs, y = load_labelled(data, g.meta["inputs"])
    xs, y = take(xs, limit), y if limit is None else y[:limit]
    produced = {o for n in onnx_model.graph.node for o in n.output}
    layers = [(n, n.outputs[0]) for n in g.nodes if n.outputs and n.outputs[0] in produced
              and g.tensors[n.outputs[0]].quant is not None]
    if not layers:
        raise TinyaotError("analyze found no layer whose output is a tensor of the float model")
    names = [t for _, t in layers]
    transforms = _cle_transforms(imported, calibration, options, compiled)
    ndims: dict[str, int] = {}
    sess = float_session(onnx_model, names)
    outs = [o.name for o in sess.get_outputs()]
    n_sqnr = min(len(y), SQNR_SAMPLES)
    f_acc = {t: [] for t in names}
    q_acc = {t: [] for t in names}
    feeds = [compiled.feed(k, xs) for k in range(n_sqnr)]
    for feed, qv in zip(feeds, run_reference_many(g, [compiled.quantize_inputs(f) for f in feeds])):
        fv = dict(zip(outs, sess.run(outs, feed)))
        for t in names:
            fval = np.asarray(fv[t], np.float64)
            ndims[t] = fval.ndim
            if t in transforms:  # the int8 tensor holds CLE's units: compare there
                fval = _cle_units(fval, transforms[t])
            qval = _to_onnx_layout(dequantize_values(qv[t], g.tensors[t].quant).astype(np.float64), fval.shape,
                                   g.meta.get("nhwc_perm", {}).get(t))
            if qval is None:
                continue
            f_acc[t].append(fval.ravel())
            q_acc[t].append(qval.ravel())
    float_sess = float_session(onnx_model)
    float_out = _predict(float_sess, xs, scored)
    binary = is_probability(float_out)  # a sigmoid head: class 1 above 0.5
    float_top1 = top1(float_out, y, binary)
    rows = []
    for node, t in layers:
        qp = g.tensors[t].quant
        f = np.concatenate(f_acc[t]) if f_acc[t] else None
        row = {"name": node.name, "op": node.op, "tensor": t,
               "sqnr_db": None if f is None else _sqnr_db(f, np.concatenate(q_acc[t])),
               "sqnr_db_this_layer": None if f is None else
               _sqnr_db(f, dequantize_values(quantize_values(f, qp), qp).astype(np.float64)),
               "scale": float(qp.s), "zero_point": int(qp.zp)}
        fq = qdq_model(onnx_model, t, float(np.float32(qp.s)), int(qp.zp), transforms.get(t),
                               ndims.get(t, 4))
        row["top1_only_this_layer"] = top1(_predict(float_session(fq), xs, scored), y, binary)
        rows.append(row)
    rows.sort(key=lambda r: (r["top1_only_this_layer"], _key(r["sqnr_db_this_layer"])))
    report = {"tinyaot_version": __version__, "versions": versions(), "model": str(model),
              "calibration": str(calibration), "data": str(data), "samples": int(len(y)), "label_output": scored,
              "sqnr_samples": n_sqnr, "calibrate": options.quantization.calibrate or DEFAULT_METHOD,
              # what ran, as deploy's report.json says it (method, CLE pairs, input ranges, bias correction)
              "quantization": {"calibration": g.meta.get("calibration")},
              "float_top1": float_top1, "layers": rows}
    _write(out, {"report.json": json.dumps(_finite(report), indent=2) + "\n", "report.md": report_md(report)},
           lambda folder: _plot(report, folder / PNG_NAME))
    return report


def _write(out: Path, texts: dict[str, str], plot) -> None:
    """The report files, made in a staging folder that replaces `out` atomically only when all are written: a
    failure (disk full, the plot, a signal) leaves no half-written `out` and an old one untouched."""
    with output_folder(out, "analyze") as tmp:
        for name, text in texts.items():
            (tmp / name).write_text(text)
        plot(tmp)


def _key(v):
    return np.inf if v is None else v


def _finite(obj):
    """JSON has no infinities: an exact tensor's SQNR (no noise at all) is written as null with `exact`."""
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


def _fmt(v) -> str:
    return "-" if v is None else ("exact" if v == float("inf") else f"{v:.1f}")


def _settings(report: dict) -> str:
    """CLE and bias correction as they ran (report.json quantization.calibration), for report.md's first line."""
    cal = (report.get("quantization") or {}).get("calibration")
    if not cal:
        return ""
    cle = "auto" if cal["cle"] == "auto" else ("every pair" if cal["cle"] else "off")
    bc = f"on, {cal['bias_corrected_layers']} layers" if cal["bias_correction"] else "off"
    return f", CLE {cle} ({cal['cle_pairs']} pairs equalized), bias correction {bc}"


def report_md(report: dict) -> str:
    lines = [f"# Per-layer quantization sensitivity: {Path(report['model']).name}", "",
             f"{report['samples']} labelled samples (SQNR over the first {report['sqnr_samples']}); calibration "
             f"method `{report['calibrate']}`{_settings(report)}; float top-1 {100 * report['float_top1']:.2f} %.", "",
             "Worst first. `sqnr_db`: the int8 model's output of the layer against float (noise of all layers up "
             "to it); `this layer`: the float tensor quantized alone; top-1: float model with only this layer's "
             "output quantized.", "",
             "| layer | op | sqnr_db | sqnr_db this layer | top-1 only this layer |", "|---|---|---|---|---|"]
    for r in report["layers"]:
        lines.append(f"| {r['name']} | {r['op']} | {_fmt(r['sqnr_db'])} | {_fmt(r['sqnr_db_this_layer'])} | "
                     f"{100 * r['top1_only_this_layer']:.2f} % |")
    lines.append(f"\n![SQNR per layer]({PNG_NAME})\n")
    return "\n".join(lines)


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["layers"]
    # long exported names (StatefulPartitionedCall/functional_1/...) keep their distinctive tail
    names = [r["name"] if len(r["name"]) <= 32 else "..." + r["name"][-29:] for r in rows]
    cap = lambda v: np.nan if v is None or not np.isfinite(v) else v  # noqa: E731
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(rows) + 2), 4.5))
    pos = np.arange(len(rows))
    ax.bar(pos - 0.2, [cap(r["sqnr_db"]) for r in rows], 0.4, label="int8 model (accumulated)")
    ax.bar(pos + 0.2, [cap(r["sqnr_db_this_layer"]) for r in rows], 0.4, label="this layer alone")
    ax.set_ylabel("SQNR (dB)")
    ax.set_xticks(pos, names, rotation=60, ha="right", fontsize=7)
    ax2 = ax.twinx()
    ax2.plot(pos, [100 * r["top1_only_this_layer"] for r in rows], "k.-", label="top-1, only this layer int8")
    ax2.axhline(100 * report["float_top1"], color="grey", ls="--", lw=0.8)
    ax2.set_ylabel("top-1 (%)")
    ax.set_title(f"{Path(report['model']).name}: per-layer quantization (worst first)", pad=22)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    # above the plot, not over the bars (the worst layers are on the left, the best on the right)
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
