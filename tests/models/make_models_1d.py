"""Build tinyaot's 1-D (sensor) PyTorch test model: a 1-D CNN over 3-axis accelerometer-like windows, trained here
on synthetic activity classes, exported with BOTH PyTorch exporters.

Run by hand (it needs torch and onnxscript, which are NOT tinyaot dependencies and which the tests never import):

    pip install torch==2.13.0 onnxscript numpy onnx
    python tests/models/make_models_1d.py     # writes pt_sensor_cnn1d{,_dynamo}.onnx and pt_sensor_cnn1d_data.npz

The task (6 classes, window of 64 samples x 3 axes, fixed numpy seed):
    0 rest:      small noise around a random gravity direction
    1 walk:      ~1.5-2.5 cycles per window sine on all axes, dominant on a random axis
    2 run:       ~5-7 cycles per window, larger amplitude
    3 shake:     ~10-14 cycles per window square-ish wave (sign of a sine), one axis
    4 tap:       1-3 short spikes at random times on a random axis
    5 rotate:    slow phase-shifted sines on two axes (a circle), ~1 cycle per window
with random amplitude, phase, gravity offset and Gaussian noise on every sample.

`pt_sensor_cnn1d.onnx` is the TorchScript export (dynamo=False, opset 13, do_constant_folding=False: every
BatchNormalization stays a node of its own), `pt_sensor_cnn1d_dynamo.onnx` the same trained network through
`torch.onnx.export(..., dynamo=True)` (opset 18). The data file holds `x` (float32 [300, 3, 64]) and `y`
(int64 [300]) of samples the model was NOT trained on: the first 100 calibrate, the last 200 evaluate.
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
LEN = 64
AXES = 3
N_SAVED = 300
N_TRAIN = 6000
SEED = 404
EPOCHS = 15


def make_sensor(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    t = np.arange(LEN, dtype=np.float64) / LEN  # one window = 1 time unit
    y = rng.integers(0, 6, n)
    x = np.empty((n, AXES, LEN), np.float32)
    for k in range(n):
        c = y[k]
        g = rng.normal(0, 1, AXES)
        g = 0.5 * g / np.linalg.norm(g)  # gravity offset, random direction
        s = np.zeros((AXES, LEN))
        main = rng.integers(0, AXES)
        amp = rng.uniform(0.5, 1.0)
        if c == 1 or c == 2:
            f = rng.uniform(1.5, 2.5) if c == 1 else rng.uniform(5, 7)
            a = amp * (1.0 if c == 1 else 1.6)
            for ax in range(AXES):
                w = 1.0 if ax == main else rng.uniform(0.1, 0.4)
                s[ax] = a * w * np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi))
        elif c == 3:
            f = rng.uniform(10, 14)
            s[main] = amp * np.sign(np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi)))
        elif c == 4:
            for _ in range(rng.integers(1, 4)):
                at = rng.integers(2, LEN - 2)
                s[main, at] += amp * 2.5
                s[main, at + 1] -= amp * 1.2
        elif c == 5:
            f, ph = rng.uniform(0.8, 1.3), rng.uniform(0, 2 * np.pi)
            other = (main + rng.integers(1, AXES)) % AXES
            s[main] = amp * np.sin(2 * np.pi * f * t + ph)
            s[other] = amp * np.cos(2 * np.pi * f * t + ph)
        x[k] = g[:, None] + s + rng.normal(0, 0.25, (AXES, LEN))
    return x, y.astype(np.int64)


class SensorCNN1d(nn.Module):
    """Conv1d-BN-ReLU, MaxPool1d, a depthwise dilated Conv1d-BN-ReLU, a strided grouped Conv1d-BN-ReLU6, AvgPool1d,
    a pointwise Conv1d-BN-ReLU, AdaptiveAvgPool1d(1), Linear, Softmax."""

    def __init__(self, classes: int = 6):
        super().__init__()
        self.f = nn.Sequential(
            nn.Conv1d(AXES, 16, 5, padding=2, bias=False), nn.BatchNorm1d(16), nn.ReLU(),
            nn.MaxPool1d(2),
            nn.Conv1d(16, 16, 3, padding=2, dilation=2, groups=16, bias=False), nn.BatchNorm1d(16), nn.ReLU(),
            nn.Conv1d(16, 32, 3, stride=2, padding=1, groups=4), nn.BatchNorm1d(32), nn.ReLU6(),
            nn.AvgPool1d(2),
            nn.Conv1d(32, 32, 1), nn.BatchNorm1d(32), nn.ReLU())
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        x = torch.flatten(F.adaptive_avg_pool1d(self.f(x), 1), 1)
        return torch.softmax(self.fc(x), dim=1)


def train(model, x, y, epochs, seed):
    torch.manual_seed(seed)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs)
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(xt))
        for i in range(0, len(xt), 64):
            idx = perm[i:i + 64]
            loss = F.nll_loss(torch.log(model(xt[idx]).clamp_min(1e-12)), yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()
    model.eval()


@torch.no_grad()
def accuracy(model, x, y) -> float:
    return float((model(torch.from_numpy(x)).argmax(1).numpy() == y).mean())


def _finish(m: onnx.ModelProto, path: Path) -> None:
    m.producer_name, m.doc_string = "tinyaot tests/models/make_models_1d.py", "trained by tinyaot on synthetic data"
    onnx.checker.check_model(m)
    onnx.save(m, str(path))


def export_torchscript(model, path: Path) -> None:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(1, AXES, LEN),), buf, opset_version=13, dynamo=False,
                          do_constant_folding=False, input_names=["x"], output_names=["probs"])
    _finish(onnx.load_from_string(buf.getvalue()), path)


def export_dynamo(model, path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = torch.onnx.export(model, (torch.zeros(1, AXES, LEN),), dynamo=True, opset_version=18,
                                 input_names=["x"], output_names=["probs"], external_data=False)
    _finish(prog.model_proto, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args()
    torch.set_num_threads(2)
    rng = np.random.default_rng(SEED)
    x_train, y_train = make_sensor(N_TRAIN, rng)
    x_saved, y_saved = make_sensor(N_SAVED, rng)
    torch.manual_seed(SEED)
    model = SensorCNN1d()
    train(model, x_train, y_train, EPOCHS, SEED)
    name = "pt_sensor_cnn1d"
    export_torchscript(model, args.out / f"{name}.onnx")
    export_dynamo(model, args.out / f"{name}_dynamo.onnx")
    np.savez_compressed(args.out / f"{name}_data.npz", x=x_saved, y=y_saved)
    for p in (args.out / f"{name}.onnx", args.out / f"{name}_dynamo.onnx"):
        m = onnx.load(str(p))
        ops = sorted({n.op_type for n in m.graph.node})
        print(f"{p.name}: opset {m.opset_import[0].version}, {p.stat().st_size} B, ops {', '.join(ops)}")
    print(f"{name}: train top-1 {accuracy(model, x_train, y_train):.4f}, calibration top-1 "
          f"{accuracy(model, x_saved[:100], y_saved[:100]):.4f}, evaluation top-1 "
          f"{accuracy(model, x_saved[100:], y_saved[100:]):.4f}")


if __name__ == "__main__":
    main()
