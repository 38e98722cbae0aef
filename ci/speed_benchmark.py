"""Issue 10's speed table: instructions per inference of the four MLPerf Tiny models on four Cortex-M cores under
QEMU, against CMSIS-NN on the same core, with instructions per MAC per layer class, kernel code bytes and flash.

Each row is `tinyaot.api.deploy` (the same call as `tinyaot deploy`): the firmware is built and verified under QEMU
(outputs == the numpy reference bit for bit, every layer within 1 LSB of onnxruntime), and the instructions are
those the QEMU plugin counts for the first calibration sample (tinyaot_mark segments). Instruction counts, not
cycles: an SMLAD or an MVE VMLADAVA counts as one.

CMSIS-NN's figures are the yardstick of ../shared/notes/cmsis-nn-instructions.md (CMSIS-NN 99f736a6, -O2, kernel
calls only, the authors' int8 TFLite layer lists, measured the same way under QEMU); they are constants below.

Code bytes: the kernel files a deploy writes (tinyaot_*.c in the folder), each compiled on its own with the
deploy's flags for the board, text + data as arm-none-eabi-size reports them (before the link's section garbage
collection); the model's schedule, its weights and parameters, the harness and the HAL are not in it. Flash: the
whole verification firmware (arm-none-eabi-size, text + data; the harness, HAL and newlib included).

The variant check (speed rows, unless --no-variant-check): every layer with more than one kernel variant has each
variant measured under QEMU (`--tune`'s rounds, tinyaot/pipeline/tune.py; cached), and a layer whose chosen variant
(the cost model's, within what the arena allows) runs more than 2x the instructions of the best bit-exact variant
measured for it is flagged: no layer left on a slow kernel by mistake.

A benchmark, not a test: it takes minutes. Exit status 1 when a row fails to deploy or verify, or a layer is
flagged by the variant check.

    .venv/bin/python ci/speed_benchmark.py [--models kws_dscnn ...] [--boards mps2-an386 ...]
                                           [--optimize speed|size|both] [--tune] [--no-variant-check]
                                           [--out ci/speed_benchmark.md]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from datasets import model_path, write_calibration  # noqa: E402

from tinyaot.api import Options, compile_model, deploy  # noqa: E402
from tinyaot.boards import load_board  # noqa: E402
from tinyaot.errors import TinyaotError  # noqa: E402
from tinyaot.pipeline.tune import tune_variants  # noqa: E402
from tinyaot.toolchain.firmware import compile_flags, find_tool  # noqa: E402

MODELS = ["kws_dscnn", "ic_resnet8", "vww_mobilenetv1_025", "ad_fc_autoencoder"]
# also measurable with --models (no CMSIS-NN yardstick or before-figures: those columns show "-")
EXTRA_MODELS = ["ic_resnet8_large", "mnist8_opset13", "sww_dscnn"]
# the variant check: a chosen variant more than this many times the best measured one is flagged
SLOW_VARIANT = 2.0
# board -> the column name of the yardstick note
BOARDS = {"mps2-an386": "M4", "mps2-an500": "M7", "mps2-an385": "M3", "mps3-an547": "M55"}

# CMSIS-NN instructions per inference (../shared/notes/cmsis-nn-instructions.md, first table).
CMSIS_NN = {
    "kws_dscnn": {"M4": 7_575_992, "M7": 7_593_056, "M3": 10_529_586, "M55": 1_810_757},
    "ic_resnet8": {"M4": 29_778_364, "M7": 29_955_808, "M3": 41_840_753, "M55": 4_905_106},
    "vww_mobilenetv1_025": {"M4": 23_766_282, "M7": 23_874_380, "M3": 31_949_336, "M55": 6_547_707},
    "ad_fc_autoencoder": {"M4": 579_478, "M7": 579_498, "M3": 952_360, "M55": 146_820},
}
# Before issue 10's kernels (ci/speed_benchmark_before.md, this script on commit b0a953e, every layer generic):
# (instructions, firmware flash bytes). Issue 10 allows flash at most 10 % above these at default settings.
BEFORE = {
    "kws_dscnn": {"M4": (9_269_367, 50_260), "M7": (9_226_180, 50_260), "M3": (13_762_924, 49_804),
                  "M55": (9_298_323, 50_916)},
    "ic_resnet8": {"M4": (28_545_264, 101_596), "M7": (28_475_521, 101_660), "M3": (46_607_948, 101_164),
                   "M55": (28_740_632, 102_324)},
    "vww_mobilenetv1_025": {"M4": (28_414_340, 265_756), "M7": (28_608_228, 265_820), "M3": (39_645_664, 265_336),
                            "M55": (28_660_996, 266_436)},
    "ad_fc_autoencoder": {"M4": (586_189, 294_204), "M7": (585_382, 294_204), "M3": (1_348_212, 293_876),
                          "M55": (556_347, 294_336)},
}
# Issue 10's targets: at most this fraction of CMSIS-NN's instructions.
TARGET = {"M4": 0.80, "M7": 0.80, "M3": 1.00, "M55": 1.00}
# The layer classes of the per-class table, in this order (report.json's per-layer `class`).
CLASSES = ["conv 1x1", "depthwise", "conv", "fully connected", "add", "pooling", "softmax"]
SHORT = {"conv 1x1": "1x1", "depthwise": "dw", "conv": "conv", "fully connected": "fc", "add": "add",
         "pooling": "pool", "softmax": "softmax"}


def kernel_code_bytes(folder: Path, report: dict, board_name: str) -> int:
    """text + data of the folder's kernel files, each compiled alone with the board's deploy flags."""
    gcc, size = find_tool("arm-none-eabi-gcc"), find_tool("arm-none-eabi-size")
    flags = compile_flags(load_board(board_name))
    total = 0
    with tempfile.TemporaryDirectory(prefix="speed-objs-") as tmp:
        for name in report["files"]["kernels"]:
            if not name.endswith(".c"):
                continue
            obj = Path(tmp) / (name[:-2] + ".o")
            subprocess.run([gcc, *flags, f"-I{folder}", "-c", str(folder / name), "-o", str(obj)], check=True,
                           capture_output=True, timeout=120)
            out = subprocess.run([size, "-B", "-d", str(obj)], check=True, capture_output=True, text=True,
                                 timeout=60).stdout.splitlines()[1].split()
            total += int(out[0]) + int(out[1])
    return total


def per_class(report: dict) -> dict[str, tuple[int, int, int]]:
    """class -> (instructions, MACs, output elements) summed over the layers with code."""
    out: dict[str, list[int]] = {}
    for layer in report["layers"]:
        if layer.get("instructions") is None:
            continue
        c = layer.get("class") or layer["op"].lower()
        elems = 1
        for d in layer["output_shape"]:
            elems *= d
        acc = out.setdefault(c, [0, 0, 0])
        acc[0] += layer["instructions"]
        acc[1] += layer["macs"]
        acc[2] += elems
    return {k: tuple(v) for k, v in out.items()}


def class_cell(figures: dict[str, tuple[int, int, int]]) -> str:
    """"1x1 2.05 · dw 7.68 · ..." (instructions per MAC; per output element for layers without MACs)."""
    parts = []
    for c in CLASSES + sorted(set(figures) - set(CLASSES)):
        if c not in figures:
            continue
        insns, macs, elems = figures[c]
        parts.append(f"{SHORT.get(c, c)} {insns / macs:.2f}" if macs else f"{SHORT.get(c, c)} {insns / elems:.1f}/el")
    return " · ".join(parts)


def variant_check(model: str, board: str, cal: Path) -> list[dict]:
    """Every multi-variant layer's variants measured under QEMU (tune rounds, cached): the layers whose chosen
    variant runs over SLOW_VARIANT x the best bit-exact one measured for it."""
    b = load_board(board)
    target = b.target("speed")
    compiled = compile_model(model_path(model), cal, target=target)
    section = tune_variants(compiled, b, target, Options.of(tune=True)).section
    flagged = []
    for layer in section["layers"]:
        measured = {v: n for v, n in layer["instructions"].items() if n is not None and v not in layer["rejected"]}
        chosen = measured.get(layer["default"])
        best = min(measured, key=measured.get) if measured else None
        if chosen is not None and best is not None and chosen > SLOW_VARIANT * measured[best]:
            flagged.append({"layer": layer["name"], "op": layer["op"], "chosen": layer["default"],
                            "chosen_instructions": chosen, "best": best, "best_instructions": measured[best]})
    return flagged


def run_row(model: str, board: str, optimize: str, tune: bool, cal_dir: Path, work: Path, samples: int,
            check: bool = False) -> dict:
    core = BOARDS[board]
    row = {"model": model, "board": board, "core": core, "optimize": optimize, "tune": tune}
    t0 = time.time()
    try:
        out = work / f"{model}_{board}_{optimize}{'_tuned' if tune else ''}"
        r = deploy(model_path(model), board, write_calibration(model, cal_dir), out, verify_samples=samples,
                   optimize=optimize, tune=tune).report
    except TinyaotError as exc:
        row.update(ok=False, error=str(exc).splitlines()[0])
        return row
    v = r["verify"]
    insns = v["instructions"]
    cmsis = CMSIS_NN.get(model, {}).get(core)
    row.update(ok=bool(v["outputs_match"]) and v["max_abs_diff_vs_reference"] == 0, instructions=insns,
               macs=r["macs"], ratio=insns / cmsis if insns and cmsis else None,
               flash=r["memory"]["flash_bytes"], weights=r["memory"]["weights_bytes"],
               params=r["memory"]["params_bytes"], code=kernel_code_bytes(out, r, board),
               classes=per_class(r), stack=v["stack_high_water_bytes"], arena=r["memory"]["arena_bytes"],
               arena_lower_bound=r["memory"].get("layer_by_layer_lower_bound_bytes",
                                                 r["memory"]["arena_lower_bound_bytes"]),
               variants=sorted({layer.get("variant", "generic") for layer in r["layers"]}),
               tuning=r.get("tuning"), seconds=round(time.time() - t0, 1))
    if check and optimize == "speed":
        row["slow_layers"] = variant_check(model, board, write_calibration(model, cal_dir))
    return row


def fmt(n) -> str:
    return "-" if n is None else f"{n:,}"


def markdown(rows: list[dict], args) -> str:
    lines = [f"Instructions per inference under QEMU (first calibration sample), tinyaot vs CMSIS-NN on the same core "
             f"(../shared/notes/cmsis-nn-instructions.md). `--optimize {args.optimize}`"
             f"{', --tune' if args.tune else ''}. Written by `ci/speed_benchmark.py`.", "",
             "| model | core (board) | optimize | instructions | x CMSIS-NN | target | x before | per MAC "
             "| kernel code B "
             "| flash B | flash vs before | arena B (layer-by-layer bound) | stack B | verified |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if not r.get("instructions"):
            lines.append(f"| {r['model']} | {r['core']} ({r['board']}) | {r['optimize']} | - | - | "
                         f"{TARGET[r['core']]:.2f} | - | - | - | - | - | - | - "
                         f"| **failed**: {r.get('error', 'no count')} |")
            continue
        ratio = r["ratio"]
        mark = "" if ratio is None or ratio <= TARGET[r["core"]] else " (over)"
        before_insns, before_flash = BEFORE.get(r["model"], {}).get(r["core"], (None, None))
        x_cmsis = "-" if ratio is None else f"{ratio:.2f}{mark}"
        x_before = "-" if before_insns is None else f"{r['instructions'] / before_insns:.2f}"
        flash_vs = "-" if before_flash is None else f"{100 * (r['flash'] / before_flash - 1):+.1f} %"
        arena = fmt(r["arena"]) + ("" if r["arena"] == r["arena_lower_bound"] else f" ({fmt(r['arena_lower_bound'])})")
        lines.append(f"| {r['model']} | {r['core']} ({r['board']}) | {r['optimize']}{' tuned' if r['tune'] else ''} "
                     f"| {fmt(r['instructions'])} | {x_cmsis} | {TARGET[r['core']]:.2f} | {x_before} "
                     f"| {r['instructions'] / r['macs']:.2f} | {fmt(r['code'])} | {fmt(r['flash'])} | {flash_vs} "
                     f"| {arena} | {fmt(r['stack'])} | {'yes' if r['ok'] else '**no**'} |")
    lines += ["", "Instructions per MAC by layer class (add, softmax: per output element):", "",
              "| model | core | optimize | per class | variants used |", "|---|---|---|---|---|"]
    for r in rows:
        if r.get("classes"):
            lines.append(f"| {r['model']} | {r['core']} | {r['optimize']}{' tuned' if r['tune'] else ''} "
                         f"| {class_cell(r['classes'])} | {', '.join(r['variants'])} |")
    tuned = [r for r in rows if r.get("tune") and r.get("tuning")]
    if tuned:
        lines += ["", "| model | core | layers tuned | variants measured | rounds | default | tuned |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for r in tuned:
            t = r["tuning"]
            lines.append(f"| {r['model']} | {r['core']} | {t['layers_tuned']} | {t['variants_tried']} | {t['rounds']} "
                         f"| {fmt(t['instructions_default'])} | {fmt(t['instructions_tuned'])} |")
    checked = [r for r in rows if "slow_layers" in r]
    if checked:
        flagged = [(r, f) for r in checked for f in r["slow_layers"]]
        lines += ["", f"Variant check ({len(checked)} speed rows; every variant of every multi-variant layer measured "
                  f"under QEMU): layers whose chosen variant runs over {SLOW_VARIANT:g}x the best variant measured "
                  f"for it: {len(flagged) or 'none'}."]
        if flagged:
            lines += ["", "| model | core | layer | op | chosen | instructions | best | instructions |",
                      "|---|---|---|---|---|---:|---|---:|"]
            lines += [f"| {r['model']} | {r['core']} | {f['layer']} | {f['op']} | {f['chosen']} "
                      f"| {fmt(f['chosen_instructions'])} | {f['best']} | {fmt(f['best_instructions'])} |"
                      for r, f in flagged]
    lines += ["", "x before: against the same row before issue 10's kernels (ci/speed_benchmark_before.md). "
              "Kernel code "
              "B: the folder's kernel files compiled one by one with the deploy's flags, text + data "
              "(arm-none-eabi-size, before link-time section GC). Flash B: the whole verification firmware "
              "(harness, HAL and newlib included). Arena: the planned arena, with the layer-by-layer liveness "
              "bound in brackets where it differs (a patch stage, pipeline/schedule.py, goes below it; no row here "
              "has one: each fits its board's RAM layer by layer). Stack: the high-water mark measured under QEMU."]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=MODELS, choices=MODELS + EXTRA_MODELS)
    ap.add_argument("--boards", nargs="+", default=list(BOARDS), choices=list(BOARDS))
    ap.add_argument("--optimize", choices=["speed", "size", "both"], default="speed")
    ap.add_argument("--tune", action="store_true", help="deploy with --tune (measured variant choice)")
    ap.add_argument("--no-variant-check", action="store_true",
                    help="skip measuring every variant of every layer (the slow-variant check)")
    ap.add_argument("--samples", type=int, default=2, help="calibration samples verified under QEMU per row")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "speed_benchmark.md")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = ap.parse_args()
    modes = ["speed", "size"] if args.optimize == "both" else [args.optimize]
    rows = []
    with tempfile.TemporaryDirectory(prefix="speed-bench-") as tmp:
        cal_dir = Path(tmp) / "cal"
        cal_dir.mkdir()
        for model in args.models:
            for board in args.boards:
                for mode in modes:
                    row = run_row(model, board, mode, args.tune, cal_dir, Path(tmp), args.samples,
                                  check=not args.no_variant_check)
                    rows.append(row)
                    print(f"{model} {board} {mode}: " + (f"{fmt(row['instructions'])} instructions, "
                          f"{row['seconds']} s" if row.get("instructions") else f"FAILED {row.get('error')}")
                          + "".join(f"; SLOW {f['layer']}: {f['chosen']} {f['chosen_instructions']} against "
                                    f"{f['best']} {f['best_instructions']}" for f in row.get("slow_layers", [])),
                          file=sys.stderr, flush=True)
    text = markdown(rows, args)
    print(text)
    args.out.write_text(text)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    failed = [r for r in rows if not r.get("ok") or r.get("slow_layers")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
