"""Build tinyaot's PyTorch-exported test models: synthetic tasks, small networks trained here, ONNX export.

Run by hand (it needs torch, which is NOT a tinyaot dependency and which the tests never import):

    pip install torch==2.13.0 numpy onnx
    python tests/models/make_models.py            # writes tests/models/<name>.onnx and <name>_data.npz

Every random number comes from a fixed seed (numpy for the data, torch for initialisation and batching), so a
rerun with the same torch build reproduces the data files exactly and the models up to floating-point
non-determinism of the training run. The tasks:

- shapes:    1x16x16 images of one of 5 shapes (horizontal bar, vertical bar, hollow square, plus, diagonal),
             random position, size and brightness, on a noisy, randomly offset background.
- gratings:  1x16x16 sinusoidal gratings in one of 4 orientations (0, 45, 90, 135 degrees), random period,
             phase and contrast, heavy additive noise.
- chirps:    1x16x16 spectrogram-like maps (16 frequency bins x 16 frames) of one of 5 sounds: steady tone,
             rising chirp, falling chirp, two steady tones, a short broadband click; random frequencies, slopes,
             onsets, on a noise floor.

Each saved data file holds `x` (float32, [300, 1, 16, 16]) and `y` (int64, [300]) of samples the model was NOT
trained on: the first 100 are the calibration set, the last 200 the evaluation set.
"""
from __future__ import annotations

import argparse
import io
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
SIDE = 16
N_SAVED = 300  # 100 calibration + 200 evaluation
N_TRAIN = 6000


# ---- synthetic data (numpy only) -------------------------------------------------------------------------------

def make_shapes(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """5 classes: 0 horizontal bar, 1 vertical bar, 2 hollow square, 3 plus, 4 diagonal line."""
    x = np.empty((n, 1, SIDE, SIDE), np.float32)
    y = rng.integers(0, 5, n)
    for k in range(n):
        img = np.zeros((SIDE, SIDE), np.float32)
        c = y[k]
        if c in (0, 1):
            length, thick = rng.integers(7, 14), rng.integers(1, 3)
            a, b = rng.integers(0, SIDE - length + 1), rng.integers(0, SIDE - thick + 1)
            if c == 0:
                img[b:b + thick, a:a + length] = 1
            else:
                img[a:a + length, b:b + thick] = 1
        elif c == 2:
            s = rng.integers(6, 13)
            r0, c0 = rng.integers(0, SIDE - s + 1, 2)
            img[r0:r0 + s, c0:c0 + s] = 1
            img[r0 + 1:r0 + s - 1, c0 + 1:c0 + s - 1] = 0
        elif c == 3:
            s = rng.integers(3, 6)  # arm length
            r0, c0 = rng.integers(s, SIDE - s, 2)
            img[r0, c0 - s:c0 + s + 1] = 1
            img[r0 - s:r0 + s + 1, c0] = 1
        else:
            length = rng.integers(7, 13)
            r0, c0 = rng.integers(0, SIDE - length + 1, 2)
            anti = rng.integers(0, 2)
            for t in range(length):
                img[r0 + t, c0 + (length - 1 - t if anti else t)] = 1
        brightness = rng.uniform(0.5, 1.0)
        background = rng.uniform(-0.3, 0.3)
        x[k, 0] = background + brightness * img + rng.normal(0, 0.3, (SIDE, SIDE))
    return x, y.astype(np.int64)


def make_gratings(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """4 classes: grating orientation 0, 45, 90, 135 degrees (+-10 degrees jitter)."""
    yy, xx = np.mgrid[0:SIDE, 0:SIDE].astype(np.float32)
    y = rng.integers(0, 4, n)
    theta = np.deg2rad(y * 45.0 + rng.uniform(-10, 10, n))
    period = rng.uniform(3.0, 8.0, n)
    phase = rng.uniform(0, 2 * np.pi, n)
    contrast = rng.uniform(0.3, 1.0, n)
    proj = np.cos(theta)[:, None, None] * xx + np.sin(theta)[:, None, None] * yy
    g = contrast[:, None, None] * np.sin(2 * np.pi * proj / period[:, None, None] + phase[:, None, None])
    x = g + rng.normal(0, 0.75, (n, SIDE, SIDE))
    return x[:, None].astype(np.float32), y.astype(np.int64)


def make_chirps(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """5 classes over a [freq, time] map: 0 steady tone, 1 rising chirp, 2 falling chirp, 3 two steady tones,
    4 broadband click. Energy is a Gaussian ridge along the track, on a log-like noise floor."""
    f = np.arange(SIDE, dtype=np.float32)[:, None]
    t = np.arange(SIDE, dtype=np.float32)[None, :]
    y = rng.integers(0, 5, n)
    x = np.empty((n, 1, SIDE, SIDE), np.float32)
    for k in range(n):
        c = y[k]
        start, stop = sorted(rng.integers(0, SIDE + 1, 2))
        if stop - start < 8:
            start, stop = 0, SIDE
        on = ((t >= start) & (t < stop)).astype(np.float32)
        if c == 0:
            track = np.full_like(t, rng.uniform(2, 13))
            m = np.exp(-0.5 * ((f - track) / 0.8) ** 2) * on
        elif c in (1, 2):
            slope = rng.uniform(0.5, 1.0) * (1 if c == 1 else -1)
            f0 = rng.uniform(1, 5) if c == 1 else rng.uniform(10, 14)
            track = f0 + slope * (t - start)
            m = np.exp(-0.5 * ((f - track) / 0.8) ** 2) * on
        elif c == 3:
            f1 = rng.uniform(1, 7)
            f2 = f1 + rng.uniform(4, 7)
            m = (np.exp(-0.5 * ((f - f1) / 0.8) ** 2) + np.exp(-0.5 * ((f - f2) / 0.8) ** 2)) * on
        else:
            t0 = rng.integers(1, SIDE - 2)
            width = rng.integers(1, 3)
            m = ((t >= t0) & (t < t0 + width)).astype(np.float32) * np.ones_like(f) * rng.uniform(0.6, 1.0)
        level = rng.uniform(0.7, 1.2)
        x[k, 0] = level * m + rng.normal(0, 0.3, (SIDE, SIDE))
    return x, y.astype(np.int64)


# ---- models ----------------------------------------------------------------------------------------------------

class ShapesResNet(nn.Module):
    """Conv-BN-ReLU6 stem, one residual block (Add), a standalone BatchNorm after the Add, pooling, Linear,
    Softmax. ONNX: Conv, BatchNormalization (after Conv and standalone after Add), Clip, Relu, Add, MaxPool,
    GlobalAveragePool, Flatten, Gemm, Softmax."""

    def __init__(self, classes: int = 5):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU6())
        self.block = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                                   nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8))
        self.post_bn = nn.BatchNorm2d(8)  # standalone: its input is the Add, not a Conv
        self.head = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU6())
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = self.stem(x)
        x = F.relu(self.post_bn(x + self.block(x)))
        x = F.max_pool2d(x, 2)
        x = self.head(x)
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return torch.softmax(self.fc(x), dim=1)


class GratingsConcat(nn.Module):
    """Two branches (3x3 Conv-BN-Tanh and 5x5 Conv-BN-Sigmoid) concatenated on channels, a 1x1 Conv, average
    pooling, Linear, Softmax. ONNX: Conv, BatchNormalization, Tanh, Sigmoid, Concat, Relu, AveragePool,
    GlobalAveragePool, Flatten, Gemm, Softmax."""

    def __init__(self, classes: int = 4):
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(1, 6, 3, padding=1), nn.BatchNorm2d(6), nn.Tanh())
        self.b = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.BatchNorm2d(6), nn.Sigmoid())
        self.mix = nn.Sequential(nn.Conv2d(12, 16, 1), nn.ReLU())
        self.conv = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = torch.cat([self.a(x), self.b(x)], dim=1)
        x = F.avg_pool2d(self.mix(x), 2)
        x = self.conv(x)
        x = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)
        return torch.softmax(self.fc(x), dim=1)


class ChirpsMLP(nn.Module):
    """Flatten, a standalone 2-D BatchNorm on the flattened input, then Linear layers with Tanh, Hardtanh (Clip)
    and Sigmoid, Softmax. ONNX: Flatten, BatchNormalization (2-D, standalone), Gemm, Tanh, Clip, Sigmoid,
    Softmax."""

    def __init__(self, classes: int = 5):
        super().__init__()
        self.bn = nn.BatchNorm1d(SIDE * SIDE)
        self.fc1 = nn.Linear(SIDE * SIDE, 48)
        self.fc2 = nn.Linear(48, 32)
        self.fc3 = nn.Linear(32, 24)
        self.fc4 = nn.Linear(24, classes)

    def forward(self, x):
        x = self.bn(torch.flatten(x, 1))
        x = torch.tanh(self.fc1(x))
        x = F.hardtanh(self.fc2(x))
        x = torch.sigmoid(self.fc3(x))
        return torch.softmax(self.fc4(x), dim=1)


# name -> (data generator, model class, data seed, epochs)
SPECS = {
    "pt_shapes_resnet": (make_shapes, ShapesResNet, 101, 12),
    "pt_gratings_concat": (make_gratings, GratingsConcat, 202, 12),
    "pt_chirps_mlp": (make_chirps, ChirpsMLP, 303, 25),
}


# ---- training and export ---------------------------------------------------------------------------------------

def train(model: nn.Module, x: np.ndarray, y: np.ndarray, epochs: int, seed: int) -> None:
    torch.manual_seed(seed)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs)
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(xt))
        for i in range(0, len(xt), 64):
            idx = perm[i:i + 64]
            # The model ends in Softmax (exported as is), so train on the log of its output.
            loss = F.nll_loss(torch.log(model(xt[idx]).clamp_min(1e-12)), yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()
    model.eval()


@torch.no_grad()
def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    return float((model(torch.from_numpy(x)).argmax(1).numpy() == y).mean())


def export(model: nn.Module, path: Path) -> None:
    """Classic (TorchScript) exporter, opset 13, batch 1. `do_constant_folding=False` keeps every
    BatchNormalization as its own node (with folding on, the exporter fuses Conv+BN itself), so tinyaot's
    own folding and its standalone-BN rewrite are what get tested."""
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation notice
        torch.onnx.export(model, (torch.zeros(1, 1, SIDE, SIDE),), buf, opset_version=13, dynamo=False,
                          do_constant_folding=False, input_names=["x"], output_names=["probs"])
    m = onnx.load_from_string(buf.getvalue())
    m.producer_name, m.doc_string = "tinyaot tests/models/make_models.py", "trained by tinyaot on synthetic data"
    onnx.checker.check_model(m)
    onnx.save(m, str(path))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--only", nargs="*", default=None, help="names to build (default: all)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    for name, (make, cls, seed, epochs) in SPECS.items():
        if args.only and name not in args.only:
            continue
        rng = np.random.default_rng(seed)
        x_train, y_train = make(N_TRAIN, rng)
        x_saved, y_saved = make(N_SAVED, rng)
        torch.manual_seed(seed)
        model = cls()
        train(model, x_train, y_train, epochs, seed)
        onnx_path = args.out / f"{name}.onnx"
        export(model, onnx_path)
        np.savez_compressed(args.out / f"{name}_data.npz", x=x_saved, y=y_saved)
        ops = sorted({n.op_type for n in onnx.load(str(onnx_path)).graph.node})
        print(f"{name}: train top-1 {accuracy(model, x_train, y_train):.4f}, calibration top-1 "
              f"{accuracy(model, x_saved[:100], y_saved[:100]):.4f}, evaluation top-1 "
              f"{accuracy(model, x_saved[100:], y_saved[100:]):.4f}; "
              f"{onnx_path.stat().st_size} B onnx, ops {', '.join(ops)}")


if __name__ == "__main__":
    main()
