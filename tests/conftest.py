"""Fixtures shared by all tests (paths and data helpers are in shared_data.py), and where the suite's caches go."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# One BLAS thread per process: the suite runs one xdist worker per core, and OpenBLAS's own threads on top of them
# spin-wait against each other (a [16, 576] x [576, 576] product, the codebook refit's, measured 11x slower with
# OpenBLAS's default two threads on a busy machine). Set before anything imports numpy; the xdist workers, started
# after this file is read, inherit it. A value the caller set wins.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

_SAVED_ENV: dict[str, str | None] = {}

# Files holding the suite's longest single tests (15 to 65 s of one core each, measured on 2 idle cores), run first:
# xdist hands tests out in collection order, and one of these collected last (they sort late: sanitize, sweep, tune)
# would leave the other worker idle at the end while it runs alone.
LONG_FIRST = ("tests/sweep/test_ray.py", "tests/fuzz/test_differential_fuzz.py", "tests/sanitize/test_sanitizers.py",
              "tests/sanitize/test_kernel_build_matrix.py", "tests/compress/test_cluster.py",
              "tests/e2e/test_two_models.py", "tests/tune/test_tune.py", "tests/compress/test_compression_spec.py",
              "tests/sweep/test_sweep.py", "tests/compress/test_prune.py")


def pytest_collection_modifyitems(config, items):
    """Whole files from LONG_FIRST to the front, in that order; everything else keeps its order (a stable sort, so
    module-scoped fixtures still serve one file's tests in a row)."""
    rank = {path: i for i, path in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(LONG_FIRST)))


@pytest.hookimpl(trylast=True)  # after pytest's own configure has made its temporary-folder factory
def pytest_configure(config):
    """The suite writes nothing in the home directory. tinyaot's compiled helpers (host JIT libraries, the QEMU
    instruction-count plugin, internal-error logs) go to $TINYAOT_CACHE, by default ~/.cache/tinyaot; onnxruntime
    keeps a device-id file and pip (in the packaging test) a download cache under $XDG_CACHE_HOME, by default
    ~/.cache. Both point into pytest's temporary root (/tmp/pytest-of-<user>/cache), beside the numbered per-run
    folders, so that tinyaot's entries, keyed by the hash of their sources, compiler and flags, are hits again on
    the next run; with --basetemp they go inside that folder, which pytest empties at the start of each run.
    Set here rather than in a fixture because onnxruntime reads $XDG_CACHE_HOME when it is imported, which test
    modules do at collection.

    Under pytest-xdist every worker is a pytest of its own whose basetemp (always given, a folder inside the
    controller's) pytest empties at its start: the workers instead take the folder the controller chose, which they
    inherit in $TINYAOT_TEST_CACHE (the controller configures before it starts them), so they share one cache and
    it outlives the run as it does without xdist. Every writer of these caches renames a finished file into place,
    so two workers at worst build the same entry twice."""
    inherited = os.environ.get("TINYAOT_TEST_CACHE")
    factory = getattr(config, "_tmp_path_factory", None)  # pytest's own (its tmpdir plugin), not public API
    if hasattr(config, "workerinput") and inherited:  # an xdist worker: the controller's folder
        cache = Path(inherited)
    elif factory is None:  # tmpdir plugin disabled: a folder of this run only
        cache = Path(tempfile.mkdtemp(prefix="tinyaot-test-cache-"))
    else:
        base = factory.getbasetemp()
        cache = (base if config.option.basetemp else base.parent) / "cache"
    for name, path in (("XDG_CACHE_HOME", cache), ("TINYAOT_CACHE", cache / "tinyaot"),
                       ("TINYAOT_TEST_CACHE", cache)):
        path.mkdir(parents=True, exist_ok=True)
        _SAVED_ENV[name] = os.environ.get(name)
        os.environ[name] = str(path)


def pytest_unconfigure(config):
    for name, value in _SAVED_ENV.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def cal_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("calibration")
