"""`tinyaot sweep`: the report's figures, equal to separate `evaluate` and `deploy` runs; the files it writes; resuming
and the content-hash cache; one-line errors."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from tinyaot.api import deploy, evaluate
from tinyaot.cli.main import app
from tinyaot.compress.options import CompressionOptions
from tinyaot.sweep.grid import DEFAULT_GRID, load_grid
from tinyaot.sweep.report import pareto
from tinyaot.sweep.run import ResultCache
from tinyaot.api import sweep as run_sweep

from .conftest import GRID, MODEL, ROOT, SAMPLES

FIELDS = ("name", "flags", "top1", "weights_bytes", "flash_bytes", "arena_bytes", "instructions")


def test_report_json_has_every_figure(small_sweep):
    r = json.loads((small_sweep["out"] / "report.json").read_text())
    assert [c["name"] for c in r["configs"]] == ["int8", "clusters16"]
    for c in r["configs"]:
        assert all(k in c for k in FIELDS) and c["error"] is None
        assert 0 < c["top1"] <= 1 and c["samples"] == SAMPLES and c["verified"]
        for k in ("weights_bytes", "flash_bytes", "arena_bytes", "instructions"):
            assert isinstance(c[k], int) and c[k] > 0
    plain, clustered = r["configs"]
    assert clustered["weights_bytes"] < plain["weights_bytes"] and clustered["flash_bytes"] < plain["flash_bytes"]
    for x in ("flash_bytes", "arena_bytes", "instructions"):  # top-1 against each axis, its own front
        assert r["pareto"][x] == pareto(r["configs"], x)
    assert "clusters16" in r["pareto"]["flash_bytes"]  # the smallest flash is always on the front


def test_figures_equal_separate_evaluate_and_deploy(small_sweep, tmp_path):
    """The clustered setting, measured again the way a user would: `evaluate` and `deploy` by hand."""
    row = small_sweep["report"]["configs"][1]
    options = CompressionOptions(clusters=16)
    cal = small_sweep["calibration"]
    ev = evaluate(MODEL, cal, small_sweep["data"], compare_onnxruntime=False, compression=options)
    dep = deploy(MODEL, "stm32", cal, tmp_path / "d", compression=options).report
    assert row["top1"] == ev["int8_top1"]
    assert row["weights_bytes"] == dep["memory"]["weights_bytes"] == ev["weights_bytes"]
    assert row["flash_bytes"] == dep["memory"]["flash_bytes"]
    assert row["arena_bytes"] == dep["memory"]["arena_bytes"]
    assert row["instructions"] == dep["verify"]["instructions"]


def test_files_written(small_sweep):
    out = small_sweep["out"]
    for png in ("pareto_flash.png", "pareto_arena.png", "pareto_instructions.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "report.md").read_text()
    assert md.count("\n| int8 |") == 1 and "`--clusters 16`" in md and "pareto_instructions.png" in md
    assert "- against instructions: " in md
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3 and 'src="pareto' not in html  # self-contained
    for c in GRID:
        assert json.loads((out / "configs" / f"{c.name}.json").read_text())["name"] == c.name
        assert (out / "configs" / c.name / "report.json").exists()  # the setting's deploy folder


def test_rerun_resumes_and_cache_serves_another_folder(small_sweep, tmp_path):
    first = small_sweep["report"]["configs"]
    lines = []
    again = run_sweep(MODEL, "stm32", small_sweep["calibration"], small_sweep["data"], small_sweep["out"], GRID,
                      cache=small_sweep["cache"], echo=lines.append)
    assert lines == [f"2 settings already in {small_sweep['out'] / 'configs'}, 0 from the cache; measuring 0"]
    assert again["configs"] == first
    lines = []
    other = run_sweep(MODEL, "stm32", small_sweep["calibration"], small_sweep["data"], tmp_path / "o", GRID,
                      cache=small_sweep["cache"], echo=lines.append)
    assert lines == ["0 settings already in " + str(tmp_path / "o" / "configs") + ", 2 from the cache; measuring 0"]
    assert other["configs"] == first


def test_cache_evicts_least_recently_used(tmp_path):
    cache = ResultCache(tmp_path, cap_bytes=10_000)
    big = {"pad": "x" * 3000}
    for k in "abc":
        cache.put(k, big)
    import os
    import time
    for i, k in enumerate("abc"):  # mtimes in the order written, a second apart
        os.utime(tmp_path / f"{k}.json", (time.time() - 10 + i, time.time() - 10 + i))
    assert cache.get("a") is not None  # refreshes a: b is now the least recently used
    cache.put("d", big)
    assert cache.get("b") is None
    assert all(cache.get(k) is not None for k in "acd")


def test_default_and_example_grids():
    assert len(DEFAULT_GRID) >= 8
    kinds = {k for c in DEFAULT_GRID for k in c.flags}
    assert {"clusters", "weight_bits", "prune", "prune_channels", "prune_pattern"} <= kinds
    assert any(len(c.flags) >= 2 for c in DEFAULT_GRID) and any(not c.flags for c in DEFAULT_GRID)
    grid = load_grid(ROOT / "examples" / "sweep_grid.toml")
    assert [c.name for c in grid][:2] == ["int8", "clusters16"]
    assert grid[-1].flags["compression"] == str(ROOT / "examples" / "compression.toml")


def test_bad_input_is_one_line(small_sweep, tmp_path):
    grid = tmp_path / "g.toml"
    grid.write_text('[[config]]\nname = "x"\nflags = { cluster = 16 }\n')
    bad_value = tmp_path / "v.toml"  # refused before any setting runs, naming the setting
    bad_value.write_text('[[config]]\nname = "ok"\nflags = {}\n[[config]]\nname = "k1"\nflags = { clusters = 1 }\n')
    cal, data = small_sweep["calibration"], small_sweep["data"]
    base = ["sweep", str(MODEL), "-c", str(cal), "-d", str(data), "--out", str(tmp_path / "o")]
    for extra, message in ((["--grid", str(grid)], "unknown flag(s) cluster"),
                           (["--grid", str(bad_value)], "setting k1: --clusters must be from 2 to 256"),
                           (["--board", "nope"], "nope"),
                           (["--executor", "slurm"], "unknown executor 'slurm'")):
        r = CliRunner().invoke(app, base + extra)
        assert r.exit_code == 2, r.output  # input error, not a regression (README "exit codes")
        assert r.output.strip().startswith("Error: ") and message in r.output and "Traceback" not in r.output
        assert not list((tmp_path / "o").glob("configs/*.json"))  # nothing measured


def test_interrupted_sweep_measures_only_what_is_missing(small_sweep, tmp_path):
    """A sweep stopped after one of its settings: the rerun keeps that one and measures the other (no cache). The
    setting left to measure is int8 (2 s; clusters16's reconstruction costs 10 s): what is checked is which
    settings the rerun measures, not what one costs."""
    import shutil

    out = tmp_path / "o"
    shutil.copytree(small_sweep["out"], out)  # the folder with its manifest: tinyaot's own output
    (out / "configs" / "int8.json").unlink()
    lines = []
    r = run_sweep(MODEL, "stm32", small_sweep["calibration"], small_sweep["data"], out, GRID, cache=False,
                  echo=lines.append)
    assert lines[0] == f"1 settings already in {out / 'configs'}, 0 from the cache; measuring 1"
    # no terminal: one line per finished setting (name, figures, seconds, elapsed, how many left)
    assert len(lines) == 2 and lines[1].startswith("[2/2] int8: top-1 ") and lines[1].endswith(", 0 left")
    strip = ("seconds",)
    assert [{k: v for k, v in c.items() if k not in strip} for c in r["configs"]] == \
        [{k: v for k, v in c.items() if k not in strip} for c in small_sweep["report"]["configs"]]
