"""tinyaot's Python API: what the CLI calls, and what tests and scripts call directly.

    compiled = compile_model("kws.onnx", "cal.npz")          # import, passes, calibrate, quantize
    compiled = compile_model("kws.onnx", "cal.npz", compression=CompressionOptions(clusters=16))  # + compression
    report = deploy("kws.onnx", "stm32", "cal.npz", "out/")   # + plan, emit C, build, verify under QEMU
    figures = evaluate("kws.onnx", "cal.npz", "data.npz")     # accuracy: float vs tinyaot int8 vs onnxruntime int8

A facade: the work is done by the pipeline's stages (tinyaot/pipeline/), one module each:
compile (ONNX -> quantized graph + memory plan), stage (the vendorable folder), build (the verification firmware),
verify (QEMU vs numpy reference vs onnxruntime), report (report.json, report.md), and evaluate (accuracy).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tinyaot.boards import load_board
from tinyaot.errors import TinyaotError
from tinyaot.files import check_output_folder
from tinyaot.pipeline.build import build_verification_firmware, firmware_sizes, tidy_firmware_dir
from tinyaot.pipeline.compile import (RANDOM_SAMPLES, RANDOM_SEED, Compiled, Echo, _quiet,  # noqa: F401
                                      board_budget, check_fits, compile_model, with_budget, with_variants)
from tinyaot.pipeline.analyze import analyze  # noqa: F401 (tinyaot analyze)
from tinyaot.pipeline.evaluate import evaluate, load_labelled  # noqa: F401
from tinyaot.pipeline.precision_search import resolve_activation_bits
from tinyaot.pipeline.report import build_report, compression_line, report_md, summary, weights_bytes  # noqa: F401
from tinyaot.pipeline.stage import FIRMWARE_DIR, clear_staging, folder_files, stage_model, staging
from tinyaot.pipeline.timeline import PNG_NAME as TIMELINE_PNG, timeline, timeline_png
from tinyaot.pipeline.tune import (check_log as check_tuning_log, finish as finish_tuning, public as public_tuning,
                                  tune_variants)
from tinyaot.pipeline.verify import check_verification, not_verified, uncompressed_costs, verify_under_qemu

# The names tests and scripts used before the pipeline was split into modules.
_verify = verify_under_qemu
_report_md = report_md


@dataclass
class DeployResult:
    out_dir: Path
    report: dict
    summary: list[str] = field(default_factory=list)


def deploy(model: str | Path, board: str, calibration: str | Path | None, out_dir: str | Path, *,
           verify: bool = True, verify_samples: int = 8, input_shapes=None, disable_passes=(), print_ir_after=(),
           qemu_timeout_s: float = 120.0, compression=None, echo: Echo = _quiet,
           calibrate: str | None = None, cle: bool | None = None,
           bias_correction: bool | None = None, optimize: str = "speed", tune: bool = False,
           tuning_log: str | Path | None = None, activation_bits=8, max_accuracy_drop: float | None = None,
           data: str | Path | None = None, arena_budget: int | None = None,
           label_output: str | None = None) -> DeployResult:
    """Compile `model` for `board` into `out_dir` (the folder an engineer vendors), and unless verify=False
    build the firmware and prove it under QEMU. Raises TinyaotError for any problem with the inputs.
    `optimize`: "speed" (each layer's cheapest kernel variant on the board's core, by the cost model) or "size" (the
    generic kernels). `tune`: measure the layers' candidate variants under QEMU and keep the fastest bit-exact one
    (pipeline/tune.py; results cached, so a second deploy measures nothing); `tuning_log`: a file of tuning records
    to read choices from (and, with `tune`, to write the measured ones to). `arena_budget`: the arena bytes the
    schedule must fit (default: the board's RAM minus its stack); a model that does not fit layer by layer runs a
    prefix of its layers patch by patch (pipeline/schedule.py)."""
    b = load_board(board)
    target = b.target(optimize)
    model = Path(model)
    check_output_folder(Path(out_dir))  # a folder holding the user's files is refused before minutes of work
    check_tuning_log(tuning_log, writing=tune)
    # activation widths: 8, 16, {layer: 8|16}, or searched within `max_accuracy_drop` points on `data`
    bits, mixed = resolve_activation_bits(model, calibration, activation_bits, max_accuracy_drop, data,
                                          input_shapes=input_shapes, calibrate=calibrate, cle=cle, echo=echo,
                                          compression=compression, bias_correction=bias_correction,
                                          label_output=label_output)
    compiled = compile_model(model, calibration, input_shapes=input_shapes, disable_passes=disable_passes,
                             print_ir_after=print_ir_after, compression=compression, echo=echo, calibrate=calibrate,
                             cle=cle, bias_correction=bias_correction, target=target, activation_bits=bits)
    if mixed is not None:
        compiled.graph.meta["mixed_precision"] = mixed  # report.json quantization.activation_bits.search
    compiled = with_budget(compiled, *board_budget(b, arena_budget, compiled))
    tuning = None
    if tune or tuning_log is not None:
        compiled, tuning = tune_variants(compiled, b, target, measure=tune, log=tuning_log, timeout=qemu_timeout_s,
                                         echo=echo)
    check_fits(compiled, b)
    with staging(Path(out_dir)) as tmp:
        emitted, section, per_layer, sizes = _stage_and_verify(compiled, b, tmp, verify, verify_samples,
                                                               qemu_timeout_s)
        uncompressed = None
        if tuning is not None and finish_tuning(tuning, section["instructions"]):
            # the tuned firmware as a whole ran more instructions than the default did (layer counts are measured
            # one round at a time): deploy the default choice instead, so tuning is never slower
            clear_staging(tmp)
            compiled = with_variants(compiled, target, tuning["_default"])
            emitted, section, per_layer, sizes = _stage_and_verify(compiled, b, tmp, verify, verify_samples,
                                                                   qemu_timeout_s)
            tuning["reverted_to_default"] = True
            tuning["instructions_tuned"] = section["instructions"]
        if verify:
            if compiled.compressed:
                uncompressed = uncompressed_costs(model, calibration, b, qemu_timeout_s, input_shapes=input_shapes,
                                                  disable_passes=disable_passes, calibrate=calibrate, cle=cle,
                                                  bias_correction=bias_correction, target=target,
                                                  activation_bits=bits,  # the same widths, uncompressed
                                                  arena_budget=arena_budget)
        tidy_firmware_dir(tmp)
        report = build_report(compiled, b, model, emitted, per_layer, sizes, section, uncompressed,
                              folder_files(tmp, emitted),
                              tuning=public_tuning(tuning) if tuning is not None else None)
        report["memory"]["timeline"] = timeline(compiled)  # the memory plan as text in report.md, and a PNG
        timeline_png(report["memory"]["timeline"], tmp / TIMELINE_PNG, f"{model.name} on {b.name}: arena timeline")
        report["files"]["report"].append(TIMELINE_PNG)
        (tmp / "report.json").write_text(json.dumps(report, indent=2) + "\n")
        (tmp / "report.md").write_text(report_md(report))
    return DeployResult(Path(out_dir), report, summary(report, Path(out_dir)))


def _stage_and_verify(compiled: Compiled, b, tmp: Path, verify: bool, samples: int, timeout: float):
    """Stage the folder into `tmp` and, with `verify`, build the firmware and hold it to the reference under QEMU
    (raises on a mismatch). Returns (emitted, verify section, per-layer instructions or None, sizes or None)."""
    emitted = stage_model(compiled, b, tmp)
    section, per_layer, sizes = not_verified(b), None, None
    if verify:
        elf = build_verification_firmware(emitted, b, tmp)
        sizes = firmware_sizes(elf)
        section, per_layer = verify_under_qemu(compiled, b, elf, tmp / FIRMWARE_DIR, samples, timeout,
                                               len(emitted.coded()), emitted)
        check_verification(section)
    else:
        # Still prove the firmware builds and fits when QEMU is skipped, if the toolchain is here.
        try:
            sizes = firmware_sizes(build_verification_firmware(emitted, b, tmp, trace=False, werror=False))
        except TinyaotError:
            pass
    return emitted, section, per_layer, sizes
