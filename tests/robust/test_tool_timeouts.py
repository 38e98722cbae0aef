"""Every external tool runs under a timeout that becomes a one-line TinyaotError saying what timed out, and an
unexpected exception in the CLI is one `Error:` line saying it is a bug, with the traceback in a log file."""
from __future__ import annotations

import ast
import re
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tinyaot.api
from tinyaot.boards import load_board
from tinyaot.toolchain.firmware import build_firmware
from tinyaot.toolchain.proc import run_tool
from tinyaot.cli.main import app
from tinyaot.errors import TinyaotError

ROOT = Path(__file__).resolve().parents[2]


def test_a_tool_that_hangs_is_killed_with_its_children(tmp_path):
    # sh starts `sleep` as a child that inherits the output pipes: killing sh alone would leave the wait for those
    # pipes to last the full 30 s (what subprocess.run(timeout=...) does with gcc's cc1/as/ld).
    start = time.monotonic()
    with pytest.raises(TinyaotError) as err:
        run_tool(["sh", "-c", "sleep 30; echo done"], what="a test tool sleeping", timeout_s=0.5,
                 timeout_hint=" (hint)")
    assert time.monotonic() - start < 10
    assert str(err.value) == "a test tool sleeping timed out after 0.5 s (hint)"


def test_a_tool_that_finishes_returns_its_output_and_status(tmp_path):
    proc = run_tool(["sh", "-c", "echo out; echo err >&2; exit 3"], what="sh", timeout_s=20, cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "out\n", "err\n")


def test_a_tool_that_cannot_start_is_an_error(tmp_path):
    with pytest.raises(TinyaotError, match=r"cannot run no-such-tool-xyz \(checking\)"):
        run_tool([str(tmp_path / "no-such-tool-xyz")], what="checking", timeout_s=5)


def test_a_compile_over_its_timeout_names_the_compiler_and_the_board(tmp_path):
    src = tmp_path / "main.c"
    src.write_text("int main(void) { return 0; }\n")
    with pytest.raises(TinyaotError) as err:
        build_firmware([src], [], load_board("stm32"), tmp_path / "fw", timeout_s=0.01)
    assert re.fullmatch(r"arm-none-eabi-gcc building firmware\.elf for board 'stm32' timed out after 0\.01 s",
                        str(err.value)), str(err.value)


def test_no_tool_runs_without_a_timeout():
    # Every external program goes through run_tool, or passes timeout= itself: check every call in the package.
    offenders = []
    for path in sorted((ROOT / "tinyaot").rglob("*.py")):
        if path.name == "proc.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            owner = node.func.value.id if isinstance(node.func.value, ast.Name) else ""
            if (owner, node.func.attr) in {("subprocess", f) for f in ("run", "call", "check_call", "check_output",
                                                                        "Popen")} | {("os", "system")}:
                if not any(k.arg == "timeout" for k in node.keywords):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_internal_error_is_one_line_with_a_traceback_file(tmp_path, monkeypatch):
    # A bug (here injected: listing the boards raises an exception that is not a TinyaotError) must not show the
    # user a traceback; it says it is a bug and where the traceback went.
    monkeypatch.setenv("TINYAOT_CACHE", str(tmp_path / "cache"))

    def broken():
        raise ZeroDivisionError("division by zero\nsecond line")

    monkeypatch.setattr(tinyaot.api, "list_boards", broken)
    r = CliRunner().invoke(app, ["boards"])
    assert r.exit_code == 3 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    m = re.fullmatch(r"Error: internal error \(a tinyaot bug\): ZeroDivisionError: division by zero second line; "
                     r"traceback written to (.+)", lines[0])
    assert m, lines[0]
    log = Path(m.group(1))
    assert log.parent == tmp_path / "cache" / "logs"
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "in broken" in text and "ZeroDivisionError" in text


def test_tinyaot_error_outside_a_command_handler_is_a_plain_error(monkeypatch):
    def refuses():
        raise TinyaotError("boards folder unreadable")

    monkeypatch.setattr(tinyaot.api, "list_boards", refuses)
    r = CliRunner().invoke(app, ["boards"])
    assert r.exit_code == 2 and r.stderr == "Error: boards folder unreadable\n"
