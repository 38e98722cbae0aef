"""Coverage of models as users export them: torchvision architectures and tinyaot's own test networks, each
exported with both of PyTorch's ONNX exporters (TorchScript, opset 13; dynamo, opset 18) at a small input size,
random weights, and deployed on a board with QEMU verification. Prints one row per model and exporter: verified
(instructions, arena, flash) or refused, and why (tinyaot's one-line error).

    pip install -e ".[bench]"      # torch, torchvision, onnxscript: benchmark-only, never a tinyaot dependency
    .venv/bin/python ci/coverage_exporters.py [--board mps2-an386] [--size 64] [--models NAME ...] [--out DIR]

A refusal with a clear `Error:` line (a model too big for the board, an operator tinyaot has no kernel for) is a
result, not a failure. The script exits 1 when a row failed otherwise: a verification that did not hold, an
internal error, or the two exports of one network compiling to instruction counts or arenas more than 0.5 % apart
(issue 21: the same network, the same code). The table is also written to ci/coverage_exporters.md.
"""
from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "models"))

import onnx  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402

from tinyaot.api import deploy  # noqa: E402
from tinyaot.errors import TinyaotError  # noqa: E402


def _tv(name, **kw):
    return lambda: getattr(torchvision.models, name)(weights=None, **kw)


def _own(name):
    def make():
        import make_models_exporters as ex

        torch.manual_seed(ex.SEED)
        return ex.MODELS[name]()
    return make


# name -> constructor (random weights, fixed seed)
MODELS = {
    "mobilenet_v2_035": _tv("mobilenet_v2", width_mult=0.35),
    "mnasnet0_5": _tv("mnasnet0_5"),
    "squeezenet1_1": _tv("squeezenet1_1"),
    "mobilenet_v3_small": _tv("mobilenet_v3_small"),
    "shufflenet_v2_x0_5": _tv("shufflenet_v2_x0_5"),
    "efficientnet_b0": _tv("efficientnet_b0"),
    "regnet_x_400mf": _tv("regnet_x_400mf"),
    "resnet18": _tv("resnet18"),
    "googlenet": _tv("googlenet", aux_logits=False, init_weights=True),
    "densenet121": _tv("densenet121"),
    "own_mbv3_block": _own("mbv3"),
    "own_effnet_block": _own("effnet"),
    "own_shuffle_block": _own("shuffle"),
}
EXPORTERS = ("torchscript", "dynamo")
SAME = 0.005  # issue 21: the two exports of one network within 0.5 % (instructions, arena)


def export(model: torch.nn.Module, how: str, size: int, path: Path) -> None:
    x = torch.zeros(1, 3, size, size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if how == "torchscript":
            buf = io.BytesIO()
            torch.onnx.export(model, (x,), buf, opset_version=13, dynamo=False, input_names=["x"],
                              output_names=["logits"])
            onnx.save(onnx.load_from_string(buf.getvalue()), str(path))
        else:
            prog = torch.onnx.export(model, (x,), dynamo=True, opset_version=18, input_names=["x"],
                                     output_names=["logits"], external_data=False, verbose=False)
            prog.save(str(path))


def run_one(name: str, how: str, size: int, board: str, work: Path) -> dict:
    row = {"model": name, "exporter": how, "result": None, "why": "", "instructions": None, "arena": None,
           "flash": None, "seconds": None}
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    path = work / f"{name}_{how}.onnx"
    try:
        export(model, how, size, path)
    except Exception as exc:  # noqa: BLE001 - the exporter's own failure is a row, not a crash
        row.update(result="export failed", why=" ".join(str(exc).split())[:160])
        return row
    cal = work / "cal.npz"
    np.savez(cal, x=np.random.default_rng(0).normal(size=(4, 1, 3, size, size)).astype(np.float32))
    t0 = time.monotonic()
    try:
        r = deploy(path, board, cal, work / f"{name}_{how}_out", verify_samples=2).report
        v = r["verify"]
        ok = v["ran"] and v["outputs_match"] and v["max_abs_diff_vs_onnxruntime"] <= max(
            [lay["tolerance"] for lay in v["layers_vs_onnxruntime"]] + [1])
        row.update(result="verified" if ok else "FAILED", instructions=v["instructions"],
                   arena=r["memory"]["arena_bytes"], flash=r["memory"]["flash_bytes"])
    except TinyaotError as exc:
        row.update(result="refused", why=str(exc).splitlines()[0][:200])
    except Exception as exc:  # noqa: BLE001 - a tinyaot bug: the row fails, the others still run
        row.update(result="FAILED", why=f"internal error: {type(exc).__name__}: {' '.join(str(exc).split())[:160]}")
    row["seconds"] = round(time.monotonic() - t0, 1)
    return row


def _fmt(v) -> str:
    return "-" if v is None else f"{v:,}" if isinstance(v, int) else str(v)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--board", default="mps2-an386")
    ap.add_argument("--size", type=int, default=64, help="input height and width")
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--exporters", nargs="*", default=list(EXPORTERS), choices=list(EXPORTERS))
    ap.add_argument("--out", type=Path, default=ROOT / "ci" / "coverage_exporters.md")
    args = ap.parse_args()
    torch.set_num_threads(2)
    rows = []
    header = "| model | exporter | result | instructions | arena B | flash B | why |"
    print(header)
    with tempfile.TemporaryDirectory(prefix="tinyaot-coverage-") as tmp:
        for name in args.models:
            for how in args.exporters:
                row = run_one(name, how, args.size, args.board, Path(tmp))
                rows.append(row)
                print(f"| {name} | {how} | {row['result']} | {_fmt(row['instructions'])} | {_fmt(row['arena'])} | "
                      f"{_fmt(row['flash'])} | {row['why']} |", flush=True)
    failed = [r for r in rows if r["result"] == "FAILED"]
    # the same network, the same code: both exports verified -> instructions and arena within 0.5 % (the same
    # kernels; the int8 weights differ slightly: one exporter folds BatchNormalization in float, tinyaot the other's)
    for name in args.models:
        pair = [r for r in rows if r["model"] == name and r["result"] == "verified"]
        if len(pair) == 2 and any(abs(pair[0][k] - pair[1][k]) > SAME * max(pair[0][k], pair[1][k])
                                  for k in ("instructions", "arena")):
            print(f"{name}: the exports differ: {pair[0]['instructions']} / {pair[1]['instructions']} instructions, "
                  f"{pair[0]['arena']} / {pair[1]['arena']} B arena")
            failed.append(pair[0])
    lines = [f"Made by `.venv/bin/python ci/coverage_exporters.py --board {args.board} --size {args.size}` "
             f"(random weights, input [1, 3, {args.size}, {args.size}]).", "", header,
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['exporter']} | {r['result']} | {_fmt(r['instructions'])} | {_fmt(r['arena'])} | "
              f"{_fmt(r['flash'])} | {r['why'].replace('|', '/')} |" for r in rows]
    if args.models == list(MODELS) and args.exporters == list(EXPORTERS):
        args.out.write_text("\n".join(lines) + "\n")
    print(f"{sum(r['result'] == 'verified' for r in rows)} verified, {sum(r['result'] == 'refused' for r in rows)} "
          f"refused, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
