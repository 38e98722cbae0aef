"""tinyaot's Python API: what the CLI calls, and what tests and scripts call directly.

    compiled = compile_model("kws.onnx", "cal.npz")          # import, passes, calibrate, quantize
    compiled = compile_model("kws.onnx", "cal.npz", compression=CompressionOptions(clusters=16))  # + compression
    report = deploy("kws.onnx", "stm32", "cal.npz", "out/")   # + plan, emit C, build, verify under QEMU
    figures = evaluate("kws.onnx", "cal.npz", "data.npz")     # accuracy: float vs tinyaot int8 vs onnxruntime int8
"""
from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from tinyaot import __version__
from tinyaot.boards import Board, load_board
from tinyaot.compress.calibrate import collect_ranges, load_samples
from tinyaot.compress.options import CompressionOptions
from tinyaot.compress.pipeline import compression_report, layer_report, prune_step, storage_step
from tinyaot.compress.quantize import quantize_graph, quantize_values
from tinyaot.errors import TinyaotError
from tinyaot.frontend import import_onnx
from tinyaot.frontend.normalize import float32_model_file
from tinyaot.ir import Graph
from tinyaot.passes import run_passes
from tinyaot.plan import Plan, lower_bound, plan
from tinyaot.plan.liveness import graph_buffers

Echo = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


@dataclass
class Compiled:
    """A quantized int8 graph with its memory plan, ready to be emitted."""

    graph: Graph
    samples: dict[str, np.ndarray]  # float samples, name -> [N, *shape]: calibration, and inputs for verification
    plan: Plan
    lower_bound: int
    peak_step: int | None
    peak_tensors: tuple[str, ...]
    prequantized: bool = False  # the model's own Q/DQ parameters were used; `samples` calibrated nothing
    samples_source: str = "calibration data"  # where `samples` come from, for the report

    @property
    def input(self) -> str:
        return self.graph.inputs[0]

    @property
    def compressed(self) -> bool:
        """Compression options were active (compress/pipeline.py keeps what it did in graph.meta)."""
        return "compression" in self.graph.meta

    @property
    def output(self) -> str:
        return self.graph.outputs[0]

    def quantize_input(self, x: np.ndarray) -> np.ndarray:
        t = self.graph.tensors[self.input]
        return quantize_values(np.asarray(x, np.float32).reshape(t.shape), t.quant)

    def dequantize_output(self, q: np.ndarray) -> np.ndarray:
        t = self.graph.tensors[self.output]
        return (np.asarray(q, np.float64).reshape(t.shape) - t.quant.zp) * t.quant.s


def compile_model(model: str | Path, calibration: str | Path | None, *, input_shapes=None,
                  disable_passes=(), print_ir_after=(), compression=None, echo: Echo = _quiet) -> Compiled:
    """Import, run the passes, calibrate with onnxruntime over the calibration samples, quantize, plan memory.

    `compression` (CompressionOptions, a dict of its fields, or a spec file path; None: none) prunes the float
    graph after the passes and clusters/packs the int8 weights after quantization (compress/pipeline.py).

    A pre-quantized (QDQ) model needs no calibration: its own scales and zero points are used, and the samples,
    if given, only feed verification; without them verification uses random int8 inputs (fixed seed)."""
    graph = import_onnx(Path(model), input_shapes)
    if len(graph.inputs) != 1 or len(graph.outputs) != 1:
        raise TinyaotError(f"models with {len(graph.inputs)} inputs and {len(graph.outputs)} outputs are not "
                           "supported yet; tinyaot compiles single-input, single-output models")
    prequantized = any(n.op in ("QuantizeLinear", "DequantizeLinear") for n in graph.nodes)
    if calibration is None and not prequantized:
        raise TinyaotError("no calibration data: int8 quantization needs sample inputs. Give --calibration "
                           "FILE.npz (one array per input name, or an 'x' array; first axis = sample)")
    samples = load_samples(Path(calibration), graph.meta["inputs"]) if calibration is not None else None
    ranges: dict[str, tuple[float, float]] = {}
    if not prequantized:
        names = [n for n, t in graph.tensors.items() if not t.is_const]
        ranges = collect_ranges(graph.meta["onnx_model"], samples, names)
    graph = run_passes(graph, set(disable_passes), set(print_ir_after), echo)
    _share_ranges_across_moves(graph, ranges)
    options = CompressionOptions.coerce(compression)
    if options is not None and options.active:
        graph = prune_step(graph, options, None if samples is None else samples[graph.inputs[0]])
    graph = quantize_graph(graph, ranges)
    if options is not None and options.active:
        # the calibration samples, quantized as the deployed model will see them, let clustering weigh each
        # layer's errors by its real inputs
        cal = None if samples is None else [quantize_values(x.reshape(graph.tensors[graph.inputs[0]].shape),
                                                            graph.tensors[graph.inputs[0]].quant)
                                            for x in samples[graph.inputs[0]]]
        graph = storage_step(graph, cal)
    source = "calibration data" if not prequantized else "--calibration samples (used for verification only)"
    if samples is None:
        samples = _random_inputs(graph, RANDOM_SAMPLES, RANDOM_SEED)
        source = f"random int8 inputs (numpy default_rng seed {RANDOM_SEED}; no calibration data given)"
    buffers = graph_buffers(graph)
    p = plan(buffers)
    lb = lower_bound(buffers)
    return Compiled(graph, samples, p, lb.bytes, lb.step, lb.names, prequantized, source)


RANDOM_SAMPLES, RANDOM_SEED = 16, 0


def _random_inputs(graph: Graph, n: int, seed: int) -> dict[str, np.ndarray]:
    """Deterministic inputs for a pre-quantized model deployed without samples: uniform int8 values dequantized
    with the input's own parameters, so quantizing them back gives exactly those integers."""
    name = graph.inputs[0]
    shape = tuple(graph.meta["inputs"][0]["shape"])
    q = np.random.default_rng(seed).integers(-128, 128, size=(n, *shape))
    return {name: graph.tensors[name].quant.dequantize(q).astype(np.float32)}


def _share_ranges_across_moves(graph: Graph, ranges: dict[str, tuple[float, float]]) -> None:
    """Tensors the passes create have no ONNX twin and so no calibrated range: e.g. a 4-D graph output `y` is
    computed in NHWC as `y_nhwc` and moved back to NCHW. A Transpose or Reshape moves values without changing
    them, so a tensor on one side of it takes the range of the other (repeated, for chains of moves)."""
    moves = [(n.inputs[0], n.outputs[0]) for n in graph.nodes if n.op in ("Transpose", "Reshape")]
    changed = True
    while changed:
        changed = False
        for a, b in moves:
            for src, dst in ((a, b), (b, a)):
                if src in ranges and dst not in ranges:
                    ranges[dst] = ranges[src]
                    changed = True


# ---- deploy ----------------------------------------------------------------------------------------------------

@dataclass
class DeployResult:
    out_dir: Path
    report: dict
    summary: list[str] = field(default_factory=list)


def _layer_rows(compiled: Compiled, emitted, per_layer_insns: list[int] | None) -> list[dict]:
    from tinyaot.ops.registry import get_op

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
        rows.append({"name": node.name, "op": node.op, "kernel": layer.kernel or "alias",
                     "output_shape": list(g.tensors[node.outputs[0]].shape), "macs": spec.macs(node, g),
                     "weights_bytes": spec.weights_bytes(node, g), "params_bytes": spec.params_bytes(node, g),
                     "instructions": insns, **layer_report(g, node)})
    return rows


def _write_build_files(out: Path, prefix: str, board: Board, emitted_files: list[Path]) -> None:
    from tinyaot.toolchain.firmware import compile_flags
    from tinyaot.codegen.emit import environment

    env = environment()
    c_files = sorted(p.name for p in emitted_files if p.suffix == ".c")
    ctx = dict(prefix=prefix, board=board, cflags=" ".join(compile_flags(board)), c_files=c_files)
    (out / "Makefile").write_text(env.get_template("project/Makefile.j2").render(**ctx))
    (out / "CMakeLists.txt").write_text(env.get_template("project/CMakeLists.txt.j2").render(**ctx))


@contextlib.contextmanager
def _staging(out_dir: Path):
    """A sibling temp folder that replaces `out_dir` only if everything inside the block succeeds, so a failed
    deploy never leaves a half-written output folder (and never destroys a previous good one)."""
    out_dir = Path(out_dir)
    parent = out_dir.resolve().parent
    if out_dir.exists() and not out_dir.is_dir():
        raise TinyaotError(f"--out {out_dir} exists and is not a directory")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=parent))
    except OSError as exc:
        raise TinyaotError(f"cannot write to {parent}: {exc.strerror}") from None
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if out_dir.exists():
        old = parent / f".{out_dir.name}.old-{tmp.name.rsplit('-', 1)[-1]}"
        out_dir.rename(old)
    tmp.rename(out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def deploy(model: str | Path, board: str, calibration: str | Path | None, out_dir: str | Path, *,
           verify: bool = True, verify_samples: int = 8, input_shapes=None, disable_passes=(), print_ir_after=(),
           qemu_timeout_s: float = 120.0, compression=None, echo: Echo = _quiet) -> DeployResult:
    """Compile `model` for `board` into `out_dir` (the folder an engineer vendors), and unless verify=False
    build the firmware and prove it under QEMU. Raises TinyaotError for any problem with the inputs."""
    from tinyaot.toolchain.firmware import build_firmware, elf_size, render_hal, render_harness
    from tinyaot.codegen.emit import emit_model
    from tinyaot.oracle.reference import run_reference

    b = load_board(board)
    model = Path(model)
    compiled = compile_model(model, calibration, input_shapes=input_shapes, disable_passes=disable_passes,
                             print_ir_after=print_ir_after, compression=compression, echo=echo)
    g = compiled.graph
    _check_fits(compiled, b)
    with _staging(Path(out_dir)) as tmp:
        emitted = emit_model(g, compiled.plan.offsets, compiled.plan.arena_bytes, compiled.lower_bound,
                             f"{b.name} ({b.core})", tmp)
        render_hal(b, tmp / "hal")
        _write_build_files(tmp, emitted.prefix, b, emitted.files)
        name = emitted.prefix[len("tinyaot_"):]
        verify_section = {"ran": False, "qemu_machine": b.qemu_machine, "exit_code": None, "outputs_match": None,
                          "max_abs_diff_vs_reference": None, "max_abs_diff_vs_onnxruntime": None,
                          "output_diff_vs_onnxruntime": None, "top1_agreement_vs_onnxruntime": None,
                          "instructions": None, "arena_high_water_bytes": None, "stack_high_water_bytes": None,
                          "arena_canary_intact": None, "stack_canary_intact": None}
        per_layer = None
        sizes = None
        uncompressed = None
        firmware_dir = tmp / "firmware"
        sources = [p for p in emitted.files if p.suffix == ".c"]
        if verify:
            harness = render_harness(name, firmware_dir)
            elf = build_firmware([harness, *sources], [tmp], b, firmware_dir, name="firmware",
                                 defines=["TINYAOT_TRACE"], werror=True)
            sizes = elf_size(elf)
            verify_section, per_layer = _verify(compiled, b, elf, firmware_dir, verify_samples, qemu_timeout_s,
                                                len([l for l in emitted.layers if l.code]))
            if not verify_section["outputs_match"]:
                raise TinyaotError(f"verification failed: the C under QEMU differs from the numpy reference by up "
                                   f"to {verify_section['max_abs_diff_vs_reference']} LSB (a tinyaot bug; the "
                                   f"staged output was discarded)")
            bad = [c for c in verify_section.pop("_layers") if c.max_abs_diff > c.tolerance]
            if bad:
                worst = max(bad, key=lambda c: c.max_abs_diff)
                raise TinyaotError(f"verification failed: layer {worst.node!r} ({worst.op}) differs from "
                                   f"onnxruntime by {worst.max_abs_diff} LSB (allowed {worst.tolerance})")
            if compiled.compressed:
                uncompressed = _uncompressed_costs(model, calibration, b, qemu_timeout_s, input_shapes=input_shapes,
                                                   disable_passes=disable_passes)
        else:
            # Still prove the firmware builds and fits when QEMU is skipped, if the toolchain is here.
            harness = render_harness(name, firmware_dir)
            with contextlib.suppress(TinyaotError):
                sizes = elf_size(build_firmware([harness, *sources], [tmp], b, firmware_dir, name="firmware"))
        report = _report(compiled, b, model, emitted, per_layer, sizes, verify_section, uncompressed)
        (tmp / "report.json").write_text(json.dumps(report, indent=2) + "\n")
        (tmp / "report.md").write_text(_report_md(report))
        for junk in firmware_dir.glob("*"):
            if junk.suffix not in (".elf", ".c", ".ld", ".map", ".h"):
                junk.unlink()
    summary = _summary(report, Path(out_dir))
    return DeployResult(Path(out_dir), report, summary)


def _uncompressed_costs(model: Path, calibration, b: Board, timeout: float, **compile_args) -> dict:
    """What the same model costs on the same board without its compression options, measured the same way: the
    same calibration and passes, built with the same flags and run under QEMU on the first calibration sample (the
    sample whose counts the compressed report gives). Per layer by node name: compression keeps layer names, and a
    layer it did not change costs the same instructions both ways. Built in a temporary folder, not vendored."""
    from tinyaot.toolchain.firmware import build_firmware, elf_size, render_harness
    from tinyaot.toolchain.qemu import run_qemu, split_segments
    from tinyaot.codegen.emit import emit_model

    base = compile_model(model, calibration, **compile_args)
    g = base.graph
    with tempfile.TemporaryDirectory(prefix="tinyaot-uncompressed-") as tmp:
        tmp = Path(tmp)
        emitted = emit_model(g, base.plan.offsets, base.plan.arena_bytes, base.lower_bound, f"{b.name} ({b.core})",
                             tmp)
        fw = tmp / "firmware"
        harness = render_harness(emitted.prefix[len("tinyaot_"):], fw)
        elf = build_firmware([harness, *[p for p in emitted.files if p.suffix == ".c"]], [tmp], b, fw,
                             name="firmware", defines=["TINYAOT_TRACE"], werror=True)
        flash = elf_size(elf)["flash_bytes"]
        (fw / "input.bin").write_bytes(base.quantize_input(base.samples[base.input][0]).tobytes())
        result = run_qemu(elf, b, fw, timeout_s=timeout)
    if result.exit_code != 0 or not result.segments:
        raise TinyaotError(f"the uncompressed model's firmware failed under QEMU {b.qemu_machine} "
                           f"(exit code {result.exit_code}; a tinyaot bug)")
    first = split_segments(result.segments, 1)[0]
    coded = [g.nodes[layer.index].name for layer in emitted.layers if layer.code]
    per_layer = dict(zip(coded, first[1:-1])) if len(first) == len(coded) + 2 else {}
    return {"instructions": int(sum(first)), "flash_bytes": int(flash), "weights_bytes": weights_bytes(g),
            "macs": int(sum(_macs(n, g) for n in g.nodes)), "layers": {k: int(v) for k, v in per_layer.items()}}


def _macs(node, g: Graph) -> int:
    from tinyaot.ops.registry import get_op

    return int(get_op(node.op).macs(node, g))


def _check_fits(compiled: Compiled, b: Board) -> None:
    """Catch an arena that cannot fit before any C is built, with the exact overshoot."""
    need = compiled.plan.arena_bytes + b.stack_bytes
    if need > b.ram_bytes:
        raise TinyaotError(f"model too big for board '{b.name}': arena {compiled.plan.arena_bytes} B + stack "
                           f"{b.stack_bytes} B exceed its {b.ram_bytes} B of RAM by {need - b.ram_bytes} bytes")
    # Only constants that nodes read: quantization leaves the replaced float weights in `graph.tensors`, and
    # counting them made a 480 KB int8 model look like 2.4 MB.
    g = compiled.graph
    # (as stored: a compressed weight tensor counts its packed bytes)
    weights = sum(g.tensors[i].storage.nbytes(g.tensors[i].data) if g.tensors[i].storage is not None
                  else g.tensors[i].nbytes for i in {i for n in g.nodes for i in n.inputs if i} if g.tensors[i].is_const)
    if weights > b.flash_bytes:
        raise TinyaotError(f"model too big for board '{b.name}': {weights} B of weights exceed its "
                           f"{b.flash_bytes} B of flash by {weights - b.flash_bytes} bytes")


def _verify(compiled: Compiled, b: Board, elf: Path, workdir: Path, n: int, timeout: float, code_layers: int):
    from tinyaot.toolchain.qemu import EXIT_MEANINGS, overrun, read_stats, run_qemu, split_segments
    from tinyaot.oracle.onnxruntime_layers import check_layers, run_chain
    from tinyaot.oracle.reference import run_reference

    g = compiled.graph
    xs = compiled.samples[compiled.input]
    n = min(n, len(xs))
    q_inputs = [compiled.quantize_input(xs[k]) for k in range(n)]
    (workdir / "input.bin").write_bytes(b"".join(q.tobytes() for q in q_inputs))
    result = run_qemu(elf, b, workdir, timeout_s=timeout)
    if result.exit_code in (22, 23):  # the harness wrote its stats before stopping at the overwritten canary
        stats = read_stats(workdir)
        raise TinyaotError(f"verification failed under QEMU {b.qemu_machine}: "
                           f"{overrun(stats) or EXIT_MEANINGS[result.exit_code]} (a tinyaot bug; the staged output "
                           "was discarded)")
    if result.exit_code != 0:
        raise TinyaotError(f"firmware exited with code {result.exit_code} under QEMU {b.qemu_machine}: "
                           f"{(result.stderr or result.stdout).strip()[:200]}")
    out_size = g.tensors[compiled.output].size
    raw = np.frombuffer((workdir / "output.bin").read_bytes(), np.int8)
    if raw.size != n * out_size:
        raise TinyaotError(f"firmware wrote {raw.size} output bytes, expected {n * out_size}")
    stats = read_stats(workdir)
    if overrun(stats):  # exit status 0 with a changed canary would be a harness bug; never report it as fine
        raise TinyaotError(f"verification failed under QEMU {b.qemu_machine}: {overrun(stats)}")
    refs = [run_reference(g, {compiled.input: q}) for q in q_inputs]
    ref_out = np.stack([r[compiled.output].reshape(-1) for r in refs])
    qemu_out = raw.reshape(n, out_size)
    diff_ref = int(np.abs(ref_out.astype(np.int32) - qemu_out.astype(np.int32)).max())
    layers = check_layers(g, refs)
    sessions: dict = {}  # onnxruntime sessions per layer, reused across samples (never kept in the graph)
    chain = [run_chain(g, q, sessions)[compiled.output].reshape(-1) for q in q_inputs]
    e2e = int(np.abs(np.stack(chain).astype(np.int32) - ref_out.astype(np.int32)).max())
    agree = float(np.mean([int(np.argmax(c) == np.argmax(r)) for c, r in zip(chain, ref_out)]))
    per_sample = split_segments(result.segments, n) if result.segments else None
    per_layer = None
    insns = None
    if per_sample:
        first = per_sample[0]
        insns = int(sum(first))
        # Segments inside invoke: entry and copy-in, one per layer with code, then copy-out and return.
        if len(first) == code_layers + 2:
            per_layer = list(first[1:-1])
    return {"ran": True, "qemu_machine": b.qemu_machine, "exit_code": result.exit_code,
            "outputs_match": diff_ref == 0, "samples": n, "inputs": compiled.samples_source,
            "max_abs_diff_vs_reference": diff_ref,
            "max_abs_diff_vs_onnxruntime": max((c.max_abs_diff for c in layers), default=0),
            "output_diff_vs_onnxruntime": e2e, "top1_agreement_vs_onnxruntime": agree,
            "instructions": insns, "arena_high_water_bytes": stats.get("arena_high_water_bytes"),
            "stack_high_water_bytes": stats.get("stack_high_water_bytes"),
            "stack_reserved_bytes": stats.get("stack_reserved_bytes"),
            "arena_canary_intact": bool(stats["arena_canary_intact"]),
            "stack_canary_intact": bool(stats["stack_canary_intact"]),
            "layers_vs_onnxruntime": [{"name": c.node, "op": c.op, "max_abs_diff": c.max_abs_diff,
                                       "tolerance": c.tolerance, "differing": c.differing,
                                       "elements": c.elements} for c in layers],
            "_layers": layers}, per_layer


def weights_bytes(g: Graph) -> int:
    """Bytes of the weight tensors as stored in flash (biases and requantization parameters excluded)."""
    from tinyaot.ops.registry import get_op

    return int(sum(get_op(n.op).weights_bytes(n, g) for n in g.nodes))


def _report(compiled: Compiled, b: Board, model: Path, emitted, per_layer, sizes, verify_section,
            uncompressed: dict | None = None) -> dict:
    """report.json. With `uncompressed` (a compressed model, verified), `compression.uncompressed` holds the
    same model's costs without compression and every layer row its `instructions_uncompressed`."""
    g = compiled.graph
    rows = _layer_rows(compiled, emitted, per_layer)
    comp = compression_report(g)
    if uncompressed is not None:
        comp["uncompressed"] = {k: v for k, v in uncompressed.items() if k != "layers"}
        for r in rows:
            if r["instructions"] is not None:
                r["instructions_uncompressed"] = uncompressed["layers"].get(r["name"])
    weights = sum(r["weights_bytes"] for r in rows)
    params = sum(r["params_bytes"] for r in rows)
    return {
        "tinyaot_version": __version__,
        "model": {"path": str(model), "sha256": g.meta["sha256"], "inputs": g.meta["inputs"],
                  "outputs": g.meta["outputs"]},
        "board": {"name": b.name, "cpu": b.core, "qemu_machine": b.qemu_machine, "flash_bytes": b.flash_bytes,
                  "sram_bytes": b.ram_bytes},
        "quantization": {
            "input": {"scale": g.tensors[compiled.input].quant.s, "zero_point": g.tensors[compiled.input].quant.zp},
            "output": {"scale": g.tensors[compiled.output].quant.s,
                       "zero_point": g.tensors[compiled.output].quant.zp},
            "calibration_samples": 0 if compiled.prequantized else int(len(compiled.samples[compiled.input])),
            "source": "the model's QuantizeLinear/DequantizeLinear" if compiled.prequantized else "calibration",
            "notes": g.meta.get("quantization_notes", [])},
        "memory": {"arena_bytes": compiled.plan.arena_bytes, "arena_lower_bound_bytes": compiled.lower_bound,
                   "peak_step": compiled.peak_step, "peak_tensors": list(compiled.peak_tensors),
                   "planner": compiled.plan.strategy, "weights_bytes": weights, "params_bytes": params,
                   "flash_bytes": sizes["flash_bytes"] if sizes else None,
                   "static_ram_bytes": sizes["static_ram_bytes"] if sizes else None,
                   "stack_bytes": b.stack_bytes},
        "macs": int(sum(r["macs"] for r in rows)),
        "compression": comp,
        "layers": rows,
        "verify": {k: v for k, v in verify_section.items() if not k.startswith("_")},
    }


def _report_md(r: dict) -> str:
    m, v = r["memory"], r["verify"]
    lines = [f"# tinyaot report: {Path(r['model']['path']).name} on {r['board']['name']}", "",
             f"- board: {r['board']['name']} ({r['board']['cpu']}, QEMU `{r['board']['qemu_machine']}`), "
             f"{r['board']['flash_bytes']} B flash, {r['board']['sram_bytes']} B SRAM",
             f"- arena: {m['arena_bytes']} B (liveness lower bound {m['arena_lower_bound_bytes']} B, peak at step "
             f"{m['peak_step']})",
             f"- weights: {m['weights_bytes']} B, biases and requantization parameters: {m['params_bytes']} B",
             f"- firmware flash: {m['flash_bytes']} B, static RAM: {m['static_ram_bytes']} B (arm-none-eabi-size)",
             f"- MACs: {r['macs']}",
             f"- quantization: {r['quantization']['source']}"]
    if "options" in r["compression"]:
        lines.append(f"- compression: {compression_line(r['compression'])}")
    for note in r["quantization"].get("notes", []):
        lines.append(f"  - `{note['tensor']}` ({note['op']}): the model gives scale {note['given']['scale']:.6g}, "
                     f"zero point {note['given']['zero_point']}; used {note['used']['scale']:.6g}, "
                     f"{note['used']['zero_point']} ({note['why']})")
    lines.append("")
    if v["ran"]:
        lines += ["## Verification under QEMU", "",
                  f"- exit code {v['exit_code']}, {v.get('samples')} samples ({v.get('inputs')}), outputs == "
                  f"numpy reference: {v['outputs_match']} (max diff {v['max_abs_diff_vs_reference']})",
                  f"- worst layer vs onnxruntime (same int8 input): {v['max_abs_diff_vs_onnxruntime']} LSB",
                  f"- end to end vs onnxruntime: max diff {v['output_diff_vs_onnxruntime']} LSB, top-1 agreement "
                  f"{v['top1_agreement_vs_onnxruntime']:.2f}",
                  f"- instructions per inference: {v['instructions']}",
                  f"- arena high-water: {v['arena_high_water_bytes']} B, stack high-water: "
                  f"{v['stack_high_water_bytes']} B (canaries after the arena and below the stack: "
                  f"{'intact' if v.get('arena_canary_intact') and v.get('stack_canary_intact') else 'overwritten'})",
                  ""]
    else:
        lines += ["Verification under QEMU was skipped (--no-verify).", ""]
    base = r["compression"].get("uncompressed")
    if base is not None:
        lines += ["## Without compression (same board, same sample)", "",
                  f"- instructions per inference: {base['instructions']} (compressed: {v['instructions']})",
                  f"- weights: {base['weights_bytes']} B (compressed: {m['weights_bytes']} B), firmware flash: "
                  f"{base['flash_bytes']} B (compressed: {m['flash_bytes']} B)", ""]
    extra = base is not None
    lines += ["## Layers", "", "| # | layer | op | kernel | output | MACs | weights B | instructions |"
              + (" weights B uncompressed | instructions uncompressed |" if extra else ""),
              "|---|---|---|---|---|---|---|---|" + ("---|---|" if extra else "")]

    def cell(x):
        return "-" if x is None else str(x)

    for k, l in enumerate(r["layers"]):
        name = l["name"].replace("|", "\\|")
        lines.append(f"| {k} | `{name}` | {l['op']} | {l['kernel']} | {l['output_shape']} | {l['macs']} | "
                     f"{l['weights_bytes']} | {cell(l['instructions'])} |"
                     + (f" {cell(l.get('weights_bytes_dense'))} | {cell(l.get('instructions_uncompressed'))} |"
                        if extra else ""))
    return "\n".join(lines) + "\n"


def compression_line(c: dict) -> str:
    """One line of what compression achieved, from report.json's `compression` section."""
    parts = [f"weights {c['weights_bytes']} B of {c['weights_bytes_dense']} B dense int8 "
             f"({100 * c['ratio_vs_int8']:.1f} %)" if c.get("ratio_vs_int8") is not None else
             f"weights {c['weights_bytes']} B", f"sparsity {100 * c['sparsity']:.1f} %",
             f"{c['weight_bits']:g} bits/weight", f"storage {'/'.join(c['storage_kinds'])}"]
    if c.get("clusters"):
        parts.append(f"{c['clusters']} clusters")
    removed = sum(c.get("channels_removed", {}).values())
    if removed:
        parts.append(f"{removed} channels removed in {len(c['channels_removed'])} layers")
    if c.get("unmatched_patterns"):
        parts.append(f"patterns matching no layer: {', '.join(c['unmatched_patterns'])}")
    return ", ".join(parts)


def _summary(r: dict, out: Path) -> list[str]:
    m, v = r["memory"], r["verify"]
    s = [f"{Path(r['model']['path']).name} -> {out} for {r['board']['name']} ({r['board']['cpu']})",
         f"arena {m['arena_bytes']} B (lower bound {m['arena_lower_bound_bytes']} B), weights {m['weights_bytes']} B, "
         f"flash {m['flash_bytes']} B, {r['macs']} MACs"]
    if "options" in r["compression"]:
        s.append(f"compression: {compression_line(r['compression'])}")
    base = r["compression"].get("uncompressed")
    if base is not None:
        s.append(f"without compression: {base['instructions']} instructions/inference "
                 f"({100 * (v['instructions'] / base['instructions'] - 1):+.1f} % compressed), flash "
                 f"{base['flash_bytes']} B ({100 * (m['flash_bytes'] / base['flash_bytes'] - 1):+.1f} %)")
    if v["ran"]:
        s.append(f"verified under QEMU {v['qemu_machine']}: outputs == reference on {v.get('samples')} samples "
                 f"({v.get('inputs')}), "
                 f"worst layer vs onnxruntime {v['max_abs_diff_vs_onnxruntime']} LSB, "
                 f"{v['instructions']} instructions/inference, stack {v['stack_high_water_bytes']} B")
    else:
        s.append("not verified (--no-verify)")
    return s


# ---- evaluate --------------------------------------------------------------------------------------------------

def load_labelled(path: str | Path, inputs: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """DATA.npz with `x` (samples, first axis = sample) and integer labels `y`."""
    path = Path(path)
    if not path.exists():
        raise TinyaotError(f"data file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as z:
            files = set(z.files)
            y = z["y"] if "y" in files else None
    except Exception as exc:
        raise TinyaotError(f"{path} is not a readable .npz file ({type(exc).__name__})") from None
    if y is None or "x" not in files:
        raise TinyaotError(f"{path} needs arrays 'x' (inputs) and 'y' (integer labels); it has {sorted(files)}")
    x = load_samples(path, inputs)[inputs[0]["name"]]
    y = np.asarray(y)
    if y.ndim != 1 or len(y) != len(x) or not np.issubdtype(y.dtype, np.integer):
        raise TinyaotError(f"{path}: 'y' must be {len(x)} integer labels, got {y.dtype}{list(y.shape)}")
    return x, y


def evaluate(model: str | Path, calibration: str | Path | None, data: str | Path, *, input_shapes=None,
             limit: int | None = None, compare_onnxruntime: bool = True, compression=None,
             echo: Echo = _quiet) -> dict:
    """Top-1 of the float model (onnxruntime), of tinyaot's int8 model (the generated C, host-compiled), and of
    onnxruntime's own quantize_static (QDQ, per-channel, same calibration samples), on the same samples.
    `compression` as for compile_model: the int8 figure is then the compressed model's, and `weights_bytes` /
    `compression` say what it costs in flash."""
    from tinyaot.toolchain.hostjit import HostModel
    from tinyaot.compress.ort_baseline import (float_predictions, ort_int8_predictions, ort_quantize_static,
                                               top1)
    from tinyaot.oracle.reference import run_reference

    compiled = compile_model(model, calibration, input_shapes=input_shapes, compression=compression, echo=echo)
    g = compiled.graph
    x, y = load_labelled(data, g.meta["inputs"])
    if limit is not None:
        x, y = x[:limit], y[:limit]
    host = HostModel(g, compiled.plan.offsets, compiled.plan.arena_bytes, compiled.lower_bound)
    q_out = []
    for k in range(len(x)):
        q_out.append(host(compiled.quantize_input(x[k])))
    # The host C must equal the numpy reference bit for bit; check it on a few samples every run.
    checked = min(len(x), 4)
    host_diff = 0  # the largest |host C - numpy reference| over the checked samples, in LSB
    for k in range(checked):
        ref = run_reference(g, {compiled.input: compiled.quantize_input(x[k])})[compiled.output]
        diff = int(np.abs(ref.astype(np.int32).reshape(-1) - q_out[k].astype(np.int32).reshape(-1)).max())
        host_diff = max(host_diff, diff)
        if diff:
            raise TinyaotError(f"host-compiled C differs from the numpy reference on sample {k} by up to {diff} "
                               "LSB (a tinyaot bug)")
    host_matches = (host_diff == 0) if checked else None  # nothing compared: unknown, not "matches"
    int8_logits = np.stack([compiled.dequantize_output(q).reshape(-1) for q in q_out])
    name = compiled.input
    # onnxruntime helpers take [N, ...] with one model batch per sample: drop the batch-of-1 axis.
    x_ort = x.reshape((len(x),) + tuple(g.meta["inputs"][0]["shape"][1:]))
    if compiled.prequantized:
        return _evaluate_prequantized(model, calibration, data, compiled, int8_logits, x_ort, y, checked,
                                      compare_onnxruntime, host_matches)
    cal_ort = {name: compiled.samples[name].reshape((-1,) + x_ort.shape[1:])}
    with tempfile.TemporaryDirectory(prefix="tinyaot-ort-") as tmp:
        # onnxruntime runs the float32 model tinyaot compiled (a float16 model's float32 rewrite)
        source = float32_model_file(model, Path(tmp))
        float_out = float_predictions(source, {name: x_ort}).reshape(len(x), -1)
        ort_out = None
        if compare_onnxruntime:
            qdq = ort_quantize_static(source, cal_ort, Path(tmp) / "model_qdq.onnx")
            ort_out = ort_int8_predictions(qdq, {name: x_ort}).reshape(len(x), -1)
    result = {
        "model": str(model), "calibration": str(calibration), "data": str(data), "samples": int(len(x)),
        "calibration_samples": int(len(compiled.samples[name])),
        "float_top1": top1(float_out, y),
        "int8_top1": top1(int8_logits, y),
        "onnxruntime_int8_top1": None,
        "agreement": float(np.mean(np.argmax(float_out, 1) == np.argmax(int8_logits, 1))),
        "host_c_matches_reference": host_matches, "reference_checked_samples": checked,
        "arena_bytes": compiled.plan.arena_bytes,
        "weights_bytes": weights_bytes(g),
        "compression": compression_report(g),  # the weights' cost, measured on the same run as the accuracy
    }
    if ort_out is not None:
        result["onnxruntime_int8_top1"] = top1(ort_out, y)
        result["onnxruntime_int8_agreement"] = float(np.mean(np.argmax(float_out, 1) == np.argmax(ort_out, 1)))
    return result


def _evaluate_prequantized(model, calibration, data, compiled: Compiled, int8_logits, x_ort, y, checked,
                           compare_onnxruntime: bool, host_matches: bool) -> dict:
    """A pre-quantized model has no float original to measure: tinyaot's int8 is set against onnxruntime
    running the very same QDQ model on its int8 kernels (so both use the model's own parameters)."""
    from tinyaot.compress.ort_baseline import ort_int8_predictions, top1

    result = {
        "model": str(model), "calibration": None if calibration is None else str(calibration), "data": str(data),
        "samples": int(len(y)), "calibration_samples": 0, "prequantized": True,
        "float_top1": None, "int8_top1": top1(int8_logits, y), "onnxruntime_int8_top1": None, "agreement": None,
        "int8_vs_onnxruntime_agreement": None,
        "host_c_matches_reference": host_matches, "reference_checked_samples": checked,
        "arena_bytes": compiled.plan.arena_bytes, "weights_bytes": weights_bytes(compiled.graph),
        "compression": compression_report(compiled.graph),
    }
    if compare_onnxruntime:
        ort_out = ort_int8_predictions(model, {compiled.input: x_ort}).reshape(len(y), -1)
        result["onnxruntime_int8_top1"] = top1(ort_out, y)
        result["int8_vs_onnxruntime_agreement"] = float(np.mean(np.argmax(ort_out, 1) ==
                                                                np.argmax(int8_logits, 1)))
    return result
