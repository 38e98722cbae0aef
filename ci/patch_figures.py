"""Issue 22's figures: patch-based execution under an arena budget, each row deployed and verified under QEMU
(`tinyaot.api.deploy`, outputs == the numpy reference), against the same model layer by layer.

Rows:
- tests/models/invres96 on stm32 with the default budget (the board's RAM), and on mps2-an386 (the same Cortex-M4,
  4 MB of RAM) layer by layer and with the same budget, for the instructions overhead;
- vww_mobilenetv1_025 on stm32 with --arena-budget 40960 and without (layer by layer);
- torchvision's MobileNetV2 width 0.35 at 64x64 (random weights, seed 0; exported here with torch, which only this
  benchmark needs: `pip install torch torchvision`) with a budget of 40 % of its layer-by-layer bound, and without;
- ic_resnet8_large on mps3-an547 (issue 22 item 4: no layer on a slow kernel).

    .venv/bin/python ci/patch_figures.py [--rows invres96 vww mbv2 resnet8_large] [--out ci/patch_figures.md]

Exit status 1 when a row fails to deploy or verify, or misses its target.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "ci"))
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "models"))

from datasets import model_path, write_calibration  # noqa: E402
from make_invres96 import calibration_images  # noqa: E402

from tinyaot.api import deploy  # noqa: E402
from tinyaot.errors import TinyaotError  # noqa: E402

INVRES = ROOT / "tests" / "models" / "invres96.onnx"


def run(label: str, model: Path, board: str, cal: Path, out: Path, budget: int | None = None) -> dict:
    t0 = time.time()
    try:
        r = deploy(model, board, cal, out, verify_samples=2, arena_budget=budget).report
    except TinyaotError as exc:
        return {"label": label, "board": board, "budget": budget, "ok": False, "error": str(exc).splitlines()[0]}
    m, v = r["memory"], r["verify"]
    p = m["patch"]
    return {"label": label, "board": board, "budget": m["arena_budget_bytes"], "ok": bool(v["outputs_match"]),
            "arena": m["arena_bytes"], "layer_by_layer": m["arena_layer_by_layer_bytes"],
            "layer_by_layer_bound": m["layer_by_layer_lower_bound_bytes"], "instructions": v["instructions"],
            "stage": None if p is None else f"{len(p['layers'])} layers, {p['stripes']} stripes, "
                                            f"{p['macs_recomputed']:,} MACs recomputed",
            "seconds": round(time.time() - t0, 1)}


def mobilenet_v2(dest: Path) -> Path:
    """torchvision's MobileNetV2, width 0.35, random weights (torch seed 0), exported at 1x3x64x64, opset 13.
    (`python ci/patch_figures.py --export-mbv2 FILE` does only this, e.g. with another venv's python.)"""
    import torch
    import torchvision

    torch.manual_seed(0)
    net = torchvision.models.mobilenet_v2(weights=None, width_mult=0.35).eval()
    path = dest / "mobilenet_v2_035_64.onnx"
    torch.onnx.export(net, torch.randn(1, 3, 64, 64), str(path), opset_version=13, input_names=["x"],
                      output_names=["logits"], dynamo=False)
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", nargs="+", default=["invres96", "vww", "mbv2", "resnet8_large"])
    ap.add_argument("--out", type=Path, default=ROOT / "ci" / "patch_figures.md")
    ap.add_argument("--mbv2-onnx", type=Path, default=None, help="the exported MobileNetV2 (else exported here)")
    ap.add_argument("--export-mbv2", type=Path, default=None, help="only export MobileNetV2 to this file")
    args = ap.parse_args()
    if args.export_mbv2 is not None:
        args.export_mbv2.write_bytes(mobilenet_v2(Path(tempfile.mkdtemp())).read_bytes())
        return 0
    rows, checks = [], []
    with tempfile.TemporaryDirectory(prefix="patch-figures-") as tmp:
        tmp = Path(tmp)
        if "invres96" in args.rows:
            cal = tmp / "invres96_cal.npz"
            np.savez(cal, x=calibration_images(16))
            stm = run("invres96", INVRES, "stm32", cal, tmp / "a")
            lbl = run("invres96", INVRES, "mps2-an386", cal, tmp / "b")
            same = run("invres96", INVRES, "mps2-an386", cal, tmp / "c", stm.get("budget"))
            rows += [stm, lbl, same]
            if all(r["ok"] for r in (stm, lbl, same)):
                checks.append(f"invres96 on stm32 verifies in {stm['arena']:,} B "
                              f"(layer by layer {stm['layer_by_layer']:,} B, over its RAM); "
                              f"instructions on the same core with the same budget "
                              f"{same['instructions']:,} against {lbl['instructions']:,} layer by layer "
                              f"({100 * (same['instructions'] / lbl['instructions'] - 1):+.1f} %)")
        if "vww" in args.rows:
            cal = write_calibration("vww_mobilenetv1_025", tmp)
            a = run("vww_mobilenetv1_025", model_path("vww_mobilenetv1_025"), "stm32", cal, tmp / "d", 40960)
            b = run("vww_mobilenetv1_025", model_path("vww_mobilenetv1_025"), "stm32", cal, tmp / "e")
            rows += [a, b]
            if a["ok"] and b["ok"]:
                good = a["arena"] <= 40960 and a["instructions"] <= 1.15 * 17_300_692
                checks.append(f"vww --arena-budget 40960: {a['arena']:,} B, {a['instructions']:,} instructions "
                              f"({100 * (a['instructions'] / 17_300_692 - 1):+.1f} % against 17,300,692): "
                              f"{'pass' if good else 'FAIL'}; without a budget {b['instructions']:,} "
                              f"({'unchanged' if b['instructions'] == 17_300_692 else 'CHANGED'})")
                a["ok"] = a["ok"] and good and b["instructions"] == 17_300_692
        if "mbv2" in args.rows:
            model = args.mbv2_onnx or mobilenet_v2(tmp)
            cal = tmp / "mbv2_cal.npz"
            np.savez(cal, x=np.random.default_rng(0).uniform(-2, 2, (16, 1, 3, 64, 64)).astype(np.float32)[:, 0])
            b = run("mobilenet_v2_0.35_64", model, "mps2-an386", cal, tmp / "f")
            rows.append(b)
            if b["ok"]:
                budget = int(0.4 * b["layer_by_layer_bound"])
                a = run("mobilenet_v2_0.35_64", model, "mps2-an386", cal, tmp / "g", budget)
                rows.append(a)
                if a["ok"]:
                    checks.append(f"MobileNetV2 0.35 at 64x64: {a['arena']:,} B = "
                                  f"{100 * a['arena'] / b['layer_by_layer_bound']:.1f} % of its layer-by-layer bound "
                                  f"{b['layer_by_layer_bound']:,} B; instructions {a['instructions']:,} against "
                                  f"{b['instructions']:,} ({100 * (a['instructions'] / b['instructions'] - 1):+.1f} %)")
        if "resnet8_large" in args.rows:
            cal = write_calibration("ic_resnet8_large", tmp)
            r = run("ic_resnet8_large", model_path("ic_resnet8_large"), "mps3-an547", cal, tmp / "h")
            rows.append(r)
            if r["ok"]:
                checks.append(f"ic_resnet8_large on mps3-an547: {r['instructions']:,} instructions "
                              f"({'pass' if r['instructions'] <= 20_000_000 else 'FAIL'}: at most 20 M)")
                r["ok"] = r["instructions"] <= 20_000_000
    lines = ["Written by `ci/patch_figures.py` (every row deployed and verified under QEMU, 2 samples).", "",
             "| model | board | budget B | arena B | layer by layer B (bound) | patch stage | instructions "
             "| verified |",
             "|---|---|---:|---:|---:|---|---:|---|"]
    for r in rows:
        if "arena" not in r:
            lines.append(f"| {r['label']} | {r['board']} | {r['budget'] or '-'} | - | - | - | - | **failed**: "
                         f"{r['error']} |")
            continue
        lines.append(f"| {r['label']} | {r['board']} | {r['budget']:,} | {r['arena']:,} | {r['layer_by_layer']:,} "
                     f"({r['layer_by_layer_bound']:,}) | {r['stage'] or 'layer by layer'} | {r['instructions']:,} "
                     f"| {'yes' if r['ok'] else '**no**'} |")
    lines += [""] + [f"- {c}" for c in checks]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.write_text(text)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
