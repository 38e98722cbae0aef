"""The regression gate on the example model shipped in the repository (.ci/run runs it after the tests):
`tinyaot sweep examples/kws_dscnn.onnx` over ci/gate/grid.toml, evaluated on the kws01 samples in tests/fixtures that
calibration does not use, compared with the committed baseline ci/gate/baseline.json by `--baseline` (the
tolerances of `tinyaot compare`). Exits non-zero on a regression or a failed setting.

    .venv/bin/python ci/gate.py            # the gate
    .venv/bin/python ci/gate.py --update   # after an intended change: measure and write a new baseline

Nothing outside the repository is read; --no-cache, so the figures are measured on this run, never recalled.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from shared_data import FIXTURE_SETS  # noqa: E402  (the fixtures' splits: calibration never overlaps evaluation)

GATE = ROOT / "ci" / "gate"
BASELINE = GATE / "baseline.json"
EVAL_SAMPLES = 300


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--update", action="store_true", help="write the measured report as the new baseline")
    ap.add_argument("--out", default=str(ROOT / "out" / "gate"), help="the sweep's folder (default out/gate)")
    args = ap.parse_args()
    out = Path(args.out)
    work = out.parent / (out.name + "-data")
    work.mkdir(parents=True, exist_ok=True)
    x, y = FIXTURE_SETS.evaluation("kws_dscnn")
    import numpy as np

    data = work / "kws01_eval.npz"
    np.savez(data, x=x[:EVAL_SAMPLES], y=y[:EVAL_SAMPLES])
    if out.exists():
        shutil.rmtree(out)  # a fresh measurement, not a resumed one
    # `python -m tinyaot` from the checkout's root: the gate measures this checkout's tinyaot, whichever is installed
    cmd = [sys.executable, "-m", "tinyaot", "sweep", "examples/kws_dscnn.onnx", "--board", "stm32",
           "--calibration", "calibration_data/kws_dscnn.npz", "--data", str(data.relative_to(ROOT))
           if data.is_relative_to(ROOT) else str(data), "--out", str(out), "--grid", "ci/gate/grid.toml",
           "--no-cache"]
    if not args.update:
        cmd += ["--baseline", str(BASELINE.relative_to(ROOT))]
    print("+", " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, cwd=ROOT).returncode
    if rc == 0 and args.update:
        shutil.copy(out / "report.json", BASELINE)
        print(f"baseline written: {BASELINE}")
    elif (out / "report.json").exists():
        # The gate's checks as a plain closing line (.ci/run's last output): one per config and metric compared.
        from tinyaot.sweep.compare import compare, load_report

        rows = compare(load_report(BASELINE), load_report(out / "report.json"))
        bad = sum(not r.ok for r in rows)
        print(f"gate: {len(rows) - bad} passed, {bad} failed")
    return rc


if __name__ == "__main__":
    sys.exit(main())
