"""Compile C sources to objects through a cache of objects ($TINYAOT_CACHE/objects), then link them.

A deployed folder is mostly the same C every time: the kernels, the HAL and the harness do not change between two
models on one board, only the model's own file does. Measured on kws_dscnn for stm32, the kernels and HAL were
1.5 s of the 2.0 s firmware build, and a deploy builds twice (the product's -O2 and the -O0 debug build); sweeps,
`--tune` and the test suite build the same kernels hundreds of times.

The key of an object is exact: the sha256 of the compiler (its path and `--version`), every flag but the include
folders, and the source as the preprocessor gives it (`-E -P`: every header it includes, every macro from the
command line, no file paths), so a changed kernel, header, define or flag is a miss, and the same source staged in
another folder is a hit. Preprocessing costs about a tenth of compiling. Only a compile that printed nothing is
kept (a warning must reach the build log each time), entries are checked before use (cache.verified) and the least
recently used go beyond MAX_ENTRIES. An object compiled from the same preprocessed text with the same flags is the
object a fresh compile gives: no flag here writes paths or dates into it (no -g).
"""
from __future__ import annotations

import functools
import hashlib
import os
import shlex
import shutil
import tempfile
import time
from pathlib import Path
from typing import Sequence

from tinyaot.cache import cache_folder, evict, install, verified
from tinyaot.errors import TinyaotError
from tinyaot.toolchain.proc import run_tool

# flags that make the compiler write files beside the object (stack usage, dependency lists, dumps, coverage
# notes): a cached object would come without them, so a build with any of them compiles every file
SIDE_OUTPUT_FLAGS = ("-fstack-usage", "-save-temps", "-MD", "-MMD", "-fdump-", "--coverage", "-ftest-coverage",
                     "-fprofile-arcs", "-fcallgraph-info")
MAX_ENTRIES = 2048  # objects kept (a kernel's object is a few KB; a model's, with its weights, up to a few hundred)
C_SUFFIXES = (".c",)


@functools.lru_cache(maxsize=8)
def compiler_identity(compiler: str) -> str:
    proc = run_tool([compiler, "--version"], what=f"{Path(compiler).name} --version", timeout_s=60)
    return f"{os.path.realpath(compiler)}\0{proc.stdout}"


class Deadline:
    """One time limit over several tool runs: each run gets what is left, and running out is reported against the
    whole limit, in the words `what` gives."""

    def __init__(self, what: str, timeout_s: float):
        self.what, self.timeout_s, self.end = what, timeout_s, time.monotonic() + timeout_s

    def run(self, cmd: Sequence[str], **kwargs):
        left = self.end - time.monotonic()
        try:
            if left <= 0:
                raise TinyaotError("timed out")
            return run_tool(cmd, what=self.what, timeout_s=left, **kwargs)
        except TinyaotError as exc:
            if "timed out" in str(exc):
                raise TinyaotError(f"{self.what} timed out after {self.timeout_s:g} s") from None
            raise


def _key(compiler: str, flags: Sequence[str], preprocessed: str) -> str:
    h = hashlib.sha256()
    for part in (compiler_identity(compiler), "\0".join(flags), preprocessed):
        h.update(part.encode() + b"\0\0")
    return h.hexdigest()


def compile_objects(compiler: str, flags: Sequence[str], path_flags: Sequence[str], sources: Sequence[Path],
                    out_dir: Path, deadline: Deadline) -> tuple[list[Path], str, int]:
    """Objects for `sources` in `out_dir` (a `.c` file compiled with `flags` and `path_flags`, through the cache;
    anything else, e.g. an object, passed on as it is), in the order given. `path_flags` name folders (-I, and
    -ffile-prefix-map to keep them out of the object): they are not part of the key, the preprocessed text is.
    Returns (objects, the compilers' output, return code); a failed preprocessing or compile stops there with its
    output and code."""
    root: Path | None = None
    if not any(f.startswith(SIDE_OUTPUT_FLAGS) for f in flags):
        try:
            root = cache_folder("objects")
        except TinyaotError:
            pass  # no usable cache folder: compile everything (a cache only saves time)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [Path(s) for s in sources]
    # numbered: two sources may share a name
    objects = [out_dir / f"{i:02d}_{p.stem}.o" if p.suffix in C_SUFFIXES else p for i, p in enumerate(paths)]
    todo = [(src, obj) for src, obj in zip(paths, objects) if src.suffix in C_SUFFIXES]
    entries: dict[Path, Path] = {}
    if root is not None and todo:
        steps = [([compiler, *flags, *path_flags, "-E", "-P", str(src), "-o", str(obj.with_suffix(".i"))], obj)
                 for src, obj in todo]
        output, code = _run_steps(steps, deadline, out_dir)
        if code != 0:
            return objects, output, code
        for src, obj in todo:
            entry = root / f"{_key(compiler, flags, obj.with_suffix('.i').read_text(errors='replace'))}.o"
            if verified(entry, "compiled object"):
                shutil.copyfile(entry, obj)
                _touch(entry)
            else:
                entries[obj] = entry
        todo = [(src, obj) for src, obj in todo if obj in entries]
    steps = [([compiler, *flags, *path_flags, "-c", str(src), "-o", str(obj)], obj) for src, obj in todo]
    output, code = _run_steps(steps, deadline, out_dir)
    for obj, entry in entries.items():
        if code == 0 and not obj.with_suffix(".err").read_text(errors="replace").strip():
            _store(obj, entry)  # only a compile that printed nothing: a warning must reach every build's log
    return objects, output, code


WORKING_SUFFIXES = (".o", ".i", ".err")  # what compile_objects leaves in its folder besides side outputs


def remove_working_files(out_dir: Path) -> None:
    """Remove what compile_objects wrote into `out_dir` (objects, preprocessed text, compiler output), and the
    folder if that leaves it empty; side outputs a flag asked for (e.g. -fstack-usage's .su files) stay."""
    if not out_dir.is_dir():
        return
    for p in out_dir.iterdir():
        if p.suffix in WORKING_SUFFIXES and p.is_file():
            p.unlink()
    try:
        out_dir.rmdir()
    except OSError:
        pass  # side outputs left in it


def _run_steps(steps: list[tuple[list[str], Path]], deadline: Deadline, out_dir: Path) -> tuple[str, int]:
    """Run the commands one after the other in one shell, each one's output into `<obj>.err`, stopping at the
    first failure: one process started from Python for the lot (starting a process from a large Python process
    costs more than a small compile). Returns (the outputs so far, the exit code)."""
    if not steps:
        return "", 0
    script = " && ".join(f"{shlex.join(cmd)} >{shlex.quote(str(obj.with_suffix('.err')))} 2>&1"
                         for cmd, obj in steps)
    proc = deadline.run(["sh", "-c", script], cwd=out_dir)
    texts = []
    for _, obj in steps:
        err = obj.with_suffix(".err")
        if err.is_file():
            texts.append(err.read_text(errors="replace").strip())
    return "\n".join(t for t in [*texts, (proc.stdout + proc.stderr).strip()] if t), proc.returncode


def _touch(path: Path) -> None:
    try:
        os.utime(path)  # recently used
    except OSError:
        pass


def _store(obj: Path, entry: Path) -> None:
    """Keep a copy of `obj` as `entry` (best effort: a cache that cannot be written only costs time)."""
    tmp = None
    try:
        fd, name = tempfile.mkstemp(prefix=f".{entry.stem[:16]}-", suffix=".o.tmp", dir=entry.parent)
        os.close(fd)
        tmp = Path(name)
        shutil.copyfile(obj, tmp)
        install(tmp, entry)
    except OSError:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        return
    evict(entry.parent, ".o", MAX_ENTRIES, keep=entry)
