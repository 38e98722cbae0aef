"""`--executor ray` on a local Ray instance gives the same figures as the process pool (the shared small sweep)."""
from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from tinyaot.cli.main import app
from tinyaot.sweep.compare import METRICS

from .conftest import MODEL


def test_ray_executor_equals_process_pool(small_sweep, tmp_path, monkeypatch):
    pytest.importorskip("ray", reason="Ray is the optional extra tinyaot[ray] (in the test extra too)")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a local instance, started and stopped by the sweep
    grid = tmp_path / "grid.toml"
    grid.write_text('[[config]]\nname = "int8"\nflags = {}\n[[config]]\nname = "clusters16"\n'
                    'flags = { clusters = 16 }\n')
    out = tmp_path / "ray"
    cal, data = small_sweep["calibration"], small_sweep["data"]
    r = CliRunner().invoke(app, ["sweep", str(MODEL), "-c", str(cal), "-d", str(data),
                                 "--out", str(out), "--grid", str(grid), "--workers", "2", "--executor", "ray",
                                 "--no-cache"])
    assert r.exit_code == 0, r.output
    import json
    ray_report = json.loads((out / "report.json").read_text())
    assert ray_report["executor"] == "ray"
    pool = {c["name"]: c for c in small_sweep["report"]["configs"]}
    for c in ray_report["configs"]:
        assert c["error"] is None
        for metric in METRICS:
            assert c[metric] == pool[c["name"]][metric], (c["name"], metric)
    # the same report passes the gate against the process pool's
    assert CliRunner().invoke(app, ["compare", str(small_sweep["out"] / "report.json"),
                                    str(out / "report.json")]).exit_code == 0
    assert os.environ.get("RAY_ADDRESS") is None
