"""16x8 activations (issue 12): every shared model deployed with --activation-bits 8 and 16 on one board and verified
under QEMU (outputs == the numpy reference, every layer within 1 LSB of onnxruntime, int16 QDQ for the 16-bit
layers), and the top-1 of float, int8 and 16x8 on the shared evaluation split where there are labels (the splits
of ci/datasets.py; tinyaot.api.evaluate: the generated C, host-compiled, checked against the numpy reference).

A benchmark, not a test: it prints a table and takes a few minutes. Exit status 1 when a row fails: a deploy or
verification, a host C that differs from the reference, or kws_dscnn's 16x8 top-1 more than 0.2 points below float
(issue 12's target).

    .venv/bin/python ci/s16_figures.py [--board mps2-an386] [--models kws_dscnn,...,pt_mbv3_se]

A name from tests/models with a `_data.npz` (pt_mbv3_se: HardSwish, squeeze-and-excitation) is split as
ci/accuracy_comparison.py does: the first 100 samples calibrate, the last 200 evaluate.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from datasets import ALL_MODELS, model_path, write_calibration, write_evaluation  # noqa: E402

from tinyaot.api import deploy, evaluate  # noqa: E402
from tinyaot.errors import TinyaotError  # noqa: E402

TARGETS = {"kws_dscnn": 0.2}  # 16x8 top-1 at most this many points below float
TEST_MODELS = Path(__file__).resolve().parent.parent / "tests" / "models"
TEST_CAL, TEST_EVAL = 100, 200


def _files(m: str, tmp: Path):
    """(model, calibration file, evaluation file or None) of a shared model or a tests/models one."""
    data = TEST_MODELS / f"{m}_data.npz"
    if not data.exists():
        return model_path(m), write_calibration(m, tmp), write_evaluation(m, tmp)
    with np.load(data) as z:
        x, y = z["x"].astype(np.float32), z["y"]
    np.savez(tmp / f"{m}_cal.npz", x=x[:TEST_CAL])
    np.savez(tmp / f"{m}_eval.npz", x=x[-TEST_EVAL:], y=y[-TEST_EVAL:])
    return TEST_MODELS / f"{m}.onnx", tmp / f"{m}_cal.npz", tmp / f"{m}_eval.npz"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--board", default="mps2-an386")
    ap.add_argument("--models", default=",".join(ALL_MODELS))
    args = ap.parse_args()
    failed = []
    print("| model | float | int8 | 16x8 | arena int8 / 16x8 | flash int8 / 16x8 | instructions int8 / 16x8 | "
          "worst layer vs onnxruntime (16x8) |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="tinyaot-s16-") as tmp:
        tmp = Path(tmp)
        for m in args.models.split(","):
            path, cal, data = _files(m, tmp)
            row = {}
            for bits in (8, 16):
                try:
                    r = deploy(path, args.board, cal, tmp / f"{m}_{bits}", activation_bits=bits,
                               optimize="size").report
                    row[bits] = r
                    if data is not None:
                        e = evaluate(path, cal, data, compare_onnxruntime=False, activation_bits=bits)
                        if not e["host_c_matches_reference"]:
                            failed.append(f"{m} {bits}: host C != reference")
                        r["_top1"], r["_float"] = e["int8_top1"], e["float_top1"]
                except TinyaotError as exc:
                    failed.append(f"{m} {bits}: {exc}")
            if len(row) < 2:
                print(f"| {m} | failed | | | | | | |")
                continue
            a, b = row[8], row[16]

            def pct(r, key):
                return f"{100 * r[key]:.2f} %" if key in r else "-"

            if m in TARGETS and "_top1" in b and 100 * (b["_float"] - b["_top1"]) > TARGETS[m] + 1e-9:
                failed.append(f"{m}: 16x8 top-1 {100 * b['_top1']:.2f} % more than {TARGETS[m]} points below float")
            print(f"| {m} | {pct(a, '_float')} | {pct(a, '_top1')} | {pct(b, '_top1')} | "
                  f"{a['memory']['arena_bytes']:,} / {b['memory']['arena_bytes']:,} | "
                  f"{a['memory']['flash_bytes']:,} / {b['memory']['flash_bytes']:,} | "
                  f"{a['verify']['instructions']:,} / {b['verify']['instructions']:,} | "
                  f"{b['verify']['max_abs_diff_vs_onnxruntime']} LSB |", flush=True)
    for f in failed:
        print("FAILED:", f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
