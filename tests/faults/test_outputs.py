"""Output folders are owned, not taken (issue 18, item 1-2): a folder holding anything tinyaot did not write is
refused before any work with one line naming it, and nothing in it changes; tinyaot's own folder is replaced as a
whole, atomically (a watcher never sees it incomplete), its files from an earlier run removed; a run killed between
the two renames of the fallback switch-over is repaired by the next; names that would become '.', '..' or a path
are refused."""
from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.faults.helpers import CAL, MANIFEST, MODEL, check_complete, copy_output, folder_state, siblings
from tinyaot import files as files_mod
from tinyaot.api import deploy
from tinyaot.cli.main import app
from tinyaot.errors import TinyaotError
from tinyaot.files import STAGING_MARK, check_output_folder, output_folder

from .conftest import GRID_TOML, deploy_figures


def run(*args, **kw):
    return CliRunner().invoke(app, [str(a) for a in args], **kw)


def one_error(r, *fragments, code: int = 2) -> str:
    """One `Error:` line on stderr, nothing on stdout, the documented exit code."""
    assert r.exit_code == code, (r.exit_code, r.output, r.stderr)
    assert r.stdout.strip() == "", r.stdout
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


def foreign_folder(tmp_path: Path) -> Path:
    """A firmware project's folder: a git repository, the user's main.c, and the model and calibration file."""
    proj = tmp_path / "proj"
    (proj / ".git" / "objects").mkdir(parents=True)
    (proj / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (proj / "main.c").write_text("int main(void){return 0;}\n")
    (proj / "model.onnx").write_bytes(MODEL.read_bytes())
    (proj / "cal.npz").write_bytes(CAL.read_bytes())
    return proj


@pytest.mark.parametrize("command", ["deploy", "analyze", "sweep"])
def test_a_folder_with_foreign_files_is_refused_untouched(tmp_path, command, data):
    proj = foreign_folder(tmp_path)
    before = folder_state(proj)
    model, cal = proj / "model.onnx", proj / "cal.npz"  # the inputs inside the folder itself, as in the issue
    args = {"deploy": ["deploy", model, "-c", cal, "--out", proj],
            "analyze": ["analyze", model, "-c", cal, "-d", data, "--out", proj],
            "sweep": ["sweep", model, "-c", cal, "-d", data, "--out", proj]}[command]
    line = one_error(run(*args), str(proj), ".git/", "main.c", "model.onnx", "cal.npz")
    assert "tinyaot did not write" in line
    assert folder_state(proj) == before and siblings(proj) == []


def test_an_edited_generated_file_or_a_damaged_manifest_is_refused(clean_deploy, tmp_path):
    out = copy_output(clean_deploy[1], tmp_path / "out")
    with open(out / "Makefile", "a") as f:
        f.write("# my change\n")
    before = folder_state(out)
    one_error(run("deploy", MODEL, "-c", CAL, "--out", out), "Makefile (changed since tinyaot wrote it)")
    assert folder_state(out) == before
    # a manifest that is not tinyaot's (damaged): nothing in the folder can be told to be tinyaot's
    (out / "Makefile").write_bytes((clean_deploy[1] / "Makefile").read_bytes())
    (out / MANIFEST).write_bytes(b"\x00\xff not json")
    before = folder_state(out)
    one_error(run("deploy", MODEL, "-c", CAL, "--out", out), "tinyaot did not write", "Makefile")
    assert folder_state(out) == before and siblings(out) == []


@pytest.mark.parametrize("where", [".", "/", "file", "cwd-parent"])
def test_out_that_cannot_be_a_folder_of_its_own(tmp_path, monkeypatch, where):
    work = tmp_path / "work"
    work.mkdir()
    (work / "keep.txt").write_text("mine")
    monkeypatch.chdir(work)
    out = {".": ".", "/": "/", "file": "keep.txt", "cwd-parent": str(tmp_path)}[where]
    before = folder_state(tmp_path)
    one_error(run("deploy", MODEL, "-c", CAL, "--out", out), out if where != "/" else "root folder")
    assert folder_state(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]  # no '..tmp-*' beside it (the 552 KB)


def test_redeploy_replaces_only_tinyaot_files_atomically(clean_deploy, tmp_path):
    """The old output with what its Makefile made (objects, `make run`'s files) and a file an earlier tinyaot wrote
    that this run does not: replaced as a whole. A watcher polling the folder throughout sees, every time, one
    complete output (its manifest's files, each with the recorded bytes): the old one or the new one."""
    figures, src = clean_deploy
    out = copy_output(src, tmp_path / "out")
    # the folder's own Makefile: the library, and the verification firmware run under QEMU on the samples the
    # folder carries (firmware/input.bin)
    for target in ("all", "run"):
        p = subprocess.run(["make", "-s", target], cwd=out, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
    assert (out / "libtinyaot_tflm_hello_world_sine.a").is_file() and (out / "tflm_hello_world_sine.o").is_file()
    out_size = figures["report"]["model"]["outputs"][0]["shape"][-1]
    assert (out / "firmware" / "output.bin").stat().st_size == 8 * out_size  # 8 verified samples, int8 outputs
    assert (out / "firmware" / "stats.txt").is_file()
    manifest = json.loads((out / MANIFEST).read_text())
    (out / "tinyaot_old_kernel.c").write_text("/* an earlier run's kernel */\n")
    manifest["files"]["tinyaot_old_kernel.c"] = files_mod.sha256_file(out / "tinyaot_old_kernel.c")
    (out / MANIFEST).write_text(json.dumps(manifest))
    seen, problems, stop = [], [], threading.Event()

    def watch():
        while not stop.is_set():
            try:
                m = json.loads((out / MANIFEST).read_text())
                for rel, digest in m["files"].items():
                    if files_mod.sha256_file(out / rel) != digest:
                        raise AssertionError(f"{rel} does not match its manifest")
                seen.append(m["tinyaot_version"])
            except (OSError, ValueError, AssertionError) as exc:
                # the folder was swapped while this pass read it: the same pass again must see a whole one
                try:
                    m = json.loads((out / MANIFEST).read_text())
                    assert all(files_mod.sha256_file(out / r) == d for r, d in m["files"].items())
                except (OSError, ValueError, AssertionError):
                    problems.append(repr(exc))

    t = threading.Thread(target=watch)
    t.start()
    try:
        r = deploy(MODEL, "stm32", CAL, out).report
    finally:
        stop.set()
        t.join()
    assert not problems, problems[:3]
    assert len(seen) > 10
    assert deploy_figures(r) == figures["figures"]
    check_complete(out)
    assert not (out / "tinyaot_old_kernel.c").exists() and not (out / "tflm_hello_world_sine.o").exists()
    assert not (out / "firmware" / "output.bin").exists() and siblings(out) == []
    assert not (out / "libtinyaot_tflm_hello_world_sine.a").exists()


def test_fallback_switch_and_its_repair(tmp_path, monkeypatch):
    """Where the file system cannot exchange two folders, the switch-over is two renames; a run killed between them
    leaves `.NAME.old-*` and no NAME, which the next run puts back (then replaces as usual)."""
    out = tmp_path / "out"
    with output_folder(out, "test") as tmp:
        (tmp / "a.txt").write_text("old")
    monkeypatch.setattr(files_mod, "_exchange", lambda a, b: False)
    with output_folder(out, "test") as tmp:
        (tmp / "b.txt").write_text("new")
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "b.txt"] and siblings(out) == []
    # the state a kill between the two renames leaves: NAME moved away (with the lock marker it held, now stale),
    # and a finished staging folder beside it
    old = tmp_path / ".out.old-killed1"
    out.rename(old)
    (old / STAGING_MARK).touch()
    (tmp_path / ".out.tmp-killed2").mkdir()
    (tmp_path / ".out.tmp-killed2" / STAGING_MARK).touch()
    check_output_folder(out)
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST, "b.txt"] and siblings(out) == []


def test_a_live_staging_folder_is_left_alone(tmp_path):
    """Two runs into the same parent: the tidying of one never removes the staging folder of a live other."""
    out = tmp_path / "out"
    with output_folder(out, "test") as tmp:
        (tmp / "x").write_text("1")
        check_output_folder(out)  # another run starting now
        assert tmp.is_dir() and (tmp / "x").exists()
    assert (out / "x").read_text() == "1"


def test_an_unmarked_staging_folder_goes_once_it_is_old(tmp_path):
    """A run killed between making its staging folder and marking it leaves an unmarked folder. A run that is
    making its own right now looks the same, so the folder is left while young and removed once older than
    files._YOUNG_S."""
    out = tmp_path / "out"
    left = tmp_path / ".out.tmp-killed3"
    left.mkdir()
    check_output_folder(out)
    assert left.is_dir()  # young: maybe a live run about to mark it
    old = time.time() - files_mod._YOUNG_S - 1
    os.utime(left, (old, old))
    check_output_folder(out)
    assert not left.exists() and siblings(out) == []


@pytest.mark.parametrize("name,why", [(".", "'.' or '..'"), ("..", "'.' or '..'"), ("a/b", "separators"),
                                      ("CON", "reserved"), (".hidden", "cannot start with '.'"),
                                      ("nul.txt", "reserved")])
def test_setting_names_that_would_be_paths(tmp_path, data, name, why):
    grid = tmp_path / "grid.toml"
    grid.write_text(f'[[config]]\nname = "{name}"\n')
    out = tmp_path / "sweep"
    one_error(run("sweep", MODEL, "-c", CAL, "-d", data, "--grid", grid, "--out", out), "config name", why)
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["grid.toml"]


def test_two_names_one_file_on_a_case_insensitive_disk(tmp_path, data):
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID_TOML + '\n[[config]]\nname = "INT8"\n')
    one_error(run("sweep", MODEL, "-c", CAL, "-d", data, "--grid", grid, "--out", tmp_path / "s"), "twice")


def test_single_files_are_replaced_only_when_tinyaot_wrote_them(tmp_path):
    target = tmp_path / "figures.json"
    files_mod.write_file(target, '{"tinyaot_version": "0"}\n', replaceable=files_mod.tinyaot_json)
    files_mod.write_file(target, '{"tinyaot_version": "1"}\n', replaceable=files_mod.tinyaot_json)
    assert json.loads(target.read_text()) == {"tinyaot_version": "1"}
    mine = tmp_path / "notes.json"
    mine.write_text('{"mine": true}\n')
    with pytest.raises(TinyaotError, match="not a file tinyaot wrote"):
        files_mod.write_file(mine, "{}", what="--json", replaceable=files_mod.tinyaot_json)
    assert mine.read_text() == '{"mine": true}\n'
    with pytest.raises(TinyaotError, match="is a folder"):
        files_mod.write_file(tmp_path, "{}", what="--json")
    # a temporary file a killed writer left (no live lock on it) goes with the next write of that name
    stale = tmp_path / ".figures.json.tmp-killed"
    stale.write_text("half")
    files_mod.write_file(target, '{"tinyaot_version": "2"}\n', replaceable=files_mod.tinyaot_json)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figures.json", "notes.json"]
    assert os.stat(target).st_mode & 0o777 == 0o666 & ~files_mod._umask()
