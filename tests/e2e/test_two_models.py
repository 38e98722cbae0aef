"""Two models in one firmware (issue 9): generated folders link side by side.

- examples/two_models: kws_dscnn and tflm_hello_world_sine (both shipped in examples/), each deployed into its own
  folder, added to one CMake project with add_subdirectory + target_link_libraries, built with arm-none-eabi-gcc and
  run under QEMU; both models' outputs == the numpy reference, bit for bit. The two share one arena the firmware
  owns (invoke_with_arena, no static arena): its size is the larger of the two, not their sum.
- kws_dscnn and sww_dscnn merged into one source tree (the C and the HAL: files with the same path must be
  byte-identical) compile with -std=c99 -Wall -Wextra -Werror at -O0..-Os for Cortex-M0, M4 and M55, and the objects
  of each build link into one relocatable object: a duplicate symbol would fail that link.
"""
from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from tinyaot.api import compile_model, deploy
from tinyaot.boards import load_board
from tinyaot.codegen.emit import model_file_stem
from tinyaot.oracle.reference import run_reference
from tinyaot.pipeline.stage import stage_model
from tinyaot.toolchain.firmware import find_tool
from tinyaot.toolchain.qemu import run_qemu

from shared_data import calibration_file, model_path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "two_models"
KWS = (ROOT / "examples" / "kws_dscnn.onnx", ROOT / "calibration_data" / "kws_dscnn.npz")
SINE = (ROOT / "examples" / "tflm_hello_world_sine.onnx", ROOT / "calibration_data" / "tflm_hello_world_sine.npz")


def _run(cmd: list, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    p = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(map(str, cmd))}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def test_two_models_example_builds_with_cmake_and_runs_under_qemu(tmp_path):
    cmake = shutil.which("cmake")
    assert cmake, "cmake is not installed (setup.sh installs it with apt)"
    board = load_board("stm32")
    folders = {}
    for name, (model, cal) in {"kws_dscnn": KWS, "tflm_hello_world_sine": SINE}.items():
        folders[name] = tmp_path / name
        deploy(model, "stm32", cal, folders[name], verify=False)
    build = tmp_path / "build"
    _run([cmake, "-S", EXAMPLE, "-B", build, f"-DCMAKE_TOOLCHAIN_FILE={EXAMPLE / 'arm-none-eabi.cmake'}",
          f"-DKWS_DIR={folders['kws_dscnn']}", f"-DSINE_DIR={folders['tflm_hello_world_sine']}",
          "-DTWO_MODELS_WERROR=ON"])
    _run([cmake, "--build", build])
    elf = build / "two_models.elf"
    # a kernel both models use is one CMake target, built once, from the first folder added (which kernels they
    # share depends on the variants chosen for the board: read it from the two folders)
    shared = ({p.stem for p in folders["kws_dscnn"].glob("tinyaot_*.c")}
              & {p.stem for p in folders["tflm_hello_world_sine"].glob("tinyaot_*.c")})
    assert shared
    for kernel in shared:
        assert [p.parent.name for p in build.rglob(f"lib{kernel}.a")] == ["kws_dscnn"], kernel

    # One sample per model, quantized as each header says; expected outputs from the numpy reference.
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    expected, arenas = {}, {}
    for name, (model, cal), sample in (("kws", KWS, 3), ("sine", SINE, 5)):
        c = compile_model(model, cal)
        arenas[name] = c.plan.arena_bytes
        q = c.quantize_input(c.samples[c.input][sample])
        (run_dir / f"{name}_input.bin").write_bytes(q.tobytes())
        expected[name] = run_reference(c.graph, {c.input: q})[c.output].reshape(-1)
    result = run_qemu(elf, board, run_dir, timeout_s=60, count_instructions=False)
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    for name in ("kws", "sine"):
        got = np.frombuffer((run_dir / f"{name}_output.bin").read_bytes(), np.int8)
        assert np.array_equal(got, expected[name]), (name, got, expected[name])
    shared = max(arenas.values())
    assert shared < sum(arenas.values())
    assert (f"two_models: keyword class {int(np.argmax(expected['kws']))}, shared arena {shared} bytes\n"
            in result.stdout + result.stderr)
    # one arena in the image, the shared one: no model keeps a static arena of its own
    sizes = _run([find_tool("arm-none-eabi-nm"), "--print-size", "--defined-only", elf]).stdout
    rows = [line.split() for line in sizes.splitlines()]
    assert {r[3]: int(r[1], 16) for r in rows if len(r) == 4 and r[3] == "shared_arena"} == {"shared_arena": shared}
    static = {"tinyaot_kws_dscnn_arena", "tinyaot_tflm_hello_world_sine_arena"}
    assert not [r for r in rows if r[-1] in static], sizes


CORES = {"cortex-m0": ["-mthumb", "-mcpu=cortex-m0", "-mfloat-abi=soft"],
         "cortex-m4": ["-mthumb", "-mcpu=cortex-m4", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard"],
         "cortex-m55": ["-mthumb", "-mcpu=cortex-m55", "-mfloat-abi=hard"]}
OPT_LEVELS = ["-O0", "-O1", "-O2", "-O3", "-Os"]
ALL_CONFIGS = [(core, opt) for core in CORES for opt in OPT_LEVELS]
# The test command builds 6 of the 15 (each a compile of every file, ~2 s of one core): every core at -O0, where
# nothing is inlined and every helper a file defines is a symbol of its own (what a duplicate would collide on), and
# each core at one optimising level (the M4's -O2 is the product's, whose symbols are checked below). Warnings by
# level are the kernel build matrix's (tests/sanitize/test_kernel_build_matrix.py); .ci/run builds all 15 after the
# suite (TINYAOT_FULL_MATRIX=1).
SUITE_CONFIGS = [("cortex-m0", "-O0"), ("cortex-m0", "-Os"), ("cortex-m4", "-O0"), ("cortex-m4", "-O2"),
                 ("cortex-m55", "-O0"), ("cortex-m55", "-O3")]
CONFIGS = ALL_CONFIGS if os.environ.get("TINYAOT_FULL_MATRIX") == "1" else SUITE_CONFIGS


def test_two_folders_merge_into_one_tree_and_link_without_duplicates(tmp_path, cal_dir):
    gcc = find_tool("arm-none-eabi-gcc")
    board = load_board("stm32")
    merged = tmp_path / "merged"
    merged.mkdir()
    names = []
    for model in ("kws_dscnn", "sww_dscnn"):
        c = compile_model(model_path(model), calibration_file(cal_dir, model))
        folder = tmp_path / model
        emitted = stage_model(c, board, folder)
        names.append(emitted.name)
        # The C a firmware compiles and the HAL; build files and reports describe one folder each.
        for src in [*folder.glob("*.[ch]"), *(folder / "hal").iterdir()]:
            dst = merged / src.relative_to(folder)
            if dst.exists():
                assert filecmp.cmp(src, dst, shallow=False), f"{dst.relative_to(merged)} differs between folders"
            else:
                dst.parent.mkdir(exist_ok=True)
                shutil.copyfile(src, dst)
    assert names == ["kws_dscnn", "sww_dscnn"]
    for name in names:
        assert (merged / f"{name}.c").is_file() and (merged / f"{name}.h").is_file()
    # nothing model-specific in a shared file: the kernels never name a model
    for shared in merged.glob("tinyaot_*"):
        text = shared.read_text()
        assert "kws" not in text and "sww" not in text, shared.name
    sources = sorted(p.name for p in merged.glob("*.c"))

    def build(core: str, opt: str) -> str:
        objs = tmp_path / f"obj{core}{opt}"
        objs.mkdir()
        # one compiler run per configuration (all files), objects written in `objs`
        _run([gcc, *CORES[core], opt, "-std=c99", "-Wall", "-Wextra", "-Werror", "-ffunction-sections",
              "-fdata-sections", f"-I{merged}", "-c", *[merged / s for s in sources]], cwd=objs)
        _run([gcc, *CORES[core], "-nostdlib", "-r", *sorted(objs.glob("*.o")), "-o", objs / "merged.o"], cwd=objs)
        return core + opt

    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(lambda c: build(*c), CONFIGS))
    assert len(done) == len(CONFIGS)
    nm = find_tool("arm-none-eabi-nm")
    symbols = _run([nm, "--defined-only", tmp_path / "objcortex-m4-O2" / "merged.o"]).stdout
    for name in names:
        assert f" T tinyaot_{name}_invoke" in symbols and f" B tinyaot_{name}_arena" in symbols, name


def test_arena_and_weights_go_to_the_named_sections(tmp_path):
    # -DTINYAOT_<NAME>_ARENA_SECTION / _WEIGHTS_SECTION move the arena and every constant array of the model into
    # the named sections; without them the arena is .bss and the weights .rodata.
    gcc, objdump = find_tool("arm-none-eabi-gcc"), find_tool("arm-none-eabi-objdump")
    c = compile_model(*SINE)
    emitted = stage_model(c, load_board("stm32"), tmp_path / "sine", harness=False)
    define = "TINYAOT_TFLM_HELLO_WORLD_SINE"

    def sections(*defines: str) -> dict[str, int]:
        obj = tmp_path / "m.o"
        _run([gcc, *CORES["cortex-m4"], "-O2", "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{emitted.header.parent}",
              *defines, "-c", emitted.source, "-o", obj])
        rows = [line.split() for line in _run([objdump, "-h", obj]).stdout.splitlines()]
        return {r[1]: int(r[2], 16) for r in rows if len(r) >= 7 and r[0].isdigit()}

    plain = sections()
    placed = sections(f'-D{define}_ARENA_SECTION=".bss.dtcm"', f'-D{define}_WEIGHTS_SECTION=".flash_b"')
    arena = c.plan.arena_bytes
    assert plain.get(".bss", 0) >= arena and ".bss.dtcm" not in plain and ".flash_b" not in plain
    # what left .bss is the arena, plus at most the padding its alignment (ARENA_ALIGNMENT, 16) cost there
    left = plain[".bss"] - placed.get(".bss", 0)
    assert placed[".bss.dtcm"] == arena and arena <= left < arena + 16
    weights = placed[".flash_b"]
    assert weights > 0 and placed.get(".rodata", 0) == plain[".rodata"] - weights


def test_a_model_file_named_like_a_kernel_does_not_overwrite_it():
    assert model_file_stem("kws_dscnn") == "kws_dscnn"
    assert model_file_stem("tinyaot_nn") == "tinyaot_nn_model"  # tinyaot_nn.h is a shared kernel header
    assert model_file_stem("tinyaot_convolve_s8") == "tinyaot_convolve_s8_model"


def test_the_suite_builds_every_core_and_ci_every_level() -> None:
    """The test command's builds are cells of the full 15, every core at -O0 and at an optimising level, the
    symbols' -O2 on the M4 among them; .ci/run builds all 15 after the suite."""
    assert set(SUITE_CONFIGS) <= set(ALL_CONFIGS) and len(ALL_CONFIGS) == 15
    assert {c for c, o in SUITE_CONFIGS if o == "-O0"} == set(CORES) == {c for c, o in SUITE_CONFIGS if o != "-O0"}
    assert ("cortex-m4", "-O2") in SUITE_CONFIGS
    ci = (ROOT / ".ci" / "run").read_text()
    assert "TINYAOT_FULL_MATRIX=1" in ci and "tests/e2e/test_two_models.py" in ci
