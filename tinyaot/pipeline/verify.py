"""Stage 4, verify: run the verification firmware under QEMU and hold it to the numpy reference (bit-exact) and
onnxruntime (each layer within its tolerance, 1 LSB), and, for a compressed model, measure what the same model
costs without compression by staging and building it the same way (the same stage and build functions, in a
temporary folder).
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import ClassVar

import numpy as np

from tinyaot.boards import Board
from tinyaot.core.target import Target
from tinyaot.errors import TinyaotError, VerificationError
from tinyaot.frontend import ImportedModel
from tinyaot.options import Options
from tinyaot.oracle.onnxruntime_layers import LayerCheck, check_layers, run_chain
from tinyaot.oracle.reference import run_reference_many
from tinyaot.oracle.tflite_interpreter import INSTALL_HINT, interpreter_name, run_tflite
from tinyaot.toolchain.qemu import EXIT_MEANINGS, overrun, read_stats, run_qemu, split_segments

from .build import DEBUG_OPT, build_debug_firmware, build_verification_firmware, firmware_sizes, optimization_level
from .compile import Compiled, board_budget, compile_model, with_budget
from .report import macs, weights_bytes
from .stage import FIRMWARE_DIR, stage_model


@dataclass
class VerifySection:
    """report.json's `verify` section: what the firmware showed under QEMU (DESIGN.md). Without a QEMU run
    (--no-verify) `ran` is False and every figure None, and the keys only a run has (samples, inputs, outputs,
    stack_reserved_bytes, layers_vs_onnxruntime) are left out of the JSON."""

    ran: bool
    qemu_machine: str
    exit_code: int | None = None
    outputs_match: bool | None = None
    samples: int | None = None
    inputs: str | None = None  # where the samples came from (Compiled.samples_source)
    outputs: list[dict] = field(default_factory=list)  # every output: C under QEMU vs reference and onnxruntime
    max_abs_diff_vs_reference: int | None = None  # C under QEMU vs the numpy reference: 0
    max_abs_diff_vs_onnxruntime: int | None = None  # the worst layer, each fed the same int8 input
    output_diff_vs_onnxruntime: int | None = None  # end to end
    top1_agreement_vs_onnxruntime: float | None = None
    # an int8 .tflite model: TFLite Micro's interpreter on the same inputs (tflite_interpreter, outputs_match_tflite,
    # max_abs_diff_vs_tflite; tflite_check); empty for an ONNX model
    tflite: dict = field(default_factory=dict)
    instructions: int | None = None  # one inference, the first sample
    arena_high_water_bytes: int | None = None
    stack_high_water_bytes: int | None = None  # the whole firmware, from the reset handler on
    stack_reserved_bytes: int | None = None
    # The stack of one invoke call, from its caller's stack pointer (what the model adds to the caller's stack), at
    # the level the firmware was built (`optimization`), and both figures again for the same C built at -O0 (a
    # debug build; None with `stack_o0_note` saying why when it could not be measured)
    optimization: str | None = None
    invoke_stack_bytes: int | None = None
    stack_high_water_bytes_o0: int | None = None
    invoke_stack_bytes_o0: int | None = None
    stack_o0_note: str | None = None
    arena_canary_intact: bool | None = None
    stack_canary_intact: bool | None = None
    layers: list[LayerCheck] = field(default_factory=list)  # every layer against onnxruntime

    RUN_ONLY: ClassVar[tuple[str, ...]] = ("samples", "inputs", "outputs", "stack_reserved_bytes")

    def to_json(self) -> dict:
        d = {}
        for f in fields(self):
            if f.name == "tflite":
                d.update(self.tflite)
            elif f.name != "layers" and (self.ran or f.name not in self.RUN_ONLY):
                d[f.name] = getattr(self, f.name)
        if self.ran:
            d["layers_vs_onnxruntime"] = [{"name": c.node, "op": c.op, "max_abs_diff": c.max_abs_diff,
                                           "tolerance": c.tolerance, "differing": c.differing,
                                           "elements": c.elements} for c in self.layers]
        return d


def not_verified(b: Board) -> VerifySection:
    """The `verify` section when QEMU did not run (--no-verify)."""
    return VerifySection(ran=False, qemu_machine=b.qemu_machine)


def verify_under_qemu(compiled: Compiled, b: Board, elf: Path, workdir: Path, n: int, timeout: float,
                      code_layers: int, emitted=None) -> tuple[VerifySection, list[int] | None]:
    """Run the verification firmware `elf` under QEMU in `workdir` on the first `n` samples and compare: its outputs
    with the numpy reference (must be equal), every layer with onnxruntime on the same int8 input, the end-to-end
    output with onnxruntime's chain. Returns report.json's `verify` section (check_verification judges it) and the
    first sample's instructions per layer with code (None if not counted)."""
    g = compiled.graph
    n = min(n, len(compiled.samples[compiled.input]))
    q_inputs = [compiled.quantize_inputs(compiled.feed(k)) for k in range(n)]
    # input.bin: each sample's inputs back to back in invoke's order (the graph's), as the harness reads them
    (workdir / "input.bin").write_bytes(b"".join(q[name].tobytes() for q in q_inputs for name in g.inputs))
    result = run_qemu(elf, b, workdir, timeout_s=timeout)
    if result.exit_code in (22, 23):  # the harness wrote its stats before stopping at the overwritten canary
        stats = read_stats(workdir)
        raise VerificationError(f"verification failed under QEMU {b.qemu_machine}: "
                           f"{overrun(stats) or EXIT_MEANINGS[result.exit_code]} (a tinyaot bug; the staged output "
                           "was discarded)")
    if result.exit_code != 0:
        raise VerificationError(f"firmware exited with code {result.exit_code} under QEMU {b.qemu_machine}: "
                           f"{(result.stderr or result.stdout).strip()[:200]}")
    sizes = [g.tensors[o].size for o in g.outputs]
    raw = np.frombuffer((workdir / "output.bin").read_bytes(), np.int8)
    if raw.size != n * sum(sizes):
        raise VerificationError(f"firmware wrote {raw.size} output bytes, expected {n * sum(sizes)}")
    stats = read_stats(workdir)
    if overrun(stats):  # exit status 0 with a changed canary would be a harness bug; never report it as fine
        raise VerificationError(f"verification failed under QEMU {b.qemu_machine}: {overrun(stats)}")
    refs = run_reference_many(g, q_inputs)
    bounds = np.cumsum([0] + sizes)
    qemu = raw.reshape(n, sum(sizes))
    tflite = tflite_check(compiled, q_inputs, qemu)
    sessions: dict = {}  # onnxruntime sessions per layer, reused across samples (never kept in the graph)
    chains = [run_chain(g, q, sessions) for q in q_inputs]
    outputs = []  # every output compared: C under QEMU == reference, and onnxruntime's chain end to end
    for o, a, z in zip(g.outputs, bounds[:-1], bounds[1:]):
        ref_out = np.stack([r[o].reshape(-1) for r in refs]).astype(np.int32)
        chain = np.stack([c[o].reshape(-1) for c in chains]).astype(np.int32)
        agreement = float(np.mean(np.argmax(chain, 1) == np.argmax(ref_out, 1)))
        outputs.append({"name": o, "max_abs_diff_vs_reference": int(np.abs(ref_out - qemu[:, a:z]).max()),
                        "output_diff_vs_onnxruntime": int(np.abs(chain - ref_out).max()),
                        "top1_agreement_vs_onnxruntime": agreement})
    diff_ref = max(o["max_abs_diff_vs_reference"] for o in outputs)
    layers = check_layers(g, refs)
    e2e = max(o["output_diff_vs_onnxruntime"] for o in outputs)
    agree = outputs[0]["top1_agreement_vs_onnxruntime"]  # the first output's (a classifier's logits, usually)
    per_sample = split_segments(result.segments, n) if result.segments else None
    per_layer = None
    insns = None
    if per_sample:
        first = per_sample[0]
        insns = int(sum(first))
        # Segments inside invoke: entry and copy-in, one per call (`emitted`: a patch stage calls its layers once
        # per stripe), then copy-out and return.
        if emitted is not None:
            per_layer = emitted.layer_instructions(first)
        elif len(first) == code_layers + 2:
            per_layer = list(first[1:-1])
    return VerifySection(
        ran=True, qemu_machine=b.qemu_machine, exit_code=result.exit_code, outputs_match=diff_ref == 0, samples=n,
        inputs=compiled.samples_source, outputs=outputs,
        max_abs_diff_vs_reference=diff_ref,
        max_abs_diff_vs_onnxruntime=max((c.max_abs_diff for c in layers), default=0),
        output_diff_vs_onnxruntime=e2e, top1_agreement_vs_onnxruntime=agree, tflite=tflite, instructions=insns,
        arena_high_water_bytes=stats.get("arena_high_water_bytes"),
        stack_high_water_bytes=stats.get("stack_high_water_bytes"),
        stack_reserved_bytes=stats.get("stack_reserved_bytes"),
        optimization=optimization_level(b), invoke_stack_bytes=stats.get("invoke_stack_bytes"),
        arena_canary_intact=bool(stats["arena_canary_intact"]),
        stack_canary_intact=bool(stats["stack_canary_intact"]), layers=layers), per_layer


def measure_debug_stack(compiled: Compiled, emitted, b: Board, folder: Path, sizes: dict, section: VerifySection,
                        timeout: float) -> None:
    """The stack the same C needs built at -O0 (a debug build), measured as the product build's is: the verification
    firmware built again with every file at -O0 (build_debug_firmware, in a temporary folder) and run under QEMU on
    the first verified sample, its stack painted at reset and scanned after invoke. Its output must equal the
    product build's, which equalled the reference (the same integers at every level; a difference is a tinyaot bug).
    The stack reservation is all the RAM the firmware leaves (a debug build may need more than the board's
    default), the board's own if that does not link. Fills `section`'s *_o0 fields, or `stack_o0_note` when the
    debug build does not fit the board. Costs one -O0 build and one QEMU run without instruction counting (taken
    from the QEMU run cache when the same debug build ran on the same sample before: toolchain/qemu.run_qemu)."""
    g = compiled.graph
    fw = Path(folder) / FIRMWARE_DIR
    in_bytes = sum(g.tensors[n].size for n in g.inputs)
    out_bytes = sum(g.tensors[o].size for o in g.outputs)
    spare = (b.ram_bytes - sizes["static_ram_bytes"] - 16) // 8 * 8  # RAM beside .data and .bss (stack-aligned)
    with tempfile.TemporaryDirectory(prefix="tinyaot-debug-stack-") as tmp:
        tmp = Path(tmp)
        elf = None
        for stack in dict.fromkeys([max(spare, b.stack_bytes), b.stack_bytes]):
            try:
                elf = build_debug_firmware(emitted, b, folder, tmp / "build", stack)
                break
            except TinyaotError as e:
                note = f"the {DEBUG_OPT} build does not link: {e}"
        if elf is None:
            section.stack_o0_note = note
            return
        run = tmp / "run"
        run.mkdir()
        (run / "input.bin").write_bytes((fw / "input.bin").read_bytes()[:in_bytes])
        result = run_qemu(elf, b, run, timeout_s=timeout, count_instructions=False, cached=True)
        stats = read_stats(run) if (run / "stats.txt").is_file() else {}
        if result.exit_code in (22, 23) or overrun(stats):
            why = overrun(stats) or EXIT_MEANINGS[result.exit_code]
            section.stack_o0_note = (f"the {DEBUG_OPT} build overran its {stats.get('stack_reserved_bytes', stack)} B "
                                     f"stack, all the RAM {b.name} leaves: {why}")
            return
        if result.exit_code != 0:
            raise VerificationError(f"the {DEBUG_OPT} build of the firmware exited with code {result.exit_code} under "
                                    f"QEMU {b.qemu_machine}: {(result.stderr or result.stdout).strip()[:200]} "
                                    "(a tinyaot bug)")
        if (run / "output.bin").read_bytes() != (fw / "output.bin").read_bytes()[:out_bytes]:
            raise VerificationError(f"the {DEBUG_OPT} build of the firmware computes other outputs than the "
                                    f"{section.optimization} build on the same sample (a tinyaot bug)")
    section.stack_high_water_bytes_o0 = stats.get("stack_high_water_bytes")
    section.invoke_stack_bytes_o0 = stats.get("invoke_stack_bytes")


def tflite_check(compiled: Compiled, q_inputs: list[dict], outputs: np.ndarray) -> dict:
    """For an int8 .tflite model: TFLite Micro's interpreter on the same int8 inputs (oracle/tflite_interpreter.py;
    `q_inputs` one {input name: int8 values} per sample), whose outputs the C's `outputs` ([samples, every output's
    values back to back in the model's order]) must equal bit for bit. {} for an ONNX model."""
    g = compiled.graph
    if g.meta.get("format") != "tflite":
        return {}
    name = interpreter_name()
    if name is None or compiled.compressed:
        why = f"not run ({INSTALL_HINT})" if name is None else "not compared (compression changed the file's weights)"
        return {"tflite_interpreter": why, "outputs_match_tflite": None, "max_abs_diff_vs_tflite": None}
    runs = run_tflite(g.meta["path"], [[q[n] for n in g.inputs] for q in q_inputs])
    theirs = np.stack([np.concatenate([o.reshape(-1) for o in outs]) for outs in runs])
    diff = int(np.abs(theirs.astype(np.int32) - np.asarray(outputs).astype(np.int32)).max())
    return {"tflite_interpreter": name, "outputs_match_tflite": diff == 0, "max_abs_diff_vs_tflite": diff}


def check_verification(section: VerifySection) -> None:
    """Raise VerificationError unless the QEMU outputs equal the reference and every layer is within its tolerance of
    onnxruntime (the staged folder is then discarded: a failed verification never produces an output folder)."""
    if not section.outputs_match:
        raise VerificationError(f"verification failed: the C under QEMU differs from the numpy reference by up "
                           f"to {section.max_abs_diff_vs_reference} LSB (a tinyaot bug; the "
                           f"staged output was discarded)")
    if section.tflite.get("outputs_match_tflite") is False:
        raise TinyaotError(f"verification failed: the C under QEMU differs from TFLite Micro's interpreter by up to "
                           f"{section.tflite['max_abs_diff_vs_tflite']} LSB on the same int8 inputs (a tinyaot bug; "
                           "the staged output was discarded)")
    bad = [c for c in section.layers if c.max_abs_diff > c.tolerance]
    if bad:
        worst = max(bad, key=lambda c: c.max_abs_diff)
        raise VerificationError(f"verification failed: layer {worst.node!r} ({worst.op}) differs from "
                           f"onnxruntime by {worst.max_abs_diff} LSB (allowed {worst.tolerance})")


def uncompressed_costs(model: ImportedModel, calibration, b: Board, options: Options, target: Target) -> dict:
    """What the same model costs on the same board without its compression options, measured the same way: the
    same calibration and passes, staged and built by the same functions with the same flags and run under QEMU on
    the first calibration sample (the sample whose counts the compressed report gives). Per layer by node name:
    compression keeps layer names, and a layer it did not change costs the same instructions both ways. Built in a
    temporary folder, not vendored."""
    base = compile_model(model, calibration, options.with_(compression=None, print_ir_after=()), target=target)
    base = with_budget(base, *board_budget(b, options.compile.arena_budget, base))
    g = base.graph
    with tempfile.TemporaryDirectory(prefix="tinyaot-uncompressed-") as tmp:
        tmp = Path(tmp)
        emitted = stage_model(base, b, tmp)
        elf = build_verification_firmware(emitted, b, tmp)
        flash = firmware_sizes(elf)["flash_bytes"]
        fw = tmp / FIRMWARE_DIR
        q0 = base.quantize_inputs(base.feed(0))
        (fw / "input.bin").write_bytes(b"".join(q0[name].tobytes() for name in base.inputs))
        result = run_qemu(elf, b, fw, timeout_s=options.verification.qemu_timeout_s, cached=True)
    if result.exit_code != 0 or not result.segments:
        raise VerificationError(f"the uncompressed model's firmware failed under QEMU {b.qemu_machine} "
                           f"(exit code {result.exit_code}; a tinyaot bug)")
    first = split_segments(result.segments, 1)[0]
    counts = emitted.layer_instructions(first)
    per_layer = {} if counts is None else dict(zip([layer.node for layer in emitted.coded()], counts))
    return {"instructions": int(sum(first)), "flash_bytes": int(flash), "weights_bytes": weights_bytes(g),
            "macs": macs(g), "layers": {k: int(v) for k, v in per_layer.items()}}
