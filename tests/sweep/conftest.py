"""One small real sweep shared by the sweep tests: examples/kws_dscnn.onnx (the model shipped in the repository) on
stm32, two settings (int8, --clusters 16), calibrated on 16 samples of the shipped calibration file, 40 held-out kws01
samples from tests/fixtures, a result cache of its own (so the figures are measured on this run, not recalled from an
earlier one)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shared_data import FIXTURE_SETS
from tinyaot.sweep.grid import Config
from tinyaot.sweep.run import ResultCache
from tinyaot.api import sweep as run_sweep

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "examples" / "kws_dscnn.onnx"
CALIBRATION = ROOT / "calibration_data" / "kws_dscnn.npz"
GRID = [Config("int8", {}), Config("clusters16", {"clusters": 16})]
SAMPLES = 40
CALIBRATION_SAMPLES = 16


@pytest.fixture(scope="session")
def sweep_inputs(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("sweep-inputs")
    x, y = FIXTURE_SETS.evaluation("kws_dscnn")
    data = folder / "eval.npz"
    np.savez(data, x=x[:SAMPLES], y=y[:SAMPLES])
    # the first CALIBRATION_SAMPLES of the shipped calibration file: the sweep's figures are compared with separate
    # runs on the same file, not with accuracy lines, and clustering's reconstruction runs every sample it is given
    calibration = folder / "calibration.npz"
    with np.load(CALIBRATION) as z:
        np.savez(calibration, **{k: z[k][:CALIBRATION_SAMPLES] for k in z.files})
    return {"model": MODEL, "calibration": calibration, "data": data, "folder": folder}


@pytest.fixture(scope="session")
def small_sweep(sweep_inputs, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("sweep") / "out"
    cache = ResultCache(tmp_path_factory.mktemp("sweep-cache"))
    lines: list[str] = []
    report = run_sweep(MODEL, "stm32", sweep_inputs["calibration"], sweep_inputs["data"], out, GRID, workers=2,
                       cache=cache, echo=lines.append)
    return {"report": report, "out": out, "cache": cache, "lines": lines, **sweep_inputs}
