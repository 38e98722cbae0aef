"""The generated C as a product team vendors it (issue 23): kws_dscnn (examples/) staged for stm32 (Cortex-M4) and
mps3-an547 (Cortex-M55, Helium), its model file and kernels built otherwise than tinyaot builds them, linked with the
verification harness and run under QEMU: the outputs equal the numpy reference, bit for bit.

- C++: the model file compiled as C++ (arm-none-eabi-g++ -x c++ -std=c++11 -Wpedantic -Werror) beside kernels compiled
  as C links (every function it calls is declared extern "C"; a C++-mangled reference would stay unresolved).
- portable: model and kernels compiled with -DTINYAOT_PORTABLE -U__GNUC__ (no GNU extension, no inline assembly, no
  intrinsic: the C99 path any compiler takes) compute the same integers as the default build.
- debug (mps3-an547): model and kernels at -O1 -fno-omit-frame-pointer, as a debugger-friendly IDE build makes them
  (no define: the Helium matrix core's inline assembly takes every register the frame pointer leaves, and builds).
- aligned-only (stm32): everything built with -mno-unaligned-access, which makes the HAL set CCR.UNALIGN_TRP: no
  kernel makes an unaligned access (one would be a UsageFault). The default build run with the trap set (the HAL
  asked by -DTINYAOT_HAL_UNALIGN_TRP) does fault: the trap is real under QEMU, so the aligned-only pass means
  something.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from tinyaot.boards import load_board
from tinyaot.oracle.reference import run_reference
from tinyaot.pipeline.compile import compile_model
from tinyaot.pipeline.stage import FIRMWARE_DIR, HAL_DIR, stage_model
from tinyaot.codegen.project import HARNESS
from tinyaot.toolchain.firmware import COMMON_CFLAGS, build_firmware, find_tool
from tinyaot.toolchain.qemu import run_qemu

ROOT = Path(__file__).resolve().parents[2]
KWS = (ROOT / "examples" / "kws_dscnn.onnx", ROOT / "calibration_data" / "kws_dscnn.npz")
SAMPLES = 2
STRICT = ("-Wall", "-Wextra", "-Wpedantic", "-Werror")
PORTABLE = ["-std=c99", "-DTINYAOT_PORTABLE", "-U__GNUC__", *STRICT]
ALIGNED = ["-std=c99", "-mno-unaligned-access", *STRICT]
DEBUG = ["-std=c99", *STRICT, "-O1", "-fno-omit-frame-pointer"]  # after COMMON_CFLAGS' -O2: this level wins
# how each mode compiles the model file, the kernels, and the rest of the firmware (harness and HAL)
MODES = {
    "c++": (["-x", "c++", "-std=c++11", *STRICT], ["-std=c99", *STRICT], []),
    "portable": (PORTABLE, PORTABLE, []),
    "aligned-only": (ALIGNED, ALIGNED, ["-mno-unaligned-access"]),
    "debug": (DEBUG, DEBUG, []),
    "default, unaligned access trapped": (["-std=c99", *STRICT], ["-std=c99", *STRICT], ["-DTINYAOT_HAL_UNALIGN_TRP"]),
}
CASES = [("stm32", "c++"), ("mps3-an547", "c++"), ("stm32", "portable"), ("mps3-an547", "portable"),
         ("mps3-an547", "debug"),
         ("stm32", "aligned-only"), ("stm32", "default, unaligned access trapped")]


@pytest.fixture(scope="module")
def kws_by_board():
    compiled = {}

    def get(board_name: str):
        if board_name not in compiled:
            compiled[board_name] = compile_model(*KWS, target=load_board(board_name).target("speed"))
        return compiled[board_name]
    return get


def _compile(flags: list[str], source: Path, obj: Path, include: Path, board) -> None:
    gcc = find_tool("arm-none-eabi-gcc")
    other = [f for f in COMMON_CFLAGS if f not in ("-std=c99",)]
    cmd = [gcc, *board.cpu_flags, *other, "-DTINYAOT_TRACE", f"-I{include}", *flags, "-c", str(source),
           "-o", str(obj)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and not p.stderr.strip(), " ".join(cmd) + "\n" + p.stderr[-4000:]


@pytest.mark.parametrize("board_name,mode", CASES)
def test_model_built_otherwise_runs_bit_exact_under_qemu(board_name, mode, kws_by_board, tmp_path):
    board = load_board(board_name)
    compiled = kws_by_board(board_name)
    folder = tmp_path / "kws"
    emitted = stage_model(compiled, board, folder)
    objs = tmp_path / "objs"
    objs.mkdir()
    model_flags, kernel_flags, firmware_flags = MODES[mode]
    objects = []
    for source in emitted.sources:
        obj = objs / (source.stem + ".o")
        _compile(model_flags if source == emitted.source else kernel_flags, source, obj, folder, board)
        objects.append(obj)
    fw = folder / FIRMWARE_DIR
    elf = build_firmware([fw / HARNESS, *objects], [folder], board, fw, name="firmware", werror=True,
                         extra_cflags=firmware_flags, hal_dir=folder / HAL_DIR)
    nm = subprocess.run([find_tool("arm-none-eabi-nm"), "--undefined-only", str(objs / (emitted.source.stem + ".o"))],
                        capture_output=True, text=True, timeout=60).stdout
    assert "_Z" not in nm, nm  # no C++-mangled reference: every kernel is called with C linkage

    q = [compiled.quantize_input(compiled.samples[compiled.input][k]) for k in range(SAMPLES)]
    (fw / "input.bin").write_bytes(b"".join(x.tobytes() for x in q))
    result = run_qemu(elf, board, fw, timeout_s=120, count_instructions=False)
    if mode.startswith("default"):  # tinyaot_read_s8x4's word loads at odd addresses
        assert result.exit_meaning == "UsageFault", (result.exit_code, result.stdout, result.stderr)
        return
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    got = np.frombuffer((fw / "output.bin").read_bytes(), np.int8).reshape(SAMPLES, -1)
    want = np.stack([run_reference(compiled.graph, {compiled.input: x})[compiled.output].reshape(-1) for x in q])
    assert np.array_equal(got, want), (got, want)
