"""`tinyaot analyze` on a small PyTorch-exported MLP (tests/models): per-layer SQNR and single-layer top-1."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

from tinyaot.cli.main import app
from tinyaot.compress.calibrate import float_session
from tinyaot.oracle.fake_quant import qdq_model
from tinyaot.pipeline.analyze import _sqnr_db

MODELS = Path(__file__).resolve().parent.parent / "models"
MLP = MODELS / "pt_chirps_mlp.onnx"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("analyze")
    z = np.load(MODELS / "pt_chirps_mlp_data.npz")
    np.savez(d / "cal.npz", x=z["x"][:100])
    np.savez(d / "data.npz", x=z["x"][100:160], y=z["y"][100:160])
    return d


def test_sqnr_known_values():
    f = np.ones(100)
    assert _sqnr_db(f, f + 0.1) == pytest.approx(20.0)  # signal 1, noise 0.01 per element
    assert _sqnr_db(f, f) == float("inf")


def test_fake_quant_model_quantizes_only_that_tensor():
    m = onnx.load(MLP)
    first = m.graph.node[0].output[0]
    fq = qdq_model(m, first, 0.5, 0)
    x = np.load(MODELS / "pt_chirps_mlp_data.npz")["x"][:1, None]  # [1 sample, batch 1, 1, 16, 16]
    a = float_session(m, [first]).run([first], {"x": x[0]})[0]
    b = float_session(fq, [first]).run([first], {"x": x[0]})[0]
    assert np.array_equal(b, np.clip(np.rint(a / 0.5), -128, 127) * 0.5)


def test_analyze_cli_writes_report(files):
    out = files / "out"
    r = CliRunner().invoke(app, ["analyze", str(MLP), "-c", str(files / "cal.npz"), "-d", str(files / "data.npz"),
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    rep = json.loads((out / "report.json").read_text())
    layers = rep["layers"]
    assert len(layers) >= 3
    for row in layers:
        assert {"name", "op", "sqnr_db", "sqnr_db_this_layer", "top1_only_this_layer"} <= set(row)
        assert 0.0 <= row["top1_only_this_layer"] <= 1.0
        # int8 with 256 levels over the calibrated range: well above 20 dB, never above the ~50 dB of pure
        # rounding of a full-range tensor (unless exact)
        if row["sqnr_db_this_layer"] is not None:
            assert 15.0 < row["sqnr_db_this_layer"] < 80.0, row
    tops = [row["top1_only_this_layer"] for row in layers]
    assert tops == sorted(tops)  # worst first
    assert (out / "report.md").read_text().count("|") > 10
    assert (out / "sqnr.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_analyze_missing_data_is_one_line(files, tmp_path):
    r = CliRunner().invoke(app, ["analyze", str(MLP), "-c", str(files / "cal.npz"), "-d", str(tmp_path / "no.npz"),
                                 "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "Error:" in r.output and "Traceback" not in r.output
