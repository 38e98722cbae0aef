"""The `tinyaot` command: a thin, polite shell over tinyaot.api. Every problem becomes one line `Error: ...` on
stderr and the exit code a CI reads (README "Files, caches, signals and exit codes"), never a traceback:

    0  success
    1  a regression found by the gate, or a failed verification (VerificationError)
    2  a usage, input or environment error (TinyaotError; an OSError such as a full disk or a read-only folder,
       named with its path and what to do)
    3  a tinyaot bug (InternalError, or any unexpected exception: the traceback goes to a log file it names)
    130, 143  stopped by SIGINT or SIGTERM (the line says what was kept)"""
from __future__ import annotations

import datetime
import os
import sys
import tempfile
import traceback
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

try:  # typer >= 0.20 vendors click: its parsing errors are typer._click's classes
    from typer._click import exceptions as _click_exc
except ImportError:  # pragma: no cover - older typer on plain click
    from click import exceptions as _click_exc

from tinyaot import api
from tinyaot.api import TinyaotError, __version__


class _PoliteGroup(TyperGroup):
    """Click's usage errors as one line, like every other error of the product; SIGINT and SIGTERM as one line and
    128 + the signal's number, after the command unwound (staging folders removed, workers and tools stopped)."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        try:
            with api.stop_on_signals():
                rv = super().main(*args, standalone_mode=False, **kwargs)
            # Outside standalone mode click does not raise a command's `typer.Exit(1)`: it returns the code (and a
            # command's own return value, None, on success). Returning it as is would end the process with 0.
            code = rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
        except (api.Interrupted, KeyboardInterrupt) as exc:
            exc = exc if isinstance(exc, api.Interrupted) else api.Interrupted(2)
            typer.echo(f"Error: interrupted by {exc.name}; "
                       f"{exc.kept or 'nothing half-written was left behind (an existing output is unchanged)'}",
                       err=True)
            code = exc.exit_code
        except _click_exc.UsageError as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # bare `tinyaot`: the help, not an error line
                typer.echo(exc.format_message())
            else:
                typer.echo(f"Error: {exc.format_message()}", err=True)
            code = 2
        # typer.Abort / typer.Exit, not _click_exc's: typer >= 0.20 keeps them in typer.exceptions, and a missing
        # attribute here would turn every other exception into an AttributeError.
        except typer.Abort:  # click's own Ctrl-C (at a prompt)
            typer.echo("Error: interrupted by SIGINT", err=True)
            code = 130
        except typer.Exit as exc:
            code = exc.exit_code
        except TinyaotError as exc:  # raised outside a command's own handler (e.g. while listing boards)
            typer.echo(f"Error: {exc}", err=True)
            code = exc.exit_code
        except OSError as exc:  # the environment (a full disk, a read-only or missing path), not tinyaot
            typer.echo(f"Error: {api.env_error(exc, doing='use')}", err=True)
            code = 2
        except Exception as exc:  # anything else is a bug in tinyaot, not a problem with the user's input
            typer.echo(_internal_error(exc), err=True)
            code = 3
        if standalone_mode:
            sys.exit(code)
        return code


def _internal_error(exc: Exception) -> str:
    """The one line for an unexpected exception; its traceback goes to a log file whose path the line gives, so a
    bug report can carry it without the user meeting a traceback."""
    text = (f"tinyaot {__version__}, {datetime.datetime.now(datetime.timezone.utc).isoformat()}\n"
            f"command: {' '.join(sys.argv)}\n\n" + "".join(traceback.format_exception(exc)))
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    cache = os.environ.get("TINYAOT_CACHE")
    where = None
    for folder in ((Path(cache) if cache else Path.home() / ".cache" / "tinyaot") / "logs",
                   Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=f"tinyaot-internal-error-{stamp}-", suffix=".log", dir=folder)
            with os.fdopen(fd, "w") as f:
                f.write(text)
            where = name
            break
        except OSError:
            continue
    # One line even if the exception's message has several.
    message = " ".join(str(exc).split())
    summary = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    tail = f"traceback written to {where}" if where else "no traceback file could be written"
    return f"Error: internal error (a tinyaot bug): {summary}; {tail}"


EXIT_CODES = ("Exit codes: 0 success; 1 a regression found by the gate, or a failed verification; 2 a usage, input "
              "or environment error (bad file or flag, missing tool, unwritable path, full disk; the line names the "
              "path and what to do); 3 a tinyaot bug; 130 or 143 stopped by SIGINT or SIGTERM.")

app = typer.Typer(cls=_PoliteGroup, add_completion=True, pretty_exceptions_enable=False, no_args_is_help=True,
                  rich_markup_mode=None, epilog=EXIT_CODES,
                  help="tinyaot: float ONNX in, calibrated int8 CMSIS-style C out, verified under QEMU.")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"tinyaot {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                                help="print tinyaot's version and exit")] = False) -> None:
    """tinyaot: float ONNX in, calibrated int8 CMSIS-style C out, verified under QEMU."""


def _fail(exc: Exception) -> None:
    """One line and the exit code of the error's class (2 input/environment, 1 verification, 3 a bug)."""
    typer.echo(f"Error: {exc}", err=True)
    raise typer.Exit(getattr(exc, "exit_code", 2))


QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="print nothing but errors (and a gate's verdict)")]


def _echo(line: str) -> None:
    typer.echo(line)


ModelArg = Annotated[Path, typer.Argument(help="the float ONNX model, a pre-quantized (QDQ) one, or an int8 .tflite",
                                           show_default=False)]
CalibrationOpt = Annotated[Optional[Path], typer.Option(
    "--calibration", "-c", help="calibration samples (.npz: one array per input name, or an 'x' array; first "
    "axis = sample); optional for a pre-quantized (QDQ or int8 .tflite) model, where they only feed verification")]
InputShapeOpt = Annotated[Optional[list[str]], typer.Option(
    "--input-shape", help="static shape for a dynamic input, NAME:D1,D2,... (repeatable)")]
# Compression (tinyaot/compress/): the same flags on deploy and evaluate, so accuracy and bytes come from one run.
PruneOpt = Annotated[Optional[float], typer.Option(
    "--prune", help="zero this fraction of the Conv/fully connected weights (0..1); each compressed layer is then "
    "refitted to the uncompressed model's output on the calibration data")]
PruneScopeOpt = Annotated[Optional[str], typer.Option(
    "--prune-scope", help="'global' (default: one threshold on layer-normalised magnitudes) or 'layer' (the same "
    "fraction in every layer)")]
PruneMethodOpt = Annotated[Optional[str], typer.Option(
    "--prune-method", help="'obs' (default with calibration data: masks by second-order saliency, each layer's "
    "sparsity by measured sensitivity, compress/reconstruct.py), 'magnitude' (the smallest weights; LAMP scores "
    "across layers) or 'distill' (the 'obs' masks and fit, then the pruned float model trained with those masks to "
    "the dense one's logits on the calibration data, compress/distill.py; slower; also refits after "
    "--prune-channels)")]
PrunePatternOpt = Annotated[Optional[str], typer.Option(
    "--prune-pattern", help="'unstructured' (default: any weight; smallest flash, slower kernels), 'block2x1' "
    "(convolutions drop an input for pairs of output channels together, fully connected layers whole 4x4 blocks, "
    "depthwise layers any weight but run dense: near-unstructured accuracy) or 'block' (whole blocks of 4 output "
    "channels x 4 inputs that the block kernels skip: fewer instructions than dense, coarser; depthwise layers stay "
    "dense)")]
PruneExcludeOpt = Annotated[Optional[list[str]], typer.Option(
    "--prune-exclude", help="never prune layers whose name matches this fnmatch pattern (repeatable)")]
PruneChannelsOpt = Annotated[Optional[float], typer.Option(
    "--prune-channels",
    help="remove this fraction of channels (jointly across residual Adds), then refit the layers reading them")]
ClustersOpt = Annotated[Optional[int], typer.Option(
    "--clusters", help="cluster the int8 weights into K values (2..256), indices packed at ceil(log2 K) bits")]
ClustersBudgetOpt = Annotated[Optional[float], typer.Option(
    "--clusters-budget", help="bits per weight, codebooks included, that clustering may spend across layers "
    "(default: the index bits + 10 %); finer codebooks go where the measured output error gains most")]
WeightBitsOpt = Annotated[Optional[int], typer.Option(
    "--weight-bits", help="8 (default) or 4: per-channel symmetric 4-bit weights, two per byte")]
def _calibrate_named(value: Optional[str]) -> Optional[str]:
    # an empty --calibrate "" (an unset shell variable) would otherwise quietly mean the default method
    if value is not None and not value.strip():
        raise typer.BadParameter("give a method name (minmax, percentile[:P], entropy, mse, auto, auto-input)")
    return value


CalibrateOpt = Annotated[Optional[str], typer.Option(
    "--calibrate", callback=_calibrate_named,
    help="calibration method: auto-input (default: minmax, but the model input's range clipped "
    "to its percentile range where that lowers the output error), minmax, percentile[:P] (P default 99.99), "
    "entropy, mse, auto (per tensor, the candidate that least changes the model's output); see "
    "tinyaot/compress/ranges.py")]
CleOpt = Annotated[Optional[bool], typer.Option(
    "--cle/--no-cle", help="cross-layer equalization with high-bias absorption of every pair (compress/equalize.py); "
    "default: only pairs joined by a tensor whose narrowest channel spans under 1/32 of its range")]
BiasCorrectionOpt = Annotated[Optional[bool], typer.Option(
    "--bias-correction/--no-bias-correction", help="take each layer's weight-rounding mean shift back in its bias "
    "(int32; int64 for 16-bit layers), from the calibration data (default off)")]
class ActivationBits(str, Enum):
    eight = "8"
    sixteen = "16"


ActivationBitsOpt = Annotated[ActivationBits, typer.Option(
    "--activation-bits", help="8: int8 activations; 16: TFLite's 16x8 scheme (int16 activations, int8 weights) on "
    "every layer (its ops must have s16 kernels: Conv, depthwise, fully connected, pooling, Add, Mul, Concat, Softmax, "
    "HardSwish, HardSigmoid, Sigmoid, Tanh)")]
MaxDropOpt = Annotated[Optional[float], typer.Option(
    "--max-accuracy-drop", min=0.0, help="choose 8 or 16 bits per layer, the least memory whose top-1 on --data "
    "stays within POINTS of float (pipeline/precision_search.py)", metavar="POINTS")]
LabelOutputOpt = Annotated[Optional[str], typer.Option(
    "--label-output", help="a model of several outputs: score top-1 on this output (default: the first)",
    metavar="NAME")]
DataHelp = ("labelled samples (.npz: one array per model input name, or 'x' for a single-input model, and integer "
            "labels 'y')")
CompressionSpecOpt = Annotated[Optional[Path], typer.Option(
    "--compression", help="per-layer compression spec (.toml, or .yaml with PyYAML); flags override its defaults")]


def _compression(spec, prune, prune_scope, prune_exclude, prune_channels, clusters, weight_bits, clusters_budget,
                 prune_method=None, prune_pattern=None):
    return api.compression_options(spec, prune=prune, prune_scope=prune_scope,
                                   prune_exclude=tuple(prune_exclude or ()), prune_channels=prune_channels,
                                   clusters=clusters, weight_bits=weight_bits, clusters_budget=clusters_budget,
                                   prune_method=prune_method, prune_pattern=prune_pattern)


@app.command()
def deploy(
    model: ModelArg,
    board: Annotated[str, typer.Option("--board", "-b", help="target board name or alias (see `tinyaot boards`)")]
    = "stm32",
    calibration: CalibrationOpt = None,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="output folder (default: <model>_<board>)")]
    = None,
    verify: Annotated[bool, typer.Option("--verify/--no-verify", help="build and run under QEMU")] = True,
    verify_samples: Annotated[int, typer.Option(min=1, help="calibration samples run under QEMU")] = 8,
    input_shape: InputShapeOpt = None,
    disable_pass: Annotated[Optional[list[str]], typer.Option(help="skip a graph pass (repeatable)")] = None,
    print_ir_after: Annotated[Optional[list[str]], typer.Option(help="print the IR after a pass (repeatable)")]
    = None,
    prune: PruneOpt = None, prune_scope: PruneScopeOpt = None, prune_method: PruneMethodOpt = None,
    prune_pattern: PrunePatternOpt = None,
    prune_exclude: PruneExcludeOpt = None,
    prune_channels: PruneChannelsOpt = None, clusters: ClustersOpt = None, weight_bits: WeightBitsOpt = None,
    clusters_budget: ClustersBudgetOpt = None,
    compression: CompressionSpecOpt = None,
    calibrate: CalibrateOpt = None, cle: CleOpt = None, bias_correction: BiasCorrectionOpt = None,
    optimize: Annotated[str, typer.Option(help="speed: each layer's fastest kernel variant for the board's core; "
                                               "size: the generic kernels everywhere")] = "speed",
    tune: Annotated[bool, typer.Option("--tune", help="measure each layer's kernel variants under QEMU on the board "
                                                      "and keep the fastest bit-exact one (cached)")] = False,
    tuning_log: Annotated[Optional[Path], typer.Option(help="tuning records (JSON lines) to take choices from; "
                                                            "with --tune, measured records are written to it")]
    = None,
    activation_bits: ActivationBitsOpt = ActivationBits.eight, max_accuracy_drop: MaxDropOpt = None,
    data: Annotated[Optional[Path], typer.Option("--data", "-d", help="labelled samples for --max-accuracy-drop "
                                                                      "(.npz as for evaluate)")] = None,
    arena_budget: Annotated[Optional[int], typer.Option(
        min=0, metavar="BYTES", help="the arena the schedule must fit (default: the board's RAM minus its stack); "
                                     "a model that does not fit layer by layer runs its first layers patch by "
                                     "patch, the fastest schedule that fits")] = None,
    aligned_only: Annotated[Optional[bool], typer.Option(
        "--aligned-only/--no-aligned-only",
        help="build with -mno-unaligned-access: every access the kernels make is aligned (for cores run with "
             "CCR.UNALIGN_TRP set; verified under QEMU with the trap on); default: on for cores without unaligned "
             "access (Cortex-M0/M0+/M23), off otherwise")] = None,
    label_output: LabelOutputOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Compile MODEL to int8 C for a board, build the firmware and verify it under QEMU."""
    try:
        out_dir = out if out is not None else Path(f"{model.stem}_{board}")
        options = api.Options.of(
            input_shapes=api.parse_input_shapes(input_shape), disable_passes=disable_pass,
            print_ir_after=print_ir_after,
            optimize=optimize, tune=tune, tuning_log=tuning_log, arena_budget=arena_budget, aligned_only=aligned_only,
            calibrate=calibrate, cle=cle, bias_correction=bias_correction,
            activation_bits=int(activation_bits.value), max_accuracy_drop=max_accuracy_drop,
            compression=_compression(compression, prune, prune_scope, prune_exclude, prune_channels, clusters,
                                     weight_bits, clusters_budget, prune_method, prune_pattern),
            verify=verify, verify_samples=verify_samples, label_output=label_output, echo=_echo, quiet=quiet)
        result = api.deploy(model, board, calibration, out_dir, options, data=data)
    except TinyaotError as exc:
        _fail(exc)
    if quiet:
        return
    for line in result.summary:
        typer.echo(line)
    if activation_bits != ActivationBits.eight or max_accuracy_drop is not None:
        typer.echo(api.bits_line(result.report["quantization"]["activation_bits"]))


@app.command()
def evaluate(
    model: ModelArg,
    data: Annotated[Path, typer.Option("--data", "-d", help=DataHelp)],
    calibration: CalibrationOpt = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="write the figures as JSON here")] = None,
    limit: Annotated[Optional[int], typer.Option(min=1, help="evaluate only the first N samples")] = None,
    onnxruntime: Annotated[bool, typer.Option("--onnxruntime/--no-onnxruntime",
                                              help="also measure onnxruntime's quantize_static")] = True,
    input_shape: InputShapeOpt = None,
    prune: PruneOpt = None, prune_scope: PruneScopeOpt = None, prune_method: PruneMethodOpt = None,
    prune_pattern: PrunePatternOpt = None,
    prune_exclude: PruneExcludeOpt = None,
    prune_channels: PruneChannelsOpt = None, clusters: ClustersOpt = None, weight_bits: WeightBitsOpt = None,
    clusters_budget: ClustersBudgetOpt = None,
    compression: CompressionSpecOpt = None,
    calibrate: CalibrateOpt = None, cle: CleOpt = None, bias_correction: BiasCorrectionOpt = None,
    activation_bits: ActivationBitsOpt = ActivationBits.eight, max_accuracy_drop: MaxDropOpt = None,
    label_output: LabelOutputOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Top-1 of the float model, tinyaot's int8 C (host-compiled) and onnxruntime's int8, side by side."""
    try:
        if json_out is not None:
            api.json_target(json_out)  # a folder, a foreign file or a read-only place: said now, not after the work
        options = api.Options.of(
            input_shapes=api.parse_input_shapes(input_shape),
            calibrate=calibrate, cle=cle, bias_correction=bias_correction,
            activation_bits=int(activation_bits.value), max_accuracy_drop=max_accuracy_drop,
            compression=_compression(compression, prune, prune_scope, prune_exclude, prune_channels, clusters,
                                     weight_bits, clusters_budget, prune_method, prune_pattern),
            limit=limit, compare_onnxruntime=onnxruntime, label_output=label_output, quiet=quiet)
        r = api.evaluate(model, calibration, data, options)
        if json_out is not None:
            api.write_json(json_out, r)
    except TinyaotError as exc:
        _fail(exc)
    if quiet:
        return
    ort = r["onnxruntime_int8_top1"]
    if "tflite_interpreter" in r:  # an int8 .tflite: TFLite Micro's interpreter ran the same file
        tfl = r["tflite_top1"]
        typer.echo(f"{r['samples']} samples (int8 TFLite model, its own parameters): tinyaot int8 "
                   f"{100 * r['int8_top1']:.2f} %" + (
                       f", TFLite interpreter {100 * tfl:.2f} % ({r['tflite_interpreter']}); outputs equal on "
                       f"{r['outputs_equal_tflite']} of {r['samples']} samples" if tfl is not None
                       else f"; TFLite interpreter {r['tflite_interpreter']}"))
        return
    if r.get("prequantized"):  # no float model to compare with: onnxruntime ran the same QDQ model
        typer.echo(f"{r['samples']} samples (pre-quantized model, its own parameters): tinyaot int8 "
                   f"{100 * r['int8_top1']:.2f} %" + (f", onnxruntime int8 {100 * ort:.2f} %; they agree on "
                   f"{100 * r['int8_vs_onnxruntime_agreement']:.2f} %" if ort is not None else ""))
        return
    label = {"8": "int8", "16": "16x8"}.get(str(r.get("activation_bits", {}).get("mode", 8)), "mixed 8/16")
    typer.echo(f"{r['samples']} samples: float {100 * r['float_top1']:.2f} %, tinyaot {label} "
               f"{100 * r['int8_top1']:.2f} %"
               + (f", onnxruntime int8 {100 * ort:.2f} %" if ort is not None else "")
               + f"; {label} agrees with float on {100 * r['agreement']:.2f} %")
    if activation_bits != ActivationBits.eight or max_accuracy_drop is not None:
        typer.echo(api.bits_line(r["activation_bits"]))
    if "options" in r.get("compression", {}):  # what the compressed weights cost, from the same compilation
        typer.echo(f"compression: {api.compression_line(r['compression'])}")


@app.command()
def boards() -> None:
    """List the boards tinyaot can target."""
    rows = [("name", "aliases", "core", "qemu machine", "flash", "RAM")]
    for b in api.list_boards():
        rows.append((b.name, ",".join(b.aliases) or "-", b.core, b.qemu_machine, f"{b.flash_bytes // 1024} KB",
                     f"{b.ram_bytes // 1024} KB"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


@app.command()
def passes() -> None:
    """List the graph passes in the order they run (names for --disable-pass and --print-ir-after)."""
    for name, required, doc in api.graph_passes():
        typer.echo(f"{name:<22} {'(required) ' if required else ''}{doc}")


@app.command()
def analyze(
    model: ModelArg,
    calibration: Annotated[Path, typer.Option("--calibration", "-c", help="calibration samples (.npz)")],
    data: Annotated[Path, typer.Option("--data", "-d", help=DataHelp)],
    out: Annotated[Path, typer.Option("--out", "-o", help="folder for report.json, report.md and sqnr.png")],
    limit: Annotated[Optional[int], typer.Option(min=1, help="use only the first N samples")] = None,
    input_shape: InputShapeOpt = None,
    calibrate: CalibrateOpt = None, cle: CleOpt = None, bias_correction: BiasCorrectionOpt = None,
    label_output: LabelOutputOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Per layer: SQNR of its int8 output and the top-1 with only that layer quantized, worst first."""
    try:
        options = api.Options.of(input_shapes=api.parse_input_shapes(input_shape), calibrate=calibrate, cle=cle,
                                 bias_correction=bias_correction, limit=limit,
                                 label_output=label_output, quiet=quiet)
        r = api.analyze(model, calibration, data, out, options)
    except TinyaotError as exc:
        _fail(exc)
    if quiet:
        return
    typer.echo(f"{r['samples']} samples, float top-1 {100 * r['float_top1']:.2f} %; worst layers:")
    for row in r["layers"][:5]:
        sq = row["sqnr_db"]
        typer.echo(f"  {row['name']} ({row['op']}): sqnr {'exact' if sq == float('inf') else f'{sq:.1f} dB'}, "
                   f"top-1 only this layer {100 * row['top1_only_this_layer']:.2f} %")
    typer.echo(f"report: {out / 'report.md'}")


@app.command()
def sweep(
    model: ModelArg,
    calibration: Annotated[Path, typer.Option("--calibration", "-c", help="calibration samples (.npz)")],
    data: Annotated[Path, typer.Option("--data", "-d", help=DataHelp)],
    out: Annotated[Path, typer.Option("--out", "-o", help="folder for report.json/.md/.html, the plots and "
                                      "configs/ (one result per setting; a rerun resumes from them)")],
    board: Annotated[str, typer.Option("--board", "-b", help="target board name or alias")] = "stm32",
    grid: Annotated[Optional[Path], typer.Option(help="settings to run (.toml, see examples/sweep_grid.toml); "
                                                 "default: 12 settings of int8, clusters, int4, pruning")] = None,
    workers: Annotated[Optional[int], typer.Option(min=1, help="settings run at once (default: the core count)")]
    = None,
    qemu: Annotated[bool, typer.Option("--qemu/--no-qemu", help="run each firmware under QEMU for its "
                                       "instruction count")] = True,
    executor: Annotated[str, typer.Option(help="'process' (a local process pool) or 'ray' (the Ray cluster at "
                                          "RAY_ADDRESS, else a local Ray instance; pip install tinyaot[ray])")]
    = "process",
    limit: Annotated[Optional[int], typer.Option(min=1, help="evaluate only the first N samples")] = None,
    cache: Annotated[bool, typer.Option("--cache/--no-cache", help="reuse results cached by content hash "
                                        "($TINYAOT_CACHE/sweep)")] = True,
    baseline: Annotated[Optional[Path], typer.Option(help="compare with this report.json at the end (as `tinyaot "
                                                     "compare`; the verdict also goes into report.md/.html): exit 1 "
                                                     "on a regression, 2 when the baseline does not fit")] = None,
    tolerances: Annotated[Optional[Path], typer.Option(help="per-metric tolerances for --baseline (.toml)")] = None,
    label_output: LabelOutputOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Measure MODEL over a grid of compression settings: top-1, weights, flash, arena, instructions; reports and
    Pareto plots in --out. Without a terminal, one line per finished setting."""
    try:
        base = api.load_report(baseline) if baseline is not None else None
        tol = api.load_tolerances(tolerances)
        options = api.Options.of(workers=workers, executor=executor, cache=cache, verify=qemu, limit=limit,
                                 label_output=label_output, echo=_echo, quiet=quiet)
        report = api.sweep(model, board, calibration, data, out, api.load_grid(grid), options, baseline=base,
                           tolerances=tol, baseline_name=str(baseline))
    except TinyaotError as exc:
        _fail(exc)
    if not quiet:
        for c in report["configs"]:
            typer.echo(f"{c['name']:<24} {api.figures_line(c)}")
        typer.echo(f"reports: {out / 'report.md'}, {out / 'report.html'}; Pareto (flash): "
                   f"{', '.join(report['pareto']['flash_bytes']) or '-'}")
    failed = [c for c in report["configs"] if c["error"]]
    # a failed setting's cause decides (1 verification, 2 input or environment, 3 a bug); so does the gate
    code = max((api.exit_code_of(f"failed:{c.get('error_kind') or 'input'}") for c in failed), default=0)
    if failed:
        typer.echo(f"Error: {len(failed)} setting(s) failed: {', '.join(c['name'] for c in failed)}", err=True)
    if base is not None:
        verdict = api.judge(base, report, tol, str(baseline))  # the same verdict report.json's `gate` holds
        typer.echo("\n".join(verdict.notes + verdict.lines) if quiet else verdict.text)
        code = max(code, verdict.exit_code)
    if code:
        raise typer.Exit(code)


@app.command(help="Compare two sweep reports config by config; exit 1 with a table naming the config and metric "
             "when top-1 drops or flash, arena, instructions or weights grow beyond the tolerances; exit 2 when the "
             "baseline does not fit (a setting missing, its flags changed, a metric not measured). Defaults: "
             + api.tolerances_help()
             + ". A TOML file overrides them: [top1] max_drop = 0.01, [flash_bytes] max_growth = 0.02, ...")
def compare(
    baseline: Annotated[Path, typer.Argument(help="the baseline sweep report (report.json)", show_default=False)],
    current: Annotated[Path, typer.Argument(help="the current sweep report (report.json)", show_default=False)],
    tolerances: Annotated[Optional[Path], typer.Option(help="per-metric tolerances (.toml)")] = None,
) -> None:
    try:
        verdict = api.compare(baseline, current, tolerances)
    except TinyaotError as exc:
        _fail(exc)
    typer.echo(verdict.text)
    if verdict.exit_code:
        raise typer.Exit(verdict.exit_code)


@app.command()
def version() -> None:
    """Print tinyaot's version."""
    typer.echo(__version__)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
