"""`--executor ray` on a local Ray instance gives the same figures as the process pool (the shared small sweep's int8
configuration)."""
from __future__ import annotations

import json
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
    # int8 only: what is compared is the executor, and the clusters16 job (its reconstruction and uncompressed
    # build) tripled the test's time; the process pool's figures for int8 come from the shared small sweep
    grid.write_text('[[config]]\nname = "int8"\nflags = {}\n')
    out = tmp_path / "ray"
    # --workers 1: the local instance starts one worker process per CPU it is given (seconds each) and there is one job
    cal, data = small_sweep["calibration"], small_sweep["data"]
    r = CliRunner().invoke(app, ["sweep", str(MODEL), "-c", str(cal), "-d", str(data),
                                 "--out", str(out), "--grid", str(grid), "--workers", "1", "--executor", "ray",
                                 "--no-cache"])
    assert r.exit_code == 0, r.output
    ray_report = json.loads((out / "report.json").read_text())
    assert ray_report["executor"] == "ray"
    pool = {c["name"]: c for c in small_sweep["report"]["configs"]}
    assert [c["name"] for c in ray_report["configs"]] == ["int8"]
    for c in ray_report["configs"]:
        assert c["error"] is None
        for metric in METRICS:
            assert c[metric] == pool[c["name"]][metric], (c["name"], metric)
    # the same report passes the gate against the process pool's (its int8 configuration)
    baseline = json.loads((small_sweep["out"] / "report.json").read_text())
    baseline["configs"] = [c for c in baseline["configs"] if c["name"] == "int8"]
    (tmp_path / "pool.json").write_text(json.dumps(baseline))
    r = CliRunner().invoke(app, ["compare", str(tmp_path / "pool.json"), str(out / "report.json")])
    assert r.exit_code == 0, r.output
    assert os.environ.get("RAY_ADDRESS") is None
