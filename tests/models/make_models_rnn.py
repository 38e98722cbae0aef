"""Build tinyaot's sequence test models (attention, LSTM): small classifiers over frames, trained here on synthetic
data, exported with PyTorch.

Run by hand (it needs torch, which is NOT a tinyaot dependency and which the tests never import):

    pip install torch==2.13.0 numpy onnx
    python tests/models/make_models_rnn.py [--only NAME ...]   # writes tests/models/<name>.onnx and <name>_data.npz

Task: the `chirps` spectrogram-like maps of make_models.py (5 sounds: steady tone, rising chirp, falling chirp, two
tones, click) read as a sequence of 16 frames of 16 frequency bins, input [16 frames, 16 bins]. Models:

- pt_frames_attention: one self-attention block over the frames (Q, K, V projections, scores Q @ K^T scaled by
  1/sqrt(16), Softmax over the keys, weights @ V: two MatMuls of activations), flattened, one linear layer, Softmax.
- pt_frames_lstm: one LSTM layer (20 hidden units, zero initial states) over the 16 frames, its 16 outputs
  flattened, one linear layer, Softmax.
- pt_rnn_plumbing (+ _dynamo): an untrained nn.LSTM and bidirectional nn.GRU called without states, input
  [16, 1, 16], exported with both exporters: the TorchScript one computes the zero states from Shape/Gather/Expand.
- pt_frames_gru: one GRU layer (20 hidden units, zero initial state) over the 16 frames, its last state (Y_h), one
  linear layer, Softmax.

Each data file holds `x` (float32 [300, 16, 16]) and `y` (int64 [300]) of samples the model was NOT trained on: the
first 100 are the calibration set, the last 200 the evaluation set. The networks train batched ([B, 16, 16]); the
export traces one sample ([1, 16, 16], reshaped to [16, 16] first), so every projection is a Gemm and no shape is
computed in the graph.
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

from make_models import N_SAVED, N_TRAIN, accuracy, make_chirps, train

HERE = Path(__file__).resolve().parent
FRAMES, BINS = 16, 16


def make_frames(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    x, y = make_chirps(n, rng)  # [n, 1, bins, frames]
    return np.ascontiguousarray(x[:, 0].transpose(0, 2, 1)), y


class FramesAttention(nn.Module):
    def __init__(self, classes: int = 5, d: int = 16):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(BINS, d), nn.Linear(BINS, d), nn.Linear(BINS, d)
        self.scale = 1.0 / float(np.sqrt(d))
        self.head = nn.Linear(FRAMES * d, classes)

    def forward(self, x):
        single = not self.training and x.shape[0] == 1  # the export: one sample, [1, frames, bins] -> 2-D
        if single:
            x = x.reshape(FRAMES, BINS)
        q, k, v = self.q(x), self.k(x), self.v(x)
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        o = torch.matmul(torch.softmax(scores, dim=-1), torch.relu(v))
        o = o.reshape(1, FRAMES * o.shape[-1]) if single else o.reshape(o.shape[0], -1)
        return torch.softmax(self.head(o), dim=-1)


class FramesLSTM(nn.Module):
    def __init__(self, classes: int = 5, hidden: int = 20):
        super().__init__()
        self.hidden = hidden
        self.lstm = nn.LSTM(BINS, hidden)  # [steps, batch, features]
        # zero initial states as constants: the export carries them as initializers, so the graph computes no
        # shape (an nn.LSTM called without states makes its zeros from the input's runtime shape)
        self.register_buffer("h0", torch.zeros(1, 1, hidden))
        self.register_buffer("c0", torch.zeros(1, 1, hidden))
        self.head = nn.Linear(FRAMES * hidden, classes)

    def forward(self, x):
        single = not self.training and x.shape[0] == 1
        if single:
            y, _ = self.lstm(x.reshape(FRAMES, 1, BINS), (self.h0, self.c0))
            o = y.reshape(1, FRAMES * self.hidden)
        else:
            b = x.shape[0]
            hx = (self.h0.expand(1, b, self.hidden).contiguous(), self.c0.expand(1, b, self.hidden).contiguous())
            y, _ = self.lstm(x.permute(1, 0, 2), hx)
            o = y.permute(1, 0, 2).reshape(b, -1)
        return torch.softmax(self.head(o), dim=-1)


class FramesGRU(nn.Module):
    def __init__(self, classes: int = 5, hidden: int = 20):
        super().__init__()
        self.hidden = hidden
        self.gru = nn.GRU(BINS, hidden)  # exported with linear_before_reset=1
        self.register_buffer("h0", torch.zeros(1, 1, hidden))  # constant zero state, as FramesLSTM
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        single = not self.training and x.shape[0] == 1
        if single:
            _, h = self.gru(x.reshape(FRAMES, 1, BINS), self.h0)  # the last state: ONNX GRU's Y_h
            o = h.reshape(1, self.hidden)
        else:
            b = x.shape[0]
            _, h = self.gru(x.permute(1, 0, 2), self.h0.expand(1, b, self.hidden).contiguous())
            o = h.reshape(b, self.hidden)
        return torch.softmax(self.head(o), dim=-1)


SPECS = {
    # name: (model class, seed, epochs)
    "pt_frames_attention": (FramesAttention, 1301, 20),
    "pt_frames_lstm": (FramesLSTM, 1302, 15),
    "pt_frames_gru": (FramesGRU, 1303, 15),
}


class PlainRecurrent(nn.Module):
    """nn.LSTM and a bidirectional nn.GRU called without states, on [16, 1, 16]: the exporters make the zero states
    from the input's runtime shape (TorchScript: Shape, Gather, Unsqueeze, Concat, Expand), which tinyaot folds.
    Untrained (seeded initialisation): it checks the export path, not accuracy."""

    def __init__(self):
        super().__init__()
        self.lstm, self.gru = nn.LSTM(BINS, 8), nn.GRU(BINS, 8, bidirectional=True)

    def forward(self, x):
        y, _ = self.lstm(x)
        z, _ = self.gru(x)
        return torch.cat([y.reshape(1, -1), z.reshape(1, -1)], 1)


def export_plain(out: Path) -> None:
    """pt_rnn_plumbing.onnx (TorchScript, opset 13) and pt_rnn_plumbing_dynamo.onnx (dynamo=True, opset 18)."""
    torch.manual_seed(1304)
    model = PlainRecurrent().eval()
    for suffix, dynamo, opset in (("", False, 13), ("_dynamo", True, 18)):
        buf = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, (torch.zeros(FRAMES, 1, BINS),), buf, opset_version=opset, dynamo=dynamo,
                              input_names=["x"], output_names=["y"])
        m = onnx.load_from_string(buf.getvalue())
        m.producer_name = "tinyaot tests/models/make_models_rnn.py"
        onnx.checker.check_model(m)
        onnx.save(m, str(out / f"pt_rnn_plumbing{suffix}.onnx"))
        print(f"pt_rnn_plumbing{suffix}: ops {', '.join(sorted({n.op_type for n in m.graph.node}))}")


def export(model: nn.Module, path: Path) -> None:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.zeros(1, FRAMES, BINS),), buf, opset_version=13, dynamo=False,
                          input_names=["x"], output_names=["probs"])
    m = onnx.load_from_string(buf.getvalue())
    m.producer_name, m.doc_string = "tinyaot tests/models/make_models_rnn.py", "trained by tinyaot on synthetic data"
    onnx.checker.check_model(m)
    onnx.save(m, str(path))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=HERE)
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args()
    torch.set_num_threads(2)
    if not args.only or "pt_rnn_plumbing" in args.only:
        export_plain(args.out)
    for name, (cls, seed, epochs) in SPECS.items():
        if args.only and name not in args.only:
            continue
        rng = np.random.default_rng(seed)
        x_train, y_train = make_frames(N_TRAIN, rng)
        x_saved, y_saved = make_frames(N_SAVED, rng)
        torch.manual_seed(seed)
        model = cls()
        train(model, x_train, y_train, epochs, seed)
        path = args.out / f"{name}.onnx"
        export(model, path)
        np.savez_compressed(args.out / f"{name}_data.npz", x=x_saved, y=y_saved)
        ops = sorted({n.op_type for n in onnx.load(str(path)).graph.node})
        print(f"{name}: train top-1 {accuracy(model, x_train, y_train):.4f}, calibration top-1 "
              f"{accuracy(model, x_saved[:100], y_saved[:100]):.4f}, evaluation top-1 "
              f"{accuracy(model, x_saved[100:], y_saved[100:]):.4f}; {path.stat().st_size} B onnx, "
              f"ops {', '.join(ops)}")


if __name__ == "__main__":
    main()
