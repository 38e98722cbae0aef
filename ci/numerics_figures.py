"""Issue 8's numerics figures: per model, how many int32 biases sit at INT32_MIN/INT32_MAX (a clamped bias is a
wrong bias), how many channels had their weight scale raised to fit their bias, and the largest compile-time
accumulator bound over all layers (tinyaot/compress/bounds.py) against int32's 2**31 - 1.

    .venv/bin/python ci/numerics_figures.py [MODEL ...]     # default: every shared model

Compiles only (no build, no QEMU): calibration from ci/datasets.py, as ci/figures.py. Exits non-zero when a row
has a saturated bias or a bound past int32.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ci.datasets import ALL_MODELS, model_path, write_calibration  # noqa: E402
from tinyaot.api import compile_model  # noqa: E402

INT32_MAX = 2 ** 31 - 1
LAYERS = ("Conv", "FullyConnected", "ConvTranspose")


def figures(model: str, folder: Path) -> dict:
    compiled = compile_model(model_path(model), write_calibration(model, folder))
    g = compiled.graph
    total = saturated = layers_hit = 0
    for node in g.nodes:
        if node.op not in LAYERS:
            continue
        b = np.asarray(g.tensors[node.inputs[2]].data, np.int64)
        hit = int(np.sum((b == INT32_MAX) | (b == -INT32_MAX - 1)))
        total += b.size
        saturated += hit
        layers_hit += hit > 0
    bounds = g.meta.get("accumulator_bounds", {})
    raised = g.meta.get("raised_weight_scales", {})
    return {"model": model, "biases": total, "saturated": saturated, "layers_saturated": layers_hit,
            "raised_channels": sum(len(v) for v in raised.values()), "raised_layers": len(raised),
            "max_bound": max(bounds.values()) if bounds else None}


def main(argv: list[str]) -> int:
    models = argv or ALL_MODELS
    failed = False
    print("| model | biases | saturated | layers with saturated | raised channels (layers) | max accumulator bound |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for m in models:
            r = figures(m, Path(tmp))
            bound = "-" if r["max_bound"] is None else f"{r['max_bound']:,} ({r['max_bound'] / INT32_MAX:.3f} of int32)"
            print(f"| {m} | {r['biases']:,} | {r['saturated']:,} | {r['layers_saturated']} | "
                  f"{r['raised_channels']} ({r['raised_layers']}) | {bound} |", flush=True)
            failed |= r["saturated"] > 0 or (r["max_bound"] is not None and r["max_bound"] > INT32_MAX)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
