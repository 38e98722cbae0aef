"""Running the external tools tinyaot drives (arm-none-eabi-gcc, size, nm, QEMU, the host compiler) with a
timeout: a tool that hangs (a stuck compiler, a firmware that never exits, a network file system that stalls)
becomes a TinyaotError naming the tool and what it was doing, never a tinyaot that waits forever.

Why not `subprocess.run(..., timeout=...)`: on a timeout it kills only the direct child and then waits for the
pipes to close. gcc is a driver whose children (cc1, as, collect2, ld) inherit the pipes, so a killed driver leaves
them running and `run` keeps waiting for them. Each tool here starts in a session of its own and a timeout kills
the whole process group. Each tool also dies with tinyaot (PR_SET_PDEATHSIG, tinyaot/interrupt.py): a tinyaot
killed by SIGKILL leaves no QEMU or compiler driver running; SIGINT and SIGTERM kill the tool's whole group on the
way out.
"""
from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Sequence

from tinyaot.errors import TinyaotError
from tinyaot.interrupt import tool_preexec

# Default limits in seconds, generous for the slowest legitimate case measured on a loaded 2-core machine (the
# largest shared model's C, 480 KB of weights, compiles in well under a minute).
COMPILE_TIMEOUT_S = 600.0
INSPECT_TIMEOUT_S = 60.0   # arm-none-eabi-size / nm on one ELF, `cc --version`


def run_tool(cmd: Sequence[str], *, what: str, timeout_s: float, cwd: Path | None = None,
             timeout_hint: str = "", env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `cmd` to completion and return it with text stdout/stderr (undecodable bytes replaced), stdin closed.

    `what` says in a few words what the tool was doing ("arm-none-eabi-gcc building firmware.elf for stm32"); a
    run longer than `timeout_s` is killed with its process group and raises TinyaotError("<what> timed out after
    N s<timeout_hint>"). A tool that cannot be started at all raises TinyaotError too."""
    cmd = [str(c) for c in cmd]
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True,
                                env=env, preexec_fn=tool_preexec(os.getpid()))
    except OSError as exc:
        raise TinyaotError(f"cannot run {Path(cmd[0]).name} ({what}): {exc.strerror or exc}") from None
    with proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            raise TinyaotError(f"{what} timed out after {timeout_s:g} s{timeout_hint}") from None
        except BaseException:  # Ctrl-C or SIGTERM while waiting: take the tool down with us rather than orphan it
            _kill_group(proc)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def _kill_group(proc: subprocess.Popen) -> None:
    # The child leads its own session (start_new_session), so its process group id is its pid: this reaches the
    # tools it started too, and nothing else.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
