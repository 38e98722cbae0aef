"""Accuracy comparison: float, onnxruntime's int8, TFLite's own int8 and tinyaot's int8 on the same samples.

    python ci/accuracy_comparison.py [--models kws_dscnn,pt_mbv3_se,...] [--grid quick|full] [--out FILE.md]
                                     [--readme]

Rows: every labelled model of ../shared (ci/datasets.py: calibrate on the first 100 samples of its set, 15 for
sww01, evaluate on the rest) and every tests/models model with a data file (the first 100 samples calibrate, the
last 200 evaluate). Columns (top-1 %, all on the same evaluation samples, all calibrated on the same samples):

- float: the ONNX model in onnxruntime.
- onnxruntime: `quantize_static` (QDQ, int8 activations and weights, per channel, min/max; tinyaot's
  compress/ort_baseline.py) run on onnxruntime's int8 kernels.
- TFLite: the authors' own int8 file in ../shared/models/tflite_int8, run on the host by the TFLite interpreter of
  the `ai-edge-litert` package (or `tflite-runtime`; `pip install 'tinyaot[bench]'`, not a tinyaot dependency).
  Inputs are quantized with the file's own input scale and zero point (rounding half to even, as ONNX's
  QuantizeLinear), in the file's layout (NHWC: the data sets are stored that way); the argmax is taken on the int8
  output. "-" where there is no such file (mnist8 and tinyaot's own test models).
- tinyaot default: `tinyaot evaluate` with no quantization options (the generated C, host-compiled).
- tinyaot best: the best of the settings of the grid (calibration methods x CLE x bias correction; `quick`: every
  method with the default auto CLE, min/max without and with CLE of every pair, mse with CLE of every pair, min/max
  and mse with bias correction; `full`: every combination), ties to the earlier setting. A setting's name is the
  method, then "no-CLE" (none), "+CLE" (every pair) or nothing (the default, auto CLE), then "+BC".

A row fails (exit 1) when tinyaot's default is below onnxruntime's int8 or more than 0.5 points below float, or
when an evaluation fails (evaluate also checks the host C against the numpy reference bit for bit). The table is
printed, written to ci/accuracy_comparison.md (with every setting's top-1 below it), and with --readme put into
README.md between the markers `<!-- accuracy-comparison:begin -->` and `<!-- accuracy-comparison:end -->`.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ci import datasets  # noqa: E402
from tinyaot.api import evaluate  # noqa: E402
from tinyaot.compress.ort_baseline import (float_predictions, ort_int8_predictions,  # noqa: E402
                                           ort_quantize_static, top1)
from tinyaot.compress.ranges import METHODS  # noqa: E402
from tinyaot.errors import TinyaotError  # noqa: E402

TESTS_MODELS = ROOT / "tests" / "models"
TFLITE = datasets.MODELS / "tflite_int8"
TEST_CAL, TEST_EVAL = 100, 200  # tests/models data files: the first 100 calibrate, the last 200 evaluate
MAX_DROP = 0.005  # tinyaot's default may be at most 0.5 points below float
README_BEGIN, README_END = "<!-- accuracy-comparison:begin -->", "<!-- accuracy-comparison:end -->"


def settings(grid: str) -> list[tuple[str, bool | None, bool]]:
    """(calibration method, cle, bias correction) for the `best` column; cle None is the default (auto CLE: only
    pairs whose channels are starved, compress/equalize.py), False none, True every pair."""
    if grid == "full":
        return [(m, cle, bc) for bc in (False, True) for cle in (None, False, True) for m in METHODS]
    return ([(m, None, False) for m in METHODS] + [("minmax", False, False), ("minmax", True, False),
                                                     ("mse", True, False), ("minmax", None, True), ("mse", None, True)])


def setting_name(method: str, cle: bool | None, bc: bool) -> str:
    return method + {None: "", False: " no-CLE", True: " +CLE"}[cle] + (" +BC" if bc else "")


def test_models() -> list[tuple[str, Path, Path]]:
    """(name, model, data file) of every tests/models model with labelled data; a `_dynamo` export shares the
    data file of the model it re-exports."""
    out = []
    for onnx_path in sorted(TESTS_MODELS.glob("*.onnx")):
        name = onnx_path.stem
        data = TESTS_MODELS / f"{name.removesuffix('_dynamo')}_data.npz"
        if data.exists():
            out.append((name, onnx_path, data))
    return out


def all_models() -> list[tuple[str, Path, Path | None]]:
    """(name, model, None) for the shared models (ci/datasets.py splits them), then the tests/models ones."""
    return [(m, datasets.model_path(m), None) for m in datasets.ALL_MODELS if m in datasets.SPLITS] + test_models()


def splits(name: str, data: Path | None, tmp: Path) -> tuple[Path, Path, np.ndarray, np.ndarray, np.ndarray]:
    """CAL.npz and DATA.npz paths, and the calibration inputs, evaluation inputs and labels as arrays."""
    if data is None:
        cal, ev = datasets.write_calibration(name, tmp), datasets.write_evaluation(name, tmp)
        x_cal = datasets.calibration(name)
        x_ev, y_ev = datasets.evaluation(name)
        return cal, ev, x_cal, x_ev, y_ev
    with np.load(data) as z:
        x, y = z["x"].astype(np.float32), z["y"]
    x_cal, x_ev, y_ev = x[:TEST_CAL], x[-TEST_EVAL:], y[-TEST_EVAL:]
    cal, ev = tmp / f"{name}_cal.npz", tmp / f"{name}_eval.npz"
    np.savez(cal, x=x_cal)
    np.savez(ev, x=x_ev, y=y_ev)
    return cal, ev, x_cal, x_ev, y_ev


def _interpreter(path: Path):
    """TFLite's interpreter with its reference kernels (BUILTIN_REF: the arithmetic TFLite Micro and CMSIS-NN
    reproduce on a microcontroller; the default resolver would hand the graph to the XNNPACK delegate)."""
    try:
        from ai_edge_litert import interpreter as tfl
    except ImportError:
        try:
            from tflite_runtime import interpreter as tfl
        except ImportError:
            return None
    return tfl.Interpreter(model_path=str(path), experimental_op_resolver_type=tfl.OpResolverType.BUILTIN_REF)


def tflite_top1(name: str, x: np.ndarray, y: np.ndarray) -> float | None | str:
    """Top-1 of the authors' int8 TFLite file, or None when there is none, or a note when no interpreter is
    installed."""
    path = TFLITE / f"{name}_int8.tflite"
    if not path.exists():
        return None
    it = _interpreter(path)
    if it is None:
        return "no TFLite interpreter (pip install 'tinyaot[bench]')"
    it.allocate_tensors()
    inp, out = it.get_input_details()[0], it.get_output_details()[0]
    scale, zp = inp["quantization"]
    info = np.iinfo(inp["dtype"])
    pred = []
    for k in range(len(x)):
        # the file's own input quantizer; rint is half to even, as ONNX's QuantizeLinear (the data sets are
        # stored in the file's NHWC layout, so a reshape only adds the batch axis)
        q = np.clip(np.rint(x[k] / scale) + zp, info.min, info.max).astype(inp["dtype"])
        it.set_tensor(inp["index"], q.reshape(inp["shape"]))
        it.invoke()
        pred.append(int(np.argmax(it.get_tensor(out["index"]).reshape(-1))))
    return float(np.mean(np.asarray(pred) == y))


def onnxruntime_top1(model: Path, x_cal: np.ndarray, x_ev: np.ndarray, y: np.ndarray, tmp: Path
                     ) -> tuple[float, float]:
    """(float top-1, quantize_static int8 top-1), each sample fed at the model's batch-1 shape."""
    import onnx

    m = onnx.load(str(model))
    inp = m.graph.input[0]
    shape = tuple(d.dim_value for d in inp.type.tensor_type.shape.dim)[1:]
    x_ev, x_cal = x_ev.reshape((len(x_ev),) + shape), x_cal.reshape((len(x_cal),) + shape)
    f = float_predictions(model, {inp.name: x_ev}).reshape(len(x_ev), -1)
    qdq = ort_quantize_static(model, {inp.name: x_cal}, tmp / f"{model.stem}_qdq.onnx")
    q = ort_int8_predictions(qdq, {inp.name: x_ev}).reshape(len(x_ev), -1)
    return top1(f, y), top1(q, y)


def measure(name: str, model: Path, data: Path | None, grid: list, tmp: Path) -> dict:
    cal, ev, x_cal, x_ev, y_ev = splits(name, data, tmp)
    row = {"model": name, "cal": len(x_cal), "eval": len(y_ev), "errors": []}
    row["float"], row["onnxruntime"] = onnxruntime_top1(model, x_cal, x_ev, y_ev, tmp)
    row["tflite"] = tflite_top1(name, x_ev, y_ev) if data is None else None
    try:
        r = evaluate(model, cal, ev, compare_onnxruntime=False)
        row["default"], row["default_setting"] = r["int8_top1"], r["quantization"]["calibration"]
    except TinyaotError as exc:
        row["default"], row["default_setting"] = None, None
        row["errors"].append(f"default: {exc}")
    row["settings"] = {}
    for method, cle, bc in grid:
        try:
            r = evaluate(model, cal, ev, compare_onnxruntime=False, calibrate=method, cle=cle, bias_correction=bc)
            row["settings"][setting_name(method, cle, bc)] = r["int8_top1"]
            print(f"  {name} {setting_name(method, cle, bc)}: {_pct(r['int8_top1'])}", flush=True)
        except TinyaotError as exc:
            row["settings"][setting_name(method, cle, bc)] = None
            row["errors"].append(f"{setting_name(method, cle, bc)}: {exc}")
    done = {k: v for k, v in row["settings"].items() if v is not None}
    row["best_setting"] = max(done, key=lambda k: (done[k], -list(done).index(k))) if done else None
    row["best"] = done.get(row["best_setting"])
    d = row["default"]
    # compare in samples (top-1 x count), so that float rounding of the fractions cannot fail a tie
    n = row["eval"]
    row["ok"] = (not row["errors"] and d is not None and round(d * n) >= round(row["onnxruntime"] * n)
                 and d * n >= row["float"] * n - MAX_DROP * n - 1e-6)
    return row


def _pct(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    return f"{100 * v:.2f}"


def _default_name(s: dict | None) -> str:
    if not s:
        return "?"
    cle = {"auto": " +auto CLE", True: " +CLE", False: ""}[s["cle"]]
    return (s["method"] + (f":{s['percentile']:g}" if s.get("percentile") else "") + cle
            + (" +BC" if s["bias_correction"] else ""))


def table(rows: list[dict]) -> str:
    lines = ["| model | cal / eval samples | float | onnxruntime int8 | TFLite int8 | tinyaot default | "
             "tinyaot best (setting) | row |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['cal']} / {r['eval']} | {_pct(r['float'])} | {_pct(r['onnxruntime'])} | "
                     f"{_pct(r['tflite'])} | {_pct(r['default'])} | {_pct(r['best'])} ({r['best_setting']}) | "
                     f"{'pass' if r['ok'] else 'FAIL'} |")
    return "\n".join(lines)


def settings_table(rows: list[dict]) -> str:
    names = list(rows[0]["settings"]) if rows else []
    lines = ["| model | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for r in rows:
        lines.append(f"| {r['model']} | " + " | ".join(_pct(r["settings"].get(k)) for k in names) + " |")
    return "\n".join(lines)


def put_into_readme(text: str) -> None:
    readme = ROOT / "README.md"
    s = readme.read_text()
    a, b = s.find(README_BEGIN), s.find(README_END)
    if a < 0 or b < a:
        raise SystemExit(f"README.md has no {README_BEGIN} ... {README_END} block")
    readme.write_text(s[:a + len(README_BEGIN)] + "\n" + text + "\n" + s[b:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=None, help="comma-separated names (default: all labelled models)")
    ap.add_argument("--grid", choices=("quick", "full"), default="quick")
    ap.add_argument("--out", type=Path, default=ROOT / "ci" / "accuracy_comparison.md")
    ap.add_argument("--readme", action="store_true", help="also put the table into README.md")
    args = ap.parse_args()
    models = all_models()
    if args.models:
        wanted = args.models.split(",")
        unknown = set(wanted) - {m for m, _, _ in models}
        if unknown:
            raise SystemExit(f"unknown models: {', '.join(sorted(unknown))}")
        models = [m for m in models if m[0] in wanted]
    grid = settings(args.grid)
    rows = []
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="tinyaot-acc-") as tmp:
        for name, model, data in models:
            t = time.time()
            row = measure(name, model, data, grid, Path(tmp))
            rows.append(row)
            print(f"{name}: float {_pct(row['float'])}, onnxruntime {_pct(row['onnxruntime'])}, TFLite "
                  f"{_pct(row['tflite'])}, default ({_default_name(row['default_setting'])}) {_pct(row['default'])}, "
                  f"best {_pct(row['best'])} ({row['best_setting']}) "
                  f"[{time.time() - t:.0f} s]{'' if row['ok'] else ' FAIL'}", flush=True)
            for e in row["errors"]:
                print(f"  error: {e}", flush=True)
    default = _default_name(rows[0]["default_setting"]) if rows else "?"
    text = (f"Top-1 % on the held-out samples; tinyaot default: `{default}`; best of {len(grid)} settings "
            f"(`--grid {args.grid}`). Made by `.venv/bin/python ci/accuracy_comparison.py"
            f"{' --grid full' if args.grid == 'full' else ''}`.\n\n" + table(rows))
    print()
    print(text)
    args.out.write_text("# Accuracy comparison (ci/accuracy_comparison.py)\n\n" + text +
                        "\n\nEvery setting (top-1 %):\n\n" + settings_table(rows) + "\n")
    if args.readme:
        put_into_readme(text)
    failed = [r["model"] for r in rows if not r["ok"]]
    print(f"\n{len(rows)} rows, {len(failed)} failed{': ' + ', '.join(failed) if failed else ''}; "
          f"{time.time() - t0:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
