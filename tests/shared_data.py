"""Paths and data for the tests: the reference models, data samples and CMSIS-NN vectors the suite reads, from the
repository's own copy in tests/fixtures (its README gives origin and licence per file), never from outside the
repository. The splits themselves are ci/datasets.py's, so the tests calibrate every model on the same samples as
ci/figures.py (which reads the full reference sets beside the project)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ci.datasets import ALL_MODELS, SPLITS, Sets  # noqa: F401
from tinyaot.toolchain.qemu import plugin_path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
MODELS = FIXTURES / "models"
DATA = FIXTURES / "data"
CMSIS_NN = FIXTURES / "cmsis_nn"  # CMSIS-NN's int8 unit-test vectors (index.json + one .npz per case)

FIXTURE_SETS = Sets(MODELS, DATA)
model_path = FIXTURE_SETS.model_path
calibration = FIXTURE_SETS.calibration
evaluation = FIXTURE_SETS.evaluation
write_calibration = FIXTURE_SETS.write_calibration
write_evaluation = FIXTURE_SETS.write_evaluation


def calibration_file(tmp: Path, model: str) -> Path:
    """The model's calibration samples (ci/datasets.py's split of the fixture data) as CAL.npz in `tmp`."""
    return write_calibration(model, tmp)


def few_calibration_samples(tmp: Path, model: str, count: int = 16) -> Path:
    """The first `count` of the model's calibration samples, for tests whose assertions follow from the settings
    (bytes, channel counts, MACs, bit-exactness) rather than from how well 100 samples calibrate: compression's
    layer-by-layer reconstruction costs time in proportion to the samples it runs."""
    with np.load(calibration_file(tmp, model)) as full:
        arrays = {k: full[k][:count] for k in full.files}
    path = tmp / f"{model}_first{count}.npz"
    np.savez(path, **arrays)
    return path


def cache_sharing_builds(folder: Path) -> Path:
    """`folder` made a tinyaot cache ($TINYAOT_CACHE) of its own whose compiled-object and host-library folders are
    the suite's (symbolic links into $TINYAOT_CACHE as tests/conftest.py set it): for a test that needs its tuning
    or sweep records fresh, not the kernels compiled again (each new cache otherwise compiles every kernel object
    and the QEMU plugin cold, a few seconds of one core each time). Both folders are keyed by their content, so
    sharing them changes no figure; a test about those caches themselves keeps a whole cache of its own. The QEMU
    instruction-count plugin is linked the same way."""
    suite = Path(os.environ["TINYAOT_CACHE"])
    folder.mkdir(parents=True, exist_ok=True)
    for sub in ("objects", "host"):
        (suite / sub).mkdir(parents=True, exist_ok=True)
        (folder / sub).symlink_to(suite / sub, target_is_directory=True)
    plugin = plugin_path()  # the suite's, compiled there on its first use
    for path in (plugin, plugin.with_name(plugin.name + ".sha256")):
        (folder / path.name).symlink_to(path)
    return folder
