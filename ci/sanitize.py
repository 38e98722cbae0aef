"""Issue 8's sanitizer sweep: every shared model with each weight storage setting (plain int8, --clusters 16,
--weight-bits 4, --prune 0.5, 4x4 blocks, --clusters 32), plus tests/sanitize's all-kernels graph, compiled, its
generated C built for the host under AddressSanitizer + UndefinedBehaviorSanitizer (tinyaot/toolchain/sanitize.py),
and run on extreme inputs (all -128, all 127, alternating), random and random-extreme inputs and calibration
samples, each output required to equal the numpy reference and not to depend on the arena's previous contents.

    .venv/bin/python ci/sanitize.py [--random N] [--targets-only] [MODEL ...]   # default: every shared model, N = 8

The host has no SIMD32 or Helium, so the kernels' DSP (Cortex-M4) and MVE (Cortex-M55) code paths are checked on
the target too: the all-kernels graph built into firmware with `-fsanitize=undefined
-fsanitize-undefined-trap-on-error` (each check a trap instruction: UB becomes a UsageFault and a non-zero exit
under QEMU) and run on the same kind of inputs, outputs == reference. (The intrinsics' own arithmetic, SMLAD and
friends, is defined by the architecture and not checked; everything written as C around them is.) The graph is
compiled for each target board's own target (Cortex-M4 twice: stm32 and mps2-an386; Cortex-M3; Cortex-M55) three
times: the cost model's variants, and twice with every layer forced onto one of its non-generic variants, so every
kernel variant's target path (DSP inline assembly, Helium, the plain-C twins on M3) runs under the traps.

The suite runs a few of these pairs (tests/sanitize/test_sanitizers.py); this runs them all, several minutes.
Prints one row per pair and exits non-zero when any row fails.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ci.datasets import ALL_MODELS, model_path, write_calibration  # noqa: E402
from tinyaot.api import compile_model  # noqa: E402
from tinyaot.toolchain.sanitize import check_model  # noqa: E402
from tinyaot.errors import TinyaotError  # noqa: E402

SETTINGS = {"plain": None, "clusters16": {"clusters": 16}, "int4": {"weight_bits": 4}, "prune0.5": {"prune": 0.5},
            "prune0.5_block": {"prune": 0.5, "prune_pattern": "block"},
            # the 5-bit grid of the fully connected layers at batch 1 (int5 storage, tinyaot_fully_connected_s5*.c)
            "clusters32": {"clusters": 32}}
CAL_SAMPLES = 4


def _load(path: Path):
    """The suite's graph builder, by path (this script's own name would shadow the tests' package)."""
    spec = importlib.util.spec_from_file_location("kernel_models", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Cortex-M4 (DSP: the variants' inline SIMD32/assembly paths), Cortex-M3 (the variants' plain-C twins on a real
# target), Cortex-M55 (Helium)
TARGET_BOARDS = ("stm32", "mps2-an386", "mps2-an385", "mps3-an547")
TRAP_FLAGS = ("-fsanitize=undefined", "-fsanitize-undefined-trap-on-error")


def run_on_board(board_name: str, compiled, work: Path, q, *, trap: bool = True):
    """The compiled model (its variants as chosen) built for `board_name` (with UBSan traps unless trap=False) and
    run under QEMU on the int8 samples q [n, ...] in one firmware run; returns the outputs [n, out_size]. Raises
    TinyaotError on a build failure, a fault (a UBSan trap is a UsageFault) or a short output."""
    import numpy as np

    from tinyaot.boards import load_board
    from tinyaot.codegen.project import render_harness
    from tinyaot.toolchain.firmware import build_firmware
    from tinyaot.toolchain.qemu import run_qemu
    from tinyaot.codegen.emit import emit_model

    g = compiled.graph
    board = load_board(board_name)
    emitted = emit_model(g, compiled.plan.offsets, compiled.plan.arena_bytes, compiled.lower_bound, board.name, work)
    fw = work / "firmware"
    harness = render_harness(emitted.prefix[len("tinyaot_"):], fw)
    elf = build_firmware([harness, *[p for p in emitted.files if p.suffix == ".c"]], [work], board, fw,
                         werror=True, extra_cflags=TRAP_FLAGS if trap else ())
    q = np.ascontiguousarray(q, dtype=np.int8)
    (fw / "input.bin").write_bytes(q.tobytes())
    result = run_qemu(elf, board, fw, count_instructions=False)
    if result.exit_code != 0:
        raise TinyaotError(f"{board.name}: firmware exited with {result.exit_code} under QEMU (a UBSan trap is a "
                           f"UsageFault): {(result.stderr or result.stdout).strip()[:200]}")
    out = np.frombuffer((fw / "output.bin").read_bytes(), np.int8)
    size = g.tensors[compiled.output].size
    if out.size != len(q) * size:
        raise TinyaotError(f"{board.name}: firmware wrote {out.size} output bytes, expected {len(q) * size}")
    return out.reshape(len(q), size)


def target_row(board_name: str, compiled, work: Path, n_random: int) -> int:
    """The compiled model built for `board_name` with UBSan traps and run under QEMU; returns the samples run,
    raises TinyaotError on a fault or a mismatch."""
    import numpy as np

    from tinyaot.toolchain.sanitize import probe_inputs
    from tinyaot.oracle.reference import run_reference

    q = probe_inputs(compiled.graph.tensors[compiled.input].shape, n_random)
    out = run_on_board(board_name, compiled, work, q)
    for k, x in enumerate(q):
        if not np.array_equal(out[k], run_reference(compiled.graph, {compiled.input: x})[compiled.output].reshape(-1)):
            raise TinyaotError(f"{board_name}: output {k} differs from the numpy reference")
    return len(q)


def variant_jobs(graph: Path, cal: Path, kernel_models, fuzz_graphs) -> list:
    """(board, label, make) for the all-kernels graph on each target board: compiled for the board's target with
    the cost model's variants, and with every layer forced onto a non-generic variant where one is listed
    (tests/fuzz/graphs.py forced_choices, two draws), so each variant kernel's target path runs under the traps."""
    from tinyaot.boards import load_board
    from tinyaot.pipeline.compile import with_variants

    def make(board, seed):
        def build():
            target = load_board(board).target()
            c = compile_model(graph, cal, compression=kernel_models.COMPRESSION, target=target)
            if seed is None:
                return c, c
            return with_variants(c, target, fuzz_graphs.forced_choices(c.graph, target, seed)), c
        return build

    return [(board, label, make(board, seed)) for board in TARGET_BOARDS
            for label, seed in (("cost model", None), ("forced #1", 1), ("forced #2", 2))]


def row(name: str, setting: str, make, work: Path, n_random: int) -> dict:
    t = time.time()
    out = {"model": name, "setting": setting}
    try:
        compiled = make()
        samples = compiled.samples[compiled.input][:CAL_SAMPLES]
        out["samples"] = check_model(compiled, work, n_random=n_random, seed=0, extra_inputs=samples)
        out["ok"] = True
    except TinyaotError as exc:  # SanitizerError included: a report, a mismatch, a failed build
        out.update(ok=False, error=" | ".join(str(exc).splitlines()[:3]))
    out["seconds"] = time.time() - t
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=ALL_MODELS)
    ap.add_argument("--random", type=int, default=8, help="random and random-extreme samples each (default 8)")
    ap.add_argument("--targets-only", action="store_true",
                    help="only the all-kernels graph's variants under QEMU with UBSan traps (no host rows)")
    args = ap.parse_args()
    unknown = [m for m in args.models if m not in ALL_MODELS]
    if unknown:
        print(f"unknown model(s) {unknown}; known: {ALL_MODELS}", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="tinyaot-sanitize-") as tmp:
        tmp = Path(tmp)
        kernel_models = _load(ROOT / "tests" / "sanitize" / "kernel_models.py")
        graph = kernel_models.all_kernels_model(tmp / "all_kernels.onnx")
        cal = kernel_models.calibration(tmp / "all_kernels_cal.npz")
        jobs = [("all_kernels", "per-layer kinds",
                 lambda: compile_model(graph, cal, compression=kernel_models.COMPRESSION))]
        for model in ([] if args.targets_only else args.models):
            mcal = write_calibration(model, tmp)
            for setting, options in SETTINGS.items():
                jobs.append((model, setting, lambda m=model, c=mcal, o=options: compile_model(model_path(m), c,
                                                                                               compression=o)))
        print(f"{'model':<24} {'setting':<30} {'samples':>7} {'s':>6}  result", flush=True)
        fuzz_graphs = _load(ROOT / "tests" / "fuzz" / "graphs.py")
        for k, (board, label, make) in enumerate(variant_jobs(graph, cal, kernel_models, fuzz_graphs)):
            t = time.time()
            r = {"model": "all_kernels", "setting": f"trap {board} {label}"}
            try:
                compiled, _ = make()
                r["variants"] = sorted({n.attrs.get("variant", "generic") for n in compiled.graph.nodes})
                r["samples"] = target_row(board, compiled, tmp / f"target{k}", args.random)
                r["ok"] = True
            except TinyaotError as exc:
                r.update(ok=False, error=" | ".join(str(exc).splitlines()[:3]))
            r["seconds"] = time.time() - t
            rows.append(r)
            result = (f"clean, == reference ({', '.join(r['variants'])})" if r["ok"] else f"FAIL: {r['error']}")
            print(f"{r['model']:<24} {r['setting']:<30} {r.get('samples', '-'):>7} {r['seconds']:6.1f}  {result}",
                  flush=True)
        if args.targets_only:
            jobs = []  # the all-kernels graph's host row too
        for k, (name, setting, make) in enumerate(jobs):
            r = row(name, setting, make, tmp / f"job{k}", args.random)
            rows.append(r)
            result = "clean, == reference" if r["ok"] else f"FAIL: {r['error']}"
            print(f"{name:<24} {setting:<30} {r.get('samples', '-'):>7} {r['seconds']:6.1f}  {result}", flush=True)
    failed = [r for r in rows if not r["ok"]]
    print(f"\n{len(rows) - len(failed)} of {len(rows)} rows clean under ASan + UBSan")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
