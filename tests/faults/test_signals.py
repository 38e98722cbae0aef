"""Killed runs (issue 18, item 3): a deploy killed at each point of its run (SIGKILL, SIGTERM, SIGINT, sent to the
tinyaot process only) leaves the previous output complete and untouched and no process behind (its gcc and QEMU
die with it); what it left beside the output (a staging folder) goes with the next run. A sweep stopped by SIGINT
or SIGTERM exits 130 / 143 within seconds with one line saying what it kept; killed by SIGKILL its pool workers die
with it. Either way the rerun resumes the finished settings and every figure equals a clean sweep's."""
from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from tests.faults.helpers import (CAL, MODEL, check_complete, cli, copy_output, finish, folder_state, kill_group,
                                  no_processes_left, siblings, sweep_figures, wait_for)
from tinyaot.files import STAGING_MARK, check_output_folder
from tinyaot.sweep.grid import load_grid
from tinyaot.api import sweep as run_sweep
from tinyaot.sweep.run import ResultCache



def _staging(out: Path) -> list[Path]:
    return [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.tmp-") and p.is_dir()]


# Points of a deploy's run, seen from outside: its staging folder is made and marked as live (a kill between
# the folder and its mark leaves an unmarked folder, which the next run removes only once it is older than a run
# needs to mark it: test_outputs.py covers that rule); the C is written; the firmware is built (QEMU verifies it
# next); the report is written (the switch-over is next).
POINTS = {
    "staging": lambda out: any((s / STAGING_MARK).exists() for s in _staging(out)),
    "sources": lambda out: any((s / "tflm_hello_world_sine.c").exists() for s in _staging(out)),
    "firmware": lambda out: any((s / "firmware" / "firmware.elf").exists() for s in _staging(out)),
    "report": lambda out: any((s / "report.json").exists() for s in _staging(out)),
}


@pytest.mark.parametrize("point,name", [("staging", "SIGKILL"), ("sources", "SIGTERM"), ("firmware", "SIGKILL"),
                                        ("firmware", "SIGINT"), ("report", "SIGKILL")])
def test_deploy_killed(clean_deploy, tmp_path, point, name):
    sig = signal.Signals[name]
    figures, src = clean_deploy
    out = copy_output(src, tmp_path / "out")
    before = folder_state(out)
    proc = cli("deploy", MODEL, "-c", CAL, "--out", out)
    try:
        reached = wait_for(lambda: POINTS[point](out), proc=proc)
        proc.send_signal(sig)  # the tinyaot process only, not its group
        rc, stdout, stderr = finish(proc)
    finally:
        kill_group(proc)
    if not reached:  # the report is written milliseconds before the switch-over: a poll may miss it
        assert point == "report" and rc == 0, (point, rc, stderr)
        check_complete(out)
        return
    assert folder_state(out) == before  # the old output, complete and untouched
    # nothing it started outlives it: gcc, cc1, as, ld and QEMU all name the staging folder on their command line
    assert no_processes_left(str(tmp_path)) == []
    if sig == signal.SIGKILL:
        assert rc == -signal.SIGKILL
    else:
        assert rc == 128 + sig, (rc, stderr)
        lines = [x for x in stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and f"interrupted by {signal.Signals(sig).name}" in lines[0], stderr
        assert _staging(out) == []  # SIGINT/SIGTERM unwind: the staging folder went with the run
    # the next run removes whatever the killed one left beside the output, before it starts
    check_output_folder(out)
    assert siblings(out) == []
    assert folder_state(out) == before  # and its output is still the clean one, complete


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_sweep_stopped_keeps_and_resumes(clean_sweep, data, tmp_path, name):
    sig = signal.Signals[name]
    figures, clean_out, grid = clean_sweep
    clean_cache = clean_out.parent / "cache"
    out = tmp_path / "sweep"
    proc = cli("sweep", MODEL, "-c", CAL, "-d", data, "--grid", grid, "--out", out, "--workers", "2", "--no-cache")
    try:
        assert wait_for(lambda: any((out / "configs").glob("*.json")), proc=proc, step=0.01), finish(proc)
        sent = time.monotonic()
        proc.send_signal(sig)  # the sweep's main process only: its workers are told by it, or die with it
        rc, stdout, stderr = finish(proc, timeout=60)
        took = time.monotonic() - sent
    finally:
        kill_group(proc)
    assert took < 15, took
    # no worker (a fork of the sweep: the same command line) and no tool of theirs is left
    assert no_processes_left(str(out)) == []
    kept = sorted(p.stem for p in (out / "configs").glob("*.json"))
    assert kept, "the finished setting was not kept"
    if sig == signal.SIGKILL:
        assert rc == -signal.SIGKILL
    else:
        assert rc == 128 + sig, (rc, stdout, stderr)
        lines = [x for x in stderr.splitlines() if x.strip()]
        assert len(lines) == 1, stderr
        assert f"interrupted by {signal.Signals(sig).name}" in lines[0] and f"kept {len(kept)} finished" in lines[0]
        assert not [p for p in (out / "configs").iterdir() if p.name.startswith(".")]  # partial ones discarded
        assert not (out / "report.json").exists()
    # the rerun resumes what was kept (measured by the stopped run) and every figure equals the clean sweep's;
    # the rest is measured again after SIGKILL, taken from the clean sweep's result cache otherwise (it costs time)
    lines: list[str] = []
    cache = False if sig == signal.SIGKILL else ResultCache(clean_cache)
    r = run_sweep(MODEL, "stm32", CAL, data, out, load_grid(grid), workers=2, cache=cache, echo=lines.append)
    assert lines[0].startswith(f"{len(kept)} settings already in"), lines
    assert sweep_figures(r) == figures
    assert json.loads((out / "report.json").read_text())["configs"] == r["configs"]
    check_complete(out)
    assert siblings(out) == [] and not [p for p in (out / "configs").iterdir() if p.name.startswith(".")]
