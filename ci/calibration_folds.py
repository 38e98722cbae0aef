"""Score a compression setting on folds of a model's calibration split, for choosing between methods.

    .venv/bin/python ci/calibration_folds.py ic_resnet8 '{"prune_channels": 0.25}' [--folds 4] [--json OUT]

The held-out split of ci/datasets.py (the README's top-1) must not choose a method: a method picked by its held-out
figure is fitted to the test (ic01 has 100 held-out images, one image is one point). This scores on the calibration
split alone. Its labelled samples (ci/datasets.SPLITS: the first 100 of kws01 / ic01) are cut into FOLDS contiguous
shares; for each, the model is compiled twice (dense int8 and with the setting) calibrated on the other shares, and
both int8 models (numpy reference, bit-exact with the host C and QEMU) run the held share. Printed per fold and
pooled over the folds: the logits' noise-to-signal ratio of the compressed model against the dense int8 one (each
sample's mean over classes removed; the logits are the input of a final Softmax, else the output), its top-1 and
its agreement with the dense model's class. The ratio is the steadier figure: at 25 samples a fold, one sample is
4 points of top-1.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ci import datasets  # noqa: E402
from tinyaot.api import compile_model  # noqa: E402
from tinyaot.compress.distill import logits_tensor  # noqa: E402
from tinyaot.oracle.reference import run_reference  # noqa: E402
from tinyaot.options import Options  # noqa: E402


def folds(n: int, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(fit, held) sample indices of k contiguous shares of n samples, each held out once."""
    cuts = [int(round(i * n / k)) for i in range(k + 1)]
    return [(np.r_[0:a, b:n], np.r_[a:b]) for a, b in zip(cuts, cuts[1:])]


def logits(compiled, x: np.ndarray) -> np.ndarray:
    """[N, classes] float logits of the int8 model on samples `x` (numpy reference)."""
    head = logits_tensor(compiled.graph)
    out = []
    for k in range(len(x)):
        q = run_reference(compiled.graph, compiled.quantize_inputs({compiled.input: x[k:k + 1]}))
        out.append(compiled.dequantize(head, q[head]).reshape(-1))
    return np.stack(out)


def nsr(got: np.ndarray, want: np.ndarray) -> float:
    got, want = got - got.mean(axis=1, keepdims=True), want - want.mean(axis=1, keepdims=True)
    return float(np.sum((got - want) ** 2) / max(float(np.sum(want ** 2)), np.finfo(np.float64).tiny))


def score(model: str, compression: dict, k: int, work: Path) -> dict:
    name, count = datasets.SPLITS[model]
    with np.load(datasets.DATA / f"{name}.npz") as z:
        y = z["y"][:count]
    x = datasets.calibration(model)
    rows, got, want, labels = [], [], [], []
    for i, (fit, held) in enumerate(folds(count, k)):
        start = time.time()
        cal = work / f"fold{i}.npz"
        np.savez(cal, x=x[fit])
        dense = logits(compile_model(datasets.model_path(model), cal, Options.of(None)), x[held])
        mine = logits(compile_model(datasets.model_path(model), cal, Options.of(None, compression=compression)),
                      x[held])
        row = {"fold": i, "nsr": nsr(mine, dense), "top1": float(np.mean(mine.argmax(1) == y[held])),
               "agreement": float(np.mean(mine.argmax(1) == dense.argmax(1))),
               "dense_top1": float(np.mean(dense.argmax(1) == y[held])), "seconds": round(time.time() - start)}
        print(json.dumps(row), flush=True)
        rows.append(row)
        got.append(mine), want.append(dense), labels.append(y[held])
    mine, dense, yy = np.concatenate(got), np.concatenate(want), np.concatenate(labels)
    pooled = {"nsr": nsr(mine, dense), "top1": float(np.mean(mine.argmax(1) == yy)),
              "agreement": float(np.mean(mine.argmax(1) == dense.argmax(1))),
              "dense_top1": float(np.mean(dense.argmax(1) == yy))}
    return {"model": model, "compression": compression, "folds": rows, "pooled": pooled}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", choices=sorted(datasets.SPLITS))
    ap.add_argument("compression", help="compression options as JSON, e.g. '{\"prune_channels\": 0.25}'")
    ap.add_argument("--folds", type=int, default=4)
    ap.add_argument("--json", type=Path, help="write the result here too")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="calibration-folds-") as tmp:
        result = score(a.model, json.loads(a.compression), a.folds, Path(tmp))
    print("pooled", json.dumps(result["pooled"]))
    if a.json:
        a.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
