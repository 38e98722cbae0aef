"""Issue 23's vendoring check over every shared model: each model staged for stm32 (Cortex-M4) and mps3-an547
(Cortex-M55), its model file compiled as C++ (arm-none-eabi-g++ -x c++ -std=c++11) and its kernels as C99, each by
GCC and by Clang (--target=arm-none-eabi), all with -Wall -Wextra -Wpedantic -Werror, then linked into one
relocatable object: no warning, and no unresolved C++-mangled symbol (every function the model file calls has C
linkage). Prints one line per model and board. The models and their calibration split come from ci/datasets.py
(the reference sets beside the project, as ci/figures.py reads them).

    .venv/bin/python ci/vendor_check.py [--models kws_dscnn ...] [--boards stm32 mps3-an547]
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ci.datasets import ALL_MODELS, REFERENCE  # noqa: E402
from tinyaot.boards import load_board  # noqa: E402
from tinyaot.pipeline.compile import compile_model  # noqa: E402
from tinyaot.pipeline.stage import stage_model  # noqa: E402

STRICT = ["-Wall", "-Wextra", "-Wpedantic", "-Werror", "-O2"]


def _clang_flags(board) -> list[str]:
    # the board's cpu flags, for Clang's arm-none-eabi target with the GNU toolchain's newlib headers
    return ["--target=arm-none-eabi", *board.cpu_flags, "-isystem", "/usr/lib/arm-none-eabi/include"]


def check(emitted, board, work: Path, compiler: str) -> tuple[bool, str]:
    """(ok, first diagnostic) of one compiler: model file as C++, kernels as C99, linked with ld -r."""
    objs = work / compiler
    objs.mkdir()
    if compiler == "gcc":
        cc, cxx, cpu = "arm-none-eabi-gcc", "arm-none-eabi-g++", list(board.cpu_flags)
    else:
        cc, cxx, cpu = "clang", "clang++", _clang_flags(board)
    for src in emitted.sources:
        cpp = src == emitted.source
        cmd = [cxx if cpp else cc, *cpu, *(["-x", "c++", "-std=c++11"] if cpp else ["-std=c99"]), *STRICT,
               f"-I{emitted.header.parent}", "-c", str(src), "-o", str(objs / (src.stem + ".o"))]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if p.returncode != 0 or p.stderr.strip():
            return False, f"{src.name}: {(p.stderr.strip().splitlines() or ['?'])[0]}"
    linked = objs / "all.o"
    p = subprocess.run(["arm-none-eabi-ld", "-r", *map(str, sorted(objs.glob("*.o"))), "-o", str(linked)],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        return False, p.stderr.strip()[:200]
    undefined = subprocess.run(["arm-none-eabi-nm", "-u", str(linked)], capture_output=True, text=True,
                               timeout=60).stdout.split()
    mangled = [s for s in undefined if s.startswith("_Z")]
    return not mangled, f"unresolved C++ symbols: {mangled[:3]}" if mangled else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=ALL_MODELS)
    ap.add_argument("--boards", nargs="*", default=["stm32", "mps3-an547"])
    args = ap.parse_args()
    if shutil.which("clang") is None:
        print("clang is not installed (setup.sh installs it)")
        return 2
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for model in args.models:
            cal = REFERENCE.write_calibration(model, tmp)
            for board_name in args.boards:
                board = load_board(board_name)
                compiled = compile_model(REFERENCE.model_path(model), cal, target=board.target("speed"))
                work = tmp / f"{model}-{board_name}"
                emitted = stage_model(compiled, board, work / "folder", harness=False)
                results = {c: check(emitted, board, work, c) for c in ("gcc", "clang")}
                ok = all(r[0] for r in results.values())
                failures += not ok
                detail = "; ".join(f"{c}: {r[1]}" for c, r in results.items() if not r[0])
                print(f"{model:24s} {board_name:11s} model file C++ + kernels C99 (gcc, clang -Werror), "
                      f"{len(emitted.kernels)} kernels: {'links, no mangled reference' if ok else 'FAILED ' + detail}",
                      flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
