"""Calibration and evaluation splits of the shared reference data, one place for ci/figures.py and the tests.

Two places hold the same models and data: the full reference set beside the project (`../shared`, read-only),
which the ci/ benchmarks read, and the trimmed copy in `tests/fixtures` (its README says what was kept), which the
tests read so that they need nothing outside the repository. `Sets(models, data)` reads either; the module-level
functions read `../shared`, and tests/shared_data.py makes the fixtures' `Sets`. Convention
(shared/models/README.md): calibrate on the first samples of a set (100, or 15 for sww01) and evaluate on the rest,
so the two never overlap; a trimmed set keeps its leading samples, so its calibration split is the same and its
evaluation split is a prefix of the full one.

Three models have no matching labelled data in the reference set, and get calibration inputs built from what is there:

- vww_mobilenetv1_025: real photos at the model's input scale, not the VWW data set (there are no VWW images in
  the reference set): the first 100 CIFAR-10 images of ic01 (raw 0..255, 32x32) resized to 96x96 (bilinear) and
  divided by 255, the [0, 1] pixel scale the model was trained on (the authors' int8 TFLite input is scale 1/255,
  zp -128).
  A calibration stand-in only: the model's accuracy cannot be measured from it.
- ad_fc_autoencoder: its input is 5 consecutive frames of 128 log-mel bins, frame after frame; the windows are
  every run of 5 consecutive frames of the normal machine-sound spectrogram `ad_normal_id_01_00000000` (200 frames,
  so 196 windows). An autoencoder has no labels.
- tflm_hello_world_sine: 100 points evenly spread over [0, 2 pi], the domain it was trained on.
"""
from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class Sets:
    """The models (`<model>.onnx` in `models`) and data files (`<set>.npz` in `data`) of one copy of the reference
    set, with the splits above."""
    models: Path
    data: Path

    def model_path(self, model: str) -> Path:
        return self.models / f"{model}.onnx"

    def _vww_stand_in(self, count: int = 100) -> np.ndarray:
        from scipy import ndimage

        with np.load(self.data / "ic01.npz") as z:
            images = z["x"][:count].astype(np.float32)  # [N, 32, 32, 3], 0..255
        f = VWW_SIZE / images.shape[1]
        # order=1: bilinear, no overshoot, so the pixels stay within [0, 255] and the scaled ones within [0, 1]
        big = ndimage.zoom(images, (1, f, f, 1), order=1)
        return (big / 255.0).astype(np.float32)

    def _ad_windows(self) -> np.ndarray:
        with np.load(self.data / "inrepo_samples.npz") as z:
            frames = z["ad_normal_id_01_00000000"].astype(np.float32)  # [200, 128]
        n = len(frames) - AD_FRAMES + 1
        return np.stack([frames[i:i + AD_FRAMES].reshape(-1) for i in range(n)])

    def calibration(self, model: str) -> np.ndarray:
        """Calibration inputs of `model`, first axis = sample."""
        if model == "vww_mobilenetv1_025":
            return self._vww_stand_in()
        if model == "ad_fc_autoencoder":
            return self._ad_windows()
        if model == "tflm_hello_world_sine":
            return np.linspace(0, 2 * np.pi, 100, dtype=np.float32).reshape(100, 1)
        data, n = SPLITS[model]
        with np.load(self.data / f"{data}.npz") as z:
            return z["x"][:n].astype(np.float32)

    def evaluation(self, model: str) -> tuple[np.ndarray, np.ndarray] | None:
        """Labelled samples that were not used for calibration, or None when there are none for this model."""
        if model not in SPLITS:
            return None
        data, n = SPLITS[model]
        with np.load(self.data / f"{data}.npz") as z:
            return z["x"][n:].astype(np.float32), z["y"][n:]

    def write_calibration(self, model: str, folder: Path) -> Path:
        """`calibration(model)` as the CAL.npz that deploy/evaluate read (an `x` array); cached in `folder`, which
        must therefore hold files of one `Sets` only."""
        path = Path(folder) / f"{model}_cal.npz"
        if not path.exists():
            np.savez(path, x=self.calibration(model))
        return path

    def write_evaluation(self, model: str, folder: Path) -> Path | None:
        """`evaluation(model)` as a DATA.npz (`x`, `y`), or None without labelled data; cached in `folder`."""
        split = self.evaluation(model)
        if split is None:
            return None
        path = Path(folder) / f"{model}_eval.npz"
        if not path.exists():
            np.savez(path, x=split[0], y=split[1])
        return path


# The full reference set, for the ci/ benchmarks.
REFERENCE = Sets(MODELS, DATA)
model_path = REFERENCE.model_path
calibration = REFERENCE.calibration
evaluation = REFERENCE.evaluation
write_calibration = REFERENCE.write_calibration
write_evaluation = REFERENCE.write_evaluation
