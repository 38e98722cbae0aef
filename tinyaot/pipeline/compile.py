"""Stage 1, compile: ONNX file -> quantized int8 graph with its memory plan (`Compiled`).

Import, run the passes, calibrate with onnxruntime over the calibration samples, prune and quantize (and cluster or
pack, with compression options), plan the arena. `check_fits` refuses a plan that cannot fit the board before any C
is written.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from tinyaot.boards import Board
from tinyaot.compress.calibrate import collect_ranges, load_samples
from tinyaot.compress.equalize import (DEFAULT_BIAS_CORRECTION, DEFAULT_CLE, correct_biases,
                                       equalize_for_calibration)
from tinyaot.compress.hessian import MAX_SAMPLES
from tinyaot.compress.options import CompressionOptions
from tinyaot.compress.prune import layer_nodes
from tinyaot.compress.ranges import DEFAULT_METHOD, DEFAULT_PERCENTILE, calibration_record, parse_method
from tinyaot.compress.pipeline import distilled_reference, fitted_layers, prune_step, storage_step
from tinyaot.compress.precision import apply_precision
from tinyaot.compress.quantize import quantize_graph
from tinyaot.core.quant import quantize_values
from tinyaot.core.target import GENERIC, Target
from tinyaot.errors import TinyaotError
from tinyaot.frontend import ImportedModel, import_model, is_prequantized
from tinyaot.ir import Graph
from tinyaot.options import Options
from tinyaot.ops.registry import traits_of
from tinyaot.passes import run_passes
from tinyaot.plan import Plan
from tinyaot.plan.patch import PatchStage

from .schedule import MISS, exact, fit_budget
from .variants import choose_variants

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
    target: Target = GENERIC  # what the kernel variants were chosen for (node.attrs["variant"])
    # The schedule (pipeline/schedule.py): a patch stage (None: layer by layer), the planner's buffers and a label
    # per step; the layer-by-layer plan's arena and lower bound (the same as `plan` without a stage); the arena
    # budget the schedule meets (None: none) and the error when no schedule fits it.
    patch: PatchStage | None = None
    buffers: list = field(default_factory=list)
    step_labels: list[str] = field(default_factory=list)
    layer_by_layer: tuple[int, int] | None = None
    patch_estimate: float = 0.0  # the stage's estimated extra instructions over layer by layer
    arena_budget: int | None = None
    budget_miss: str = MISS  # formatted with budget, arena, over, how (pipeline/schedule.py fit_budget)

    @property
    def inputs(self) -> list[str]:
        """The model's inputs, in its own order (the order invoke takes them)."""
        return list(self.graph.inputs)

    @property
    def outputs(self) -> list[str]:
        return list(self.graph.outputs)

    @property
    def input(self) -> str:
        """The first input (the only one of a single-input model)."""
        return self.graph.inputs[0]

    @property
    def compressed(self) -> bool:
        """Compression options were active (compress/pipeline.py keeps what it did in graph.meta)."""
        return "compression" in self.graph.meta

    @property
    def output(self) -> str:
        """The first output."""
        return self.graph.outputs[0]

    def feed(self, k: int, samples: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Sample `k` of `samples` (default: the compiled samples) as a float feed {input name: value}."""
        samples = self.samples if samples is None else samples
        return {name: samples[name][k] for name in self.graph.inputs}

    def quantize_inputs(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A float feed {input name: value} -> the int8 values invoke takes, by input name."""
        return {name: self.quantize(name, feed[name]) for name in self.graph.inputs}

    def quantize(self, name: str, x: np.ndarray) -> np.ndarray:
        t = self.graph.tensors[name]
        return quantize_values(np.asarray(x, np.float32).reshape(t.shape), t.quant)

    def dequantize(self, name: str, q: np.ndarray) -> np.ndarray:
        t = self.graph.tensors[name]
        return (np.asarray(q, np.float64).reshape(t.shape) - t.quant.zp) * t.quant.s

    def quantize_input(self, x: np.ndarray) -> np.ndarray:
        """The first input's float values -> int8."""
        return self.quantize(self.input, x)

    def dequantize_output(self, q: np.ndarray) -> np.ndarray:
        """The first output's int8 values -> float."""
        return self.dequantize(self.output, q)


def compile_model(model: str | Path | ImportedModel, calibration: str | Path | None, options: Options | None = None,
                  *, target: Target | None = None, variant_choices: dict[str, str] | None = None) -> Compiled:
    """Import, run the passes, calibrate with onnxruntime over the calibration samples, quantize, plan memory.

    `model`: a file, or the model already imported (frontend.import_model; each compilation works on its own copy of
    the graph). `options` (tinyaot/options.py; None: the defaults): `compile` (input shapes, passes),
    `quantization` (method, CLE, bias correction, activation bits) and `compression`, which prunes the float graph
    after the passes and clusters/packs the int8 weights after quantization (compress/pipeline.py).

    A pre-quantized (QDQ) model needs no calibration: its own scales and zero points are used, and the samples,
    if given, only feed verification; without them verification uses random int8 inputs (fixed seed).

    `target` (None: GENERIC, every layer its generic kernel) and `variant_choices` ({node name: variant}, e.g. from
    tuning) choose each layer's kernel variant (pipeline/variants.py) before the plan, which depends on them."""
    options = Options() if options is None else options
    c, q = options.compile, options.quantization
    calibrate, cle, bias_correction = q.calibrate, q.cle, q.bias_correction
    imported = import_model(model, c.input_shapes)
    graph, onnx_model = imported.fresh_graph(), imported.onnx_model
    # QDQ ONNX (passes/absorb_qdq.py) or an int8 TFLite model (frontend/tflite_import.py): its own parameters
    prequantized = is_prequantized(graph)
    if calibration is None and not prequantized:
        raise TinyaotError("no calibration data: int8 quantization needs sample inputs. Give --calibration "
                           "FILE.npz (one array per input name, or an 'x' array; first axis = sample)")
    samples = load_samples(Path(calibration), graph.meta["inputs"]) if calibration is not None else None
    ranges: dict[str, tuple[float, float]] = {}
    names = [n for n, t in graph.tensors.items() if not t.is_const]
    graph = run_passes(graph, set(c.disable_passes), set(c.print_ir_after), options.output.echo)
    if not prequantized:
        # cross-layer equalization on the float graph (compress/equalize.py); calibration then measures the
        # equalized tensors through the exact per-channel change it made
        mode = DEFAULT_CLE if cle is None else cle  # True, False or "auto" (compress/equalize.py)
        transforms = equalize_for_calibration(graph, onnx_model, samples, mode) if mode else {}
        chosen: dict[str, str] = {}
        ranges = collect_ranges(onnx_model, samples, names,  # --calibrate: compress/ranges.py
                                DEFAULT_METHOD if calibrate is None else calibrate, chosen=chosen,
                                transforms=transforms, scored=[n for n, t in graph.tensors.items() if not t.is_const])
        # report.json quantization.calibration.input_ranges: the input's range, and which method set it
        pct = parse_method(DEFAULT_METHOD if calibrate is None else calibrate)[1] or DEFAULT_PERCENTILE
        graph.meta["input_ranges"] = {
            n: {"method": chosen.get(n, "minmax"), "range": [float(v) for v in ranges[n]],
                "percentile": pct if chosen.get(n) == "percentile" else None} for n in samples if n in ranges}
    _share_ranges_across_moves(graph, ranges)
    compression = options.compression
    dense = None
    if compression is not None and compression.active:
        if samples is not None and not prequantized and q.activation_bits == 8:
            # the same model uncompressed: compression refits each layer to its output (compress/reconstruct.py)
            dense = copy.deepcopy(graph)
        start = _obs_start(dense, compression, samples, ranges) if dense is not None else None
        graph = prune_step(graph, compression, samples, start)
        if dense is not None and graph.meta["compression"].get("distilled"):
            dense = distilled_reference(graph)  # the int8 fit aims at the distilled layers (compress/distill.py)
    float_weights = {n.name: np.array(graph.tensors[n.inputs[1]].data, np.float64) for n in layer_nodes(graph)}
    if q.activation_bits != 8:  # 16-bit activations, all layers or {node name: bits} (compress/precision.py)
        refuse_sparse16(compression, "--activation-bits 16")
        graph = apply_precision(graph, ranges, q.activation_bits)
    graph = quantize_graph(graph, ranges)
    if dense is not None:
        dense = quantize_graph(dense, ranges)
    if (not prequantized and samples is not None and not _fits_weights(compression)
            and (DEFAULT_BIAS_CORRECTION if bias_correction is None else bias_correction)):
        # compression's own fitting corrects its layers' biases (compress/pipeline.storage_step); --prune-channels
        # alone fits none, so these layers are corrected here (8- and 16-bit, compress/equalize.correct_biases)
        graph.meta["bias_corrected"] = correct_biases(graph, float_weights,
                                                      _quantized_feeds(graph, samples, MAX_SAMPLES))
    if compression is not None and compression.active:
        # the calibration samples, quantized as the deployed model will see them, let clustering weigh each
        # layer's errors by its real inputs
        graph = storage_step(graph, None if samples is None else _quantized_feeds(graph, samples), dense, ranges)
    if not prequantized:  # report.json quantization.calibration, evaluate's result
        graph.meta["calibration"] = calibration_record(graph.meta, calibrate, DEFAULT_CLE if cle is None else cle)
    source = "calibration data" if not prequantized else "--calibration samples (used for verification only)"
    if samples is None:
        samples = _random_inputs(graph, RANDOM_SAMPLES, RANDOM_SEED)
        source = f"random int8 inputs (numpy default_rng seed {RANDOM_SEED}; no calibration data given)"
    return with_variants(Compiled(graph, samples, None, 0, None, (), prequantized, source),  # type: ignore[arg-type]
                         GENERIC if target is None else target, variant_choices)


# Compression kinds whose weights only the int8 kernels read (compressed storage, compress/encode.py): refused
# with 16-bit activations. --prune-channels removes channels on the float graph and leaves every layer dense.
SPARSE_KINDS = (("--prune", "prune / sparsity", "its sparse weight storage"),
                ("--clusters", "clusters", "its clustered (codebook) weight storage"),
                ("--weight-bits 4", "weight_bits = 4", "its int4 weight storage"))


def _obs_start(dense: Graph, compression: CompressionOptions, samples, ranges) -> dict | None:
    """--prune-method distill with --prune: the same compression by "obs" first (masks and layer-wise fit on the
    calibration data, compress/reconstruct.py), whose pruned layers distillation then starts from, masks fixed
    (compress/pipeline.fitted_layers); None otherwise."""
    if compression.prune_method != "distill" or not (compression.prune or any(r.sparsity for r in compression.rules)):
        return None
    obs = replace(compression, prune_method="obs")
    g = quantize_graph(prune_step(copy.deepcopy(dense), obs, samples), ranges)
    g = storage_step(g, _quantized_feeds(g, samples), quantize_graph(copy.deepcopy(dense), ranges), ranges)
    return fitted_layers(g)


def _kinds(options: CompressionOptions | None) -> list[int]:
    """Indices into SPARSE_KINDS of what `options` (flags, spec top level or any [[layer]] entry) asks for."""
    if options is None or not options.active:
        return []
    rules = options.rules
    asks = (options.prune > 0 or any(r.sparsity for r in rules),
            bool(options.clusters) or any(r.clusters for r in rules),
            options.weight_bits == 4 or any(r.weight_bits == 4 for r in rules))
    return [k for k, a in enumerate(asks) if a]


def _fits_weights(options: CompressionOptions | None) -> bool:
    """Compression fits some layer's int8 values to its inputs (and corrects its bias itself, storage_step)."""
    return bool(_kinds(options))


def refuse_sparse16(options: CompressionOptions | None, what: str) -> None:
    """One Error line per compression kind that cannot run with 16-bit activations (`what`: the option asking
    for them). The s16 kernels read dense int8 weights only; --prune-channels keeps layers dense and is accepted."""
    for k in _kinds(options):
        flag, key, storage = SPARSE_KINDS[k]
        via = f" (or {key} in {options.spec})" if options.spec else ""
        raise TinyaotError(f"{flag}{via} cannot be combined with {what}: {storage} is read only by the int8 "
                           "kernels, the 16-bit kernels take dense weights (--prune-channels keeps layers dense)")


def with_variants(compiled: Compiled, target: Target, choices: dict[str, str] | None = None) -> Compiled:
    """`compiled` with its kernel variants chosen for `target` (and `choices`) and its schedule planned for them
    within its arena budget (pipeline/schedule.py: layer by layer when that fits, else a patch stage). The graph is
    shared, its nodes' `variant` attributes rewritten: the returned Compiled replaces the old one."""
    choose_variants(compiled.graph, target, choices)
    lbl = exact(compiled.graph, None)
    f = fit_budget(compiled.graph, target, compiled.arena_budget, lbl, compiled.budget_miss)
    return replace(compiled, plan=f.plan, lower_bound=f.lower_bound, peak_step=f.peak_step, peak_tensors=f.peak_names,
                   target=target, patch=f.stage, buffers=f.buffers, step_labels=f.labels,
                   layer_by_layer=(lbl.plan.arena_bytes, lbl.lower_bound), patch_estimate=f.estimate)


def retarget(compiled: Compiled, target: Target) -> Compiled:
    """What compile_model(..., target=target) gives for the same model, calibration and options, from `compiled`
    without compiling again (compile_model chooses the variants last): its variants chosen for `target` on a copy of
    its graph, which with_variants rewrites, so `compiled` itself stays as it was."""
    return with_variants(replace(compiled, graph=copy.deepcopy(compiled.graph)), target)


def with_budget(compiled: Compiled, budget: int | None, miss: str = MISS) -> Compiled:
    """`compiled` rescheduled to fit `budget` bytes of arena (None: no budget), its variants kept; `miss` is the
    error when nothing fits (pipeline/schedule.py fit_budget)."""
    choices = {n.name: n.attrs.get("variant", "generic") for n in compiled.graph.nodes}
    return with_variants(replace(compiled, arena_budget=budget, budget_miss=miss), compiled.target, choices)


# RAM the verification firmware takes beside the arena, the stack and the model's input and output buffers (its
# statistics text, the canaries, newlib's semihosting state): measured 386 B on stm32 (vww_mobilenetv1_025's
# static RAM 64,900 B = arena 36,864 + input 27,648 + output 2 + 386), rounded up.
FIRMWARE_RAM_RESERVE = 1024


def board_budget(b: Board, arena_budget: int | None, compiled: Compiled) -> tuple[int, str]:
    """The arena budget a deploy to `b` meets: `arena_budget` (--arena-budget), else the board's RAM minus its
    stack, the model's input and output buffers (the caller's, in the same RAM) and FIRMWARE_RAM_RESERVE; and the
    one-line error when no schedule fits it."""
    if arena_budget is not None:
        if arena_budget < 0:
            raise TinyaotError(f"--arena-budget must be a number of bytes >= 0, got {arena_budget}")
        return arena_budget, ("no schedule fits --arena-budget {budget}: the smallest found ({how}) needs an arena "
                              "of {arena} B, {over} bytes over")
    g = compiled.graph
    io = sum(g.tensors[t].nbytes for t in g.inputs + g.outputs)  # every input and output buffer
    return b.ram_bytes - b.stack_bytes - io - FIRMWARE_RAM_RESERVE, (
        f"model too big for board '{b.name}': the smallest schedule found ({{how}}) needs an arena of {{arena}} B; "
        f"with the {b.stack_bytes} B stack, the input and output buffers ({io} B) and {FIRMWARE_RAM_RESERVE} B for "
        f"the firmware that exceeds its {b.ram_bytes} B of RAM by {{over}} bytes")


RANDOM_SAMPLES, RANDOM_SEED = 16, 0


def _random_inputs(graph: Graph, n: int, seed: int) -> dict[str, np.ndarray]:
    """Deterministic inputs for a pre-quantized model deployed without samples: uniform int8 values dequantized
    with each input's own parameters, so quantizing them back gives exactly those integers (one generator, drawn
    input by input in the model's order)."""
    rng = np.random.default_rng(seed)
    out = {}
    shapes = {m["name"]: m["shape"] for m in graph.meta["inputs"]}
    for name in graph.inputs:
        q = rng.integers(-128, 128, size=(n, *shapes[name]))
        out[name] = graph.tensors[name].quant.dequantize(q).astype(np.float32)
    return out


def _quantized_feeds(graph: Graph, samples: dict[str, np.ndarray], limit: int | None = None) -> list[dict]:
    """The float calibration samples as the deployed model sees them: one {input name: int8 values} per sample."""
    count = len(samples[graph.inputs[0]])
    count = count if limit is None else min(count, limit)
    return [{name: quantize_values(samples[name][k].reshape(graph.tensors[name].shape), graph.tensors[name].quant)
             for name in graph.inputs} for k in range(count)]


def _share_ranges_across_moves(graph: Graph, ranges: dict[str, tuple[float, float]]) -> None:
    """Tensors the passes create have no ONNX twin and so no calibrated range: e.g. a 4-D graph output `y` is
    computed in NHWC as `y_nhwc` and moved back to NCHW. A Transpose or Reshape moves values without changing
    them, so a tensor on one side of it takes the range of the other (repeated, for chains of moves)."""
    moves = [(n.inputs[0], n.outputs[0]) for n in graph.nodes if traits_of(n.op).layout == "move"]
    changed = True
    while changed:
        changed = False
        for a, b in moves:
            for src, dst in ((a, b), (b, a)):
                if src in ranges and dst not in ranges:
                    ranges[dst] = ranges[src]
                    changed = True


def check_fits(compiled: Compiled, b: Board) -> None:
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
                  else g.tensors[i].nbytes
                  for i in {i for n in g.nodes for i in n.inputs if i} if g.tensors[i].is_const)
    if weights > b.flash_bytes:
        raise TinyaotError(f"model too big for board '{b.name}': {weights} B of weights exceed its "
                           f"{b.flash_bytes} B of flash by {weights - b.flash_bytes} bytes")
