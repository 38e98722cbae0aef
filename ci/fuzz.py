"""Differential fuzzing, the long run: many more random graphs than the suite's fixed budget
(tests/fuzz/test_differential_fuzz.py), from a fresh seed unless one is given. Each graph (tests/fuzz/graphs.py) is
compiled by tinyaot; the numpy reference must equal the generated C built for the host under ASan + UBSan, and each
layer must be within 1 LSB of onnxruntime on the same int8 input; a refusal of the (valid) graph is a failure too.

    .venv/bin/python ci/fuzz.py [--examples N] [--seed S] [--max-layers L] [--allow-scale-refusals]
                                # default 300 examples, 5 layers

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

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402

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
    args = ap.parse_args()
    graphs = _load(ROOT / "tests" / "fuzz" / "graphs.py")
    run_seed = args.seed if args.seed is not None else random.randrange(2 ** 32)
    ops = collections.Counter()
    kinds = collections.Counter()
    count = {"graphs": 0, "layers": 0, "inputs": 0, "one_lsb_layers": 0}
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
        ops.update(r["ops"])
        kinds[spec["data"]["kind"]] += 1

    t = time.time()
    print(f"ci/fuzz.py: seed {run_seed}, up to {args.examples} graphs of up to {args.max_layers} layers", flush=True)
    try:
        prop()
    except BaseException as exc:  # noqa: BLE001 - report whatever the property raised, shrunk
        traceback.print_exception(exc, limit=3)
        print(f"\nFAIL after {time.time() - t:.0f} s (seed {run_seed}); minimal spec:\n{failure.get('spec')}")
        return 1
    print(f"{count['graphs']} graph runs passed in {time.time() - t:.0f} s: {count['layers']} layers checked "
          f"against onnxruntime, {count['inputs']} inputs through the sanitized C; graphs with a 1-LSB layer "
          f"difference: {count['one_lsb_layers']}")
    print("ops:", ", ".join(f"{k} {v}" for k, v in sorted(ops.items())))
    print("calibration data:", ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    if refusals:
        print("scale refusals (allowed):", ", ".join(f"{k} {v}" for k, v in sorted(refusals.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
