"""Calibration and evaluation splits of the shared reference data, one place for ci/figures.py and the tests.

The shared models and data live beside the project (`../shared`, read-only). Convention (shared/models/README.md):
calibrate on the first samples of a set (100, or 15 for sww01) and evaluate on the rest, so the two never overlap.
Three models have no matching labelled data in ../shared, and get calibration inputs built from what is there:

- vww_mobilenetv1_025: real photos at the model's input scale, not the VWW data set (there are no VWW images in
  ../shared): the first 100 CIFAR-10 images of ic01 (raw 0..255, 32x32) resized to 96x96 (bilinear) and divided by
  255, the [0, 1] pixel scale the model was trained on (the authors' int8 TFLite input is scale 1/255, zp -128).
  A calibration stand-in only: the model's accuracy cannot be measured from it.
- ad_fc_autoencoder: its input is 5 consecutive frames of 128 log-mel bins, frame after frame; the windows are
  every run of 5 consecutive frames of the normal machine-sound spectrogram `ad_normal_id_01_00000000` (200 frames,
  so 196 windows). An autoencoder has no labels.
- tflm_hello_world_sine: 100 points evenly spread over [0, 2 pi], the domain it was trained on.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
MODELS = SHARED / "models"
DATA = SHARED / "data"

# model -> (labelled data file, number of leading samples used for calibration)
SPLITS = {"kws_dscnn": ("kws01", 100), "ic_resnet8": ("ic01", 100), "ic_resnet8_large": ("ic01", 100),
          "mnist8_opset13": ("mnist01", 100), "sww_dscnn": ("sww01", 15)}
ALL_MODELS = ["kws_dscnn", "vww_mobilenetv1_025", "ic_resnet8", "ad_fc_autoencoder", "sww_dscnn", "ic_resnet8_large",
              "mnist8_opset13", "tflm_hello_world_sine"]

VWW_SIZE = 96
AD_FRAMES = 5


def model_path(model: str) -> Path:
    return MODELS / f"{model}.onnx"


def _vww_stand_in(count: int = 100) -> np.ndarray:
    from scipy import ndimage

    with np.load(DATA / "ic01.npz") as z:
        images = z["x"][:count].astype(np.float32)  # [N, 32, 32, 3], 0..255
    f = VWW_SIZE / images.shape[1]
    # order=1: bilinear, no overshoot, so the pixels stay within [0, 255] and the scaled ones within [0, 1]
    big = ndimage.zoom(images, (1, f, f, 1), order=1)
    return (big / 255.0).astype(np.float32)


def _ad_windows() -> np.ndarray:
    with np.load(DATA / "inrepo_samples.npz") as z:
        frames = z["ad_normal_id_01_00000000"].astype(np.float32)  # [200, 128]
    n = len(frames) - AD_FRAMES + 1
    return np.stack([frames[i:i + AD_FRAMES].reshape(-1) for i in range(n)])


def calibration(model: str) -> np.ndarray:
    """Calibration inputs of `model`, first axis = sample."""
    if model == "vww_mobilenetv1_025":
        return _vww_stand_in()
    if model == "ad_fc_autoencoder":
        return _ad_windows()
    if model == "tflm_hello_world_sine":
        return np.linspace(0, 2 * np.pi, 100, dtype=np.float32).reshape(100, 1)
    data, n = SPLITS[model]
    with np.load(DATA / f"{data}.npz") as z:
        return z["x"][:n].astype(np.float32)


def evaluation(model: str) -> tuple[np.ndarray, np.ndarray] | None:
    """Labelled samples that were not used for calibration, or None when there are none for this model."""
    if model not in SPLITS:
        return None
    data, n = SPLITS[model]
    with np.load(DATA / f"{data}.npz") as z:
        return z["x"][n:].astype(np.float32), z["y"][n:]


def write_calibration(model: str, folder: Path) -> Path:
    """`calibration(model)` as the CAL.npz that deploy/evaluate read (an `x` array); cached in `folder`."""
    path = Path(folder) / f"{model}_cal.npz"
    if not path.exists():
        np.savez(path, x=calibration(model))
    return path


def write_evaluation(model: str, folder: Path) -> Path | None:
    """`evaluation(model)` as a DATA.npz (`x`, `y`), or None without labelled data; cached in `folder`."""
    split = evaluation(model)
    if split is None:
        return None
    path = Path(folder) / f"{model}_eval.npz"
    if not path.exists():
        np.savez(path, x=split[0], y=split[1])
    return path
