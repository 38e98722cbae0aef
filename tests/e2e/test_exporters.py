"""The same network, the same code (issue 21, items 2 and 3): PyTorch's two ONNX exporters spell one network
differently, and tinyaot compiles both spellings to the same kernels, arena and instruction count.

The fixtures `tests/models/ex_<name>_{ts,dynamo}.onnx` (made by tests/models/make_models_exporters.py from one set of
random weights each; torch is not imported here) are exported with the TorchScript exporter (opset 13) and the
dynamo exporter (opset 18):
- mbv3: HardSwish is `x * HardSigmoid(x)` in the TorchScript file, HardSwish in the dynamo one; adaptive pooling is
  GlobalAveragePool in one, ReduceMean in the other;
- effnet: SiLU is `x * Sigmoid(x)` in both (tinyaot's Swish table); the padding is a separate Pad (its pads
  computed by ConstantOfShape/Concat/Slice/Transpose arithmetic) in the TorchScript file, inside the Conv in the
  dynamo one; the input is divided by a constant (a Div in the activation path);
- shuffle: `chunk(2, dim=1)` is Shape -> Gather -> Div -> Slice arithmetic in the TorchScript file (the Div that
  made torchvision's ShuffleNetV2 unsupported) and a Split in the dynamo one.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from tinyaot.api import compile_model, deploy
from tinyaot.boards import load_board
from tinyaot.pipeline.report import macs

MODELS = Path(__file__).resolve().parents[1] / "models"
PAIRS = ("mbv3", "effnet", "shuffle")
BOARD = "mps2-an386"

# what makes each pair's two files different: ops one export has and the other has not
SPELLINGS = {"mbv3": ({"HardSigmoid", "GlobalAveragePool"}, {"HardSwish", "ReduceMean"}),
             "effnet": ({"Pad", "ConstantOfShape", "Div", "Sigmoid"}, {"Div", "Sigmoid", "ReduceMean"}),
             "shuffle": ({"Shape", "Gather", "Div", "Slice"}, {"Split"})}


@pytest.fixture(scope="module")
def cal(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("exporters") / "cal.npz"
    np.savez(path, x=np.random.default_rng(0).normal(size=(8, 1, 3, 32, 32)).astype(np.float32))
    return path


def _compiled(name: str, how: str, cal: Path):
    return compile_model(MODELS / f"ex_{name}_{how}.onnx", cal, target=load_board(BOARD).target("speed"))


@pytest.mark.parametrize("name", PAIRS)
def test_the_exports_spell_it_differently(name):
    ts, dy = ({n.op_type for n in onnx.load(str(MODELS / f"ex_{name}_{how}.onnx")).graph.node}
              for how in ("ts", "dynamo"))
    want_ts, want_dy = SPELLINGS[name]
    assert want_ts <= ts and want_dy <= dy and ts != dy


@pytest.mark.parametrize("name", PAIRS)
def test_both_exports_compile_to_the_same_layers_and_arena(name, cal):
    ts, dy = _compiled(name, "ts", cal), _compiled(name, "dynamo", cal)
    layers = [[(n.op, n.attrs.get("variant")) for n in c.graph.nodes] for c in (ts, dy)]
    assert layers[0] == layers[1]
    assert ts.plan.arena_bytes == dy.plan.arena_bytes and macs(ts.graph) == macs(dy.graph)
    ops = [op for op, _ in layers[0]]
    assert {"Pad", "Div", "ReduceMean"}.isdisjoint(ops)  # folded, multiplied, pooled
    # every x * gate(x) is one table; the squeeze-and-excitation gates (a broadcast Mul) stay gate and Mul
    want = {"mbv3": {"HardSwish": 4, "HardSigmoid": 1, "Mul": 1}, "effnet": {"Swish": 4, "Sigmoid": 1, "Mul": 2},
            "shuffle": {"Mul": 0}}[name]
    assert {op: ops.count(op) for op in want} == want


def test_both_exports_run_the_same_instructions(cal, tmp_path):
    """The MobileNetV3 pair, deployed and verified under QEMU: the same arena and instruction count within 0.5 %
    (the same kernels on slightly different int8 weights: one exporter folds BatchNormalization in float, tinyaot
    the other's; torchvision's MobileNetV3-Small ran 17.0 M against 14.2 M instructions before HardSwish was
    recognised, 15,600,141 against 15,600,149 after)."""
    counts = {}
    for how in ("ts", "dynamo"):
        r = deploy(MODELS / f"ex_mbv3_{how}.onnx", BOARD, cal, tmp_path / how, verify_samples=2).report
        assert r["verify"]["outputs_match"]
        counts[how] = (r["verify"]["instructions"], r["memory"]["arena_bytes"])
    (ts, arena_ts), (dy, arena_dy) = counts["ts"], counts["dynamo"]
    assert arena_ts == arena_dy and abs(ts - dy) <= 0.005 * dy, counts
