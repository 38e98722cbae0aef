"""`evaluate` on the shared keyword-spotting split: the generated C (host-compiled) against float and against
onnxruntime's own int8. The full 900-sample figure is measured by ci/figures.py; here 300 samples keep it fast."""
from __future__ import annotations

import numpy as np

from tinyaot.api import evaluate

from shared_data import DATA, MODELS, calibration_file


def test_evaluate_kws(tmp_path, cal_dir):
    with np.load(DATA / "kws01.npz") as z:
        np.savez(tmp_path / "eval.npz", x=z["x"][100:400], y=z["y"][100:400])
    r = evaluate(MODELS / "kws_dscnn.onnx", calibration_file(cal_dir, "kws_dscnn"), tmp_path / "eval.npz")
    assert r["samples"] == 300 and r["calibration_samples"] == 100
    for key in ("float_top1", "int8_top1", "onnxruntime_int8_top1", "agreement"):
        assert 0.0 <= r[key] <= 1.0
    assert r["float_top1"] > 0.85
    assert abs(r["int8_top1"] - r["float_top1"]) <= 0.015
    assert r["agreement"] >= 0.97
    assert r["host_c_matches_reference"]
