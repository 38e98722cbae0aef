"""The CMSIS-NN conformance vectors through every kernel variant, on the host and under QEMU.

Each conv / depthwise / fully connected vector (tests/fixtures/cmsis_nn) becomes a one-layer quantized graph
(tests/ops/test_cmsis_nn_vectors.py vector_graph), compiled for each board's target with the layer forced onto
each non-generic variant it lists there (fold, dw3x3, dw3x3_fold, mve_conv, mve_1x1, mve_dw, mve_fc), and must
equal the vector's expected output (1) as host C under ASan + UBSan (the variants' portable paths) and (2) built
into firmware for the board with UBSan traps and run under QEMU, the vector's batch in one run (the DSP inline
assembly on M4, the plain-C twins on M3, Helium on M55). The suite runs one vector per (board, variant) on the
host; this runs them all.

    .venv/bin/python ci/cmsis_nn_vectors_variants.py [--boards B ...] [--no-qemu]

Prints per (board, variant) how many vectors passed and exits 1 if any failed.
"""
from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "ops")]

import numpy as np  # noqa: E402

import test_cmsis_nn_vectors as vectors  # noqa: E402
from ci.sanitize import run_on_board  # noqa: E402
from tinyaot.errors import TinyaotError  # noqa: E402
from tinyaot.toolchain.sanitize import build_sanitized  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boards", nargs="+", default=list(vectors.VARIANT_BOARDS))
    ap.add_argument("--no-qemu", action="store_true")
    args = ap.parse_args()
    builds = [b for b in vectors.vector_variant_builds(tuple(args.boards))]
    passed, failed = collections.Counter(), []
    t0 = time.time()
    print(f"{len(builds)} (vector, board, variant) builds; host ASan+UBSan{'' if args.no_qemu else ' and QEMU'}",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="tinyaot-vectors-") as tmp:
        for k, (case, board, variant) in enumerate(builds):
            a = vectors._arrays(case)
            want = a["expected"].reshape(len(a["input"]), -1)
            where = "host"
            try:
                g, offsets, arena, lb = vectors.planned_vector_graph(case, board, variant)
                host = build_sanitized(g, offsets, arena, lb, Path(tmp) / f"h{k}")
                got = host.run(a["input"]).reshape(want.shape)
                if not np.array_equal(got, want):
                    raise TinyaotError(f"max diff {int(np.abs(got.astype(int) - want).max())}")
                if not args.no_qemu:
                    where = "qemu"
                    compiled = SimpleNamespace(graph=g, plan=SimpleNamespace(offsets=offsets, arena_bytes=arena),
                                               lower_bound=lb, input="x", output="y")
                    got = run_on_board(board, compiled, Path(tmp) / f"q{k}", a["input"].reshape(len(want), -1))
                    if not np.array_equal(got, want):
                        raise TinyaotError(f"max diff {int(np.abs(got.astype(int) - want).max())}")
                passed[(board, variant)] += 1
            except TinyaotError as exc:  # SanitizerError included
                failed.append((case["id"], board, variant, where, " | ".join(str(exc).splitlines()[:3])))
                print(f"FAIL {case['id']} {board} {variant} ({where}): {failed[-1][-1]}", flush=True)
    for (board, variant), n in sorted(passed.items()):
        print(f"{board:<12} {variant:<12} {n:>3} vectors ==")
    print(f"{sum(passed.values())} of {len(builds)} passed in {time.time() - t0:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
