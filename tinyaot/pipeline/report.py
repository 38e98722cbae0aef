"""Stage 5, report: report.json (a dict), report.md (rendered from templates/report/report.md.j2 through codegen) and
the summary lines the CLI prints.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tinyaot import __version__
from tinyaot.boards import Board
from tinyaot.codegen.project import render_report_md
from tinyaot.compress.pipeline import compression_report, layer_report
from tinyaot.compress.precision import layer_bits, precision_report
from tinyaot.ir import Graph
from tinyaot.ops.registry import get_op, variant_of
from tinyaot.toolchain.versions import versions

from .compile import Compiled
from .schedule import patch_record
from .timeline import timeline_text

if TYPE_CHECKING:  # verify.py imports this module (macs, weights_bytes)
    from .verify import VerifySection


def weights_bytes(g: Graph) -> int:
    """Bytes of the weight tensors as stored in flash (biases and requantization parameters excluded)."""
    return int(sum(get_op(n.op).weights_bytes(n, g) for n in g.nodes))


def macs(g: Graph) -> int:
    """Multiply-accumulates of one inference."""
    return int(sum(get_op(n.op).macs(n, g) for n in g.nodes))


def layer_class(node, graph: Graph) -> str:
    """The layer's class for per-class speed figures, as its op file says: "conv 1x1", "depthwise", "conv" (other
    kernel sizes), "fully connected", "add", "pooling", else the op name in lower case."""
    return get_op(node.op).layer_class(node)


def layer_rows(compiled: Compiled, emitted, per_layer_insns: list[int] | None) -> list[dict]:
    """report.json's `layers`: one row per node, with its first-sample instruction count when measured."""
    g = compiled.graph
    rows, k = [], 0
    for layer in emitted.layers:
        node = g.nodes[layer.index]
        spec = get_op(node.op)
        insns = None
        if layer.code:
            if per_layer_insns is not None:
                insns = int(per_layer_insns[k])
            k += 1
        n_macs = spec.macs(node, g)
        rows.append({"name": node.name, "op": node.op, "kernel": layer.kernel or "alias", "variant": variant_of(node),
                     "class": layer_class(node, g),
                     "output_shape": list(g.tensors[node.outputs[0]].shape), "macs": n_macs,
                     "activation_bits": layer_bits(g, node),  # 8 or 16 (--activation-bits, compress/precision.py)
                     "weights_bytes": spec.weights_bytes(node, g), "params_bytes": spec.params_bytes(node, g),
                     "instructions": insns,
                     "instructions_per_mac": round(insns / n_macs, 3) if insns is not None and n_macs else None,
                     **layer_report(g, node)})
    return rows


def build_report(compiled: Compiled, b: Board, model: Path, emitted, per_layer, sizes, verify_section: VerifySection,
                 uncompressed: dict | None = None, files: dict | None = None, tuning: dict | None = None) -> dict:
    """report.json. With `uncompressed` (a compressed model, verified), `compression.uncompressed` holds the
    same model's costs without compression and every layer row its `instructions_uncompressed`. `files`: the
    folder's files by role (stage.folder_files). `tuning`: what --tune / --tuning-log did (pipeline/tune.py); None:
    the variants are the cost model's choice (or generic with --optimize size)."""
    g = compiled.graph
    rows = layer_rows(compiled, emitted, per_layer)
    comp = compression_report(g)
    if uncompressed is not None:
        comp["uncompressed"] = {k: v for k, v in uncompressed.items() if k != "layers"}
        for r in rows:
            if r["instructions"] is not None:
                r["instructions_uncompressed"] = uncompressed["layers"].get(r["name"])
    weights = sum(r["weights_bytes"] for r in rows)
    params = sum(r["params_bytes"] for r in rows)
    lbl = compiled.layer_by_layer or (compiled.plan.arena_bytes, compiled.lower_bound)
    return {
        "tinyaot_version": __version__,
        "versions": versions(),  # what measured the figures: tinyaot, gcc, QEMU, onnxruntime, numpy
        "model": {"path": str(model), "sha256": g.meta["sha256"], "inputs": g.meta["inputs"],
                  "outputs": g.meta["outputs"]},
        "board": {"name": b.name, "cpu": b.core, "qemu_machine": b.qemu_machine, "flash_bytes": b.flash_bytes,
                  "sram_bytes": b.ram_bytes},
        "quantization": {
            "input": {"scale": g.tensors[compiled.input].quant.s, "zero_point": g.tensors[compiled.input].quant.zp},
            "output": {"scale": g.tensors[compiled.output].quant.s,
                       "zero_point": g.tensors[compiled.output].quant.zp},
            # every input and output as the header declares them (the two above are the first ones)
            "inputs": [_port(p, compiled) for p in emitted.inputs],
            "outputs": [_port(p, compiled) for p in emitted.outputs],
            "calibration_samples": 0 if compiled.prequantized else int(len(compiled.samples[compiled.input])),
            "source": _source(g, compiled.prequantized),
            "calibration": g.meta.get("calibration"),  # method, CLE, bias correction (compress/ranges.py)
            "notes": g.meta.get("quantization_notes", []),
            "activation_bits": precision_report(g)},
        "memory": {"arena_bytes": compiled.plan.arena_bytes, "arena_lower_bound_bytes": compiled.lower_bound,
                   # layer by layer: its planned arena and the liveness bound it cannot go below (a patch stage
                   # does: `patch`, pipeline/schedule.py)
                   "arena_layer_by_layer_bytes": lbl[0], "layer_by_layer_lower_bound_bytes": lbl[1],
                   "arena_budget_bytes": compiled.arena_budget,
                   "patch": patch_record(compiled.graph, compiled.patch, compiled.patch_estimate, lbl[0]),
                   "peak_step": compiled.peak_step, "peak_tensors": list(compiled.peak_tensors),
                   "planner": compiled.plan.strategy, "weights_bytes": weights, "params_bytes": params,
                   "flash_bytes": sizes["flash_bytes"] if sizes else None,
                   "static_ram_bytes": sizes["static_ram_bytes"] if sizes else None,
                   "stack_bytes": b.stack_bytes},
        "macs": int(sum(r["macs"] for r in rows)),
        "target": {"core": compiled.target.core, "has_dsp": compiled.target.has_dsp,
                   "has_mve": compiled.target.has_mve, "optimize": compiled.target.optimize,
                   "aligned_only": b.aligned_only},
        "tuning": tuning if tuning is not None else {
            "enabled": False, "choice": "generic kernels (--optimize size)" if compiled.target.optimize == "size"
            else "cost model"},
        "compression": comp,
        "layers": rows,
        "verify": verify_section.to_json(),
        "files": files or {},
    }


def _source(g: Graph, prequantized: bool) -> str:
    """Where the quantization parameters came from, for report.json."""
    if g.meta.get("format") == "tflite":
        return "the TFLite model's own parameters"
    return "the model's QuantizeLinear/DequantizeLinear" if prequantized else "calibration"


def _port(p, compiled: Compiled) -> dict:
    """One input or output as invoke takes it: C parameter, size, int8 parameters, arena offset (None for a patch
    stage's input, copied in band by band)."""
    offset = compiled.plan.offsets.get(p.name)
    return {"name": p.name, "c_name": p.c_name, "parameter": p.param, "shape": list(p.shape), "size": p.size,
            "scale": p.scale, "zero_point": p.zero_point, "arena_offset": None if offset is None else int(offset)}


def report_md(r: dict) -> str:
    """report.md from report.json's dict."""
    comp = compression_line(r["compression"]) if "options" in r["compression"] else None
    tl = r["memory"].get("timeline")
    return render_report_md(r, model_file=Path(r["model"]["path"]).name, compression_text=comp,
                            timeline_text=timeline_text(tl) if tl else None)


def compression_line(c: dict) -> str:
    """One line of what compression achieved, from report.json's `compression` section."""
    parts = [f"weights {c['weights_bytes']} B of {c['weights_bytes_dense']} B dense int8 "
             f"({100 * c['ratio_vs_int8']:.1f} %)" if c.get("ratio_vs_int8") is not None else
             f"weights {c['weights_bytes']} B", f"sparsity {100 * c['sparsity']:.1f} %",
             f"{c['weight_bits']:g} bits/weight", f"storage {'/'.join(c['storage_kinds'])}"]
    if c.get("clusters"):
        parts.append(f"{c['clusters']} clusters")
    if c.get("grid_layers"):  # --clusters on layers that use each weight once: evenly spaced levels, run as int4
        n = len(c["grid_layers"])
        parts.append(f"{n} single-use layer{'' if n == 1 else 's'} on a grid (int4)")
    removed = sum(c.get("channels_removed", {}).values())
    if removed:
        parts.append(f"{removed} channels removed in {len(c['channels_removed'])} layers")
    if c.get("unmatched_patterns"):
        parts.append(f"patterns matching no layer: {', '.join(c['unmatched_patterns'])}")
    return ", ".join(parts)


def summary(r: dict, out: Path) -> list[str]:
    """The lines the CLI prints after a deploy."""
    m, v = r["memory"], r["verify"]
    s = [f"{Path(r['model']['path']).name} -> {out} for {r['board']['name']} ({r['board']['cpu']})",
         f"arena {m['arena_bytes']} B (lower bound {m['arena_lower_bound_bytes']} B), weights {m['weights_bytes']} B, "
         f"flash {m['flash_bytes']} B, {r['macs']} MACs"]
    p = m.get("patch")
    if p:
        s.append(f"patch stage: the first {len(p['layers'])} layers in {p['stripes']} stripes "
                 f"({p['macs_recomputed']} MACs recomputed, "
                 f"{100 * p['macs_recomputed'] / p['macs_layer_by_layer']:.1f} "
                 f"% of theirs); layer by layer the arena is {m['arena_layer_by_layer_bytes']} B")
    if "options" in r["compression"]:
        s.append(f"compression: {compression_line(r['compression'])}")
    base = r["compression"].get("uncompressed")
    if base is not None:
        s.append(f"without compression: {base['instructions']} instructions/inference "
                 f"({100 * (v['instructions'] / base['instructions'] - 1):+.1f} % compressed), flash "
                 f"{base['flash_bytes']} B ({100 * (m['flash_bytes'] / base['flash_bytes'] - 1):+.1f} %)")
    t = r.get("tuning") or {}
    if t.get("enabled") or t.get("log"):
        s.append(f"tuning: {t['layers_tuned']} layers with variants, {t['variants_tried']} variants measured "
                 f"({t['measured_now']} now in {t['rounds']} rounds, {t['from_cache_layers']} layers from cache/log); "
                 f"instructions default {t['instructions_default']} -> tuned {t['instructions_tuned']}"
                 + (f" (default kept: the other choice ran {t.get('instructions_rejected_choice')})"
                    if t.get("reverted_to_default") else ""))
    if v["ran"]:
        s.append(f"verified under QEMU {v['qemu_machine']}: outputs == reference on {v.get('samples')} samples "
                 f"({v.get('inputs')}), "
                 f"worst layer vs onnxruntime {v['max_abs_diff_vs_onnxruntime']} LSB, "
                 f"{v['instructions']} instructions/inference, stack {v['stack_high_water_bytes']} B"
                 + (f" (invoke {v['invoke_stack_bytes']} B at {v['optimization']}, "
                    + (f"{v['invoke_stack_bytes_o0']} B at -O0)" if v.get("invoke_stack_bytes_o0") is not None
                       else "-O0 not measured)") if v.get("invoke_stack_bytes") is not None else ""))
        if "tflite_interpreter" in v:  # an int8 .tflite model: its own interpreter on the same int8 inputs
            match = v["outputs_match_tflite"]
            s.append(f"TFLite interpreter: {v['tflite_interpreter']}" if match is None else
                     f"TFLite interpreter ({v['tflite_interpreter']}): " + (
                         "outputs == the C's on every sample" if match else
                         f"outputs differ by up to {v['max_abs_diff_vs_tflite']} LSB"))
    else:
        s.append("not verified (--no-verify)")
    return s
