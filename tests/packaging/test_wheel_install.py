"""Installable anywhere: a wheel built from the repository carries templates/ and boards/ as package data, and,
installed in a fresh virtual environment, lists the boards and deploys and verifies a model from a directory that
is not the repository.

The fresh environment gets tinyaot from the wheel only. Its third-party dependencies (onnx, onnxruntime, numpy, ...)
come from the environment running the tests, through a .pth file written after the install, so the test needs no
network and stays fast; `tinyaot` itself is checked to be imported from the fresh environment. (A full install with
the dependencies from the package index is the same wheel with `pip install` instead of `--no-deps`.)"""
from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from shared_data import ROOT

# What a build reads: the package, the two data folders, the build configuration and the readme (long description).
BUILD_INPUTS = ["tinyaot", "templates", "boards", "setup.py", "pyproject.toml", "README.md"]
JUNK_SUFFIXES = (".pyc", ".so", ".o", ".elf")  # build products left in the tree (.gitignore), not sources


def _run(cmd, cwd: Path, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the build inputs: an in-tree build would reuse a stale build/ folder (files
    deleted from the tree still shipped) and collide with a concurrent build of the same checkout."""
    src = tmp_path_factory.mktemp("src")
    junk = shutil.ignore_patterns("__pycache__", *(f"*{s}" for s in JUNK_SUFFIXES))
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=junk)
        else:
            shutil.copy2(ROOT / name, src / name)
    dist = tmp_path_factory.mktemp("dist")
    r = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, src], cwd=dist)
    assert r.returncode == 0, r.stdout + r.stderr
    (found,) = dist.glob("tinyaot-*.whl")
    return found


def test_wheel_carries_templates_and_boards(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in ("templates", "boards"):
        files = [p for p in (ROOT / folder).rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts and p.suffix not in JUNK_SUFFIXES]
        assert files
        for p in files:
            assert f"tinyaot/_data/{p.relative_to(ROOT).as_posix()}" in names, p
    assert "tinyaot/toolchain/insn_plugin.c" in names  # the QEMU plugin's source, compiled on first use
    # test material stays out of the product (tests/fixtures holds data that must not ship)
    assert not [n for n in names if n.startswith(("tests/", "ci/", "examples/", "calibration_data/"))]
    assert not [n for n in names if n.endswith((".npz", ".onnx"))]


def test_fresh_venv_deploys_and_verifies_from_another_directory(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(env_dir)
    bin_dir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    python = bin_dir / ("python.exe" if os.name == "nt" else "python")
    # Installed before the .pth below exists, so this pip sees only the fresh environment (and never touches the
    # tinyaot installed in the environment running the tests).
    r = _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel],
             cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    fresh_site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                           cwd=tmp_path).stdout.strip())
    deps = [p for p in {*site.getsitepackages(), sysconfig.get_paths()["purelib"]} if Path(p).is_dir()]
    (fresh_site / "zz_test_dependencies.pth").write_text("".join(f"{p}\n" for p in deps))

    work = tmp_path / "elsewhere"  # neither the repository nor anything below it
    work.mkdir()
    shutil.copy(ROOT / "examples" / "kws_dscnn.onnx", work / "model.onnx")
    shutil.copy(ROOT / "calibration_data" / "kws_dscnn.npz", work / "cal.npz")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}

    r = _run([python, "-c", "import tinyaot, tinyaot.paths as p; print(tinyaot.__file__); print(p.TEMPLATES); "
                            "print(p.BOARDS)"], cwd=work, env=env)
    assert r.returncode == 0, r.stderr
    for line in r.stdout.split():
        assert Path(line).resolve().is_relative_to(fresh_site.resolve()), line
    assert not Path(r.stdout.split()[0]).resolve().is_relative_to(ROOT)

    tinyaot = bin_dir / "tinyaot"
    r = _run([tinyaot, "boards"], cwd=work, env=env)
    assert r.returncode == 0, r.stderr
    assert any(line.split()[:1] == ["stm32"] for line in r.stdout.splitlines()), r.stdout

    r = _run([tinyaot, "deploy", "model.onnx", "--board", "stm32", "--calibration", "cal.npz", "--out", "out"],
             cwd=work, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads((work / "out" / "report.json").read_text())
    v = report["verify"]
    assert v["ran"] and v["exit_code"] == 0 and v["outputs_match"] and v["max_abs_diff_vs_reference"] == 0
    assert v["max_abs_diff_vs_onnxruntime"] <= 1
    # the convolution kernel (generic or a faster variant, as chosen for the board) and the HAL came from the wheel
    assert list((work / "out").glob("tinyaot_convolve_s8*.c")) and (work / "out" / "hal" / "linker.ld").is_file()
