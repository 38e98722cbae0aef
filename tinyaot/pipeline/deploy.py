"""deploy: the stages strung together. Import the model once, choose the activation widths, compile, tune, stage the
folder, build and verify the firmware under QEMU, write report.json and report.md; the folder appears only when all
of it succeeded (stage.staging).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tinyaot.boards import Board, aligned_only_board, load_board
from tinyaot.codegen.emit import StackFigures, write_header
from tinyaot.files import check_output_folder
from tinyaot.frontend import ImportedModel, import_model
from tinyaot.options import Options

from .build import build_verification_firmware, firmware_sizes, tidy_firmware_dir
from .compile import Compiled, board_budget, check_fits, compile_model, retarget, with_budget, with_variants
from .precision_search import resolve_activation_bits
from .report import build_report, report_md, summary
from .stage import FIRMWARE_DIR, clear_staging, folder_files, stage_model, staging
from .timeline import PNG_NAME as TIMELINE_PNG, timeline, timeline_png
from .tune import check_log as check_tuning_log, finish as finish_tuning, tune_variants
from .verify import check_verification, measure_debug_stack, not_verified, uncompressed_costs, verify_under_qemu


@dataclass
class DeployResult:
    out_dir: Path
    report: dict
    summary: list[str] = field(default_factory=list)


def deploy(model: str | Path | ImportedModel, board: str, calibration: str | Path | None, out_dir: str | Path,
           options: Options | None = None, *, data: str | Path | None = None,
           compiled: Compiled | None = None) -> DeployResult:
    """Compile `model` for `board` into `out_dir` (the folder an engineer vendors), and unless
    `options.verification.verify` is off build the firmware and prove it under QEMU. `data`: labelled samples for
    `quantization.max_accuracy_drop`. `compiled`: compile_model's result for this model, calibration and options (a
    sweep compiles once for evaluate and deploy), used instead of compiling again. Raises TinyaotError for any
    problem with the inputs."""
    options = Options() if options is None else options
    b = aligned_only_board(load_board(board), options.compile.aligned_only)
    target = b.target(options.compile.optimize)
    check_output_folder(Path(out_dir))  # a folder holding the user's files is refused before minutes of work
    check_tuning_log(options.compile.tuning_log, writing=options.compile.tune)
    imported = import_model(model, options.compile.input_shapes)
    if compiled is not None:
        compiled = retarget(compiled, target)
    else:
        # activation widths: 8, 16, {layer: 8|16}, or searched within `max_accuracy_drop` points on `data`
        bits, mixed = resolve_activation_bits(imported, calibration, data, options)
        options = options.with_(activation_bits=bits)
        compiled = compile_model(imported, calibration, options, target=target)
        if mixed is not None:
            compiled.graph.meta["mixed_precision"] = mixed  # report.json quantization.activation_bits.search
    compiled = with_budget(compiled, *board_budget(b, options.compile.arena_budget, compiled))
    tuning = None
    if options.compile.tune or options.compile.tuning_log is not None:
        tuning = tune_variants(compiled, b, target, options)
        compiled = tuning.compiled
    check_fits(compiled, b)
    with staging(Path(out_dir)) as tmp:
        emitted, section, per_layer, sizes = _stage_and_verify(compiled, b, tmp, options)
        uncompressed = None
        if tuning is not None and finish_tuning(tuning.section, section.instructions):
            # the tuned firmware as a whole ran more instructions than the default did (layer counts are measured
            # one round at a time): deploy the default choice instead, so tuning is never slower
            clear_staging(tmp)
            compiled = with_variants(compiled, target, tuning.default_choice)
            emitted, section, per_layer, sizes = _stage_and_verify(compiled, b, tmp, options)
            tuning.section["reverted_to_default"] = True
            tuning.section["instructions_rejected_choice"] = tuning.section["instructions_tuned"]  # the records' choice
            tuning.section["instructions_tuned"] = section.instructions
        if options.verification.verify and compiled.compressed:
            # the same widths, uncompressed
            uncompressed = uncompressed_costs(imported, calibration, b, options, target)
        tidy_firmware_dir(tmp)
        report = build_report(compiled, b, imported.path, emitted, per_layer, sizes, section, uncompressed,
                              folder_files(tmp, emitted),
                              tuning=tuning.section if tuning is not None else None)
        report["memory"]["timeline"] = timeline(compiled)  # the memory plan as text in report.md, and a PNG
        timeline_png(report["memory"]["timeline"], tmp / TIMELINE_PNG,
                     f"{imported.path.name} on {b.name}: arena timeline")
        report["files"]["report"].append(TIMELINE_PNG)
        (tmp / "report.json").write_text(json.dumps(report, indent=2) + "\n")
        (tmp / "report.md").write_text(report_md(report))
    return DeployResult(Path(out_dir), report, summary(report, Path(out_dir)))


def _stage_and_verify(compiled: Compiled, b: Board, tmp: Path, options: Options):
    """Stage the folder into `tmp`, build the firmware (a failed build raises) and, with `verification.verify`, hold
    it to the reference under QEMU (raises on a mismatch). Returns (emitted, verify section, per-layer instructions
    or None, sizes)."""
    emitted = stage_model(compiled, b, tmp)
    section, per_layer, sizes = not_verified(b), None, None
    v = options.verification
    if v.verify:
        elf = build_verification_firmware(emitted, b, tmp)
        sizes = firmware_sizes(elf)
        section, per_layer = verify_under_qemu(compiled, b, elf, tmp / FIRMWARE_DIR, v.verify_samples,
                                               v.qemu_timeout_s, len(emitted.coded()), emitted)
        check_verification(section)
        measure_debug_stack(compiled, emitted, b, tmp, sizes, section, v.qemu_timeout_s)
        if section.invoke_stack_bytes is not None:
            write_header(emitted, StackFigures("arm-none-eabi-gcc", section.optimization, section.invoke_stack_bytes,
                                               section.invoke_stack_bytes_o0, section.stack_o0_note))
    else:
        # QEMU skipped (--no-verify), not the build: the firmware is still built, to prove that the C compiles,
        # links and fits the board and to measure its flash; a failed build (or no compiler) is an error as with
        # verification
        sizes = firmware_sizes(build_verification_firmware(emitted, b, tmp, trace=False, werror=False))
    return emitted, section, per_layer, sizes
