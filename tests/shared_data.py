"""Shared paths and data for the tests: the reference models and data live in ../shared (read-only). The splits
themselves are ci/datasets.py's, so the tests and ci/figures.py calibrate every model on the same samples."""
from __future__ import annotations

from pathlib import Path

from ci.datasets import DATA, MODELS, ROOT, SHARED, SPLITS, write_calibration, write_evaluation  # noqa: F401


def calibration_file(tmp: Path, model: str) -> Path:
    """The model's calibration samples (ci/datasets.py) as CAL.npz in `tmp`."""
    return write_calibration(model, tmp)
