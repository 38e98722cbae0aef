"""Build the exporter-pair fixtures: small PyTorch networks, each exported twice from the same weights, with the
TorchScript exporter (`dynamo=False`, opset 13, the default constant folding) and the dynamo exporter
(`dynamo=True`, opset 18). The two files spell the same network differently (HardSwish as `x * HardSigmoid(x)` or
as HardSwish, padding as a Pad node or inside the Conv, `chunk` as Shape/Gather/Div/Slice arithmetic or as Split,
BatchNormalization folded by one exporter and not the other...); tests/e2e/test_exporters.py holds tinyaot to
compiling both to the same kernels, arena and instruction count.

Run by hand (torch is NOT a tinyaot dependency and the tests never import it):

    pip install torch torchvision onnxscript numpy onnx
    python tests/models/make_models_exporters.py      # writes tests/models/ex_<name>_{ts,dynamo}.onnx

Weights are random (a fixed torch seed) and the BatchNormalization statistics are made non-trivial: only the
compiled structure is compared, not accuracy. Input [1, 3, 32, 32], output `logits`.
"""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
SEED = 21
SHAPE = (1, 3, 32, 32)


def conv_bn(cin, cout, k=3, stride=1, groups=1, padding=None):
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2 if padding is None else padding, groups=groups,
                                   bias=False), nn.BatchNorm2d(cout))


class MobileNetV3Block(nn.Module):
    """MobileNetV3's pieces: HardSwish stem, a depthwise block with squeeze-and-excitation (HardSigmoid gate), a
    residual block with HardSwish, a HardSwish classifier head (torchvision's structure, smaller)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 16, stride=2), nn.Hardswish())
        self.dw = nn.Sequential(conv_bn(16, 16, groups=16, stride=2), nn.ReLU())
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(16, 8, 1), nn.ReLU(), nn.Conv2d(8, 16, 1),
                                nn.Hardsigmoid())
        self.project = conv_bn(16, 16, k=1)
        self.expand = nn.Sequential(conv_bn(16, 32, k=1), nn.Hardswish(), conv_bn(32, 32, groups=32), nn.Hardswish(),
                                    conv_bn(32, 16, k=1))
        self.head = nn.Sequential(nn.Linear(16, 32), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(32, 10))

    def forward(self, x):
        x = self.dw(self.stem(x))
        x = self.project(x * self.se(x))
        x = x + self.expand(x)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class EfficientNetBlock(nn.Module):
    """EfficientNet's pieces: SiLU activations, a TF-style asymmetric 'same' padding as an explicit zero pad before
    a strided conv, squeeze-and-excitation with a Sigmoid gate, an input scaled by a division by a constant."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.ZeroPad2d((0, 1, 0, 1)), conv_bn(3, 16, stride=2, padding=0), nn.SiLU())
        self.dw = nn.Sequential(conv_bn(16, 16, groups=16), nn.SiLU())
        self.se_reduce, self.se_expand = nn.Conv2d(16, 4, 1), nn.Conv2d(4, 16, 1)
        self.project = conv_bn(16, 24, k=1)
        self.down = nn.Sequential(nn.ZeroPad2d(1), conv_bn(24, 24, stride=2, padding=0), nn.SiLU())
        self.fc = nn.Linear(24, 10)

    def forward(self, x):
        x = self.stem(x / 4.0)
        y = self.dw(x)
        s = F.adaptive_avg_pool2d(y, 1)
        s = torch.sigmoid(self.se_expand(F.silu(self.se_reduce(s))))
        x = self.down(self.project(y * s))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class ShuffleNetBlock(nn.Module):
    """ShuffleNetV2's pieces: `chunk(2, dim=1)` (the TorchScript exporter computes the split point from Shape), a
    branch on one half, concatenation and the channel shuffle (view, transpose, view)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 16, stride=2), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.branch = nn.Sequential(conv_bn(8, 8, k=1), nn.ReLU(), conv_bn(8, 8, groups=8), conv_bn(8, 8, k=1),
                                    nn.ReLU())
        self.fc = nn.Linear(16, 10)

    @staticmethod
    def shuffle(x, groups=2):
        n, c, h, w = x.size()
        return x.view(n, groups, c // groups, h, w).transpose(1, 2).contiguous().view(n, c, h, w)

    def forward(self, x):
        x = self.stem(x)
        a, b = x.chunk(2, dim=1)
        x = self.shuffle(torch.cat((a, self.branch(b)), 1))
        return self.fc(x.mean([2, 3]))


MODELS = {"mbv3": MobileNetV3Block, "effnet": EfficientNetBlock, "shuffle": ShuffleNetBlock}


def strip_stack_traces(m: onnx.ModelProto) -> None:
    """Drop the per-node metadata the dynamo exporter adds (`pkg.torch.onnx.stack_trace` and the like): it holds
    absolute paths of the machine that exported the model, and nothing a compiler reads."""
    for nodes in [m.graph.node, *(f.node for f in m.functions)]:
        for node in nodes:
            keep = [kv for kv in node.metadata_props if not kv.key.startswith("pkg.torch.onnx.")]
            del node.metadata_props[:]
            node.metadata_props.extend(keep)


def _finish(m: onnx.ModelProto, path: Path, how: str) -> None:
    m.producer_name = f"tinyaot tests/models/make_models_exporters.py ({how})"
    m.doc_string = "random weights (fixed seed): an exporter-pair fixture"
    strip_stack_traces(m)
    onnx.checker.check_model(m)
    onnx.save(m, str(path))


def export(model: nn.Module, name: str, out: Path) -> list[Path]:
    x = torch.zeros(SHAPE)
    ts, dy = out / f"ex_{name}_ts.onnx", out / f"ex_{name}_dynamo.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import io

        buf = io.BytesIO()
        torch.onnx.export(model, (x,), buf, opset_version=13, dynamo=False, input_names=["x"],
                          output_names=["logits"])
        _finish(onnx.load_from_string(buf.getvalue()), ts, "TorchScript exporter, opset 13")
        prog = torch.onnx.export(model, (x,), dynamo=True, opset_version=18, input_names=["x"],
                                 output_names=["logits"], external_data=False)
        _finish(prog.model_proto, dy, "dynamo exporter, opset 18")
    return [ts, dy]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=HERE)
    args = ap.parse_args()
    torch.set_num_threads(2)
    for name, cls in MODELS.items():
        torch.manual_seed(SEED)
        model = cls()
        for m in model.modules():  # non-trivial BatchNormalization statistics, as a trained network has
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.data.uniform_(0.5, 1.5)
                m.bias.data.uniform_(-0.3, 0.3)
        model.eval()
        for p in export(model, name, args.out):
            m = onnx.load(str(p))
            print(f"{p.name}: opset {m.opset_import[0].version}, {p.stat().st_size} B, ops "
                  f"{', '.join(sorted({n.op_type for n in m.graph.node}))}")


if __name__ == "__main__":
    main()
