"""Compile C for the host into a shared library (the host JIT), cached on disk.

The cache key is a sha256 over the compiler identity, the flags, every source text and every header text in the
include directories and beside the sources (names and texts, not folder locations), so a library is rebuilt
exactly when something that could change it changed, and the same C emitted into a new temporary folder is a cache
hit. Entries are `<key>.so` files in one folder (`$TINYAOT_CACHE/host`, default `~/.cache/tinyaot/host`); a hit
refreshes the file's mtime and the oldest entries beyond `max_entries` are evicted (least recently used; the entry
just built or hit is never the one evicted). Builds go to a temporary file in the cache folder and are renamed into
place, so parallel processes (pytest -n, several CLIs) never see a half-written library and at worst compile the
same thing twice.
"""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Sequence

from tinyaot.cache import cache_folder, env_error, evict, install, verified
from tinyaot.toolchain.objects import Deadline, compile_objects
from tinyaot.toolchain.proc import COMPILE_TIMEOUT_S, run_tool
from tinyaot.errors import TinyaotError

BASE_FLAGS = ("-O2", "-fPIC", "-shared", "-std=c99", "-Wall", "-Wextra")
DEFAULT_MAX_ENTRIES = 64
_HEADER_SUFFIXES = (".h", ".inc")


def cache_root(cache_dir: Path | None = None) -> Path:
    """The host-library cache folder: `cache_dir` if given, else `host/` under tinyaot's cache root ($TINYAOT_CACHE,
    else ~/.cache/tinyaot). A folder of its own, because eviction removes the oldest `*.so` in it and other tools
    (the QEMU plugin) keep their own `.so` files in the cache root."""
    if cache_dir is not None:
        return Path(cache_dir)
    return cache_folder("host")


@functools.lru_cache(maxsize=8)
def _compiler_identity(cc: str) -> str:
    try:
        out = run_tool([cc, "--version"], what=f"host C compiler '{cc} --version'", timeout_s=60)
    except TinyaotError as exc:
        if "timed out" in str(exc):
            raise
        raise TinyaotError(f"host C compiler '{cc}' not found; install one or set CC") from None
    return out.stdout.strip()


def _cache_key(cc: str, sources: Sequence[Path], include_dirs: Sequence[Path], flags: Sequence[str]) -> str:
    """Content hash of everything that can change the library. Directory locations are deliberately left out (only
    file names relative to their directory and texts count), so the same C emitted into a fresh temporary folder
    hits the cache. Headers next to the sources count too, since `#include "x.h"` looks there first."""
    h = hashlib.sha256()

    def put(tag: str, data: bytes) -> None:
        h.update(tag.encode() + b"\0" + len(data).to_bytes(8, "little") + data)

    put("cc", cc.encode())
    put("cc-version", _compiler_identity(cc).encode())
    put("flags", "\0".join(flags).encode())
    for src in sources:
        put("source", src.name.encode())
        put("text", src.read_bytes())
    source_dirs = list(dict.fromkeys(s.parent for s in sources))
    # include dirs are searched recursively (`#include "sub/x.h"`), source folders only at their top level
    for tag, dirs, walk in (("include-dir", include_dirs, Path.rglob), ("source-dir", source_dirs, Path.glob)):
        for i, inc in enumerate(dirs):
            put(tag, str(i).encode())
            if inc.is_dir():
                for hdr in sorted(p for p in walk(inc, "*") if p.is_file() and p.suffix in _HEADER_SUFFIXES):
                    put("header", hdr.relative_to(inc).as_posix().encode())
                    put("text", hdr.read_bytes())
    return h.hexdigest()


def _first_error_line(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        if "error" in ln.lower():
            return ln
    return lines[0] if lines else "(no compiler output)"


def compile_shared(
    sources: list[Path],
    include_dirs: list[Path],
    extra_flags: Iterable[str] = (),
    cache_dir: Path | None = None,
    *,
    max_entries: int = DEFAULT_MAX_ENTRIES,
) -> Path:
    """Compile `sources` with the system C compiler into a shared library and return its path (cached).

    Raises TinyaotError (with the compiler's first error line) if compilation fails.
    """
    cc = os.environ.get("CC", "cc")
    sources = [Path(s).resolve() for s in sources]
    include_dirs = [Path(d).resolve() for d in include_dirs]
    for s in sources:
        if not s.is_file():
            raise TinyaotError(f"C source not found: {s}")
    flags = list(BASE_FLAGS) + [str(f) for f in extra_flags]
    root = cache_root(cache_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise env_error(exc, root, "use the host library cache") from None
    key = _cache_key(cc, sources, include_dirs, flags)
    target = root / f"{key}.so"
    if verified(target, "host library"):
        try:
            os.utime(target)  # mark as recently used
        except FileNotFoundError:
            pass
        else:
            return target

    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{key[:16]}-", suffix=".so.tmp", dir=root)
        os.close(fd)
    except OSError as exc:
        raise env_error(exc, root, "write to the host library cache") from None
    tmp = Path(tmp_name)
    deadline = Deadline(f"host C compiler {cc} building {sources[0].name}", COMPILE_TIMEOUT_S)
    work = Path(tempfile.mkdtemp(prefix=f".{key[:16]}-", suffix=".objects", dir=root))
    try:
        # each source through the object cache (toolchain/objects.py: the kernels are the same C for every model),
        # then one link; -shared only at the link
        compile_flags = [f for f in flags if f != "-shared"]
        objects, output, returncode = compile_objects(cc, compile_flags, [f"-I{d}" for d in include_dirs], sources,
                                                      work, deadline)
        if returncode == 0:
            link = deadline.run([cc, *flags, *map(str, objects), "-o", str(tmp)])
            output, returncode = output + link.stdout + link.stderr, link.returncode
        if returncode != 0:
            if "No space left" in output:
                raise TinyaotError(f"cannot write {root}: No space left on device; free some space or set "
                                   "TINYAOT_CACHE to another folder")
            raise TinyaotError(f"host C compilation failed: {_first_error_line(output)}")
        try:
            install(tmp, target)
        except OSError as exc:
            raise env_error(exc, target, "write to the host library cache") from None
    finally:
        if tmp.exists():
            tmp.unlink()
        shutil.rmtree(work, ignore_errors=True)
    evict(root, ".so", max_entries, keep=target)
    return target
