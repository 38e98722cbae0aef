"""Differential fuzzing, the long run: many more random graphs than the suite's fixed budget
(tests/fuzz/test_differential_fuzz.py), from a fresh seed unless one is given. Each graph (tests/fuzz/graphs.py) is
compiled by tinyaot; the numpy reference must equal the generated C built for the host under ASan + UBSan, and each
layer must be within 1 LSB of onnxruntime on the same int8 input; a refusal of the (valid) graph is a failure too.

    .venv/bin/python ci/fuzz.py [--examples N] [--seed S] [--max-layers L] [--allow-scale-refusals]
                                [--boards B ...] [--no-variants] [--no-qemu]
                                # default 300 examples, 5 layers, boards mps2-an386 mps2-an385 mps3-an547

Kernel variants (issue 10): each graph is also compiled for every board's target (M4: DSP, M3: plain-C twins,
M55: Helium) with every layer forced onto one of its non-generic variants where it lists one
(graphs.forced_choices), and (1) that C built for the host under ASan + UBSan must equal the numpy reference (the
variants' portable paths), (2) the same C built into firmware for the board with UBSan traps
(-fsanitize-undefined-trap-on-error) and run under QEMU, all inputs of the graph (calibration samples, all -128,
all 127, alternating, random and random-extreme) in one firmware run, must equal it too (the DSP inline assembly
and Helium paths, which only run there). Prints per board how often each variant ran.

On a failure hypothesis shrinks the graph and the script prints the minimal spec (rebuild it with
graphs.build_model) and exits 1. Prints how many graphs ran and which ops they exercised.

--allow-scale-refusals counts (and prints) instead of failing the one refusal tinyaot documents for valid float
graphs, a ratio of quantization scales no fixed-point multiplier encodes (tinyaot/core/fixedpoint.py ScaleError,
e.g. a rescale factor above 2**31), so a long run can look past it for other bugs.
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import random
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from hypothesis import HealthCheck, given, seed, settings  # noqa: E402

from tinyaot.oracle.reference import run_reference  # noqa: E402

from tinyaot.toolchain.sanitize import SanitizerError  # noqa: E402
from tinyaot.errors import TinyaotError  # noqa: E402


# the messages of fixedpoint.ScaleError as quantize_graph reports them
SCALE_REFUSAL = re.compile(r"too small|too large to encode as a fixed-point multiplier")


def _load(path: Path):
    """tests/fuzz/graphs.py by path (this script's own name would shadow the tests' package)."""
    spec = importlib.util.spec_from_file_location("fuzz_graphs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=300)
    ap.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: random, printed)")
    ap.add_argument("--max-layers", type=int, default=5)
    ap.add_argument("--allow-scale-refusals", action="store_true")
    ap.add_argument("--boards", nargs="+", default=None, help="variant targets (default: graphs.VARIANT_BOARDS)")
    ap.add_argument("--no-variants", action="store_true", help="only the generic kernels on the host")
    ap.add_argument("--no-qemu", action="store_true", help="the variants on the host only")
    ap.add_argument("--qemu-random", type=int, default=4,
                    help="random and random-extreme inputs each in the firmware batch (default 4)")
    args = ap.parse_args()
    graphs = _load(ROOT / "tests" / "fuzz" / "graphs.py")
    boards = tuple(args.boards or graphs.VARIANT_BOARDS)
    variants_run = collections.Counter()  # (board, variant) -> layers run on the host (and under QEMU)
    from ci.sanitize import run_on_board
    run_seed = args.seed if args.seed is not None else random.randrange(2 ** 32)
    ops = collections.Counter()
    kinds = collections.Counter()
    count = {"graphs": 0, "layers": 0, "inputs": 0, "one_lsb_layers": 0, "qemu_inputs": 0}
    failure = {}
    refusals = collections.Counter()

    @seed(run_seed)
    @settings(max_examples=args.examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(spec=graphs.graph_specs(max_layers=args.max_layers))
    def prop(spec: dict) -> None:
        with tempfile.TemporaryDirectory(prefix="tinyaot-fuzz-") as tmp:
            try:
                r = graphs.check_spec(spec, Path(tmp))
                if not args.no_variants:
                    r["qemu_inputs"] = 0
                    for board, (compiled, used) in graphs.check_variants_host(spec, Path(tmp), boards).items():
                        variants_run.update((board, v) for v in used.values())
                        if args.no_qemu:
                            continue
                        q = graphs.variant_inputs(compiled, spec, args.qemu_random)
                        try:
                            got = run_on_board(board, compiled, Path(tmp) / f"fw_{board}", q)
                        except TinyaotError as exc:  # a fault or failed build on the target: not a refusal
                            raise AssertionError(f"{board} firmware (variants {sorted(set(used.values()))}): "
                                                 f"{exc}") from None
                        for k, x in enumerate(q):
                            want = run_reference(compiled.graph, {compiled.input: x})[compiled.output].reshape(-1)
                            assert np.array_equal(got[k], want), (
                                f"{board} under QEMU (variants {sorted(set(used.values()))}) != numpy reference "
                                f"on input {k}: max diff "
                                f"{int(np.abs(got[k].astype(np.int32) - want.astype(np.int32)).max())}")
                        r["qemu_inputs"] += len(q)
            except SanitizerError:  # a sanitizer report or a failed run of the sanitized C
                failure["spec"] = spec
                raise
            except TinyaotError as exc:
                if args.allow_scale_refusals and SCALE_REFUSAL.search(str(exc)):
                    refusals[str(exc).split()[0]] += 1  # the op
                    return
                failure["spec"] = spec
                raise AssertionError(f"tinyaot refused a valid graph: {exc}") from None
            except BaseException:
                failure["spec"] = spec
                raise
        count["graphs"] += 1
        count["layers"] += r["layers"]
        count["inputs"] += r["inputs"]
        count["one_lsb_layers"] += r["worst_lsb"] > 0
        count["qemu_inputs"] += r.get("qemu_inputs", 0)
        ops.update(r["ops"])
        kinds[spec["data"]["kind"]] += 1
        if count["graphs"] % 10 == 0:  # progress: a run with QEMU takes ~10 s per graph
            print(f"  {count['graphs']} graphs passed, {time.time() - t:.0f} s", flush=True)

    t = time.time()
    where = "off" if args.no_variants else ", ".join(boards) + (" (host only)" if args.no_qemu else " (host + QEMU)")
    print(f"ci/fuzz.py: seed {run_seed}, up to {args.examples} graphs of up to {args.max_layers} layers; variants: "
          f"{where}", flush=True)
    try:
        prop()
    except BaseException as exc:  # noqa: BLE001 - report whatever the property raised, shrunk
        traceback.print_exception(exc, limit=3)
        print(f"\nFAIL after {time.time() - t:.0f} s (seed {run_seed}); minimal spec:\n{failure.get('spec')}")
        return 1
    print(f"{count['graphs']} graph runs passed in {time.time() - t:.0f} s: {count['layers']} layers checked "
          f"against onnxruntime, {count['inputs']} inputs through the sanitized C; graphs with a 1-LSB layer "
          f"difference: {count['one_lsb_layers']}")
    if not args.no_variants:
        print(f"variant targets: {count['graphs']} graphs each on {', '.join(boards)}; "
              f"{count['qemu_inputs']} inputs through QEMU firmware (UBSan traps)")
        for board in boards:
            print(f"  {board} layers per variant:", ", ".join(f"{v} {n}" for (b, v), n in sorted(variants_run.items())
                                                           if b == board))
    print("ops:", ", ".join(f"{k} {v}" for k, v in sorted(ops.items())))
    print("calibration data:", ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    if refusals:
        print("scale refusals (allowed):", ", ".join(f"{k} {v}" for k, v in sorted(refusals.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
