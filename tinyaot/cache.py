"""tinyaot's on-disk caches ($TINYAOT_CACHE, default ~/.cache/tinyaot) and how every entry is checked before use.

A cache only saves time: an entry that fails its check (a truncated or overwritten file, a flipped digit, binary
garbage) is rebuilt or measured again, with one warning line on stderr, never a crash and never a wrong figure.

- Built files (the QEMU instruction-count plugin, host JIT libraries): `NAME` with a sidecar `NAME.sha256` holding
  the sha256 of its bytes, written when it was built. A file whose bytes do not hash to its sidecar (or that has
  none) is built again and renamed over it (never deleted first: another process may be loading it).
- Records (sweep results, tuning records, repeated QEMU runs, a sweep's `--out/configs/*.json`): JSON objects
  sealed with a `checksum` key, the sha256 of the rest of the object in canonical form. A record that is not UTF-8
  JSON, or whose checksum does not match, is not used.
- The cache folder itself must be a writable folder: a file in its place or an unwritable home is one `Error:` line
  naming the path and `TINYAOT_CACHE`, not a traceback.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from tinyaot.errors import TinyaotError
from tinyaot.files import env_error, sha256_file

CHECKSUM = "checksum"


def cache_root() -> Path:
    """$TINYAOT_CACHE, else ~/.cache/tinyaot (not created here)."""
    configured = os.environ.get("TINYAOT_CACHE")
    if configured:
        return Path(configured)
    try:
        home = Path.home()
    except RuntimeError:  # no HOME and no password entry
        raise TinyaotError("cannot find a home folder for the cache; set TINYAOT_CACHE to a writable folder") \
            from None
    return home / ".cache" / "tinyaot"


def cache_folder(sub: str | None = None) -> Path:
    """The cache folder (or its sub-folder `sub`), created; TinyaotError naming it when it cannot be."""
    root = cache_root()
    folder = root / sub if sub else root
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied", str(folder))
    except OSError as exc:
        where = "TINYAOT_CACHE" if os.environ.get("TINYAOT_CACHE") else "the default ~/.cache/tinyaot"
        err = env_error(exc, folder, "use the cache folder")
        raise TinyaotError(f"{err}; or set TINYAOT_CACHE (now {where}) to a writable folder") from None
    return folder


def warn(message: str) -> None:
    """One warning line on stderr (a cache entry rebuilt, a record ignored)."""
    print(f"Warning: {message}", file=sys.stderr, flush=True)


# ---- built files with a sidecar hash ------------------------------------------------------------------------
def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def verified(path: Path, what: str) -> bool:
    """Whether the cached file `path` exists and its bytes are the ones recorded when it was built. A file that
    exists but fails gets a warning (the caller rebuilds it)."""
    path = Path(path)
    if not path.is_file():
        return False
    try:
        recorded = _sidecar(path).read_text().strip()
        ok = recorded == sha256_file(path)
    except (OSError, UnicodeDecodeError):
        ok = False
    if not ok:
        warn(f"cached {what} {path} is damaged or unrecorded (its sha256 does not match); building it again")
    return ok


def install(built: Path, target: Path) -> Path:
    """Move the freshly built file `built` to `target` (same folder) with its sidecar hash: the sidecar first,
    then the file, each by an atomic rename (a reader between the two sees a mismatch and only rebuilds)."""
    digest = sha256_file(built)
    side = _sidecar(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{side.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(digest + "\n")
        os.replace(tmp, side)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    os.replace(built, target)
    return target


STALE_TMP_S = 3600.0  # a `*.tmp` beside the entries this old was left by a killed build (a live one is seconds old)


def evict(folder: Path, suffix: str, max_entries: int, keep: Path) -> None:
    """Keep at most `max_entries` built files `*<suffix>` in `folder`, `keep` (the one just built or used) counted
    and never removed: the least recently used go first, with their sidecars. Temporary files `*<suffix>.tmp` older
    than STALE_TMP_S go too. Safe beside other processes doing the same (a file gone meanwhile is skipped)."""
    folder = Path(folder)
    now = time.time()
    for tmp in folder.glob(f"*{suffix}.tmp"):
        try:
            if now - tmp.stat().st_mtime > STALE_TMP_S:
                tmp.unlink()
        except FileNotFoundError:
            pass
    entries = []
    for p in folder.glob(f"*{suffix}"):
        if p == keep:
            continue
        try:
            entries.append((p.stat().st_mtime, p))
        except FileNotFoundError:  # removed by a concurrent eviction
            continue
    entries.sort()
    for _, p in entries[: max(0, len(entries) + 1 - max(max_entries, 1))]:  # +1: `keep` counts as an entry
        for f in (p, _sidecar(p)):
            f.unlink(missing_ok=True)


# ---- sealed JSON records ------------------------------------------------------------------------------------
def _digest(record: dict) -> str:
    body = {k: v for k, v in record.items() if k != CHECKSUM}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def seal(record: dict) -> dict:
    """`record` with its checksum (a copy)."""
    out = {k: v for k, v in record.items() if k != CHECKSUM}
    out[CHECKSUM] = _digest(out)
    return out


def unsealed(data) -> dict | None:
    """The record without its checksum if `data` is a sealed record whose checksum matches, else None."""
    if not isinstance(data, dict) or not isinstance(data.get(CHECKSUM), str) or data[CHECKSUM] != _digest(data):
        return None
    return {k: v for k, v in data.items() if k != CHECKSUM}


def read_record(path: Path) -> tuple[dict | None, str | None]:
    """(record, None) for a sealed record file that checks out; (None, None) when there is no file; (None, why)
    when there is one and it fails (not UTF-8, not JSON, checksum mismatch)."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"unreadable ({exc.strerror})"
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "not text"
    except ValueError:
        return None, "not JSON"
    rec = unsealed(data)
    if rec is None:
        return None, "checksum mismatch" if isinstance(data, dict) and CHECKSUM in data else "not a sealed record"
    return rec, None


def record_text(record: dict, indent: int | None = 2) -> str:
    return json.dumps(seal(record), indent=indent) + "\n"


def write_record(path: Path, record: dict) -> None:
    """Write a sealed record atomically (best effort: a cache that cannot be written only costs time)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(record_text(record, indent=None))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass


__all__ = ["cache_root", "cache_folder", "warn", "verified", "install", "evict", "seal", "unsealed", "read_record",
           "record_text", "write_record", "env_error"]
