"""Build pt_mbv3_se: a MobileNetV3-style test model (HardSwish, squeeze-and-excitation, depthwise layers with wide
per-channel ranges) on a synthetic labelled task where plain min/max int8 calibration loses accuracy.

Run by hand (torch is NOT a tinyaot dependency; the tests never import it):

    .venv/bin/pip install torch==2.13.0 numpy onnx
    .venv/bin/python tests/models/make_models_mbv3.py     # writes pt_mbv3_se.onnx and pt_mbv3_se_data.npz here

The task is make_models.py's shapes (5 classes, 1x16x16), with hot pixels: a third of the images get 1-3 pixels
of a large random amplitude (a sensor's defects). They are rare, so they set the min/max of the input and of the
early activations while the shapes themselves use a small part of those ranges: the activation outliers that
min/max calibration spends its 256 levels on.

The network, MobileNetV3-like:
    stem      Conv 3x3 (1->8), BN, HardSwish
    block 1   expand 1x1 (8->16), BN, ReLU; depthwise 3x3 stride 2, BN, ReLU; project 1x1 (16->12), BN
    block 2   expand 1x1 (12->24), BN, HardSwish; depthwise 3x3, BN, HardSwish;
              squeeze-and-excitation (global average pool, 1x1 24->8, ReLU, 1x1 8->24, HardSigmoid, Mul);
              project 1x1 (24->12), BN; residual Add
    head      1x1 (12->32), BN, HardSwish; global average pool; Linear 32->24, HardSwish; Linear 24->5; Softmax

Wide per-channel ranges: after training, block 1's depthwise channels are multiplied by factors spread
log-uniformly over [1/32, 8] (its weights and BatchNorm shift, so its ReLU output channel k is multiplied by
s_k) and the project layer's input channel k is divided by s_k. ReLU(s z) = s ReLU(z) for s > 0, so the float
function is unchanged (to float rounding); only the depthwise output's channels now span two orders of
magnitude, as they do in trained MobileNets after BatchNorm folding (Nagel et al. 2019, the motivation of
cross-layer equalization). One int8 scale per tensor then leaves the small channels a few levels.

Export: TorchScript exporter, opset 14 (HardSwish is an opset-14 op), `do_constant_folding=False`, batch 1, input
`x` [1,1,16,16], output `probs`; the exporter's doc strings (which hold source paths of this machine) are
removed. The data file holds `x` (float32 [300,1,16,16]) and `y` (int64 [300]) of samples not trained on: the
first 100 calibrate, the last 200 evaluate. Every random number has a fixed seed.
"""
from __future__ import annotations

import argparse
import io
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_models import N_SAVED, N_TRAIN, SIDE, accuracy, make_shapes, train  # noqa: E402

NAME = "pt_mbv3_se"
SEED = 404
EPOCHS = 14
HOT_FRACTION = 1 / 3  # images with hot pixels
HOT_AMPLITUDE = (4.0, 10.0)  # |value| of a hot pixel (the shapes are about 1 on noise of 0.3)
SPREAD = (1 / 32, 8.0)  # block 1's depthwise channel factors, log-uniform


def make_data(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    x, y = make_shapes(n, rng)
    for k in np.nonzero(rng.random(n) < HOT_FRACTION)[0]:
        for _ in range(rng.integers(1, 4)):
            r, c = rng.integers(0, SIDE, 2)
            x[k, 0, r, c] = rng.choice([-1.0, 1.0]) * rng.uniform(*HOT_AMPLITUDE)
    return x, y


def conv_bn(cin: int, cout: int, k: int = 1, stride: int = 1, groups: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, squeeze: int):
        super().__init__()
        self.fc1 = nn.Conv2d(c, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, c, 1)

    def forward(self, x):
        g = F.adaptive_avg_pool2d(x, 1)
        return x * F.hardsigmoid(self.fc2(F.relu(self.fc1(g))))


class MobileNetV3Small(nn.Module):
    def __init__(self, classes: int = 5):
        super().__init__()
        self.stem = nn.Sequential(*conv_bn(1, 8, 3), nn.Hardswish())
        self.expand1 = nn.Sequential(*conv_bn(8, 16), nn.ReLU())
        self.dw1 = nn.Sequential(*conv_bn(16, 16, 3, 2, groups=16), nn.ReLU())
        self.project1 = nn.Sequential(*conv_bn(16, 12))
        self.expand2 = nn.Sequential(*conv_bn(12, 24), nn.Hardswish())
        self.dw2 = nn.Sequential(*conv_bn(24, 24, 3, groups=24), nn.Hardswish())
        self.se2 = SqueezeExcite(24, 8)
        self.project2 = nn.Sequential(*conv_bn(24, 12))
        self.head = nn.Sequential(*conv_bn(12, 32), nn.Hardswish())
        self.fc1 = nn.Linear(32, 24)
        self.fc2 = nn.Linear(24, classes)

    def forward(self, x):
        x = self.stem(x)
        x = self.project1(self.dw1(self.expand1(x)))
        x = x + self.project2(self.se2(self.dw2(self.expand2(x))))
        x = torch.flatten(F.adaptive_avg_pool2d(self.head(x), 1), 1)
        return torch.softmax(self.fc2(F.hardswish(self.fc1(x))), dim=1)


@torch.no_grad()
def spread_depthwise(model: MobileNetV3Small, rng: np.random.Generator) -> np.ndarray:
    """Multiply dw1's output channel k by s_k (its BN's gamma and beta: BN(z) s = s gamma (z - mu)/sigma + s beta)
    and divide project1's input channel k by s_k; ReLU between them keeps the function (positive homogeneity)."""
    s = np.exp(rng.uniform(np.log(SPREAD[0]), np.log(SPREAD[1]), 16)).astype(np.float32)
    st = torch.from_numpy(s)
    bn = model.dw1[1]
    bn.weight.mul_(st)
    bn.bias.mul_(st)
    model.project1[0].weight.div_(st[None, :, None, None])
    return s


def export(model: nn.Module, path: Path) -> None:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation notice
        torch.onnx.export(model, (torch.zeros(1, 1, SIDE, SIDE),), buf, opset_version=14, dynamo=False,
                          do_constant_folding=False, input_names=["x"], output_names=["probs"])
    m = onnx.load_from_string(buf.getvalue())
    m.producer_name, m.doc_string = "tinyaot tests/models/make_models_mbv3.py", "trained by tinyaot on synthetic data"
    for node in m.graph.node:  # no source paths of the machine that exported it
        node.doc_string = ""
        del node.metadata_props[:]
    del m.metadata_props[:]
    onnx.checker.check_model(m)
    onnx.save(m, str(path))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args()
    torch.set_num_threads(2)
    rng = np.random.default_rng(SEED)
    x_train, y_train = make_data(N_TRAIN, rng)
    x_saved, y_saved = make_data(N_SAVED, rng)
    torch.manual_seed(SEED)
    model = MobileNetV3Small()
    train(model, x_train, y_train, EPOCHS, SEED)
    before = model(torch.from_numpy(x_saved)).detach().numpy()
    s = spread_depthwise(model, rng)
    after = model(torch.from_numpy(x_saved)).detach().numpy()
    path = args.out / f"{NAME}.onnx"
    export(model, path)
    np.savez_compressed(args.out / f"{NAME}_data.npz", x=x_saved, y=y_saved)
    ops = sorted({n.op_type for n in onnx.load(str(path)).graph.node})
    print(f"{NAME}: depthwise channel factors {s.min():.3f}..{s.max():.3f}, max |probs change| from the "
          f"rescaling {np.abs(after - before).max():.2e}; train top-1 {accuracy(model, x_train, y_train):.4f}, "
          f"calibration top-1 {accuracy(model, x_saved[:100], y_saved[:100]):.4f}, evaluation top-1 "
          f"{accuracy(model, x_saved[100:], y_saved[100:]):.4f}; {path.stat().st_size} B onnx, ops {', '.join(ops)}")


if __name__ == "__main__":
    main()
