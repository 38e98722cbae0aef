"""Shared paths and data for the tests: the reference models and data live in ../shared (read-only)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
MODELS = SHARED / "models"
DATA = SHARED / "data"

# model -> (data file, calibration count) following the shared README's convention
SPLITS = {"kws_dscnn": ("kws01", 100), "ic_resnet8": ("ic01", 100), "mnist8_opset13": ("mnist01", 100),
          "sww_dscnn": ("sww01", 15), "ic_resnet8_large": ("ic01", 100)}


def calibration_file(tmp: Path, model: str) -> Path:
    """The first samples of the model's shared data set (or 100 points of [0, 2 pi] for the sine model)."""
    path = tmp / f"{model}_cal.npz"
    if model == "tflm_hello_world_sine":
        np.savez(path, x=np.linspace(0, 2 * np.pi, 100, dtype=np.float32).reshape(100, 1))
    else:
        data, n = SPLITS[model]
        with np.load(DATA / f"{data}.npz") as z:
            np.savez(path, x=z["x"][:n])
    return path


