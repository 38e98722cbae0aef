"""The object cache under firmware builds (toolchain/objects.py): the same sources give the same ELF with every
object read from the cache, a changed header compiles again, a damaged entry is rebuilt, a warning is never cached."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tinyaot.boards import load_board
from tinyaot.toolchain.firmware import build_firmware

BOARD = load_board("stm32")
HEADER = "#define SCALE {scale}\nint tinyaot_scaled(int x);\n"
LIBRARY = '#include "scale.h"\nint tinyaot_scaled(int x) { return x * SCALE; }\n'
PROGRAM = '#include "scale.h"\nint main(void) { return tinyaot_scaled(3) == 3 * SCALE ? 0 : 1; }\n'


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("TINYAOT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "objects"


def _stage(folder: Path, scale: int = 2, library: str = LIBRARY) -> list[Path]:
    folder.mkdir(parents=True)
    (folder / "scale.h").write_text(HEADER.format(scale=scale))
    (folder / "library.c").write_text(library)
    (folder / "program.c").write_text(PROGRAM)
    return [folder / "library.c", folder / "program.c"]


def _entries(cache: Path) -> dict[str, float]:
    return {p.name: p.stat().st_mtime_ns for p in cache.glob("*.o")}


def _build(tmp_path: Path, name: str, **kwargs) -> bytes:
    sources = _stage(tmp_path / name, **kwargs)
    elf = build_firmware(sources, [sources[0].parent], BOARD, tmp_path / name / "fw", werror=False)
    assert not (tmp_path / name / "fw" / "firmware.objects").exists()  # the working objects are gone
    return elf.read_bytes()


def test_the_same_sources_in_another_folder_link_from_the_cache(tmp_path, cache) -> None:
    first = _build(tmp_path, "a")
    entries = _entries(cache)
    assert len(entries) == 4  # the HAL's startup.c and tinyaot_hal.c, library.c, program.c
    second = _build(tmp_path, "b")
    assert second == first and set(_entries(cache)) == set(entries)  # no new entry: all four were hits


def test_a_changed_header_compiles_again(tmp_path, cache) -> None:
    first = _build(tmp_path, "a")
    before = set(_entries(cache))
    second = _build(tmp_path, "b", scale=5)
    added = set(_entries(cache)) - before
    assert len(added) == 2 and second != first  # both files that include scale.h, not the HAL


def test_a_damaged_entry_is_rebuilt_with_a_warning(tmp_path, cache, capsys) -> None:
    first = _build(tmp_path, "a")
    for entry in cache.glob("*.o"):
        entry.write_bytes(b"\0" * 64)  # the sidecar hash no longer matches
    capsys.readouterr()
    assert _build(tmp_path, "b") == first
    assert capsys.readouterr().err.count("compiled object") == 4
    assert all(os.path.getsize(p) > 64 for p in cache.glob("*.o"))


def test_an_object_compiled_with_warnings_is_not_kept(tmp_path, cache) -> None:
    noisy = LIBRARY + "int tinyaot_unused_probe(int x) { int y; return x; }\n"  # -Wunused-variable
    _build(tmp_path, "a", library=noisy)
    log = (tmp_path / "a" / "fw" / "firmware.build.log").read_text()
    assert "unused variable" in log
    assert len(_entries(cache)) == 3  # library.c compiled with a warning: not kept, so it warns again next time
    _build(tmp_path, "b", library=noisy)
    assert "unused variable" in (tmp_path / "b" / "fw" / "firmware.build.log").read_text()
