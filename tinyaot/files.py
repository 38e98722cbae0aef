"""Files tinyaot writes for the user: output folders it owns, single files replaced atomically, and names that become
paths. What a firmware repository relies on (DESIGN.md, "Files, caches, signals, exit codes"):

- **An output folder is owned, not taken.** tinyaot writes a manifest (MANIFEST) into every folder it makes: the
  files it wrote and their sha256, and the patterns of what the folder's own Makefile produces (objects, the
  library, the firmware's run files). An existing `--out` is replaced only when every file in it is one tinyaot wrote
  and has not changed since, or a product of its own Makefile; any other file (a user's `main.c`, `.git`, the model
  itself, a generated file someone edited) makes the command refuse with one `Error:` line naming them, before any
  work, and nothing is touched. Files of an earlier run that the new run does not write go with the old folder.
- **The switch-over is atomic.** The new output is made in a hidden sibling `.NAME.tmp-XXXXXXXX` and exchanged with
  the old folder by one renameat2(RENAME_EXCHANGE) (Linux; elsewhere, or on a file system without it, two renames,
  which a later run repairs if it was killed between them), so at every instant `--out` holds the complete old
  output or the complete new one. A staging folder holds a lock while its run is alive (flock on a marker file);
  one that no live run holds (the run was killed) is removed by the next run that writes beside it.
- **Single files** (`--json`, `--tuning-log`, sweep records) are written to a locked temporary file beside them and
  renamed over the old one; an existing file is replaced only if it is one tinyaot wrote (the caller says how to
  tell).
- **Names that become paths** (sweep setting names, model-derived file names) are checked by `check_name`.
- **Environment errors** (a full disk, a read-only or missing folder, a file where a folder should be) become one
  TinyaotError line naming the path and what to do (`env_error`), which the CLI reports with exit code 2.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import fnmatch
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

from tinyaot import __version__
from tinyaot.errors import TinyaotError
from tinyaot.interrupt import deferred

MANIFEST = ".tinyaot-manifest.json"
STAGING_MARK = ".tinyaot-staging"
MANIFEST_FORMAT = 1
# What a generated folder's own Makefile writes (`make`, `make firmware`, `make run`): tinyaot's, not the user's.
DEPLOY_PRODUCTS = ("*.o", "lib*.a", "firmware/firmware.elf", "firmware/firmware.map", "firmware/output.bin",
                   "firmware/stats.txt")
# An empty staging folder younger than this may belong to a run that is just creating its marker.
_YOUNG_S = 30.0


# ---- errors -------------------------------------------------------------------------------------------------
_FIXES = {
    errno.ENOSPC: "free some space or choose another folder",
    errno.EDQUOT: "free some space or choose another folder",
    errno.EROFS: "choose a writable folder",
    errno.EACCES: "choose a folder you can write to",
    errno.EPERM: "choose a folder you can write to",
    errno.ENOTDIR: "a file stands where a folder is needed; choose another path",
    errno.EISDIR: "a folder stands where a file is needed; choose another path",
    errno.ENAMETOOLONG: "choose a shorter path",
    errno.ENOENT: "check the path",
    errno.ELOOP: "check the path (a symbolic link loop)",
    errno.EMFILE: "raise the open-file limit (ulimit -n)",
}


_WRITING = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)


def env_error(exc: OSError, path: str | Path | None = None, doing: str = "write") -> TinyaotError:
    """One line for an OSError met while reading or writing the user's files: what, which path, what to do."""
    where = path if path is not None else (exc.filename or "?")
    what = exc.strerror or str(exc)
    fix = _FIXES.get(exc.errno, "check the path and its permissions")
    return TinyaotError(f"cannot {doing} {where}: {what}; {fix}")


# ---- names --------------------------------------------------------------------------------------------------
_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)), *(f"lpt{i}" for i in range(1, 10))}
_NAME_CHARS = re.compile(r"^[A-Za-z0-9_.+-]+$")
MAX_NAME = 100


def check_name(name, what: str) -> str:
    """`name` if it can be a file or folder name everywhere tinyaot puts one (letters, digits, '_', '.', '+', '-';
    not '.', '..', hidden, a Windows device name or too long); else TinyaotError naming `what`."""
    why = None
    if not isinstance(name, str) or not name:
        why = "must be a non-empty string"
    elif name in (".", ".."):
        why = "cannot be '.' or '..'"
    elif not _NAME_CHARS.match(name):
        why = "must be letters, digits, '_', '.', '+' or '-' (no separators, spaces or control characters)"
    elif name.startswith("."):
        why = "cannot start with '.' (hidden files are tinyaot's staging and manifest files)"
    elif name.endswith("."):
        why = "cannot end with '.'"
    elif name.split(".")[0].lower() in _RESERVED:
        why = "is a reserved device name on Windows"
    elif len(name) > MAX_NAME:
        why = f"is longer than {MAX_NAME} characters"
    if why:
        raise TinyaotError(f"{what} {name!r} {why}")
    return name


# ---- hashing and manifests ----------------------------------------------------------------------------------
def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def manifest_of(folder: Path, kind: str, products: tuple[str, ...] = ()) -> dict:
    """The manifest of everything now in `folder` (tinyaot just wrote it all): its files with their sha256, its
    folders, and `products` (patterns of what the folder's own build files make)."""
    files, dirs = {}, []
    for root, subdirs, names in os.walk(folder):
        rel_root = Path(root).relative_to(folder)
        dirs += [(rel_root / d).as_posix() for d in subdirs]
        for n in names:
            rel = (rel_root / n).as_posix()
            if rel not in (MANIFEST, STAGING_MARK):
                files[rel] = sha256_file(Path(root) / n)
    return {"format": MANIFEST_FORMAT, "tinyaot_version": __version__, "kind": kind,
            "files": dict(sorted(files.items())), "dirs": sorted(dirs), "products": list(products)}


def write_manifest(folder: Path, kind: str, products: tuple[str, ...] = ()) -> dict:
    m = manifest_of(folder, kind, products)
    (folder / MANIFEST).write_text(json.dumps(m, indent=1) + "\n")
    return m


def read_manifest(folder: Path) -> dict | None:
    """The folder's manifest, or None when it has none that tinyaot could have written."""
    try:
        m = json.loads((folder / MANIFEST).read_bytes().decode())
    except (OSError, ValueError):
        return None
    if not (isinstance(m, dict) and isinstance(m.get("files"), dict) and isinstance(m.get("products", []), list)
            and isinstance(m.get("dirs", []), list)):
        return None
    return m


def _legacy_manifest(folder: Path) -> dict | None:
    """A folder a tinyaot before manifests wrote: its report.json lists the deploy folder's files (`files`) or the
    sweep's settings (`configs`). Owned without hashes (it recorded none)."""
    try:
        report = json.loads((folder / "report.json").read_bytes().decode())
    except (OSError, ValueError):
        return None
    if not isinstance(report, dict) or "tinyaot_version" not in report:
        return None
    if isinstance(report.get("files"), dict):  # a deploy folder
        listed = [f for group in report["files"].values() if isinstance(group, list) for f in group
                  if isinstance(f, str)]
        return {"files": {f: None for f in listed}, "dirs": ["hal", "firmware"],
                "products": list(DEPLOY_PRODUCTS) + ["firmware/*"]}
    if isinstance(report.get("configs"), list):  # a sweep folder
        return {"files": {}, "dirs": ["configs"], "products": ["report.json", "report.md", "report.html", "*.png",
                                                              "configs/*.json", "configs/*/**"]}
    return None


def _matches(rel: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(rel, p) or (p.endswith("/**") and rel.startswith(p[:-2]))
               for p in patterns if isinstance(p, str))


def foreign_files(folder: Path) -> list[str]:
    """The entries of `folder` tinyaot did not write (relative paths; a directory of them as 'dir/'), or changed
    since it wrote them. A sub-folder with a manifest of its own (a sweep's per-setting deploy folder) is judged by
    that manifest. [] for a folder that is tinyaot's own, or empty."""
    folder = Path(folder)
    # a manifest tinyaot cannot read (damaged) vouches for nothing: only a folder without one may be a legacy one
    manifest = read_manifest(folder) if (folder / MANIFEST).exists() else _legacy_manifest(folder)
    files = manifest["files"] if manifest else {}
    dirs_owned = set(manifest.get("dirs", [])) if manifest else set()
    products = manifest["products"] if manifest else []
    foreign = []
    nested = []
    for root, dirs, names in os.walk(folder, followlinks=False):
        rel_root = Path(root).relative_to(folder)
        for d in list(dirs):
            p = Path(root) / d
            rel = (rel_root / d).as_posix()
            if p.is_symlink():
                dirs.remove(d)
                names.append(d)
            elif (p / MANIFEST).is_file() and read_manifest(p) is not None:
                dirs.remove(d)  # judged by its own manifest
                nested.append(rel)
            elif rel not in dirs_owned and not _matches(rel + "/x", products):
                dirs.remove(d)  # a folder tinyaot never wrote into: foreign as a whole
                foreign.append(rel + "/")
        for n in names:
            rel = (rel_root / n).as_posix()
            if rel in (MANIFEST, STAGING_MARK):  # ours (a marker a killed switch-over left is tidied by _recover)
                continue
            p = Path(root) / n
            if p.is_symlink():  # tinyaot writes no links
                foreign.append(rel)
            elif _matches(rel, products):  # what the folder's own build files or the run itself make
                continue
            elif rel in files:
                want = files[rel]
                try:
                    if want is None or sha256_file(p) == want:
                        continue
                except OSError:
                    pass
                foreign.append(f"{rel} (changed since tinyaot wrote it)")
            else:
                foreign.append(rel)
    for rel in nested:
        foreign += [f"{rel}/{f}" for f in foreign_files(folder / rel)]
    return sorted(foreign)


_TEMPORARY = re.compile(r"^\..+\.(tmp|old)-[A-Za-z0-9_]+$")


def tidy_folder(folder: Path) -> None:
    """Remove what killed runs left inside an owned folder (stale staging folders and temporary files of its
    records and per-setting folders); what a live run holds stays."""
    for root, dirs, names in os.walk(folder):
        for n in list(dirs) + names:
            p = Path(root) / n
            if _TEMPORARY.match(n) and _stale(p):
                _remove(p)
                if n in dirs:
                    dirs.remove(n)


def _describe(names: list[str], limit: int = 6) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def check_output_folder(out: Path, what: str = "--out") -> Path:
    """Refuse (TinyaotError) an output folder tinyaot may not replace: '/', the current folder or one holding it,
    a file, or a folder with files tinyaot did not write. Returns the absolute path."""
    out = Path(out)
    try:
        absolute = Path(os.path.abspath(out))
        resolved = out.resolve()
    except (OSError, RuntimeError) as exc:
        raise TinyaotError(f"{what} {out}: cannot resolve the path ({exc}); check it") from None
    if resolved == resolved.parent or absolute == absolute.parent:
        raise TinyaotError(f"{what} {out} is the root folder; name a folder of its own (e.g. {what} out/model)")
    cwd = Path.cwd().resolve()
    if resolved == cwd or resolved in cwd.parents:
        raise TinyaotError(f"{what} {out} is the current folder or holds it, and tinyaot replaces its output folder "
                           f"as a whole; name a folder of its own (e.g. {what} {out / 'model'})")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise TinyaotError(f"{what} {out} exists and is not a folder; remove it or choose another path")
    check_writable(absolute.parent, what, out)
    _recover(absolute)  # what killed runs left beside it (and a folder a killed switch-over moved away: put back)
    if out.is_dir():
        try:
            if read_manifest(out) is not None:
                tidy_folder(out)
            foreign = foreign_files(out)
        except OSError as exc:
            raise env_error(exc, out, "read") from None
        if foreign:
            raise TinyaotError(f"{what} {out} holds files tinyaot did not write: {_describe(foreign)}; tinyaot "
                               f"replaces only its own output, so choose a new or empty folder (or move those "
                               f"files away)")
    return absolute


def check_writable(folder: Path, what: str, path: Path) -> None:
    """TinyaotError now (not after minutes of work) when `path` cannot be made in `folder`: the nearest existing
    folder up the way is not writable, or a file stands where a folder is needed."""
    probe = Path(folder)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise env_error(OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR)), probe, f"write {what} {path} in")
    if not os.access(probe, os.W_OK | os.X_OK):
        try:  # access() says why only by its errno: ask the file system itself
            fd, name = tempfile.mkstemp(prefix=".tinyaot-probe-", dir=probe)
            os.close(fd)
            os.unlink(name)
        except OSError as exc:
            raise env_error(exc, path, f"write {what}") from None


def _refuse_in_the_way(path: Path, what: str, replaceable: Callable[[Path], bool] | None) -> Path:
    """TinyaotError when what stands at `path` may not be replaced by a file tinyaot writes."""
    if path.is_dir():
        raise TinyaotError(f"{what} {path} is a folder; give a file name")
    if path.exists() and not path.is_file():
        raise TinyaotError(f"{what} {path} exists and is not a regular file; choose another path")
    if path.is_file() and replaceable is not None and not replaceable(path):
        raise TinyaotError(f"{what} {path} exists and is not a file tinyaot wrote; remove it or choose another path")
    return path


def check_file_target(path: str | Path, what: str, replaceable: Callable[[Path], bool] | None = None) -> Path:
    """Refuse now (TinyaotError) a file tinyaot is going to write at the end of a run: a folder in its place, an
    existing file it did not write (`replaceable` says), or a folder it cannot write in."""
    path = _refuse_in_the_way(Path(path), what, replaceable)
    check_writable(Path(os.path.abspath(path)).parent, what, path)
    return path


# ---- staging, locks, the atomic exchange --------------------------------------------------------------------
def _lock(path: Path):
    """An open file holding an exclusive flock on `path` (created): released when closed or when the process dies."""
    f = open(path, "a+b")
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


def _held(path: Path) -> bool:
    """Whether a live process holds the lock file `path`."""
    try:
        with open(path, "rb") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return True
            return False
    except OSError:
        return False


def _stale(p: Path) -> bool:
    """Whether `p` (a staging folder or temporary file of ours) belongs to no live run."""
    try:
        st = p.lstat()
    except OSError:
        return False
    if p.is_dir() and not p.is_symlink():
        mark = p / STAGING_MARK
        if mark.exists():
            return not _held(mark)
        return time.time() - st.st_mtime > _YOUNG_S
    return not _held(p)


def _staging_siblings(target: Path) -> list[Path]:
    parent, name = target.parent, target.name
    try:
        return [p for p in parent.iterdir() if p.name.startswith(f".{name}.tmp-") or
                p.name.startswith(f".{name}.old-")]
    except OSError:
        return []


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            p.unlink()


def _recover(target: Path) -> None:
    """Tidy what killed runs left beside `target`: a `.NAME.old-*` folder while `target` is missing (a run killed
    between the two renames of the fallback switch-over) goes back in place; other stale staging folders and
    temporary files go."""
    target = Path(os.path.abspath(target))
    mark = target / STAGING_MARK
    if mark.is_file() and not _held(mark):  # left by a run killed in the fallback switch-over
        with contextlib.suppress(OSError):
            mark.unlink()
    for p in sorted(_staging_siblings(target)):
        if not _stale(p):
            continue
        if p.name.startswith(f".{target.name}.old-") and not target.exists() and p.is_dir():
            with contextlib.suppress(OSError):
                (p / STAGING_MARK).unlink(missing_ok=True)
                p.rename(target)
                continue
        _remove(p)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_libc = None


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (renameat2 RENAME_EXCHANGE); False where the system or file system cannot."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            _libc.renameat2  # noqa: B018 (glibc >= 2.28)
        except (OSError, AttributeError):
            _libc = False
    if not _libc:
        return False
    rc = _libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _new_staging(target: Path, what: str):
    """(folder, its held lock) made beside `target`."""
    parent = target.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=parent))
        lock = _lock(tmp / STAGING_MARK)
    except OSError as exc:
        raise env_error(exc, parent if not parent.is_dir() else target, f"write {what}") from None
    return tmp, lock


def _switch(tmp: Path, target: Path, lock) -> None:
    """Put the finished folder `tmp` in place of `target` (which may not exist); the old output is removed."""
    (tmp / STAGING_MARK).unlink()  # the lock stays held through the open file until the old folder is gone
    if not target.exists():
        tmp.rename(target)
        return
    if _exchange(tmp, target):
        (tmp / STAGING_MARK).touch()  # the old output, now at tmp's name: marked, so a kill during removal is tidied
        shutil.rmtree(tmp, ignore_errors=True)
        return
    old = target.parent / f".{target.name}.old-{tmp.name.rsplit('-', 1)[-1]}"
    with _lock(target / STAGING_MARK):  # held while `target` is away: a kill between the renames shows as stale
        target.rename(old)  # a kill here leaves `old` and no `target`: _recover puts it back
        tmp.rename(target)
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def output_folder(out: str | Path, kind: str, *, what: str = "--out", products: tuple[str, ...] = (),
                  checked: bool = False):
    """Make a complete new output for `out` in a staging folder (yielded) and switch it in atomically once the
    block succeeds, with a manifest of its files. On any exception (including a signal) the staging folder goes and
    `out` is untouched. `checked`: check_output_folder already ran (it runs here otherwise, before anything)."""
    target = Path(os.path.abspath(out)) if checked else check_output_folder(Path(out), what)
    _recover(target)
    tmp = lock = None
    try:
        try:
            with deferred():  # a signal between creating the folder and noting it would leave it behind
                tmp, lock = _new_staging(target, what)
            yield tmp
            write_manifest(tmp, kind, products)
            tmp.chmod(0o777 & ~_umask())  # mkdtemp made it 0700; a checked-out folder's mode instead
            with deferred():  # the switch-over completes once begun; a signal is handled right after it
                _switch(tmp, target, lock)
        except OSError as exc:
            if exc.errno in _WRITING or not exc.filename:  # the output's place (a copy names its source file)
                raise env_error(exc, target, f"write {what}") from None
            raise env_error(exc, exc.filename, "use") from None
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if lock is not None:
            lock.close()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---- single files -------------------------------------------------------------------------------------------
def write_file(path: str | Path, data: str | bytes, *, what: str = "file",
               replaceable: Callable[[Path], bool] | None = None) -> Path:
    """Write `data` to `path` atomically (a locked temporary file beside it, renamed over it). An existing `path`
    is replaced only if `replaceable(path)` says it is tinyaot's (None: any regular file). Stale temporary files of
    killed runs beside it are removed. TinyaotError for a folder in the way, a foreign file or an OSError."""
    path = _refuse_in_the_way(Path(path), what, replaceable)
    target = Path(os.path.abspath(path))
    _recover(target)
    payload = data.encode() if isinstance(data, str) else data
    tmp = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with deferred():
            fd, name = tempfile.mkstemp(prefix=f".{target.name}.tmp-", dir=target.parent)
            tmp = Path(name)
        with os.fdopen(fd, "wb") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write(payload)
            f.flush()
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            os.replace(tmp, target)
            tmp = None
    except OSError as exc:
        raise env_error(exc, path, f"write {what}") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()
    return path


def tinyaot_json(path: Path) -> bool:
    """Whether `path` holds a JSON object tinyaot wrote: it has a tinyaot_version key (or, written by a tinyaot
    before it recorded one, an evaluation's `samples` and `int8_top1`)."""
    try:
        data = json.loads(path.read_bytes().decode())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and ("tinyaot_version" in data or {"samples", "int8_top1"} <= set(data))


def link_tree(src: Path, dst: Path) -> None:
    """Recreate the file or folder `src` as `dst` with hard links to its files (copies where links are not
    possible)."""
    if src.is_file():
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)
        return
    for root, dirs, files in os.walk(src):
        rel = Path(root).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for f in files:
            s, d = Path(root) / f, dst / rel / f
            try:
                os.link(s, d)
            except OSError:
                shutil.copy2(s, d)
