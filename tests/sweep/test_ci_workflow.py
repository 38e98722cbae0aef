"""ci/github-actions.yml is a workflow a user copies into their own repository: it installs tinyaot from its source
(not the repository it runs in), takes the model, data and baseline paths as inputs, and its gate step and the two
commands its header gives for the first baseline and for updating it work as written: here they run on the sine
model laid out as the workflow expects (model/model.onnx, ...), with a one-setting grid."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "ci" / "github-actions.yml"


def _workflow() -> dict:
    yaml = pytest.importorskip("yaml", reason="PyYAML reads the workflow (Ray brings it in the test extra)")
    return yaml.safe_load(WORKFLOW.read_text())


def test_the_workflow_is_the_users_not_this_repositorys():
    wf = _workflow()
    text = WORKFLOW.read_text()
    for inside in ("tests/", "shared_data", "ci/gate", "pip install .", "examples/", "calibration_data/"):
        assert inside not in text, inside  # nothing of this repository: it runs in the user's
    triggers = wf[True] if True in wf else wf["on"]  # YAML 1.1 reads the key `on` as True
    inputs = triggers["workflow_dispatch"]["inputs"]
    assert {"model", "calibration", "data", "baseline", "grid", "board"} <= set(inputs)
    env = wf["env"]
    for key in ("MODEL", "CALIBRATION", "DATA", "BASELINE", "GRID", "BOARD"):
        assert f"inputs.{key.lower()}" in env[key], key
    steps = wf["jobs"]["gate"]["steps"]
    runs = "\n".join(s.get("run", "") for s in steps)
    assert "gcc-arm-none-eabi" in runs and "qemu-system-arm" in runs
    assert 'pip install -q "$TINYAOT_SOURCE"' in runs and "git+" in env["TINYAOT_SOURCE"]
    assert "tinyaot sweep" in runs and '--baseline "$BASELINE"' in runs
    upload = [s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert upload and upload[0]["if"] == "always()" and "report.html" in upload[0]["with"]["path"]


def test_the_baseline_commands_and_the_gate_step_run_as_written(tmp_path):
    wf = _workflow()
    repo = tmp_path / "repo"  # a user's repository, laid out as the workflow's defaults say
    (repo / "model").mkdir(parents=True)
    (repo / "ci").mkdir()
    shutil.copy(ROOT / "examples" / "tflm_hello_world_sine.onnx", repo / "model" / "model.onnx")
    x = np.load(ROOT / "calibration_data" / "tflm_hello_world_sine.npz")["serving_default_dense_input:0"]
    np.savez(repo / "model" / "calibration.npz", x=x)
    np.savez(repo / "model" / "eval.npz", x=x[:20], y=np.zeros(20, np.int64))
    (repo / "ci" / "grid.toml").write_text('[[config]]\nname = "int8"\n')
    bin_dir = Path(sys.executable).parent  # `tinyaot` as pip installs it
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    header = [line[1:].strip() for line in WORKFLOW.read_text().splitlines() if line.startswith("#   tinyaot sweep")]
    assert len(header) == 2, header
    create, update = (c.replace(" && cp", " --grid ci/grid.toml && cp").replace("; cp", " --grid ci/grid.toml; cp")
                      for c in header)
    p = subprocess.run(["bash", "-c", create], cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    baseline = json.loads((repo / "ci" / "tinyaot-baseline.json").read_text())
    assert [c["name"] for c in baseline["configs"]] == ["int8"] and baseline["versions"]["tinyaot"]
    # the workflow's gate step, its env as the workflow's defaults give it (the GRID input set)
    step = next(s for s in wf["jobs"]["gate"]["steps"] if s.get("name") == "Sweep and gate")
    defaults = {k: re.sub(r"^\$\{\{ inputs\.\w+ \|\| '(.*)' \}\}$", r"\1", v) for k, v in wf["env"].items()}
    shutil.rmtree(repo / "tinyaot-sweep")
    p = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=repo, capture_output=True, text=True, timeout=600,
                       env={**env, **defaults, "GRID": "ci/grid.toml"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "OK: 1 configs within tolerance of ci/tinyaot-baseline.json" in p.stdout
    assert "## Gate against `ci/tinyaot-baseline.json`" in (repo / "tinyaot-sweep" / "report.md").read_text()
    # the update command: the gate again, then the new figures taken as the baseline
    p = subprocess.run(["bash", "-c", update], cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert json.loads((repo / "ci" / "tinyaot-baseline.json").read_text())["configs"][0]["flash_bytes"] == \
        baseline["configs"][0]["flash_bytes"]
