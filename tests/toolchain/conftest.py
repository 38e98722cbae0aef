"""Helpers for the firmware/QEMU tests: a fake model built with the real harness and HAL."""
from __future__ import annotations

from pathlib import Path

import pytest

from tinyaot.codegen.project import render_harness
from tinyaot.toolchain.firmware import build_firmware

FAKE_MODEL = Path(__file__).parent / "fake_model"


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    # The plugin is compiled into a per-session cache so the tests exercise the first-use compile and never touch
    # the user's ~/.cache.
    mp = pytest.MonkeyPatch()
    mp.setenv("TINYAOT_CACHE", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()


def _build_fake(board, out_dir: Path, defines=(), **kwargs) -> Path:
    harness = render_harness("fake", out_dir)
    return build_firmware([FAKE_MODEL / "fake.c", harness], [FAKE_MODEL], board, out_dir,
                          defines=defines, werror=True, **kwargs)


def _build_program(board, out_dir: Path, source: str, **kwargs) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    src = out_dir / "program.c"
    src.write_text(source)
    return build_firmware([src], [], board, out_dir, werror=True, **kwargs)


# Fixtures rather than importable helpers: other test folders have their own conftest.py, so `import conftest`
# would be ambiguous.
@pytest.fixture
def build_fake():
    """build_fake(board, out_dir, defines=()) -> elf: the fake model (output = input + 1) plus the verification
    harness, held to -Werror."""
    return _build_fake


@pytest.fixture
def build_program():
    """build_program(board, out_dir, source) -> elf: a one-file C program with its own main, plus the HAL."""
    return _build_program
