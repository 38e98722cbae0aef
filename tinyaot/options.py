"""Every option of a tinyaot run, as one frozen object built once (by the CLI from its flags, or by the caller) and
passed down whole: pipeline functions take `options` and read `options.<group>.<field>`, never single options.

    opts = Options.of(calibrate="mse", cle=False, verify=False)      # flat keywords -> their group
    opts.quantization.calibrate                                      # "mse"
    opts16 = opts.with_(activation_bits=16)                          # a changed copy (the object is frozen)

The groups: `compile` (import, passes, kernel variants), `quantization` (calibration, CLE, bias correction,
activation widths), `compression` (tinyaot/compress/options.py's CompressionOptions, or None), `verification` (QEMU,
labelled data), `output` (progress lines), `sweep` (how `tinyaot sweep` runs its settings). Every field name is unique
across the groups, so one flat name is the API keyword (`tinyaot.api.deploy(..., calibrate="mse")`), the sweep
grid's flag key and, with dashes, the CLI flag (`--calibrate`).

Adding an option: one field, with its default and its flag in a comment, in the group it belongs to; one CLI flag
handed to the `Options.of(...)` call of the commands that take it; read it where it is used. No function gains a
parameter for it.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from tinyaot.compress.options import CompressionOptions
from tinyaot.errors import TinyaotError

Echo = Callable[[str], None]


def silent(_: str) -> None:
    """The default `echo`: progress lines go nowhere."""


@dataclass(frozen=True)
class CompileOptions:
    """Import, graph passes and kernel choice."""

    input_shapes: Mapping[str, tuple[int, ...]] | None = None  # --input-shape NAME:D1,D2: static dynamic inputs
    disable_passes: tuple[str, ...] = ()  # --disable-pass
    print_ir_after: tuple[str, ...] = ()  # --print-ir-after
    optimize: str = "speed"  # --optimize: "speed" (each layer's cheapest variant on the board) or "size" (generic)
    tune: bool = False  # --tune: measure the layers' kernel variants under QEMU (pipeline/tune.py)
    tuning_log: Path | None = None  # --tuning-log: tuning records to read (and with --tune, write)
    arena_budget: int | None = None  # --arena-budget BYTES: the arena the schedule must fit (None: the board's RAM
    # minus its stack; pipeline/schedule.py)
    aligned_only: bool | None = None  # --aligned-only/--no-aligned-only: build with -mno-unaligned-access, every
    # access the kernels make aligned (None: automatic, on a core without unaligned access; boards.aligned_only_board)

    def __post_init__(self):
        object.__setattr__(self, "disable_passes", tuple(self.disable_passes or ()))
        object.__setattr__(self, "print_ir_after", tuple(self.print_ir_after or ()))


@dataclass(frozen=True)
class QuantizationOptions:
    """How the float model becomes an integer one."""

    calibrate: str | None = None  # --calibrate METHOD (None: compress/ranges.py DEFAULT_METHOD)
    cle: bool | str | None = None  # --cle/--no-cle: True, False or "auto" (None: compress/equalize.py DEFAULT_CLE)
    bias_correction: bool | None = None  # --bias-correction (None: compress/equalize.py DEFAULT_BIAS_CORRECTION)
    activation_bits: int | Mapping[str, int] = 8  # --activation-bits: 8, 16 or {layer name: 8|16}
    max_accuracy_drop: float | None = None  # --max-accuracy-drop POINTS: search the widths (pipeline/precision_search)


@dataclass(frozen=True)
class VerificationOptions:
    """How the result is checked: under QEMU (deploy) and on labelled data (evaluate, analyze, the width search)."""

    verify: bool = True  # --verify/--no-verify: run the firmware under QEMU (it is built either way)
    verify_samples: int = 8  # --verify-samples: calibration samples run under QEMU
    qemu_timeout_s: float = 120.0  # seconds one QEMU run may take
    limit: int | None = None  # --limit N: use only the first N labelled samples
    label_output: str | None = None  # --label-output NAME: the output top-1 is scored on (default: the first)
    compare_onnxruntime: bool = True  # --onnxruntime/--no-onnxruntime: evaluate also measures quantize_static


@dataclass(frozen=True)
class OutputOptions:
    """What the run tells its user while it works."""

    echo: Echo = silent  # progress lines (the CLI prints them)
    quiet: bool = False  # no progress bar or progress lines (a sweep's)


@dataclass(frozen=True)
class SweepOptions:
    """How `tinyaot sweep` runs its settings (each setting's own options come from its grid flags)."""

    workers: int | None = None  # --workers: settings run at once (None: the core count)
    executor: str = "process"  # --executor: "process" or "ray"
    cache: Any = True  # --cache/--no-cache: reuse results by content hash (or a sweep.run.ResultCache to use)


def parse_input_shapes(specs: list[str] | None) -> dict[str, tuple[int, ...]]:
    """--input-shape's values as `input_shapes`: `["input_1:1,49,10,1"]` -> {"input_1": (1, 49, 10, 1)}. The name
    may itself contain ':'."""
    out: dict[str, tuple[int, ...]] = {}
    for spec in specs or []:
        name, sep, dims = spec.rpartition(":")
        try:
            shape = tuple(int(d) for d in dims.split(","))
        except ValueError:
            shape = ()
        if not sep or not name or not shape or min(shape) < 1:
            raise TinyaotError(f"--input-shape {spec!r} is not NAME:D1,D2,... with positive integers")
        out[name] = shape
    return out


GROUPS = ("compile", "quantization", "verification", "output", "sweep")


@dataclass(frozen=True)
class Options:
    """One tinyaot run's options (see the module docstring). `Options()` is every default."""

    compile: CompileOptions = field(default_factory=CompileOptions)
    quantization: QuantizationOptions = field(default_factory=QuantizationOptions)
    compression: CompressionOptions | None = None  # --prune, --clusters, ..., --compression SPEC
    verification: VerificationOptions = field(default_factory=VerificationOptions)
    output: OutputOptions = field(default_factory=OutputOptions)
    sweep: SweepOptions = field(default_factory=SweepOptions)

    def __post_init__(self):
        object.__setattr__(self, "compression", CompressionOptions.coerce(self.compression))

    @classmethod
    def of(cls, options: Options | None = None, /, **keywords) -> Options:
        """`options` (None: the defaults) with the flat `keywords` set: any field name of any group, or
        `compression` (CompressionOptions, a dict of its fields or a spec file path). An unknown name is a
        TypeError, as an unknown keyword argument is."""
        return (options if options is not None else cls()).with_(**keywords)

    def with_(self, **keywords) -> Options:
        """A copy with the flat `keywords` changed (see `of`)."""
        if not keywords:
            return self
        unknown = sorted(set(keywords) - set(KEYWORDS))
        if unknown:
            raise TypeError(f"unknown option(s) {', '.join(unknown)}; options are {', '.join(sorted(KEYWORDS))}")
        changes: dict[str, Any] = {}
        if "compression" in keywords:
            changes["compression"] = keywords.pop("compression")
        for group in GROUPS:
            mine = {k: v for k, v in keywords.items() if KEYWORDS[k] == group}
            if mine:
                changes[group] = replace(getattr(self, group), **mine)
        return replace(self, **changes)


def _keywords() -> dict[str, str]:
    """flat option name -> its group ("compression" for the compression options object itself)."""
    out = {"compression": "compression"}
    for group in GROUPS:
        for f in fields(Options.__dataclass_fields__[group].default_factory()):
            assert f.name not in out, f"option name {f.name} appears in two groups"
            out[f.name] = group
    return out


KEYWORDS = _keywords()

__all__ = ["CompileOptions", "CompressionOptions", "Echo", "KEYWORDS", "OutputOptions", "Options",
           "QuantizationOptions", "SweepOptions", "VerificationOptions", "parse_input_shapes", "silent"]
