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
from tinyaot.pipeline.build import build_verification_firmware, firmware_sizes, tidy_firmware_dir
from tinyaot.pipeline.compile import (RANDOM_SAMPLES, RANDOM_SEED, Compiled, Echo, _quiet,  # noqa: F401
                                      check_fits, compile_model)
from tinyaot.pipeline.evaluate import evaluate, load_labelled  # noqa: F401
from tinyaot.pipeline.report import build_report, compression_line, report_md, summary, weights_bytes  # noqa: F401
from tinyaot.pipeline.stage import FIRMWARE_DIR, folder_files, stage_model, staging
from tinyaot.pipeline.timeline import PNG_NAME as TIMELINE_PNG, timeline, timeline_png
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
           bias_correction: bool | None = None, optimize: str = "speed") -> DeployResult:
    """Compile `model` for `board` into `out_dir` (the folder an engineer vendors), and unless verify=False
    build the firmware and prove it under QEMU. Raises TinyaotError for any problem with the inputs.
    `optimize`: "speed" (each layer's cheapest kernel variant on the board's core) or "size" (the generic kernels)."""
    b = load_board(board)
    target = b.target(optimize)
    model = Path(model)
    compiled = compile_model(model, calibration, input_shapes=input_shapes, disable_passes=disable_passes,
                             print_ir_after=print_ir_after, compression=compression, echo=echo, calibrate=calibrate,
                             cle=cle, bias_correction=bias_correction, target=target)
    check_fits(compiled, b)
    with staging(Path(out_dir)) as tmp:
        emitted = stage_model(compiled, b, tmp)
        section, per_layer, sizes, uncompressed = not_verified(b), None, None, None
        if verify:
            elf = build_verification_firmware(emitted, b, tmp)
            sizes = firmware_sizes(elf)
            section, per_layer = verify_under_qemu(compiled, b, elf, tmp / FIRMWARE_DIR, verify_samples,
                                                   qemu_timeout_s, len([l for l in emitted.layers if l.code]))
            check_verification(section)
            if compiled.compressed:
                uncompressed = uncompressed_costs(model, calibration, b, qemu_timeout_s, input_shapes=input_shapes,
                                                  disable_passes=disable_passes, calibrate=calibrate, cle=cle,
                                                  bias_correction=bias_correction, target=target)
        else:
            # Still prove the firmware builds and fits when QEMU is skipped, if the toolchain is here.
            try:
                sizes = firmware_sizes(build_verification_firmware(emitted, b, tmp, trace=False, werror=False))
            except TinyaotError:
                pass
        tidy_firmware_dir(tmp)
        report = build_report(compiled, b, model, emitted, per_layer, sizes, section, uncompressed,
                              folder_files(tmp, emitted))
        report["memory"]["timeline"] = timeline(compiled)  # the memory plan as text in report.md, and a PNG
        timeline_png(report["memory"]["timeline"], tmp / TIMELINE_PNG, f"{model.name} on {b.name}: arena timeline")
        report["files"]["report"].append(TIMELINE_PNG)
        (tmp / "report.json").write_text(json.dumps(report, indent=2) + "\n")
        (tmp / "report.md").write_text(report_md(report))
    return DeployResult(Path(out_dir), report, summary(report, Path(out_dir)))
