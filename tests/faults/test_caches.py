"""Every cache kind damaged on purpose (issue 18, item 4): the QEMU plugin and a host JIT library truncated or
overwritten, sweep results in the cache and in --out/configs with binary bytes or one digit changed, tuning records
in the cache altered and a tuning log that is binary. Each costs a rebuild or a new measurement and one warning
line, never a crash, and every figure equals a clean run's. Each test has a cache folder of its own."""
from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest

from tests.faults.helpers import CAL, MODEL, check_complete, cli, copy_output, finish, sweep_figures
from tinyaot.api import deploy, evaluate
from tinyaot.errors import TinyaotError
from tinyaot.pipeline.tune import read_log
from tinyaot.sweep.grid import load_grid
from tinyaot.sweep.run import ResultCache
from tinyaot.api import sweep as run_sweep
from tinyaot.toolchain.qemu import plugin_path

from .conftest import deploy_figures


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("TINYAOT_CACHE", str(folder))
    return folder


def _damage(path, how: str) -> None:
    data = path.read_bytes()
    if how in ("truncated", "overwritten"):
        # a new file in its place (a library this process already mapped must not change under it)
        tmp = path.with_name(path.name + ".damage")
        tmp.write_bytes(data[: len(data) // 3] if how == "truncated" else
                        b"\x7fELF" + bytes(range(256)) * (len(data) // 256))
        os.replace(tmp, path)
    elif how == "binary":
        path.write_bytes(b"\x00\xff\xfe\x80 binary " + data[:40])
    elif how == "digit":  # one digit of a figure changed: still valid JSON, still the same shape
        text = data.decode()
        i = next(k for k, ch in enumerate(text) if ch.isdigit() and k > text.find("top1"))
        path.write_text(text[:i] + str((int(text[i]) + 1) % 10) + text[i + 1:])


def test_damaged_built_libraries_are_rebuilt(cache, clean_deploy, clean_evaluate, data, tmp_path, capfd):
    """Before: a damaged host library made `evaluate` exit 3 or crash (rc 139) or report the host C wrong on every
    run; a damaged plugin failed every deploy. Here the host library is truncated and the plugin overwritten."""
    evaluate(MODEL, CAL, data, compare_onnxruntime=False)
    (host_lib,) = (cache / "host").glob("*.so")
    plugin = plugin_path()  # the QEMU plugin, built into this cache
    _damage(host_lib, "truncated")
    _damage(plugin, "overwritten")
    capfd.readouterr()
    # a new process loads the library (this one has it mapped already)
    rc, out, err = finish(cli("evaluate", MODEL, "-c", CAL, "-d", data, "--no-onnxruntime", "--json",
                              tmp_path / "figures.json", env={"TINYAOT_CACHE": str(cache)}))
    assert rc == 0, err
    assert err.count("Warning: cached host library") == 1 and "building it again" in err, err
    ev = json.loads((tmp_path / "figures.json").read_text())
    for key, value in clean_evaluate.items():
        assert ev[key] == value, key
    r = deploy(MODEL, "stm32", CAL, tmp_path / "out").report
    assert "Warning: cached QEMU instruction-count plugin" in capfd.readouterr().err
    assert deploy_figures(r) == clean_deploy[0]["figures"]
    # rebuilt in place, each with its recorded hash
    for lib in (host_lib, plugin):
        assert (lib.parent / (lib.name + ".sha256")).read_text().strip() == hashlib.sha256(lib.read_bytes()).hexdigest()


def test_damaged_sweep_records_are_measured_again(cache, clean_sweep, data, tmp_path, capfd):
    """int8: its --out record binary, its cache entry good (taken from the cache); int4: its record and its cache
    entry each with a digit changed (measured again). A cache entry of binary bytes is a miss too."""
    figures, src, grid = clean_sweep
    out = copy_output(src, tmp_path / "sweep")
    results = ResultCache(tmp_path / "sweep-cache")
    keys = {}
    for name in ("int8", "int4"):
        record = json.loads((out / "configs" / f"{name}.json").read_text())
        keys[name] = record["key"]
        results.put(record["key"], record)
    _damage(out / "configs" / "int8.json", "binary")
    _damage(out / "configs" / "int4.json", "digit")
    _damage(results.folder / f"{keys['int4']}.json", "digit")
    capfd.readouterr()
    lines: list[str] = []
    r = run_sweep(MODEL, "stm32", CAL, data, out, load_grid(grid), workers=2, cache=results, echo=lines.append)
    err = capfd.readouterr().err
    assert "configs/int8.json is damaged (not text)" in err and "configs/int4.json is damaged (checksum" in err
    assert f"{keys['int4']}.json is damaged (checksum mismatch)" in err and err.count("Warning:") == 3, err
    assert lines[0] == f"0 settings already in {out / 'configs'}, 1 from the cache; measuring 1", lines
    assert sweep_figures(r) == figures
    check_complete(out)
    _damage(results.folder / f"{keys['int8']}.json", "binary")
    assert results.get(keys["int8"]) is None and "is damaged (not text)" in capfd.readouterr().err


def test_damaged_tuning_records_and_a_binary_log(cache, tmp_path, capfd):
    first = deploy(MODEL, "mps2-an386", CAL, tmp_path / "one", tune=True).report
    records = sorted((cache / "tune").glob("*.json"))
    assert records and first["tuning"]["rounds"] >= 2
    for k, rec in enumerate(records):
        _damage(rec, "binary" if k % 2 == 0 else "overwritten")
    log = tmp_path / "tuning.jsonl"
    log.write_bytes(b"\x00\xff\xfe not a log")
    capfd.readouterr()
    # measuring (--tune) would write the log: a file that is no tuning log is refused, before any work, untouched
    with pytest.raises(TinyaotError, match="not a file tinyaot wrote"):
        deploy(MODEL, "mps2-an386", CAL, tmp_path / "two", tune=True, tuning_log=log)
    assert log.read_bytes() == b"\x00\xff\xfe not a log" and not (tmp_path / "two").exists()
    # the damaged cache records are measured again: the same choices and instructions as the clean run
    again = deploy(MODEL, "mps2-an386", CAL, tmp_path / "two", tune=True).report
    err = capfd.readouterr().err
    assert err.count("cached tuning record") == len(records), err
    assert again["tuning"]["rounds"] == first["tuning"]["rounds"]
    assert deploy_figures(again) == deploy_figures(first)
    # only reading the binary log (no --tune): a hint that cannot be read is ignored with a warning
    assert read_log(log) == {} and "is not a tuning log" in capfd.readouterr().err
    shutil.rmtree(cache)


def test_qemu_run_records_are_taken_and_damaged_ones_run_again(cache, clean_deploy, tmp_path, capfd, monkeypatch):
    """The QEMU run cache (toolchain/qemu.run_qemu(cached=True): the debug build's stack run and the uncompressed
    model's run): the same ELF on the same input is taken from its record, files and counts equal to the real
    run's and QEMU not started; another input is a miss; a damaged record is one warning and a real run."""
    from tinyaot.boards import load_board
    from tinyaot.toolchain import qemu

    fw = clean_deploy[1] / "firmware"
    board = load_board("stm32")

    def run(name, data=None):
        work = tmp_path / name
        work.mkdir()
        (work / "input.bin").write_bytes(data if data is not None else (fw / "input.bin").read_bytes())
        result = qemu.run_qemu(fw / "firmware.elf", board, work, cached=True)
        return result, {f: (work / f).read_bytes() for f in qemu.RUN_FILES}

    first, files = run("first")
    assert first.exit_code == 0 and first.segments and files["output.bin"]
    (record,) = (cache / qemu.RUN_CACHE).glob("*.json")
    real_tool = qemu.run_tool

    def no_qemu(*a, **k):
        raise AssertionError("QEMU ran on a recorded run")

    monkeypatch.setattr(qemu, "run_tool", no_qemu)
    again, again_files = run("again")
    assert again == first and again_files == files
    with pytest.raises(AssertionError, match="QEMU ran"):  # another input: a miss
        run("other", bytes(len((fw / "input.bin").read_bytes())))
    monkeypatch.setattr(qemu, "run_tool", real_tool)
    _damage(record, "digit")
    capfd.readouterr()
    third, third_files = run("third")
    err = capfd.readouterr().err
    assert "cached QEMU run" in err and "is damaged (checksum mismatch)" in err and err.count("Warning:") == 1
    assert third == first and third_files == files
