"""The authors' int8 .tflite files through tinyaot, held to TFLite's interpreter: bit-exact outputs, top-1, and
instructions per inference on Cortex-M4 and M55 against CMSIS-NN's.

    python ci/tflite_figures.py [--models kws_dscnn,ic_resnet8,...] [--boards mps2-an386,mps3-an547]
                                [--qemu-samples N] [--readme]

For each file in ../shared/models/tflite_int8 (needs `pip install 'tinyaot[bench]'`: tflite-micro and
ai-edge-litert):
- inputs: every labelled sample of its data set (kws01 1000, ic01 200, sww01 45; quantized with the file's own input
  scale and zero point, rounding half to even), or, for the two models without labelled data, their inputs from the
  reference set (ad_fc_autoencoder: the 196 five-frame windows of inrepo_samples' spectrogram; vww_mobilenetv1_025:
  ci/datasets.py's 100 CIFAR-10 images at 96x96, there being no VWW image in ../shared); then 50 random int8 inputs
  (numpy default_rng seed 0) and the all -128 / 0 / 127 inputs, for every model;
- the generated C compiled for the host (tinyaot's host JIT, generic kernels) runs them all, and so do TensorFlow Lite
  Micro's interpreter (the oracle: its outputs must be equal, element for element, on every input) and LiteRT's
  interpreter with its reference kernels (BUILTIN_REF), reported beside it;
- top-1 of tinyaot and of TFLite Micro on the labelled samples (they must be equal);
- `tinyaot deploy` on each board (default mps2-an386, Cortex-M4, and mps3-an547, Cortex-M55; kernel variants by the
  cost model), verified under QEMU on the first --qemu-samples inputs (default 8; QEMU's outputs must equal the numpy
  reference and TFLite Micro's): instructions per inference, arena, flash;
- CMSIS-NN's instructions for the same files' layers on the same boards, from ../shared/notes/cmsis-nn-instructions.md
  (kernel calls only, -O2; measured there, not here).

It prints a markdown table, writes it to ci/tflite_figures.md, with --readme also into README.md between
`<!-- tflite-figures:begin -->` and `<!-- tflite-figures:end -->`, and exits 1 when a row fails (a deploy that does
not verify, any output differing from TFLite Micro's, or top-1 differing from TFLite Micro's).
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ci import datasets  # noqa: E402
from tinyaot.api import compile_model, deploy  # noqa: E402
from tinyaot.errors import TinyaotError  # noqa: E402
from tinyaot.oracle.tflite_interpreter import interpreter_name, run_tflite  # noqa: E402
from tinyaot.toolchain.hostjit import HostModel  # noqa: E402

TFLITE = datasets.MODELS / "tflite_int8"
NOTES = datasets.SHARED / "notes" / "cmsis-nn-instructions.md"
MODELS = ["kws_dscnn", "ic_resnet8", "sww_dscnn", "vww_mobilenetv1_025", "ad_fc_autoencoder", "ic_resnet8_large"]
LABELLED = {"kws_dscnn": "kws01", "ic_resnet8": "ic01", "ic_resnet8_large": "ic01", "sww_dscnn": "sww01"}
BOARDS = ["mps2-an386", "mps3-an547"]
CMSIS_COLUMN = {"mps2-an386": "M4", "mps3-an547": "M55"}
RANDOM, SEED = 50, 0
README_BEGIN, README_END = "<!-- tflite-figures:begin -->", "<!-- tflite-figures:end -->"


def cmsis_nn_instructions() -> dict[str, dict[str, int]]:
    """{model: {"M4": n, "M55": n, ...}} from the yardstick's first table."""
    lines = NOTES.read_text().splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| model | MACs |"))
    cols = [c.strip() for c in lines[head].strip("|").split("|")]
    out = {}
    for line in lines[head + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        out[cells[0]] = {c: int(v.replace(",", "")) for c, v in zip(cols, cells)
                         if c in ("M4", "M7", "M3", "M55") and re.fullmatch(r"[\d,]+", v)}
    return out


def litert_outputs(path: Path, qs: list[np.ndarray]) -> list[np.ndarray] | None:
    """LiteRT's interpreter with its reference kernels, or None when ai-edge-litert is not installed."""
    try:
        from ai_edge_litert import interpreter as tfl
    except ImportError:
        return None
    it = tfl.Interpreter(model_path=str(path), experimental_op_resolver_type=tfl.OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    i, o = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
    outs = []
    for q in qs:
        it.set_tensor(i, q)
        it.invoke()
        outs.append(it.get_tensor(o).copy())
    return outs


def inputs(model: str, compiled) -> tuple[list[np.ndarray], np.ndarray | None, str]:
    """(int8 inputs, labels of the leading ones or None, what they are)."""
    shape = compiled.graph.tensors[compiled.input].shape
    y = None
    if model in LABELLED:
        with np.load(datasets.DATA / f"{LABELLED[model]}.npz") as z:
            x, y = z["x"], z["y"]
        what = f"{LABELLED[model]} all {len(x)}"
    elif model == "ad_fc_autoencoder":
        x = datasets.calibration(model)
        what = f"inrepo_samples windows {len(x)}"
    else:
        x = datasets.calibration(model)
        what = f"CIFAR-10 at 96x96 {len(x)}"
    qs = [compiled.quantize_input(s) for s in x]
    rng = np.random.default_rng(SEED)
    qs += [rng.integers(-128, 128, size=shape).astype(np.int8) for _ in range(RANDOM)]
    qs += [np.full(shape, v, np.int8) for v in (-128, 0, 127)]
    return qs, y, f"{what} + {RANDOM} random + 3 constant"


def measure(model: str, boards: list[str], qemu_samples: int, tmp: Path, cmsis: dict) -> dict:
    path = TFLITE / f"{model}_int8.tflite"
    row: dict = {"model": model, "ok": True, "problems": []}
    t0 = time.time()
    compiled = compile_model(path, None)
    qs, y, row["inputs"] = inputs(model, compiled)
    host = HostModel(compiled.graph, compiled.plan.offsets, compiled.plan.arena_bytes, compiled.lower_bound,
                     compiled.patch)
    ours = np.stack([np.asarray(host(q)).reshape(-1) for q in qs])
    theirs = np.stack([o[0].reshape(-1) for o in run_tflite(path, [[q] for q in qs])])
    row["n"] = len(qs)
    row["equal_tflm"] = int(np.all(ours == theirs, axis=1).sum())
    if row["equal_tflm"] != len(qs):
        row["problems"].append(f"{len(qs) - row['equal_tflm']} outputs differ from TFLite Micro")
    lite = litert_outputs(path, qs)
    if lite is not None:
        lite = np.stack([o.reshape(-1) for o in lite])
        row["equal_litert"] = int(np.all(ours == lite, axis=1).sum())
        row["litert_max_diff"] = int(np.abs(ours.astype(np.int32) - lite.astype(np.int32)).max())
    if y is not None:
        n = len(y)
        row["top1"] = float(np.mean(np.argmax(ours[:n], 1) == y))
        row["top1_tflm"] = float(np.mean(np.argmax(theirs[:n], 1) == y))
        if row["top1"] != row["top1_tflm"]:
            row["problems"].append("top-1 differs from TFLite Micro's")
    np.savez(tmp / f"{model}_verify.npz", x=np.stack(qs[:qemu_samples]))  # int8: the model's own integers
    row["boards"] = {}
    for board in boards:
        try:
            r = deploy(path, board, tmp / f"{model}_verify.npz", tmp / f"{model}_{board}",
                       verify_samples=qemu_samples, qemu_timeout_s=1800).report
            v = r["verify"]
            row["boards"][board] = {"instructions": v["instructions"], "arena": r["memory"]["arena_bytes"],
                                    "flash": r["memory"]["flash_bytes"], "samples": v["samples"],
                                    "tflm": v.get("outputs_match_tflite"),
                                    "cmsis": cmsis.get(model, {}).get(CMSIS_COLUMN.get(board, ""), None)}
            if v.get("outputs_match_tflite") is not True:
                row["problems"].append(f"{board}: QEMU outputs not compared with TFLite Micro")
        except TinyaotError as exc:
            row["boards"][board] = {"error": str(exc)}
            row["problems"].append(f"{board}: {exc}")
    row["ok"] = not row["problems"]
    row["seconds"] = round(time.time() - t0, 1)
    return row


def _n(v) -> str:
    return "-" if v is None else f"{v:,}"


def table(rows: list[dict], boards: list[str]) -> str:
    head = ["model", "inputs", "outputs == TFLite Micro", "== LiteRT (BUILTIN_REF)", "top-1 tinyaot / TFLite Micro"]
    for b in boards:
        cpu = CMSIS_COLUMN.get(b, b)
        head += [f"{cpu} ({b}) instructions: tinyaot / CMSIS-NN", f"{cpu} verified (QEMU == TFLite Micro)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["model"], r["inputs"], f"{r['equal_tflm']} of {r['n']}",
                 f"{r['equal_litert']} of {r['n']} (max {r['litert_max_diff']} LSB)" if "equal_litert" in r else "-",
                 f"{100 * r['top1']:.2f} % / {100 * r['top1_tflm']:.2f} %" if "top1" in r else "-"]
        for b in boards:
            d = r["boards"].get(b, {})
            if "error" in d:
                cells += ["failed", d["error"][:80]]
                continue
            ratio = f" ({d['instructions'] / d['cmsis']:.2f}x)" if d.get("cmsis") and d.get("instructions") else ""
            cells += [f"{_n(d.get('instructions'))} / {_n(d.get('cmsis'))}{ratio}",
                      f"yes, {d['samples']} inputs" if d.get("tflm") else "no"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def put_into_readme(text: str) -> None:
    readme = ROOT / "README.md"
    s = readme.read_text()
    a, b = s.index(README_BEGIN), s.index(README_END)
    readme.write_text(s[:a + len(README_BEGIN)] + "\n" + text + "\n" + s[b:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--boards", default=",".join(BOARDS))
    ap.add_argument("--qemu-samples", type=int, default=8, help="inputs each QEMU run verifies (default 8)")
    ap.add_argument("--readme", action="store_true", help="also put the table into README.md")
    args = ap.parse_args()
    if interpreter_name() is None:
        print("TFLite Micro's interpreter is not installed: pip install 'tinyaot[bench]'", file=sys.stderr)
        return 1
    boards = args.boards.split(",")
    cmsis = cmsis_nn_instructions()
    rows = []
    with tempfile.TemporaryDirectory(prefix="tinyaot-tflite-") as tmp:
        for model in args.models.split(","):
            row = measure(model, boards, args.qemu_samples, Path(tmp), cmsis)
            rows.append(row)
            print(f"{model}: {'ok' if row['ok'] else 'FAILED: ' + '; '.join(row['problems'])} ({row['seconds']} s)",
                  flush=True)
    text = (f"Made by `.venv/bin/python ci/tflite_figures.py --qemu-samples {args.qemu_samples}` with "
            f"{interpreter_name()}; CMSIS-NN: ../shared/notes/cmsis-nn-instructions.md (kernel calls only, -O2).\n\n"
            + table(rows, boards))
    print(text)
    (ROOT / "ci" / "tflite_figures.md").write_text(text + "\n")
    if args.readme:
        put_into_readme(text)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
