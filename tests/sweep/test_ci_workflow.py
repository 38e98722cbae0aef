"""ci/github-actions.yml is a well-formed workflow whose files exist in the repository, installs the toolchain, runs the
sweep with the gate, and uploads the reports even when the gate fails."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_workflow():
    yaml = pytest.importorskip("yaml", reason="PyYAML reads the workflow (Ray brings it in the test extra)")
    wf = yaml.safe_load((ROOT / "ci" / "github-actions.yml").read_text())
    env = wf["env"]
    for key in ("MODEL", "CALIBRATION", "GRID", "BASELINE"):
        assert (ROOT / env[key]).is_file(), key
    steps = wf["jobs"]["sweep"]["steps"]
    runs = "\n".join(s.get("run", "") for s in steps)
    assert "gcc-arm-none-eabi" in runs and "qemu-system-arm" in runs
    assert "tinyaot sweep" in runs and '--baseline "$BASELINE"' in runs
    upload = [s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert upload and upload[0]["if"] == "always()" and "report.html" in upload[0]["with"]["path"]
