"""Issue 4's "done when" figures in one run: for kws_dscnn and ic_resnet8, the weights bytes of each compression
setting against plain int8, the top-1 on the shared evaluation split (tinyaot.api.evaluate: the generated C,
host-compiled, checked against the numpy reference), and the setting deployed on a board and verified under QEMU
(outputs == the numpy reference, instructions per inference counted by the QEMU plugin). Then the instructions of
ic_resnet8 with --prune-channels 0.25 against unpruned on the same board.

A benchmark, not a test: it prints figures and takes several minutes. Exit status 1 when a row fails: a
verification under QEMU, an evaluation whose host-compiled C differs from the numpy reference, or one of issue 4's
targets missed (TARGETS below; with --skip-qemu the byte and accuracy targets only).

    .venv/bin/python ci/compression_targets.py [--board stm32] [--skip-qemu]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from datasets import model_path, write_calibration, write_evaluation  # noqa: E402

from tinyaot.api import deploy, evaluate  # noqa: E402
from tinyaot.errors import TinyaotError  # noqa: E402

MODELS = ["kws_dscnn", "ic_resnet8"]
SETTINGS = [("int8", None), ("--clusters 16", dict(clusters=16)), ("--prune 0.5", dict(prune=0.5)),
            ("--weight-bits 4", dict(weight_bits=4))]
CHANNELS = ("--prune-channels 0.25", dict(prune_channels=0.25))
# Issue 4's "done when": setting -> (weights bytes at most this fraction of plain int8, int8 top-1 at most this many
# points below the plain int8 model's or None when the accuracy effect is only reported)
TARGETS = {"--clusters 16": (0.55, 1.5), "--prune 0.5": (0.70, None)}
MIN_INSTRUCTION_CUT = 0.20  # --prune-channels 0.25 on ic_resnet8: at least 20 % fewer instructions than unpruned


def target_misses(name: str, e: dict, plain: dict) -> list[str]:
    """What this evaluated row misses: its host C against the reference, and the setting's targets."""
    misses = [] if e.get("host_c_matches_reference") else ["host C != reference"]
    if name in TARGETS:
        max_ratio, max_drop = TARGETS[name]
        ratio = e["weights_bytes"] / plain["weights_bytes"]
        if ratio > max_ratio:
            misses.append(f"weights {ratio:.3f} of int8 > {max_ratio}")
        drop = 100 * (plain["int8_top1"] - e["int8_top1"])
        if max_drop is not None and drop > max_drop:
            misses.append(f"top-1 {drop:.2f} points below int8 > {max_drop}")
    return misses


def qemu(model: str, compression, cal: Path, board: str, work: Path) -> dict:
    """Deploy and verify under QEMU; deploy raises when the C under QEMU differs from the numpy reference."""
    tag = "plain" if compression is None else "_".join(f"{k}{v}" for k, v in compression.items())
    try:
        r = deploy(model_path(model), board, cal, work / f"{model}_{tag}", compression=compression).report
    except TinyaotError as exc:
        return {"match": False, "insns": None, "error": str(exc).splitlines()[0]}
    return {"match": bool(r["verify"]["outputs_match"]), "insns": r["verify"]["instructions"],
            "weights": r["memory"]["weights_bytes"], "flash": r["memory"]["flash_bytes"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--board", default="stm32")
    ap.add_argument("--skip-qemu", action="store_true", help="accuracy and bytes only")
    args = ap.parse_args()
    failed = False
    with tempfile.TemporaryDirectory(prefix="tinyaot-targets-") as tmp:
        work = Path(tmp)
        print(f"| model | setting | weights B | vs int8 | top-1 % | vs int8 (points) | QEMU {args.board} == ref "
              f"| instructions |")
        print("|---|---|---|---|---|---|---|---|", flush=True)
        for model in MODELS:
            cal, data = write_calibration(model, work), write_evaluation(model, work)
            plain = None
            for name, comp in SETTINGS:
                e = evaluate(model_path(model), cal, data, compression=comp, compare_onnxruntime=False)
                if plain is None:
                    plain = e
                q = {"match": "-", "insns": "-"} if args.skip_qemu else qemu(model, comp, cal, args.board, work)
                misses = target_misses(name, e, plain)
                failed |= q["match"] is False or bool(misses)
                print(f"| {model} | {name} | {e['weights_bytes']:,} "
                      f"| {e['weights_bytes'] / plain['weights_bytes']:.3f} "
                      f"| {100 * e['int8_top1']:.2f} | {100 * (e['int8_top1'] - plain['int8_top1']):+.2f} "
                      f"| {q['match']} | {q['insns']} |" + (f" {q['error']}" if "error" in q else "")
                      + (f" TARGET MISSED: {'; '.join(misses)}" if misses else ""), flush=True)
        if not args.skip_qemu:
            model = "ic_resnet8"
            cal, data = write_calibration(model, work), write_evaluation(model, work)
            base = qemu(model, None, cal, args.board, work)
            pruned = qemu(model, CHANNELS[1], cal, args.board, work)
            e = evaluate(model_path(model), cal, data, compression=CHANNELS[1], compare_onnxruntime=False)
            failed |= not (base["match"] and pruned["match"] and e.get("host_c_matches_reference"))
            if base["insns"] and pruned["insns"]:
                cut = 1 - pruned["insns"] / base["insns"]
                failed |= cut < MIN_INSTRUCTION_CUT
                print(f"\n{model} {CHANNELS[0]} on {args.board}: instructions {base['insns']:,} -> "
                      f"{pruned['insns']:,} ({100 * cut:.1f} % fewer), weights {base['weights']:,} -> "
                      f"{pruned['weights']:,} B, QEMU == ref {pruned['match']}, top-1 {100 * e['int8_top1']:.2f} %"
                      + (f" TARGET MISSED: fewer than {100 * MIN_INSTRUCTION_CUT:.0f} % fewer instructions"
                         if cut < MIN_INSTRUCTION_CUT else ""))
            else:
                print(f"\n{model} {CHANNELS[0]}: failed: {pruned.get('error') or base.get('error')}")
    print("all verified, all targets met" if not failed else "SOME ROW FAILED (verification or target)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
