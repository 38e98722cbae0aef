"""The environment fails, not tinyaot (issue 18, items 4-5): a full disk, read-only folders, a cache setting that
points at a file, an unwritable home, and paths that point at a folder where a file goes (or the other way round)
each give exit code 2 and one `Error:` line naming the path and what to do; the previous output stays complete and
nothing is left behind.

The full disk and the read-only places are tmpfs mounts in a private mount namespace (`unshare`), where a test needs
no privileges it does not have; where no namespace can be made, those tests are skipped with the reason."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.faults.helpers import CAL, MANIFEST, MODEL, cli_args, folder_state, in_namespace, namespace_prefix
from tinyaot.cli.main import app

from .test_outputs import one_error

NAMESPACE = namespace_prefix()
needs_namespace = pytest.mark.skipif(NAMESPACE is None, reason="no private mount namespace here (unshare -m / -Urm "
                                     "failed), so no tmpfs can be mounted for a full disk or a read-only folder")


def run(*args, env=None):
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def _one_line(result: dict, *fragments) -> str:
    assert result["rc"] == 2, result
    lines = [x for x in result["stderr"].splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result["stderr"]
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


@needs_namespace
def test_full_disk_and_read_only_places(clean_deploy, data, tmp_path):
    """A disk with the old output on it and no room left: deploy, evaluate --json and sweep stop with one line
    naming the place, the old output complete and nothing new on the disk. A read-only folder for --out and --json,
    and a read-only home with no TINYAOT_CACHE: one line each, naming the path, before any work is lost."""
    disk, ro = tmp_path / "disk", tmp_path / "ro"
    src = clean_deploy[1]
    size = sum(p.stat().st_size for p in src.rglob("*") if p.is_file())
    (tmp_path / "grid.toml").write_text('[[config]]\nname = "int8"\n')
    spec = {"mounts": [{"at": str(disk), "options": f"size={size + 256 * 1024}"},
                       {"at": str(ro), "options": "size=64k", "remount_ro": True}],
            "copy": [{"from": str(src), "to": str(disk / "out")}],
            "fill": [{"at": str(disk), "free": 0}],
            "runs": [{"cli": cli_args("deploy", MODEL, "-c", CAL, "--out", disk / "out")},
                     {"cli": cli_args("evaluate", MODEL, "-c", CAL, "-d", data, "--no-onnxruntime", "--json",
                                      disk / "figures.json")},
                     {"cli": cli_args("sweep", MODEL, "-c", CAL, "-d", data, "--out", disk / "sweep", "--grid",
                                      tmp_path / "grid.toml", "--workers", "1", "--no-qemu")},
                     {"cli": cli_args("deploy", MODEL, "-c", CAL, "--out", ro / "out", "--no-verify")},
                     {"cli": cli_args("evaluate", MODEL, "-c", CAL, "-d", data, "--no-onnxruntime", "--json",
                                      ro / "figures.json")},
                     {"cli": cli_args("evaluate", MODEL, "-c", CAL, "-d", data, "--no-onnxruntime"),
                      "env": {"HOME": str(ro), "TINYAOT_CACHE": ""}}],
            "inspect": [str(disk), str(ro)]}
    res = in_namespace(NAMESPACE, spec)
    full_deploy, full_json, full_sweep, ro_deploy, ro_json, ro_home = res["results"]
    for r in (full_deploy, full_json, full_sweep):
        _one_line(r, "No space left on device", str(disk), "free some space")
    _one_line(ro_deploy, str(ro / "out"), "Read-only file system", "choose a writable folder")
    _one_line(ro_json, str(ro / "figures.json"), "Read-only file system")
    _one_line(ro_home, str(ro / ".cache" / "tinyaot"), "Read-only file system", "TINYAOT_CACHE")
    state = res["state"]
    names = sorted(Path(p).relative_to(disk).as_posix() for p in state if Path(p).is_relative_to(disk))
    want = sorted(["filler", "out"] + [f"out/{p.relative_to(src).as_posix()}" for p in src.rglob("*")])
    assert names == want  # no staging folder, no half-written figures.json, no sweep folder
    for rel, content in folder_state(src).items():
        assert bytes.fromhex(state[str(disk / "out" / rel)]) == content, rel
    assert not [p for p in state if Path(p).is_relative_to(ro)]


def test_cache_setting_that_is_a_file(tmp_path, data):
    f = tmp_path / "cache-file"
    f.write_text("not a folder")
    r = run("evaluate", MODEL, "-c", CAL, "-d", data, "--no-onnxruntime", env={"TINYAOT_CACHE": str(f)})
    one_error(r, str(f), "TINYAOT_CACHE")
    assert f.read_text() == "not a folder"


def test_paths_of_the_wrong_kind(tmp_path, data):
    folder = tmp_path / "a-folder"
    folder.mkdir()
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\x00\xff\xfe\x80 binary")
    text = tmp_path / "text.txt"
    text.write_text("hello")
    bad_flags = tmp_path / "flags.toml"
    bad_flags.write_text('[[config]]\nname = "x"\nflags = "x"\n')
    sweep = ["sweep", MODEL, "-c", CAL, "-d", data, "--out", tmp_path / "s"]
    cases = [
        (["deploy", MODEL, "-c", folder, "--out", tmp_path / "o", "--no-verify"], [str(folder)]),
        (["deploy", folder, "-c", CAL, "--out", tmp_path / "o", "--no-verify"], [str(folder)]),
        (["deploy", MODEL, "-c", CAL, "--out", tmp_path / "o", "--tuning-log", folder, "--no-verify"],
         [str(folder), "folder"]),
        (["evaluate", MODEL, "-c", CAL, "-d", data, "--json", folder], [str(folder), "folder"]),
        (["evaluate", MODEL, "-c", CAL, "-d", data, "--json", text], [str(text), "not a file tinyaot wrote"]),
        ([*sweep, "--grid", folder], [str(folder), "not a file"]),
        ([*sweep, "--grid", binary], [str(binary), "not valid TOML"]),
        ([*sweep, "--grid", bad_flags], ["flags must be a table"]),
        ([*sweep, "--baseline", folder], [str(folder), "not a file"]),
    ]
    for args, fragments in cases:
        one_error(run(*args), *fragments)
    assert text.read_text() == "hello" and list(folder.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-folder", "binary.toml", "flags.toml", "text.txt"]


def test_compare_given_what_is_no_report(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"configs": [{"name": "int8", "top1": 0.9}]}))
    string_top1 = tmp_path / "string.json"
    string_top1.write_text(json.dumps({"configs": [{"name": "int8", "top1": "0.9"}]}))
    folder = tmp_path / "folder"
    folder.mkdir()
    binary = tmp_path / "tol.toml"
    binary.write_bytes(b"\x00\xff\xfe binary")
    one_error(run("compare", good, string_top1), "top1 must be a number")
    one_error(run("compare", folder, good), str(folder), "not a file")
    one_error(run("compare", good, good, "--tolerances", binary), str(binary), "not valid TOML")
    one_error(run("compare", good, good, "--tolerances", folder), str(folder), "not a file")


def test_stale_manifest_of_a_nested_folder_does_not_hide_foreign_files(clean_deploy, tmp_path):
    """A sweep folder's per-setting deploy folders are judged by their own manifests: a foreign file inside one is
    still foreign."""
    from tinyaot.files import foreign_files

    out = tmp_path / "s"
    (out / "configs").mkdir(parents=True)
    (out / MANIFEST).write_text(json.dumps({"files": {}, "dirs": ["configs"], "products": ["configs/*.json"]}))
    (out / "configs" / "int8").mkdir()
    for p in clean_deploy[1].iterdir():
        if p.is_file():
            (out / "configs" / "int8" / p.name).write_bytes(p.read_bytes())
    os.makedirs(out / "configs" / "int8" / "hal")
    os.makedirs(out / "configs" / "int8" / "firmware")
    (out / "configs" / "int8" / "notes.txt").write_text("mine")
    assert "configs/int8/notes.txt" in foreign_files(out)
