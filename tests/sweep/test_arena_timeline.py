"""The memory plan as a picture: deploy's report.json `memory.timeline`, the text map in report.md and
arena_timeline.png beside report.json; the timeline agrees with the plan (tensors live at the same step never share
bytes, the peak is the liveness lower bound, everything within the arena)."""
from __future__ import annotations

import json
from pathlib import Path

from tinyaot.api import compile_model, deploy
from tinyaot.pipeline.timeline import timeline, timeline_text

ROOT = Path(__file__).resolve().parents[2]


def _check(t: dict, arena: int, lower_bound: int) -> None:
    regs = {r["key"]: r for r in t["tensors"]}
    assert len(regs) == len(t["tensors"])
    for s in t["steps"]:
        live = sorted((regs[k]["offset"], regs[k]["offset"] + regs[k]["size"]) for k in s["live"])
        assert all(a[1] <= b[0] for a, b in zip(live, live[1:])), f"step {s['step']} overlaps: {live}"
        assert all(hi <= arena for _, hi in live)
        assert s["live_bytes"] == sum(hi - lo for lo, hi in live)
    assert t["peak_bytes"] == max(s["live_bytes"] for s in t["steps"]) == lower_bound


def test_kws_timeline_matches_the_plan():
    c = compile_model(ROOT / "examples" / "kws_dscnn.onnx", ROOT / "calibration_data" / "kws_dscnn.npz")
    t = timeline(c)
    _check(t, c.plan.arena_bytes, c.lower_bound)
    assert t["peak_step"] == c.peak_step
    text = timeline_text(t).splitlines()
    rows = [line for line in text if "|" in line]
    assert len(rows) == len(t["steps"])
    for s, row in zip(t["steps"], rows):
        assert row.startswith("*") == (s["live_bytes"] == t["peak_bytes"])
        band = row.split("|")[1]
        assert set(band) - {"."} == set(s["live"])  # every live tensor drawn, nothing else


def test_deploy_writes_timeline_text_and_png(tmp_path):
    out = tmp_path / "sine"
    r = deploy(ROOT / "examples" / "tflm_hello_world_sine.onnx", "stm32",
               ROOT / "calibration_data" / "tflm_hello_world_sine.npz", out, verify=False).report
    saved = json.loads((out / "report.json").read_text())
    t = saved["memory"]["timeline"]
    _check(t, saved["memory"]["arena_bytes"], saved["memory"]["arena_lower_bound_bytes"])
    assert t == r["memory"]["timeline"]
    assert (out / "arena_timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "arena_timeline.png" in saved["files"]["report"]
    md = (out / "report.md").read_text()
    assert "## Arena timeline" in md and timeline_text(t) in md
