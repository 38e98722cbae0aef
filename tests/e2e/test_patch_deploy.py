"""`tinyaot deploy --arena-budget`: a model that does not fit its budget layer by layer runs its first layers patch
by patch (pipeline/schedule.py), verified under QEMU like any other (outputs == the numpy reference); report.json
and report.md name the stage (a budget no schedule meets: tests/cli/test_cli_errors.py).

tests/models/pt_shapes_resnet (16x16, one-channel input, a residual Add and a MaxPool inside the stage): 4,248 B
layer by layer on mps2-an386."""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from tinyaot.api import deploy

MODEL = Path(__file__).resolve().parent.parent / "models" / "pt_shapes_resnet.onnx"
HAVE_ARM = subprocess.run(["which", "qemu-system-arm"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def cal(tmp_path_factory) -> Path:
    with np.load(MODEL.with_name("pt_shapes_resnet_data.npz")) as z:
        x = z["x"][:100]
    path = tmp_path_factory.mktemp("shapes") / "cal.npz"
    np.savez(path, x=x)
    return path


@pytest.mark.skipif(not HAVE_ARM, reason="qemu-system-arm is not installed")
def test_a_budget_below_layer_by_layer_deploys_patched_and_verifies(cal, tmp_path):
    r = deploy(MODEL, "mps2-an386", cal, tmp_path / "out", verify_samples=2, arena_budget=3000).report
    m, v = r["memory"], r["verify"]
    assert v["outputs_match"] and v["max_abs_diff_vs_reference"] == 0 and v["max_abs_diff_vs_onnxruntime"] <= 1
    assert m["arena_layer_by_layer_bytes"] == 4248 and m["arena_bytes"] <= 3000 == m["arena_budget_bytes"]
    assert v["arena_high_water_bytes"] <= m["arena_bytes"] and v["arena_canary_intact"]
    p = m["patch"]
    assert p["stripes"] >= 2 and p["grid"] == [p["stripes"], 1] and p["macs_recomputed"] > 0
    assert len(p["layers"]) >= 3 and p["layers"][0] == r["layers"][0]["name"]
    # every stage layer's instructions are counted (their stripes' calls summed) and add up to the whole
    assert all(layer["instructions"] for layer in r["layers"] if layer["kernel"] != "alias")
    assert sum(layer["instructions"] or 0 for layer in r["layers"]) < v["instructions"]
    md = (tmp_path / "out" / "report.md").read_text()
    assert "patch stage: steps 0.." in md and "stripes" in md
    timeline = m["timeline"]
    assert timeline["patch"]["stripes"] == p["stripes"] and timeline["arena_bytes"] == m["arena_bytes"]
    c = (tmp_path / "out" / "pt_shapes_resnet.c").read_text()
    assert c.count("TINYAOT_MARK();") == len(r["layers"]) - 2 + (p["stripes"] - 1) * (len(p["layers"]) - 1) + 1
    # without a budget below it, the same model keeps its layer-by-layer schedule
    r2 = deploy(MODEL, "mps2-an386", cal, tmp_path / "out2", verify=False).report
    assert r2["memory"]["patch"] is None and r2["memory"]["arena_bytes"] == 4248

