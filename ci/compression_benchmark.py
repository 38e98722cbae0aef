"""Compression benchmark: every compression setting of every model, its top-1, bytes and speed on the boards.

    .venv/bin/python ci/compression_benchmark.py [--models kws_dscnn,ad_fc_autoencoder,...]
        [--boards mps2-an386,mps3-an547] [--settings int8,prune0.5_block,...] [--workers N] [--readme]

Models: every labelled model of ../shared and of tests/models (the splits of ci/accuracy_comparison.py:
ci/datasets.py for the shared ones, the first 100 / last 200 samples of a tests/models data file), and the two
unlabelled shared models the speed targets name (vww_mobilenetv1_025, ad_fc_autoencoder: no top-1, their
calibration inputs from ci/datasets.py). Settings: SETTINGS below (--prune 0.5 in both sparsity patterns).

Per model and board, a labelled model runs `tinyaot sweep` (tinyaot.sweep.run_sweep: top-1 of the host-compiled
C as `tinyaot evaluate` measures it, the setting deployed and verified under QEMU: weights as stored, flash from
arm-none-eabi-size, instructions per inference; results cached by content hash, a rerun is fast); an unlabelled
one `tinyaot deploy` (tinyaot.api.deploy, verified under QEMU). Every number is against int8 of the same model on
the same board: instructions ratio and weights ratio.

Targets (issue 20; checked on kws_dscnn, ic_resnet8, vww_mobilenetv1_025, ad_fc_autoencoder): instructions at most
TARGETS[setting] x int8's, and weights at --prune 0.5 at most 0.60 x int8's. A row fails (exit 1) when a setting
does not verify under QEMU or does not build; a missed target is printed as such (and fails with --strict).
Writes ci/compression_benchmark.md; --readme also puts the table between `<!-- compression-benchmark:begin -->`
and `<!-- compression-benchmark:end -->` in README.md.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "ci"))

from ci import datasets  # noqa: E402
from ci.accuracy_comparison import all_models, splits  # noqa: E402
from tinyaot.api import deploy  # noqa: E402
from tinyaot.errors import TinyaotError  # noqa: E402
from tinyaot.options import Options  # noqa: E402
from tinyaot.sweep.grid import Config  # noqa: E402
from tinyaot.sweep.sweep import run_sweep  # noqa: E402

SETTINGS = [
    Config("int8", {}),
    Config("prune0.5_block", {"prune": 0.5, "prune_pattern": "block"}),
    Config("prune0.6_block", {"prune": 0.6, "prune_pattern": "block"}),
    # the speed form that keeps accuracy (h20i): convolutions in 2x1 blocks, fully connected 4x4, depthwise dense-run
    Config("prune0.5_block2x1", {"prune": 0.5, "prune_pattern": "block2x1"}),
    Config("prune0.6_block2x1", {"prune": 0.6, "prune_pattern": "block2x1"}),
    # end-to-end distillation over block masks (--prune-method distill, not the default; its masks: obs's)
    Config("prune0.5_block_distill", {"prune": 0.5, "prune_pattern": "block", "prune_method": "distill"}),
    # the obs masks and fit, then distillation with those masks (h20j): what keeps --prune 0.6 above its line
    Config("prune0.6_block2x1_distill", {"prune": 0.6, "prune_pattern": "block2x1", "prune_method": "distill"}),
    Config("prune0.5", {"prune": 0.5}),
    Config("prune0.6", {"prune": 0.6}),
    Config("int4", {"weight_bits": 4}),
    Config("clusters16", {"clusters": 16}),
    Config("clusters32", {"clusters": 32}),
    Config("channels0.25", {"prune_channels": 0.25}),
    # the channel choice, allocation and refit of channels0.25, then distillation to the dense model's logits and
    # feature maps (h20r): the recipe for ic_resnet8's 0.25 line
    Config("channels0.25_distill", {"prune_channels": 0.25, "prune_method": "distill"}),
]
UNLABELLED = ["vww_mobilenetv1_025", "ad_fc_autoencoder"]
SPEED_MODELS = ("kws_dscnn", "ic_resnet8", "vww_mobilenetv1_025", "ad_fc_autoencoder")
# instructions at most this many times int8's (issue 20), on the SPEED_MODELS
TARGETS = {"prune0.5_block": 0.85, "prune0.5_block2x1": 0.85, "int4": 1.10, "clusters16": 1.10, "clusters32": 1.25}
WEIGHTS_TARGET = ("prune0.5_block2x1", 0.60)  # the speed form (README: block2x1 bitmaps, h20k)
BOARDS = ("mps2-an386", "mps3-an547")
# issue 20's accuracy lines: (model, setting) -> (top-1 at least, in %, or None; points below int8 at most, or None)
ACCURACY_LINES = {
    ("kws_dscnn", "prune0.5"): (86.0, None), ("kws_dscnn", "prune0.5_block2x1"): (86.0, None),
    ("kws_dscnn", "prune0.5_block"): (86.0, None), ("kws_dscnn", "prune0.5_block_distill"): (86.0, None),
    ("kws_dscnn", "prune0.6"): (78.0, None), ("kws_dscnn", "prune0.6_block2x1_distill"): (78.0, None),
    ("kws_dscnn", "prune0.6_block2x1"): (78.0, None), ("kws_dscnn", "prune0.6_block"): (78.0, None),
    ("kws_dscnn", "int4"): (None, 0.5), ("kws_dscnn", "clusters16"): (None, 0.5),
    ("ic_resnet8", "prune0.5"): (85.0, None), ("ic_resnet8", "prune0.5_block2x1"): (85.0, None),
    ("ic_resnet8", "prune0.5_block"): (85.0, None), ("ic_resnet8", "int4"): (87.0, None),
    ("ic_resnet8", "channels0.25"): (75.0, None), ("ic_resnet8", "channels0.25_distill"): (75.0, None)}
# Rows of forms the README does not recommend for their line (4x4 blocks, and block2x1 at 0.6 without distill, the
# recipe there): their accuracy is listed under the line for information ("other form"), not as a pass or a miss.
# Each line is judged on the default form (the flag alone) and on the speed form (block2x1, + distill at 0.6).
OTHER_FORMS = {("kws_dscnn", "prune0.5_block"), ("kws_dscnn", "prune0.5_block_distill"),
               ("kws_dscnn", "prune0.6_block"), ("kws_dscnn", "prune0.6_block2x1"), ("ic_resnet8", "prune0.5_block")}
README_BEGIN, README_END = "<!-- compression-benchmark:begin -->", "<!-- compression-benchmark:end -->"


def measure_labelled(name: str, model: Path, data: Path | None, board: str, settings: list[Config], tmp: Path,
                     workers: int | None) -> dict[str, dict]:
    cal, ev, *_ = splits(name, data, tmp)
    r = run_sweep(model, board, cal, ev, tmp / f"sweep_{name}_{board}", settings,
                  Options.of(workers=workers, quiet=True))
    return {c["name"]: c for c in r["configs"]}


def measure_unlabelled(name: str, board: str, settings: list[Config], tmp: Path) -> dict[str, dict]:
    cal = datasets.write_calibration(name, tmp)
    out = {}
    for c in settings:
        row = {"name": c.name, "top1": None, "error": None}
        try:
            r = deploy(datasets.model_path(name), board, cal, tmp / f"{name}_{board}_{c.name}",
                       compression=c.flags or None).report
            row.update(weights_bytes=r["memory"]["weights_bytes"], flash_bytes=r["memory"]["flash_bytes"],
                       arena_bytes=r["memory"]["arena_bytes"], instructions=r["verify"]["instructions"],
                       verified=bool(r["verify"]["outputs_match"]))
        except TinyaotError as exc:
            row["error"] = str(exc).splitlines()[0]
        out[c.name] = row
    return out


def commit_of(root: Path) -> str:
    """The short commit of `root`'s checkout (+ "-dirty" with uncommitted changes), or "?" outside git."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return head + ("-dirty" if dirty else "")


def _ratio(a, b) -> str:
    return "-" if a is None or not b else f"{a / b:.3f}"


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.2f}"


def table(results: dict, boards: list[str], settings: list[Config]) -> tuple[str, list[str], list[str]]:
    """The markdown table, the failed rows, the missed targets."""
    head = "| model | setting | top-1 % | weights B | weights vs int8 |" + "".join(
        f" instructions {b} | vs int8 |" for b in boards) + "".join(f" flash B {b} |" for b in boards) + " commit |"
    sep = "|---" * (6 + 3 * len(boards)) + "|"
    lines, failed, missed = [head, sep], [], []
    for model, per_board in results.items():
        base = {b: per_board.get(b, {}).get("int8", {}) for b in boards}  # a board not measured: {}
        for c in settings:
            rows = {b: per_board.get(b, {}).get(c.name) for b in boards}
            b0 = next((b for b in boards if rows[b]), None)
            if b0 is None:
                continue
            first = rows[b0]
            cells = [model, f"`{c.command_line}`" if c.flags else "int8", _pct(first.get("top1")),
                     f"{first.get('weights_bytes', 0):,}" if first.get("weights_bytes") else "-",
                     _ratio(first.get("weights_bytes"), base[b0].get("weights_bytes"))]
            for b in boards:
                r = rows[b] or {}
                cells += [f"{r['instructions']:,}" if r.get("instructions") else "-",
                          _ratio(r.get("instructions"), base[b].get("instructions"))]
                if r.get("error") or (r and not r.get("verified", False)):
                    failed.append(f"{model} {c.name} {b}: {r.get('error') or 'not verified'}")
                ratio = None if not r.get("instructions") or not base[b].get("instructions") else \
                    r["instructions"] / base[b]["instructions"]
                if model in SPEED_MODELS and c.name in TARGETS and ratio is not None and ratio > TARGETS[c.name]:
                    missed.append(f"{model} {c.name} on {b}: {ratio:.3f}x int8's instructions > {TARGETS[c.name]}")
            cells += [f"{(rows[b] or {}).get('flash_bytes', 0):,}" if (rows[b] or {}).get("flash_bytes") else "-"
                      for b in boards]
            cells.append(", ".join(sorted({(rows[b] or {}).get("commit", "?") for b in boards if rows[b]})))
            if model in SPEED_MODELS and c.name == WEIGHTS_TARGET[0] and first.get("weights_bytes"):
                w = first["weights_bytes"] / base[b0]["weights_bytes"]
                if w > WEIGHTS_TARGET[1]:
                    missed.append(f"{model} {c.name}: weights {w:.3f}x int8's > {WEIGHTS_TARGET[1]}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines), failed, missed


def done_when(results: dict, boards: list[str]) -> str:
    """Issue 20's done-when lines as a table: line, figure, pass/miss (rows not measured are left out)."""
    rows = ["| line | figure | |", "|---|---|---|"]

    def add(line: str, figure: str, ok: bool, other: bool = False) -> None:
        status = ("other form, meets the line" if ok else "other form, below the line") if other else \
            ("pass" if ok else "miss")
        rows.append(f"| {line} | {figure} | {status} |")

    def cmd(name: str) -> str:
        return next((f"`{c.command_line}`" if c.flags else "int8" for c in SETTINGS if c.name == name), name)

    for (model, name), (least, below) in ACCURACY_LINES.items():
        per_board = results.get(model, {})
        r = next((per_board[b][name] for b in boards if per_board.get(b, {}).get(name, {}).get("top1") is not None),
                 None)
        base = next((per_board[b]["int8"] for b in boards if per_board.get(b, {}).get("int8", {}).get("top1")
                     is not None), None)
        if r is None or (below is not None and base is None):
            continue
        other = (model, name) in OTHER_FORMS
        if least is not None:
            add(f"{model} {cmd(name)} top-1 >= {least:g} %", f"{100 * r['top1']:.2f} %", 100 * r["top1"] >= least,
                other)
        else:
            drop = 100 * (base["top1"] - r["top1"])
            add(f"{model} {cmd(name)} within {below:g} points of int8", f"{100 * r['top1']:.2f} % (int8 "
                f"{100 * base['top1']:.2f} %)", drop <= below, other)
    for model in SPEED_MODELS:
        per_board = results.get(model, {})
        for name, limit in TARGETS.items():
            for b in boards:
                r, base = per_board.get(b, {}).get(name, {}), per_board.get(b, {}).get("int8", {})
                if r.get("instructions") and base.get("instructions"):
                    x = r["instructions"] / base["instructions"]
                    add(f"{model} {cmd(name)} on {b}: instructions <= {limit:g}x int8",
                        f"{r['instructions']:,} / {base['instructions']:,} = {x:.3f}x", x <= limit)
        name, limit = WEIGHTS_TARGET
        b0 = next((b for b in boards if per_board.get(b, {}).get(name, {}).get("weights_bytes")), None)
        if b0 is not None and per_board[b0].get("int8", {}).get("weights_bytes"):
            w, w0 = per_board[b0][name]["weights_bytes"], per_board[b0]["int8"]["weights_bytes"]
            add(f"{model} {cmd(name)}: weights <= {limit:g}x int8", f"{w:,} / {w0:,} B = {w / w0:.3f}x",
                w / w0 <= limit)
    measured = [r for per_board in results.values() for rows_ in per_board.values() for r in rows_.values()]
    bad = [r for r in measured if r.get("error") or not r.get("verified", False)]
    add("every compressed setting verifies under QEMU", f"{len(measured) - len(bad)} of {len(measured)} rows",
        not bad)
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", help="comma-separated model names (default: all)")
    ap.add_argument("--boards", default=",".join(BOARDS))
    ap.add_argument("--settings", help="comma-separated setting names (default: all of SETTINGS)")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--out", default=str(ROOT / "ci" / "compression_benchmark.md"))
    ap.add_argument("--readme", action="store_true")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--merge", action="store_true",
                    help="keep the rows of --out's .json that this run does not measure (each row names its commit)")
    ap.add_argument("--commit", default=None, help="the commit the rows are measured on (default: ROOT's HEAD)")
    args = ap.parse_args()
    boards = args.boards.split(",")
    settings = SETTINGS if not args.settings else [c for c in SETTINGS if c.name in args.settings.split(",")]
    if settings and settings[0].name != "int8":
        settings = [SETTINGS[0]] + settings  # the ratios need int8
    models = [(n, m, d) for n, m, d in all_models()] + [(n, None, None) for n in UNLABELLED]
    if args.models:
        wanted = args.models.split(",")
        models = [m for m in models if m[0] in wanted]
    out_json = Path(args.out).with_suffix(".json")
    results: dict[str, dict] = json.loads(out_json.read_text()) if args.merge and out_json.exists() else {}
    commit = args.commit or commit_of(ROOT)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="tinyaot-compression-") as tmp_name:
        tmp = Path(tmp_name)
        for name, model, data in models:
            results.setdefault(name, {})
            for b in boards:
                t = time.time()
                try:
                    if model is None:
                        rows = measure_unlabelled(name, b, settings, tmp)
                    else:
                        rows = measure_labelled(name, model, data, b, settings, tmp, args.workers)
                except TinyaotError as exc:
                    rows = {c.name: {"name": c.name, "error": str(exc).splitlines()[0]} for c in settings}
                for row in rows.values():
                    row["commit"] = commit
                results[name].setdefault(b, {}).update(rows)
                out_json.write_text(json.dumps(results, indent=1, default=str) + "\n")  # progress survives a stop
                print(f"{name} on {b}: {time.time() - t:.0f} s", file=sys.stderr, flush=True)
    if args.merge:  # the table shows every setting measured so far, in SETTINGS order
        seen = {n for per_board in results.values() for rows in per_board.values() for n in rows}
        settings = [c for c in SETTINGS if c.name in seen]
        # and every board measured so far (a run on one board keeps the other's columns)
        boards = [b for b in BOARDS if any(b in per_board for per_board in results.values())] + \
            [b for b in boards if b not in BOARDS]
    text, failed, missed = table(results, boards, settings)
    made = f"`.venv/bin/python ci/compression_benchmark.py` ({time.time() - t0:.0f} s)"
    if args.merge:
        made = "`.venv/bin/python ci/compression_benchmark.py --merge`: rows of several runs, each one's commit last"
    header = (f"Made by {made}. Top-1 on the "
              "held-out splits of ci/accuracy_comparison.py; weights as stored (codebooks, indices included); "
              "instructions per inference under QEMU, every row verified (outputs == the numpy reference); "
              "ratios against int8 of the same model on the same board.\n\n")
    body = header + text + "\n\nIssue 20's done-when lines on these rows:\n\n" + done_when(results, boards) + "\n"
    if missed:
        body += "\nTargets missed:\n" + "".join(f"- {m}\n" for m in missed)
    Path(args.out).write_text(body)
    out_json.write_text(json.dumps(results, indent=1, default=str) + "\n")
    print(body)
    if args.readme:
        readme = ROOT / "README.md"
        s = readme.read_text()
        if README_BEGIN in s and README_END in s:
            s = s[:s.index(README_BEGIN) + len(README_BEGIN)] + "\n" + body + s[s.index(README_END):]
            readme.write_text(s)
    for f in failed:
        print(f"FAILED: {f}", file=sys.stderr)
    return 1 if failed or (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
