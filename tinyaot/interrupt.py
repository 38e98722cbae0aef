"""Stopping when told: SIGINT (Ctrl-C) and SIGTERM end any tinyaot command within seconds, and no process tinyaot
started outlives it.

- `stop_on_signals()` (the CLI wraps every command in it) turns SIGINT and SIGTERM into the exception
  `Interrupted`, so the command unwinds like any failure: staging folders are removed, tool process groups are
  killed (toolchain/proc.py), a sweep stops its workers and keeps its finished results. The CLI then prints one
  line and exits 128 + the signal's number (130 for SIGINT, 143 for SIGTERM), as a shell does.
- Every tool tinyaot runs (gcc, QEMU, the host compiler) and every sweep worker is started with
  PR_SET_PDEATHSIG = SIGKILL (`die_with_parent`): when its parent dies, by whatever means (SIGKILL included), the
  kernel kills it, so nothing is orphaned. Sweep workers ignore SIGINT (a terminal's Ctrl-C reaches the whole
  process group; the parent decides) and stop at SIGTERM, which is how the parent tells them to.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import threading

PR_SET_PDEATHSIG = 1
_prctl = None


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived. A BaseException, like KeyboardInterrupt: `except Exception` does not swallow it.
    `kept` says what the interrupted command kept (set by whoever knows, e.g. the sweep)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        self.kept = ""

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _raise(signum, frame):
    raise Interrupted(signum)


@contextlib.contextmanager
def stop_on_signals():
    """SIGINT and SIGTERM raise Interrupted in the main thread while the block runs (elsewhere: a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for s in saved:
            signal.signal(s, _raise)
        yield
    finally:
        for s, h in saved.items():
            signal.signal(s, h)


@contextlib.contextmanager
def deferred():
    """SIGINT and SIGTERM that arrive while the block runs are held and handled right after it (as the handler in
    place would have handled them): for the few steps that must not be split by an exception (creating a staging
    folder and noting it, the switch-over of an output folder). Main thread only; elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    if any(h is None for h in saved.values()):  # a handler installed outside Python: leave it alone
        yield
        return
    got: list[int] = []
    for s in saved:
        signal.signal(s, lambda signum, frame: got.append(signum))
    try:
        yield
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
        if got:
            handler = saved[got[0]]
            if callable(handler):
                handler(got[0], None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(got[0])


def die_with_parent(sig: int = signal.SIGKILL, parent: int | None = None) -> bool:
    """Ask the kernel to send `sig` to this process when its parent dies (Linux; False elsewhere). `parent`: the
    pid the caller expects as its parent; if it already died (the race before prctl), die now."""
    global _prctl
    if _prctl is None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            _prctl = libc.prctl
        except (OSError, AttributeError):
            _prctl = False
    if not _prctl:
        return False
    ok = _prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    if ok and parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), sig)
    return ok


def tool_preexec(parent: int):
    """A subprocess `preexec_fn` that ties the tool to this process (`parent`: this process's pid)."""
    def run() -> None:
        die_with_parent(signal.SIGKILL, parent)
    return run


# ---- sweep workers ------------------------------------------------------------------------------------------
_IN_JOB = False


def _worker_term(signum, frame):
    if _IN_JOB:
        raise Interrupted(signum)  # unwinds the job: its staging folder and tools go
    os._exit(128 + signum)  # idle: nothing to tidy


def worker_setup(parent: int) -> None:
    """A sweep worker's initializer: dies with the parent, ignores SIGINT, stops at SIGTERM."""
    die_with_parent(signal.SIGKILL, parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _worker_term)


def run_job(fn, *args):
    """Run one job in a worker; SIGTERM while it runs unwinds it (finally blocks run) and ends the worker."""
    global _IN_JOB
    _IN_JOB = True
    try:
        return fn(*args)
    except Interrupted as exc:
        os._exit(exc.exit_code)
    finally:
        _IN_JOB = False
