"""Paths and data for the tests: the reference models, data samples and CMSIS-NN vectors the suite reads, from the
repository's own copy in tests/fixtures (its README gives origin and licence per file), never from outside the
repository. The splits themselves are ci/datasets.py's, so the tests calibrate every model on the same samples as
ci/figures.py (which reads the full reference sets beside the project)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ci.datasets import ALL_MODELS, SPLITS, Sets  # noqa: F401

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
