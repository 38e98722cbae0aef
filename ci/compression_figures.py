"""Issue 4's bit-exactness figures: every shared model deployed on mps2-an500 (Cortex-M7) with --clusters 16,
--weight-bits 4 and --prune 0.5, plus the plain int8 deploy as the baseline. For each: weights bytes (and the
ratio to plain int8), firmware flash, instructions per inference under QEMU, whether the C under QEMU equals the
numpy reference (`==`, max diff), and whether the host-compiled C equals the reference on calibration samples
(the check `tinyaot evaluate` runs). A benchmark, not a test: it takes several minutes.

    .venv/bin/python ci/compression_figures.py [MODEL ...]
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from datasets import ALL_MODELS, calibration, model_path, write_calibration  # noqa: E402

from tinyaot.api import compile_model, deploy  # noqa: E402
from tinyaot.errors import TinyaotError  # noqa: E402

BOARD = "mps2-an500"
CONFIGS = [("int8", None), ("clusters=16", dict(clusters=16)), ("weight_bits=4", dict(weight_bits=4)),
           ("prune=0.5", dict(prune=0.5))]
HOST_SAMPLES = 4


def host_matches_reference(model: str, cal: Path, compression) -> bool:
    """The host-compiled C equals the numpy reference on the first calibration samples (as evaluate checks)."""
    from tinyaot.toolchain.hostjit import HostModel
    from tinyaot.oracle.reference import run_reference

    c = compile_model(model_path(model), cal, compression=compression)
    g = c.graph
    host = HostModel(g, c.plan.offsets, c.plan.arena_bytes, c.lower_bound)
    for x in calibration(model)[:HOST_SAMPLES]:
        q = c.quantize_input(x)
        if not np.array_equal(host(q), run_reference(g, {c.input: q})[c.output]):
            return False
    return True


def row(model: str, name: str, compression, cal: Path, work: Path, plain_bytes: int | None) -> dict:
    t = time.time()
    out = {"model": model, "config": name}
    try:
        r = deploy(model_path(model), BOARD, cal, work / f"{model}_{name}", compression=compression).report
        m, v = r["memory"], r["verify"]
        out.update(weights=m["weights_bytes"], flash=m["flash_bytes"], insns=v["instructions"],
                   match=v["outputs_match"], diff=v["max_abs_diff_vs_reference"])
    except TinyaotError as exc:  # deploy raises when QEMU's outputs differ from the reference
        out.update(weights=None, flash=None, insns=None, match=False, diff=None, error=str(exc).splitlines()[0])
    out["ratio"] = (out["weights"] / plain_bytes) if plain_bytes and out["weights"] else None
    try:
        out["host"] = host_matches_reference(model, cal, compression)
    except TinyaotError as exc:
        out["host"], out["error"] = False, out.get("error") or str(exc).splitlines()[0]
    out["seconds"] = time.time() - t
    return out


def main(models: list[str]) -> int:
    rows, failed = [], False
    with tempfile.TemporaryDirectory(prefix="tinyaot-cfig-") as tmp:
        work = Path(tmp)
        print("| model | config | weights B | vs int8 | flash B | instructions | QEMU == ref | max diff | "
              "host C == ref |")
        print("|---|---|---|---|---|---|---|---|---|", flush=True)
        for model in models:
            cal = write_calibration(model, work)
            plain = None
            for name, comp in CONFIGS:
                r = row(model, name, comp, cal, work, plain)
                if name == "int8":
                    plain = r["weights"]
                rows.append(r)
                failed |= not (r["match"] and r["host"])
                ratio = f"{r['ratio']:.3f}" if r["ratio"] else "-"
                print(f"| {model} | {name} | {r['weights']} | {ratio} | {r['flash']} | {r['insns']} | {r['match']} | "
                      f"{r['diff']} | {r['host']} |" + (f" {r['error']}" if "error" in r else ""), flush=True)
    print("all bit-exact" if not failed else "SOME MODEL FAILED VERIFICATION")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ALL_MODELS))
