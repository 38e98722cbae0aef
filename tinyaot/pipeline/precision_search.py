"""`--max-accuracy-drop POINTS`: choose each layer's activation width (8 or 16 bits) so that top-1 on labelled data
stays within POINTS of the float model's, at the least memory.

Memory is the arena (RAM) plus the constant bytes in flash (weights, biases, requantization parameters), both from
the compiled model: a 16-bit layer doubles its output tensor, its biases are int64 and its neighbours may need an
int8 <-> int16 conversion (compress/precision.py), so every promotion costs bytes, and the search adds as few as it
can:

1. all layers at 8 bits: if its top-1 drop is within the budget, that is the choice (the smallest model);
2. sensitivity: for every layer whose op has a 16-bit kernel, the model with only that layer at 16 bits is compiled
   and measured (top-1 over the data, the generated C compiled for the host; its extra bytes);
3. greedy promotion: layers are promoted in order of measured top-1 gain per extra byte (gains <= 0 last, by their
   gain), the combined model measured after each step, until the drop is within the budget; if even every
   supported layer at 16 bits is not, the search reports that and stops with an error;
4. pruning: each promoted layer, costliest first, is put back to 8 bits when the model stays within the budget.

Each measurement is the same host-compiled C `tinyaot evaluate` runs (bit-exact with the numpy reference and with
QEMU), over the same samples, so the recorded top-1 of the choice is the deployed model's.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from tinyaot.compress.ort_baseline import float_predictions, is_probability, top1
from tinyaot.compress.precision import layer_names
from tinyaot.errors import TinyaotError
from tinyaot.frontend import ImportedModel, import_model
from tinyaot.frontend.normalize import float32_model_file
from tinyaot.ops.registry import get_op, int16_form
from tinyaot.options import Options
from tinyaot.toolchain.hostjit import HostModel

from .compile import compile_model, refuse_sparse16
from .labelled import label_output as label_output_of, load_labelled, take


def _check_budget(max_drop) -> None:
    # NaN compares false with everything: unchecked, the search would measure every layer and then fail
    if not np.isfinite(float(max_drop)) or float(max_drop) < 0:
        raise TinyaotError(f"--max-accuracy-drop must be >= 0 points, got {max_drop}")


def _const_bytes(graph) -> int:
    return int(sum(get_op(n.op).weights_bytes(n, graph) + get_op(n.op).params_bytes(n, graph) for n in graph.nodes))


def candidate_layers(graph) -> list[str]:
    """The layers the search may promote, in schedule order: every layer whose op has a 16-bit form (its 16-bit op
    declares it: convolution, fully connected, pooling, Add, Mul, Concat, Softmax and the activations with s16
    kernels)."""
    names = set(layer_names(graph))
    return [n.name for n in graph.nodes if n.name in names and int16_form(n.op) is not None]


def search_precision(model: str | Path | ImportedModel, calibration, data, max_drop: float,
                     options: Options | None = None) -> dict:
    """The per-layer widths within `max_drop` top-1 points of float (see the module docstring), each configuration
    compiled with `options` (its activation bits replaced), measured on the first `verification.limit` samples of
    `data`. Returns the record report.json keeps: `bits` {layer: 8|16}, `top1`, `float_top1`, `drop_points`,
    `arena_bytes`, `const_bytes`, `measurements` (every configuration measured) and `sensitivity` (per candidate
    layer)."""
    _check_budget(max_drop)
    options = Options() if options is None else options
    echo = options.output.echo
    imported = import_model(model, options.compile.input_shapes)
    # the IR is printed by deploy's own compilation, not by each of the search's
    options = options.with_(print_ir_after=(), activation_bits=8)
    base = compile_model(imported, calibration, options)
    # the checks `tinyaot evaluate --data` makes (x of the model's input shape, y integer labels, one per sample)
    scored = label_output_of(base.graph.outputs, options.verification.label_output)
    xs, y = load_labelled(data, base.graph.meta["inputs"])
    limit = options.verification.limit
    xs, y = take(xs, limit), y if limit is None else y[:limit]
    shapes = {i["name"]: tuple(i["shape"]) for i in base.graph.meta["inputs"]}
    x_ort = {n: a.reshape((len(y),) + shapes[n][1:]) for n, a in xs.items()}
    with tempfile.TemporaryDirectory(prefix="tinyaot-ort-") as tmp:
        float_out = float_predictions(float32_model_file(imported.path, Path(tmp)), x_ort, scored).reshape(len(y), -1)
    binary = is_probability(float_out)  # a sigmoid head: class 1 above 0.5
    float_top1 = top1(float_out, y, binary)
    names = layer_names(base.graph)
    measured: dict[tuple, dict] = {}

    def measure(sixteen: frozenset) -> dict:
        key = tuple(sorted(sixteen))
        if key not in measured:
            bits = {n: (16 if n in sixteen else 8) for n in names}
            c = compile_model(imported, calibration, options.with_(activation_bits=bits)) if sixteen else base
            host = HostModel(c.graph, c.plan.offsets, c.plan.arena_bytes, c.lower_bound, c.patch)
            logits = np.stack([c.dequantize(scored, host.run(c.quantize_inputs(c.feed(k, xs)))[scored]).reshape(-1)
                               for k in range(len(y))])
            t = top1(logits, y, binary)
            measured[key] = {"layers_16": list(key), "top1": t, "drop_points": round(100 * (float_top1 - t), 4),
                             "arena_bytes": int(c.plan.arena_bytes), "const_bytes": _const_bytes(c.graph)}
            echo(f"  {len(key)} layers at 16 bits: top-1 {100 * t:.2f} %, arena {c.plan.arena_bytes} B, "
                 f"constants {measured[key]['const_bytes']} B")
        return measured[key]

    def ok(m: dict) -> bool:
        return m["drop_points"] <= max_drop + 1e-9

    def cost(m: dict) -> int:
        return m["arena_bytes"] + m["const_bytes"]

    current = frozenset()
    m = measure(current)
    sensitivity = []
    if not ok(m):
        for name in candidate_layers(base.graph):
            s = measure(frozenset([name]))
            sensitivity.append({"layer": name, "top1": s["top1"],
                                "gain_points": round(100 * (s["top1"] - m["top1"]), 4),
                                "extra_bytes": cost(s) - cost(m)})
        order = sorted(sensitivity, key=lambda r: (r["gain_points"] <= 0, -r["gain_points"] / max(r["extra_bytes"], 1)
                                                   if r["gain_points"] > 0 else -r["gain_points"]))
        for r in order:
            current = current | {r["layer"]}
            m = measure(current)
            if ok(m):
                break
        if not ok(m):
            raise TinyaotError(f"no choice of activation widths keeps top-1 within {max_drop} points of float "
                               f"({100 * float_top1:.2f} %): with every supported layer at 16 bits it is "
                               f"{100 * m['top1']:.2f} % ({m['drop_points']:.2f} points lower)")
        for name in sorted(current, key=lambda n: -next(r["extra_bytes"] for r in sensitivity if r["layer"] == n)):
            trial = measure(current - {name})
            if ok(trial) and cost(trial) <= cost(m):
                current, m = current - {name}, trial
    return {"max_drop_points": max_drop, "float_top1": float_top1, "samples": int(len(y)),
            "bits": {n: (16 if n in current else 8) for n in names}, "top1": m["top1"],
            "drop_points": m["drop_points"], "arena_bytes": m["arena_bytes"], "const_bytes": m["const_bytes"],
            "sensitivity": sensitivity, "measurements": list(measured.values())}


def resolve_activation_bits(model: ImportedModel, calibration, data, options: Options):
    """What deploy and evaluate compile with: `quantization.activation_bits` (8, 16 or {layer: bits}) as given, or
    with `quantization.max_accuracy_drop` the searched per-layer widths (needs `data`). Returns (bits, the search
    record or None). Everything that would refuse the search's choice is refused here, before the search spends
    its minutes."""
    activation_bits, max_accuracy_drop = options.quantization.activation_bits, options.quantization.max_accuracy_drop
    if max_accuracy_drop is None:
        return activation_bits, None
    if data is None:
        raise TinyaotError("--max-accuracy-drop needs labelled data: give --data DATA.npz (x and integer y)")
    _check_budget(max_accuracy_drop)
    if activation_bits not in (8, None):
        raise TinyaotError("--max-accuracy-drop chooses the activation bits itself; do not also give "
                           "--activation-bits")
    # compressed weight storage is int8-only (compile_model refuses it for 16-bit layers); --prune-channels and
    # --bias-correction are measured by the search as the final model will have them
    refuse_sparse16(options.compression, "--max-accuracy-drop")
    load_labelled(data, model.inputs)  # a bad data file fails now, not after the first compile
    label_output_of(model.graph.outputs, options.verification.label_output)
    options.output.echo(f"choosing activation widths within {max_accuracy_drop} top-1 points of float on {data}")
    # the search measures on every sample of `data` (evaluate's --limit is for evaluate's own figures)
    record = search_precision(model, calibration, data, float(max_accuracy_drop), options.with_(limit=None))
    return record["bits"], record


def bits_line(r: dict) -> str:
    """One line on the layers' widths for the CLI (`r`: report.json quantization.activation_bits)."""
    if r["mode"] != "mixed":
        line = f"activations: {r['mode']}-bit"
    else:
        line = f"activations: mixed, 16-bit layers: {', '.join(r['layers_16'])}"
    s = r.get("search")
    if s:
        n = len(s["measurements"])
        line += (f"; chosen within {s['max_drop_points']} points of float {100 * s['float_top1']:.2f} %: top-1 "
                 f"{100 * s['top1']:.2f} %, arena {s['arena_bytes']} B, constants {s['const_bytes']} B "
                 f"({n} configuration{'s' if n != 1 else ''} measured on {s['samples']} samples)")
    return line
