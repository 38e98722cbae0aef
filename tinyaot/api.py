"""tinyaot's Python API: what the CLI calls (it imports nothing else of tinyaot), and what tests and scripts call.

    compiled = compile_model("kws.onnx", "cal.npz")          # import, passes, calibrate, quantize
    compiled = compile_model("kws.onnx", "cal.npz", compression=CompressionOptions(clusters=16))  # + compression
    report = deploy("kws.onnx", "stm32", "cal.npz", "out/")   # + plan, emit C, build, verify under QEMU
    figures = evaluate("kws.onnx", "cal.npz", "data.npz")     # accuracy: float vs tinyaot int8 vs onnxruntime int8

Options. Every function takes its options either as keyword arguments or as one `Options` object (or both: the
keywords then change the object's fields). `Options` (tinyaot/options.py) is frozen and holds every option of a
run in groups; each keyword is one field's name:

    compile       input_shapes, disable_passes, print_ir_after, optimize ("speed"|"size"), tune, tuning_log
    quantization  calibrate, cle, bias_correction, activation_bits (8, 16 or {layer: bits}), max_accuracy_drop
    compression   a CompressionOptions (tinyaot/compress/options.py), a dict of its fields, or a spec file path
    verification  verify, verify_samples, qemu_timeout_s, limit, compare_onnxruntime
    output        echo (a function taking each progress line), quiet
    sweep         workers, executor, cache

    opts = Options.of(calibrate="mse", cle=False)
    deploy("kws.onnx", "stm32", "cal.npz", "out/", opts)                 # the same as passing the keywords
    deploy("kws.onnx", "stm32", "cal.npz", "out/", opts, verify=False)   # opts with verify changed

A facade: the work is done by the pipeline's stages (tinyaot/pipeline/), one module each: deploy (the stages in
order), compile (ONNX -> quantized graph + memory plan), stage (the vendorable folder), build (the verification
firmware), verify (QEMU vs numpy reference vs onnxruntime), report (report.json, report.md), evaluate (accuracy),
analyze (per-layer sensitivity); and by tinyaot/sweep/ (sweeps over compression settings and the regression gate).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tinyaot import __version__
from tinyaot.boards import Board, list_boards, load_board
from tinyaot.compress.options import CompressionOptions, LayerRule, options_from_flags as compression_options
from tinyaot.core.target import Target
from tinyaot.errors import InternalError, TinyaotError, VerificationError
from tinyaot.files import check_file_target, env_error, tinyaot_json, write_file
from tinyaot.interrupt import Interrupted, stop_on_signals
from tinyaot.options import (CompileOptions, OutputOptions, Options, QuantizationOptions, SweepOptions,
                             VerificationOptions, parse_input_shapes)
from tinyaot.sweep.compare import Verdict, exit_code_of, gate, judge, load_report, load_tolerances, tolerances_help
from tinyaot.sweep.grid import Config, load_grid

if TYPE_CHECKING:
    from tinyaot.frontend import ImportedModel
    from tinyaot.pipeline.compile import Compiled
    from tinyaot.pipeline.deploy import DeployResult

# This module is cheap to import (no onnx, onnxruntime or pipeline): the CLI imports it before it knows which
# command runs, and `tinyaot --help`, `version` or `boards` should not wait for the compiler. The functions below
# import their stage when called, and the pipeline's names this module offers load on first use (`__getattr__`).
_LAZY = {
    "Compiled": "compile", "RANDOM_SAMPLES": "compile", "RANDOM_SEED": "compile", "check_fits": "compile",
    "with_variants": "compile", "DeployResult": "deploy", "ImportedModel": "frontend", "import_model": "frontend",
    "load_labelled": "labelled", "bits_line": "precision_search", "compression_line": "report",
    "report_md": "report", "summary": "report", "weights_bytes": "report", "figures_line": "sweep",
}


def __getattr__(name: str):
    where = _LAZY.get(name)
    if where == "compile":
        from tinyaot.pipeline import compile as module
    elif where == "deploy":
        from tinyaot.pipeline import deploy as module
    elif where == "frontend":
        from tinyaot import frontend as module
    elif where == "labelled":
        from tinyaot.pipeline import labelled as module
    elif where == "precision_search":
        from tinyaot.pipeline import precision_search as module
    elif where == "report":
        from tinyaot.pipeline import report as module
    elif where == "sweep":
        from tinyaot.sweep import sweep as module
    else:
        raise AttributeError(f"module 'tinyaot.api' has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value


def compile_model(model: str | Path | ImportedModel, calibration: str | Path | None, options: Options | None = None,
                  *, target: Target | None = None, variant_choices: dict[str, str] | None = None,
                  **keywords) -> Compiled:
    """Import, run the passes, calibrate with onnxruntime over the calibration samples, quantize (and compress),
    plan memory (pipeline/compile.py). `target` (None: generic kernels) and `variant_choices` ({node: variant})
    choose the kernel variants."""
    from tinyaot.pipeline.compile import compile_model as compile_stage

    return compile_stage(model, calibration, Options.of(options, **keywords), target=target,
                         variant_choices=variant_choices)


def deploy(model: str | Path | ImportedModel, board: str, calibration: str | Path | None, out_dir: str | Path,
           options: Options | None = None, *, data: str | Path | None = None, **keywords) -> DeployResult:
    """Compile `model` for `board` into `out_dir` (the folder an engineer vendors), and unless verify=False build
    the firmware and prove it under QEMU. Raises TinyaotError for any problem with the inputs. `optimize`: "speed"
    (each layer's cheapest kernel variant on the board's core, by the cost model) or "size" (the generic kernels).
    `tune`: measure the layers' candidate variants under QEMU and keep the fastest bit-exact one (pipeline/tune.py;
    results cached); `tuning_log`: a file of tuning records to read choices from (and, with `tune`, to write the
    measured ones to). `data`: labelled samples for `max_accuracy_drop`."""
    from tinyaot.pipeline.deploy import deploy as deploy_stage

    return deploy_stage(model, board, calibration, out_dir, Options.of(options, **keywords), data=data)


def evaluate(model: str | Path | ImportedModel, calibration: str | Path | None, data: str | Path,
             options: Options | None = None, *, target: Target | None = None, **keywords) -> dict:
    """Top-1 of the float model (onnxruntime), of tinyaot's int8 model (the generated C, host-compiled) and of
    onnxruntime's quantize_static, on the labelled `data` (pipeline/evaluate.py)."""
    from tinyaot.pipeline.evaluate import evaluate as evaluate_stage

    return evaluate_stage(model, calibration, data, Options.of(options, **keywords), target=target)


def analyze(model: str | Path | ImportedModel, calibration: str | Path, data: str | Path, out_dir: str | Path,
            options: Options | None = None, **keywords) -> dict:
    """Per layer: SQNR of its int8 output and top-1 with only that layer quantized, written to `out_dir`
    (pipeline/analyze.py)."""
    from tinyaot.pipeline.analyze import analyze as analyze_stage

    return analyze_stage(model, calibration, data, out_dir, Options.of(options, **keywords))


def sweep(model: str | Path, board: str, calibration: str | Path, data: str | Path, out: str | Path,
          grid: str | Path | list[Config] | None = None, options: Options | None = None, *,
          baseline: dict | None = None, tolerances: dict | None = None, baseline_name: str = "the baseline",
          **keywords) -> dict:
    """Every setting of `grid` (a grid file, a list of Config, or None: the default grid) measured, reports written
    to `out` (tinyaot/sweep/sweep.py); returns the sweep's report. With `baseline` (a sweep report, load_report) the
    gate's verdict within `tolerances` (load_tolerances) goes into the report."""
    from tinyaot.sweep.sweep import run_sweep

    configs = grid if isinstance(grid, list) else load_grid(grid)
    return run_sweep(model, board, calibration, data, out, configs, Options.of(options, **keywords),
                     baseline=baseline, tolerances=tolerances, baseline_name=baseline_name)


def compare(baseline: str | Path | dict, current: str | Path | dict,
            tolerances: str | Path | dict | None = None) -> Verdict:
    """The gate's verdict on the sweep report `current` held to `baseline` (reports or their paths) within
    `tolerances` (a TOML file, a loaded dict, or None: the defaults): `.passed`, `.exit_code` (0; 1 a regression;
    2 the baseline does not fit), `.text` (notes, table, verdict lines), `.lines` (the verdict lines alone)."""
    base = baseline if isinstance(baseline, dict) else load_report(baseline)
    cur = current if isinstance(current, dict) else load_report(current)
    name = str(baseline) if not isinstance(baseline, dict) else "baseline"
    tol = tolerances if isinstance(tolerances, dict) else load_tolerances(tolerances)
    return judge(base, cur, tol, name)


def json_target(path: str | Path) -> Path:
    """Check now, before the work, that `path` can take a JSON file of figures (`evaluate --json`): no folder
    there, no file tinyaot did not write, a writable folder."""
    return check_file_target(path, "--json", replaceable=tinyaot_json)


def write_json(path: str | Path, data: dict) -> Path:
    """`data` as JSON at `path`, written atomically, replacing only a file tinyaot wrote."""
    return write_file(path, json.dumps(data, indent=2) + "\n", what="--json", replaceable=tinyaot_json)


def graph_passes() -> list[tuple[str, bool, str]]:
    """The graph passes in the order they run: (name, required, the first line of its module's docstring)."""
    from tinyaot.passes import PIPELINE, REQUIRED

    return [(name, name in REQUIRED, (sys.modules[fn.__module__].__doc__ or "").strip().splitlines()[0])
            for name, fn in PIPELINE]


__all__ = ["Board", "CompileOptions", "CompressionOptions", "Config", "InternalError", "Interrupted", "LayerRule",
           "Options", "OutputOptions", "QuantizationOptions", "SweepOptions", "Target", "TinyaotError",
           "VerificationError", "VerificationOptions", "Verdict", "__version__", "analyze", "compare",
           "compile_model", "compression_options", "deploy", "env_error", "evaluate", "exit_code_of", "gate",
           "graph_passes", "json_target", "judge", "list_boards", "load_board", "load_grid", "load_report",
           "load_tolerances", "parse_input_shapes", "stop_on_signals", "sweep", "tolerances_help", "write_json",
           *_LAZY]
