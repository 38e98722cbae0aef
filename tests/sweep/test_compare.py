"""`tinyaot compare`, the gate, on the committed baseline of ci/gate.py (a real sweep of examples/kws_dscnn.onnx):
a report passes against itself, and fails naming metric and config when the baseline is made better than the
current report (top-1 raised, flash or arena lowered)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tinyaot.cli.main import app
from tinyaot.sweep.compare import flags_digest

ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "ci" / "gate" / "baseline.json"


def _compare(tmp_path: Path, baseline: dict, current: dict | None = None, tolerances: str | None = None):
    b, c = tmp_path / "baseline.json", tmp_path / "current.json"
    b.write_text(json.dumps(baseline))
    c.write_text(json.dumps(current if current is not None else json.loads(BASELINE.read_text())))
    args = ["compare", str(b), str(c)]
    if tolerances is not None:
        t = tmp_path / "tol.toml"
        t.write_text(tolerances)
        args += ["--tolerances", str(t)]
    return CliRunner().invoke(app, args)


def _report() -> dict:
    r = json.loads(BASELINE.read_text())
    assert len(r["configs"]) >= 3 and all(c["instructions"] for c in r["configs"])
    return r


def test_report_passes_against_itself(tmp_path):
    r = _compare(tmp_path, _report())
    assert r.exit_code == 0, r.output
    assert "OK: 3 configs" in r.output
    assert "FAIL" not in r.output


@pytest.mark.parametrize("metric,change", [("top1", +0.02), ("flash_bytes", -0.05), ("arena_bytes", -16),
                                           ("instructions", -0.05)])
def test_better_baseline_fails_naming_metric_and_config(tmp_path, metric, change):
    base = _report()
    target = base["configs"][1]  # clusters16
    if metric == "top1":
        target[metric] += change
    elif isinstance(change, float):
        target[metric] = int(target[metric] * (1 + change))
    else:
        target[metric] += change
    r = _compare(tmp_path, base)
    assert r.exit_code == 1, r.output
    fails = [line for line in r.output.splitlines() if line.startswith("  config ")]
    assert len(fails) == 1, r.output
    assert f"config {target['name']}: {metric} " in fails[0]
    # the table's row for it says FAIL, the other configs' rows are ok
    row = [line for line in r.output.splitlines() if line.startswith(target["name"]) and f" {metric} " in line]
    assert "FAIL" in row[0]


def test_within_tolerance_passes_and_a_file_tightens(tmp_path):
    base = _report()
    base["configs"][0]["flash_bytes"] = int(base["configs"][0]["flash_bytes"] * 0.995)  # current grew 0.5 %
    assert _compare(tmp_path, base).exit_code == 0
    r = _compare(tmp_path, base, tolerances="[flash_bytes]\nmax_growth = 0.001\n")
    assert r.exit_code == 1 and "config int8: flash_bytes" in r.output


def test_missing_config_or_metric_fails(tmp_path):
    current = _report()
    current["configs"] = current["configs"][:2]
    current["configs"][0]["instructions"] = None  # e.g. --no-qemu
    r = _compare(tmp_path, _report(), current)
    assert r.exit_code == 2  # the baseline does not fit this report (a mismatch), not a regression
    assert "config int4: missing from the current report" in r.output
    assert "config int8: instructions not measured" in r.output


@pytest.mark.parametrize("content,message", [
    ("[speed]\nmax_growth = 1\n", "unknown metric 'speed'"),
    ("[top1]\nmax_growth = 1\n", "[top1] takes exactly one key, max_drop"),
    ("[arena_bytes]\nmax_growth = -1\n", "must be a number >= 0"),
])
def test_bad_tolerances_one_line_error(tmp_path, content, message):
    r = _compare(tmp_path, _report(), tolerances=content)
    assert r.exit_code == 2
    assert r.output.strip().startswith("Error: ") and message in r.output and "Traceback" not in r.output


def test_not_a_report(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"layers": []}')
    r = CliRunner().invoke(app, ["compare", str(bad), str(BASELINE)])
    assert r.exit_code == 2 and "is not a sweep report" in r.output
    r = CliRunner().invoke(app, ["compare", str(tmp_path / "none.json"), str(BASELINE)])
    assert r.exit_code == 2 and "sweep report not found" in r.output


def test_different_inputs_are_noted(tmp_path):
    current = _report()
    current["samples"] = 40
    r = _compare(tmp_path, _report(), current)
    assert r.exit_code == 0
    assert r.output.splitlines()[0] == "note: different number of evaluation samples: baseline 300, current 40"


def test_changed_flags_under_the_same_name_are_reported_not_compared(tmp_path):
    current = _report()
    target = current["configs"][1]  # clusters16, now measured with other flags under the same name
    target["flags"], target["command_line"] = {"clusters": 32}, "--clusters 32"
    target["flags_digest"] = flags_digest(target["flags"])  # as the sweep records it (a baseline may carry it too)
    target["flash_bytes"] -= 1000  # better figures must not hide the change
    r = _compare(tmp_path, _report(), current)
    assert r.exit_code == 2, r.output  # the baseline does not fit: the job is misconfigured, the model not worse
    assert "config clusters16: flags changed: baseline --clusters 16, current --clusters 32; not compared" in r.output
    row = [line for line in r.output.splitlines() if line.startswith("clusters16")]
    assert len(row) == 1 and "CHANGED" in row[0]  # one row for the setting, no metric compared


@pytest.mark.parametrize("kind,code", [("verification", 1), ("input", 2), ("environment", 2), ("internal", 3)])
def test_a_failed_setting_exits_by_its_cause(tmp_path, kind, code):
    current = _report()
    current["configs"][0].update(error="it failed", error_kind=kind, top1=None, flash_bytes=None)
    r = _compare(tmp_path, _report(), current)
    assert r.exit_code == code, r.output
    assert "config int8: failed in the current sweep: it failed" in r.output


def test_a_different_toolchain_is_warned_about(tmp_path):
    base, current = _report(), _report()
    base["versions"] = {"tinyaot": "0.1.0", "gcc": "12.2.1", "qemu": "7.2.22", "onnxruntime": "1.18.0"}
    current["versions"] = dict(base["versions"], gcc="13.2.1")
    r = _compare(tmp_path, base, current)
    assert r.exit_code == 0
    assert r.output.splitlines()[0] == ("Warning: gcc differs from the baseline's: baseline 12.2.1, current 13.2.1 "
                                        "(figures may move with it)")
