"""Regression figures for every shared reference model: deploy (verified under QEMU) and accuracy.

    python ci/figures.py [--out DIR] [--models kws_dscnn,sww_dscnn,...] [--boards mps2-an500,stm32]

For each model in ../shared/models it deploys on each board (default: mps2-an500, the 4 MB Cortex-M7, and stm32,
the 128 KB STM32F405; a model that does not fit a board gets a row with deploy's one-line refusal), and runs
`evaluate` on the held-out labelled samples where there are any (ci/datasets.py has the splits). It prints a
markdown table and writes it to ci/figures.md. This is a script, not a test: it measures. Every number in the
table is read from deploy's report.json or evaluate's result of this run. It exits 1 when a row failed: a deploy
that did not verify (or failed otherwise; a model refused as too big for a board is a measurement, not a failure),
or an evaluation that failed or whose host C differed from the numpy reference.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ci import datasets  # noqa: E402
from tinyaot.api import deploy, evaluate  # noqa: E402
from tinyaot.errors import TinyaotError  # noqa: E402

# TensorFlow Lite Micro's activation arena for the authors' int8 TFLite model of the same network
# (../shared/models/tflite_int8): the "Arena allocation head" that tflite_micro's Interpreter.print_allocations()
# reports (the non-persistent tensor arena), measured with the tflite-micro PyPI package. It is not a project
# dependency, so the figures are recorded here. mnist8 and the sine model have no int8 TFLite twin in ../shared.
TFLM_ARENA = {"kws_dscnn": 16000, "vww_mobilenetv1_025": 73728, "ic_resnet8": 49152, "ad_fc_autoencoder": 768,
              "sww_dscnn": 6656, "ic_resnet8_large": 122880}

BOARDS = ["mps2-an500", "stm32"]
COLUMNS = ["model", "board", "arena B", "lower bound B", "TFLM arena B", "weights B", "flash B",
           "instructions/inference", "stack high water B", "verify", "float top-1", "tinyaot int8 top-1",
           "onnxruntime int8 top-1"]


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f} %"


def _num(v) -> str:
    return "-" if v is None else f"{v:,}"


def deploy_row(model: str, board: str, cal: Path, out: Path) -> dict:
    """The row's figures; `failed` is set unless it verified (or the model does not fit the board)."""
    try:
        r = deploy(datasets.model_path(model), board, cal, out / f"{model}_{board}").report
    except TinyaotError as exc:
        too_big = str(exc).startswith("model too big for board")
        return {"verify": f"{'not deployed' if too_big else 'FAIL'}: {exc}", "failed": not too_big}
    m, v = r["memory"], r["verify"]
    ok = bool(v["ran"] and v["outputs_match"] and v["max_abs_diff_vs_onnxruntime"] <= 1)
    return {"arena": m["arena_bytes"], "lower": m["arena_lower_bound_bytes"], "weights": m["weights_bytes"],
            "flash": m["flash_bytes"], "insns": v["instructions"], "stack": v["stack_high_water_bytes"],
            "verify": (f"{'pass' if ok else 'FAIL'}: == reference on {v['samples']} samples, worst layer "
                       f"{v['max_abs_diff_vs_onnxruntime']} LSB vs onnxruntime"), "failed": not ok}


def evaluate_row(model: str, cal: Path, data: Path | None) -> tuple[dict, str | None]:
    """evaluate's result (empty without labelled data) and why it failed, or None."""
    if data is None:
        return {}, None
    try:
        acc = evaluate(datasets.model_path(model), cal, data)
    except TinyaotError as exc:
        return {}, f"evaluate failed: {exc}"
    if not acc.get("host_c_matches_reference"):
        return acc, "evaluate: the host-compiled C differs from the numpy reference"
    return acc, None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="keep the deployed folders here (default: a temporary folder)")
    ap.add_argument("--models", default=",".join(datasets.ALL_MODELS))
    ap.add_argument("--boards", default=",".join(BOARDS))
    ap.add_argument("--table", type=Path, default=Path(__file__).resolve().parent / "figures.md")
    args = ap.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    boards = [b for b in args.boards.split(",") if b]
    with tempfile.TemporaryDirectory(prefix="tinyaot-figures-") as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        rows, failures = [], []
        for model in models:
            t0 = time.monotonic()
            cal = datasets.write_calibration(model, out)
            data = datasets.write_evaluation(model, out)
            acc, acc_failure = evaluate_row(model, cal, data)
            if acc_failure:
                failures.append(f"{model}: {acc_failure}")
            for board in boards:
                d = deploy_row(model, board, cal, out)
                if d["failed"]:
                    failures.append(f"{model} on {board}: {d['verify']}")
                rows.append([model, board, _num(d.get("arena")), _num(d.get("lower")), _num(TFLM_ARENA.get(model)),
                             _num(d.get("weights")), _num(d.get("flash")), _num(d.get("insns")),
                             _num(d.get("stack")), d["verify"], _pct(acc.get("float_top1")),
                             _pct(acc.get("int8_top1")), _pct(acc.get("onnxruntime_int8_top1"))])
            samples = f"{acc['samples']} held-out samples" if acc else "no labelled data"
            print(f"{model}: {time.monotonic() - t0:.1f} s ({samples})", file=sys.stderr)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    notes = ["",
             "Calibration and evaluation splits: ci/datasets.py (first 100 samples calibrate, 15 for sww01; top-1 on "
             "the rest). vww_mobilenetv1_025 is calibrated on CIFAR-10 photos resized to 96x96 (a stand-in, not VWW "
             "data) and ad_fc_autoencoder on log-mel windows: neither has labels here. Instructions, stack and the "
             "outputs come from QEMU runs of the firmware; TFLM arena: TensorFlow Lite Micro's activation arena for "
             "the authors' int8 model."]
    text = "\n".join(lines + notes) + "\n"
    print(text)
    args.table.write_text(text)
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
