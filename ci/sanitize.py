"""Issue 8's sanitizer sweep: every shared model with each weight storage setting (plain int8, --clusters 16,
--weight-bits 4, --prune 0.5), plus tests/sanitize's all-kernels graph, compiled, its generated C built for the
host under AddressSanitizer + UndefinedBehaviorSanitizer (tinyaot/toolchain/sanitize.py), and run on extreme inputs
(all -128, all 127, alternating), random and random-extreme inputs and calibration samples, each output required
to equal the numpy reference and not to depend on the arena's previous contents.

    .venv/bin/python ci/sanitize.py [--random N] [MODEL ...]     # default: every shared model, N = 8

The host has no SIMD32 or Helium, so the kernels' DSP (Cortex-M4) and MVE (Cortex-M55) code paths are checked on
the target too: the all-kernels graph built into firmware with `-fsanitize=undefined
-fsanitize-undefined-trap-on-error` (each check a trap instruction: UB becomes a UsageFault and a non-zero exit
under QEMU) and run on the same kind of inputs, outputs == reference. (The intrinsics' own arithmetic, SMLAD and
friends, is defined by the architecture and not checked; everything written as C around them is.)

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

SETTINGS = {"plain": None, "clusters16": {"clusters": 16}, "int4": {"weight_bits": 4}, "prune0.5": {"prune": 0.5}}
CAL_SAMPLES = 4


def _load(path: Path):
    """The suite's graph builder, by path (this script's own name would shadow the tests' package)."""
    spec = importlib.util.spec_from_file_location("kernel_models", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TARGET_BOARDS = ("stm32", "mps3-an547")  # Cortex-M4 (DSP), Cortex-M55 (MVE)
TRAP_FLAGS = ("-fsanitize=undefined", "-fsanitize-undefined-trap-on-error")


def target_row(board_name: str, compiled, work: Path, n_random: int) -> int:
    """The compiled model built for `board_name` with UBSan traps and run under QEMU; returns the samples run,
    raises TinyaotError on a fault or a mismatch."""
    import numpy as np

    from tinyaot.boards import load_board
    from tinyaot.toolchain.firmware import build_firmware, render_harness
    from tinyaot.toolchain.qemu import run_qemu
    from tinyaot.toolchain.sanitize import probe_inputs
    from tinyaot.codegen.emit import emit_model
    from tinyaot.oracle.reference import run_reference

    g = compiled.graph
    board = load_board(board_name)
    emitted = emit_model(g, compiled.plan.offsets, compiled.plan.arena_bytes, compiled.lower_bound, board.name, work)
    fw = work / "firmware"
    harness = render_harness(emitted.prefix[len("tinyaot_"):], fw)
    elf = build_firmware([harness, *[p for p in emitted.files if p.suffix == ".c"]], [work], board, fw,
                         werror=True, extra_cflags=TRAP_FLAGS)
    q = probe_inputs(g.tensors[compiled.input].shape, n_random)
    (fw / "input.bin").write_bytes(q.tobytes())
    result = run_qemu(elf, board, fw, count_instructions=False)
    if result.exit_code != 0:
        raise TinyaotError(f"firmware exited with {result.exit_code} under QEMU (a UBSan trap is a UsageFault): "
                           f"{(result.stderr or result.stdout).strip()[:200]}")
    out = np.frombuffer((fw / "output.bin").read_bytes(), np.int8).reshape(len(q), -1)
    for k, x in enumerate(q):
        if not np.array_equal(out[k], run_reference(g, {compiled.input: x})[compiled.output].reshape(-1)):
            raise TinyaotError(f"{board.name}: output {k} differs from the numpy reference")
    return len(q)


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
        for model in args.models:
            mcal = write_calibration(model, tmp)
            for setting, options in SETTINGS.items():
                jobs.append((model, setting, lambda m=model, c=mcal, o=options: compile_model(model_path(m), c,
                                                                                               compression=o)))
        print(f"{'model':<24} {'setting':<22} {'samples':>7} {'s':>6}  result", flush=True)
        for board in TARGET_BOARDS:
            t = time.time()
            r = {"model": "all_kernels", "setting": f"UBSan trap {board}"}
            try:
                r["samples"] = target_row(board, jobs[0][2](), tmp / f"target_{board}", args.random)
                r["ok"] = True
            except TinyaotError as exc:
                r.update(ok=False, error=" | ".join(str(exc).splitlines()[:3]))
            r["seconds"] = time.time() - t
            rows.append(r)
            result = "clean, == reference" if r["ok"] else f"FAIL: {r['error']}"
            print(f"{r['model']:<24} {r['setting']:<22} {r.get('samples', '-'):>7} {r['seconds']:6.1f}  {result}",
                  flush=True)
        for k, (name, setting, make) in enumerate(jobs):
            r = row(name, setting, make, tmp / f"job{k}", args.random)
            rows.append(r)
            result = "clean, == reference" if r["ok"] else f"FAIL: {r['error']}"
            print(f"{name:<24} {setting:<22} {r.get('samples', '-'):>7} {r['seconds']:6.1f}  {result}", flush=True)
    failed = [r for r in rows if not r["ok"]]
    print(f"\n{len(rows) - len(failed)} of {len(rows)} rows clean under ASan + UBSan")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
