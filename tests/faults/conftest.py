"""The clean runs every fault is compared with, made once per test run (shared by the xdist workers): a verified
deploy of the sine model, its evaluation, and a two-setting sweep (int8, 4-bit weights)."""
from __future__ import annotations

import json

import pytest

from tests.faults.helpers import CAL, MODEL, deploy_figures, shared, sweep_figures, write_data
from tinyaot.api import deploy, evaluate
from tinyaot.sweep.grid import Config
from tinyaot.sweep.run import ResultCache
from tinyaot.api import sweep as run_sweep

GRID = [Config("int8", {}), Config("int4", {"weight_bits": 4})]
GRID_TOML = '[[config]]\nname = "int8"\n\n[[config]]\nname = "int4"\nflags = { weight_bits = 4 }\n'


@pytest.fixture(scope="session")
def clean_deploy(tmp_path_factory):
    """(figures, the verified output folder)."""
    def compute(folder):
        r = deploy(MODEL, "stm32", CAL, folder / "out").report
        return {"figures": deploy_figures(r), "report": r}
    result, folder = shared(tmp_path_factory, "deploy", compute)
    return result, folder / "out"


@pytest.fixture(scope="session")
def data(tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    return write_data(base / "sine_data.npz")


@pytest.fixture(scope="session")
def clean_evaluate(tmp_path_factory, data):
    def compute(folder):
        r = evaluate(MODEL, CAL, data, compare_onnxruntime=False)
        return {k: r[k] for k in ("samples", "float_top1", "int8_top1", "agreement", "weights_bytes", "arena_bytes")}
    return shared(tmp_path_factory, "evaluate", compute)[0]


@pytest.fixture(scope="session")
def clean_sweep(tmp_path_factory, data):
    """(figures by setting, the sweep's folder, the grid file)."""
    def compute(folder):
        (folder / "grid.toml").write_text(GRID_TOML)
        r = run_sweep(MODEL, "stm32", CAL, data, folder / "out", GRID, workers=2,
                      cache=ResultCache(folder / "cache"))
        return {"figures": sweep_figures(r)}
    result, folder = shared(tmp_path_factory, "sweep", compute)
    return result["figures"], folder / "out", folder / "grid.toml"


def figures_of(path) -> dict:
    return deploy_figures(json.loads(path.read_text()))
