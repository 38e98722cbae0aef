"""Tools of the fault-injection suite (issue 18): the small model every fault runs on, the CLI as a real process
(so that it can be killed), waiting for a point of a run to be reached, the processes a run left, a folder's
manifest checked file by file, and a private mount namespace for a full disk and read-only places.

The model is examples/tflm_hello_world_sine.onnx (288 MACs: a deploy builds and verifies its firmware under QEMU
in about a second of CPU), calibrated on calibration_data/, evaluated on 20 of those samples labelled 0 (its one
output makes top-1 trivially 100 %; the figures that can move are the bytes and the instructions)."""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "examples" / "tflm_hello_world_sine.onnx"
CAL = ROOT / "calibration_data" / "tflm_hello_world_sine.npz"
MANIFEST = ".tinyaot-manifest.json"
FIGURES = ("top1", "weights_bytes", "flash_bytes", "arena_bytes", "instructions")


def write_data(path: Path) -> Path:
    x = np.load(CAL)["serving_default_dense_input:0"][:20]
    np.savez(path, x=x, y=np.zeros(len(x), np.int64))
    return path


def deploy_figures(report: dict) -> dict:
    """What a deploy measured (everything a rerun must reproduce)."""
    m, v = report["memory"], report["verify"]
    return {"arena": m["arena_bytes"], "weights": m["weights_bytes"], "flash": m["flash_bytes"],
            "instructions": v["instructions"], "outputs_match": v["outputs_match"], "macs": report["macs"],
            "layers": [[x["name"], x["variant"], x["instructions"]] for x in report["layers"]]}


def sweep_figures(report: dict) -> dict:
    return {c["name"]: {k: c[k] for k in FIGURES} for c in report["configs"]}


def folder_state(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (hidden ones included) with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def check_complete(folder: Path) -> dict:
    """`folder` is one complete tinyaot output: its manifest lists exactly its files, each with the bytes it
    recorded. Returns the manifest."""
    manifest = json.loads((folder / MANIFEST).read_text())
    files = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()} - {MANIFEST}
    listed = set(manifest["files"])
    assert files == listed, (sorted(files - listed), sorted(listed - files))
    for rel, digest in manifest["files"].items():
        assert hashlib.sha256((folder / rel).read_bytes()).hexdigest() == digest, rel
    return manifest


def siblings(folder: Path) -> list[str]:
    """Staging folders and temporary files beside `folder` (what a killed run could leave)."""
    return sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}."))


def cli(*args, env: dict | None = None, **kw) -> subprocess.Popen:
    """`tinyaot ARGS` as a process of its own (its own session, so a test can signal it alone)."""
    return subprocess.Popen([sys.executable, "-m", "tinyaot", *map(str, args)], cwd=kw.pop("cwd", ROOT),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, **(env or {})}, **kw)


def finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def wait_for(predicate, timeout: float = 120.0, proc: subprocess.Popen | None = None, step: float = 0.002) -> bool:
    """Poll until `predicate()` holds (True) or the time is up or `proc` ended (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if predicate():
                return True
        except OSError:
            pass
        if proc is not None and proc.poll() is not None:
            return False
        time.sleep(step)
    return False


def processes_mentioning(text: str) -> list[str]:
    """Live processes (not zombies) whose command line contains `text`, as 'pid: command'."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmd and state != "Z":
            found.append(f"{d.name}: {cmd[:200]}")
    return found


def no_processes_left(text: str, timeout: float = 15.0) -> list[str]:
    """Wait (briefly) until no process mentions `text`; returns what is still running after `timeout`."""
    wait_for(lambda: not processes_mentioning(text), timeout=timeout, step=0.05)
    return processes_mentioning(text)


def kill_group(proc: subprocess.Popen) -> None:
    """Tidy after a test (its process group), whatever happened."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def shared(tmp_path_factory, name: str, compute):
    """`compute(folder)` once per test run, shared by the xdist workers (a file lock in the run's base folder):
    the clean runs every fault is compared with. Returns (its JSON result, its folder)."""
    base = tmp_path_factory.getbasetemp()
    base = base.parent if base.name.startswith("popen-gw") else base
    folder = base / f"faults-{name}"
    folder.mkdir(exist_ok=True)
    with open(base / f"faults-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = folder / "result.json"
        if not done.exists():
            result = compute(folder)
            done.write_text(json.dumps(result))
        return json.loads(done.read_text()), folder


def copy_output(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


# ---- a private mount namespace (a small full disk, read-only places) -----------------------------------------
NAMESPACE_DRIVER = r'''
import json, os, subprocess, sys
spec = json.loads(sys.argv[1])
for m in spec["mounts"]:
    os.makedirs(m["at"], exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", m["options"], "tmpfs", m["at"]], check=True)
for c in spec.get("copy", []):
    subprocess.run(["cp", "-a", c["from"], c["to"]], check=True)
for f in spec.get("fill", []):  # leave only `free` bytes on the file system of `at`
    st = os.statvfs(f["at"])
    with open(os.path.join(f["at"], "filler"), "wb") as out:
        out.write(b"\0" * max(0, st.f_bavail * st.f_frsize - f["free"]))
for m in spec["mounts"]:
    if m.get("remount_ro"):
        subprocess.run(["mount", "-o", "remount,ro", m["at"]], check=True)
results = []
runner = None
for run in spec["runs"]:  # each a tinyaot command line, run in this process (one import for them all)
    if runner is None:
        sys.path.insert(0, spec["root"])
        from typer.testing import CliRunner
        from tinyaot.cli.main import app
        runner = CliRunner()
    r = runner.invoke(app, run["cli"], env=run.get("env"))
    results.append({"rc": r.exit_code, "stdout": r.stdout, "stderr": r.stderr})
state = {}
for root in spec.get("inspect", []):
    for dirpath, dirs, files in os.walk(root):
        for name in files + dirs:
            p = os.path.join(dirpath, name)
            state[p] = None if os.path.isdir(p) else open(p, "rb").read().hex()
print(json.dumps({"results": results, "state": state}))
'''


def namespace_prefix() -> list[str] | None:
    """The command that runs a program in a private mount namespace where it may mount tmpfs (root: `unshare -m`;
    otherwise a user namespace, `unshare -Urm`), or None where neither works here."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    for prefix in ([unshare, "-m"], [unshare, "-Urm"]) if os.geteuid() == 0 else ([unshare, "-Urm"],):
        probe = subprocess.run([*prefix, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt 2>/dev/null || "
                                "mount -t tmpfs -o size=64k tmpfs /tmp"], capture_output=True)
        if probe.returncode == 0:
            return prefix
    return None


def in_namespace(prefix: list[str], spec: dict) -> dict:
    """Mount `spec["mounts"]` (tmpfs, some then read-only), copy and fill as it says, run its tinyaot command lines
    (`runs`: {"cli": [...], "env": {...}}) and return their results and the files then under `inspect`."""
    spec = {**spec, "root": str(ROOT)}
    p = subprocess.run([*prefix, sys.executable, "-c", NAMESPACE_DRIVER, json.dumps(spec)], capture_output=True,
                       text=True, timeout=600, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


def cli_args(*args) -> list[str]:
    return [str(a) for a in args]
