"""Every kernel in templates/kernels compiles warning-free (-Werror, with -Wpedantic) at every optimisation level a
firmware project may use, for each M-profile feature set the kernels have code paths for: v6-M (plain C), v7-M
(SSAT/USAT through __ARM_FEATURE_SAT, no DSP), v7E-M (SIMD32: SMLAD, SXTB16) and v8.1-M (Helium). Firmware often
builds at -O0/-Og for debugging and -Os for size, so a kernel that only builds at the product's -O2 is a bug (GCC
refused the always_inline decoders of the compressed fully connected kernels at -O1 once). The other cores of the
board files with the same feature sets as one of those (Cortex-M7: v7E-M, Cortex-M33: v8-M Mainline with DSP) are
built at -O2, as the product builds them.

The same kernels are held to Debian's Clang (`clang --target=arm-none-eabi`, which setup.sh installs) as C99 and as
C++11 (a C++ project compiles a vendored .c file as C++ when told to): M0, M4 and M55 at -O0 and -O2 as C99, and at
-O0 as C++. Clang's warnings come from its front end and do not depend on the optimisation level; what does (inline
assembly the register allocator cannot honour) is the C99 cells' to find at both levels, so the C++ cells stay at the
cheap -O0 (the clang part of the file costs about 60 s of one core's time without records).

Both compilers build with issue 23's warning flags (-Wconversion, -Wcast-align, -Wshadow and the others in
VENDOR_WARNINGS) on top of -Wall -Wextra -Wpedantic, all with -Werror: the warnings a firmware team turns on before
it vendors code.

The cpu flags come from the board files (the ones the product builds with) and the other flags from
tinyaot/toolchain/firmware.py; one compiler invocation compiles all kernels per combination (-c only), one test per
combination, so that pytest-xdist spreads them over the workers.

A clean build is recorded in tinyaot's cache ($TINYAOT_CACHE/kernel_matrix, which tests/conftest.py keeps in pytest's
temporary root) under a hash of the compiler's path and `-v` identity, the flags and the name and text of every file
in the kernel folder, with the hashes of the files outside it the build read (the toolchain's headers, listed by -MD).
The same inputs give the same build, so a later run with none of them changed reads the record instead of
compiling again; any changed kernel, header, flag, compiler or toolchain header compiles again. A failed or noisy
build is never recorded, so it compiles (and fails) every time.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tinyaot.boards import load_board
from tinyaot.toolchain.firmware import COMMON_CFLAGS
from tinyaot.paths import TEMPLATES

KERNELS = TEMPLATES / "kernels"
ARM_GCC = shutil.which("arm-none-eabi-gcc")
CLANG = shutil.which("clang")
OPT_LEVELS = ("-O0", "-O1", "-O2", "-O3", "-Os")
# a debug build as IDEs make it: the inline assembly must fall back or fit without r7 by itself (no extra define)
DEBUG = "-Og -fno-omit-frame-pointer"
DEBUG_O1 = "-O1 -fno-omit-frame-pointer"  # the other debug build: GCC's allocator is weaker at -O1 than at -O2
EXTRA_WARNINGS = ("-Wpedantic",)  # beyond COMMON_CFLAGS' -Wall -Wextra: C99 as the standard has it, no extensions
# issue 23's flags: implicit narrowing, casts that drop alignment or const, shadowed names, undefined macros in #if,
# float promotion, VLAs, repeated declarations (C adds old-style declarations and functions without a prototype).
# Not -Wsign-conversion on GCC: GCC 12's own arm_acle.h __ssat macro trips it inside its expansion.
VENDOR_WARNINGS = ("-Wconversion", "-Wcast-align", "-Wshadow", "-Wundef", "-Wcast-qual", "-Wpointer-arith",
                   "-Wdouble-promotion", "-Wvla", "-Wredundant-decls", "-Wfloat-equal")
C_ONLY_WARNINGS = ("-Wstrict-prototypes", "-Wmissing-prototypes")
CLANG_ONLY_WARNINGS = ("-Wsign-conversion",)

# feature set -> (board whose cpu flags stand for it, the architecture the board file must name, optimisation levels)
CORES = {
    "v6-M": ("microbit", "armv6-m", OPT_LEVELS),                  # Cortex-M0
    "v7-M": ("mps2-an385", "armv7-m", OPT_LEVELS),                # Cortex-M3
    "v7E-M": ("stm32", "armv7e-m", (*OPT_LEVELS, DEBUG, DEBUG_O1)),  # Cortex-M4F
    "v7E-M (M7)": ("mps2-an500", "armv7e-m", ("-O2",)),           # Cortex-M7
    "v8-M": ("mps2-an505", "armv8-m.main", ("-O2",)),             # Cortex-M33
    "v8.1-M": ("mps3-an547", "armv8.1-m.main", (*OPT_LEVELS, DEBUG, DEBUG_O1)),  # Cortex-M55, Helium
}
ALL_COMBINATIONS = [(arch, opt) for arch, (_, _, opts) in CORES.items() for opt in opts]
# Clang: (language, feature set, optimisation level); see the module's text for why C++ builds at -O0 only
CLANG_LANGUAGES = {"c99": ("-std=c99",), "c++11": ("-x", "c++", "-std=c++11")}
ALL_CLANG_COMBINATIONS = [(lang, arch, opt) for arch in ("v6-M", "v7E-M", "v8.1-M")
                          for lang, opts in (("c99", ("-O0", "-O2")), ("c++11", ("-O0",))) for opt in opts]
# The test command builds a subset: the cells the rest of the suite never compiles and that break most easily, the
# inline-assembly cores' debug builds (GCC's allocator without r7, at -Og and -O1), the plain C path at -Os on
# Armv6-M, Helium and C++ under clang. The whole matrix took 390 s of the suite's 2,130 s of test time on 2 cores, a
# covering subset (every feature set and level) still 150 s of 1,360 s; .ci/run builds every cell after the suite
# (TINYAOT_FULL_MATRIX=1), so CI sees them all, and the DSP and Helium paths at -O2 are what every verified deploy in
# the suite builds with -Werror.
SUITE_COMBINATIONS = [("v6-M", "-Os"), ("v7E-M", DEBUG), ("v7E-M", DEBUG_O1), ("v8.1-M", DEBUG), ("v8.1-M", DEBUG_O1)]
SUITE_CLANG_COMBINATIONS = [("c99", "v8.1-M", "-O2"), ("c++11", "v7E-M", "-O0")]
FULL = os.environ.get("TINYAOT_FULL_MATRIX") == "1"
COMBINATIONS = ALL_COMBINATIONS if FULL else SUITE_COMBINATIONS
CLANG_COMBINATIONS = ALL_CLANG_COMBINATIONS if FULL else SUITE_CLANG_COMBINATIONS
MAX_RECORDS = 256  # clean builds kept; the oldest go first (each record is a few hundred bytes)


def kernel_sources(kernels: Path = KERNELS) -> list[Path]:
    sources = sorted(kernels.glob("*.c"))
    assert sources, f"expected the kernel templates in {kernels}"
    return sources


def _cpu_flags(arch: str) -> list[str]:
    board_name, want_arch, _ = CORES[arch]
    board = load_board(board_name)
    assert board.arch == want_arch, f"board {board_name} is {board.arch}, expected {want_arch}"
    return list(board.cpu_flags)


def _flags(arch: str, opt: str) -> list[str]:
    return [*_cpu_flags(arch), *(f for f in COMMON_CFLAGS if not f.startswith("-O")), *EXTRA_WARNINGS,
            *VENDOR_WARNINGS, *C_ONLY_WARNINGS, *opt.split(), "-Werror"]


@functools.lru_cache(maxsize=1)
def _newlib_include() -> str:
    """The GNU toolchain's newlib headers (stdint.h, string.h) for Clang's bare-metal target, which has none."""
    sysroot = subprocess.run([ARM_GCC, "-print-sysroot"], capture_output=True, text=True, timeout=60).stdout.strip()
    return str(Path(sysroot or "/usr/lib/arm-none-eabi") / "include")


def _clang_flags(lang: str, arch: str, opt: str) -> list[str]:
    common = [f for f in COMMON_CFLAGS if not f.startswith(("-O", "-std="))]
    return ["--target=arm-none-eabi", *_cpu_flags(arch), "-isystem", _newlib_include(), *CLANG_LANGUAGES[lang],
            *common, *EXTRA_WARNINGS, *VENDOR_WARNINGS, *CLANG_ONLY_WARNINGS,
            *(C_ONLY_WARNINGS if lang == "c99" else ()), opt, "-Werror"]


@functools.lru_cache(maxsize=4)
def _compiler_identity(compiler: str) -> str:
    proc = subprocess.run([compiler, "-v"], capture_output=True, text=True, timeout=60)
    return compiler + "\0" + proc.stdout + proc.stderr  # version and configuration (-v writes them to stderr)


def _record_key(compiler: str, flags: list[str], kernels: Path) -> str:
    """The hash of the compiler, the flags and every file in the kernel folder (by name and text: more than the
    build reads from there, and the checkout's location does not matter)."""
    h = hashlib.sha256()
    for part in (_compiler_identity(compiler), json.dumps(flags)):
        h.update(part.encode() + b"\0")
    for path in sorted(p for p in kernels.iterdir() if p.is_file()):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _outside_files(out: Path, kernels: Path) -> dict[str, str | None]:
    """The files outside the kernel folder the build read (the toolchain's headers), from the -MD lists, with
    their hashes."""
    deps: set[Path] = set()
    for d in out.glob("*.d"):
        deps |= {Path(w).resolve() for w in d.read_text().replace("\\\n", " ").split() if not w.endswith(":")}
    inside = kernels.resolve()
    return {str(p): _digest(p) for p in sorted(deps) if p.parent != inside}


def _records() -> Path | None:
    root = os.environ.get("TINYAOT_CACHE")
    return Path(root) / "kernel_matrix" if root else None


def _build(arch: str, opt: str, out: Path, kernels: Path = KERNELS, *, compiler: str | None = None,
           flags: list[str] | None = None) -> tuple[list[str], int, str, list[str], bool]:
    """(flags, return code, compiler output, object names, whether read from a record) of one combination (GCC with
    the flags of (arch, opt) unless a compiler and its flags are given)."""
    compiler = compiler or ARM_GCC
    flags, sources = flags or _flags(arch, opt), kernel_sources(kernels)
    folder = _records()
    record = folder / f"{_record_key(compiler, flags, kernels)}.json" if folder is not None else None
    if record is not None and record.is_file():
        try:
            r = json.loads(record.read_text())
            if all(_digest(Path(p)) == h for p, h in r["outside_files"].items()):  # toolchain headers unchanged
                os.utime(record)
                return flags, r["returncode"], r["diagnostics"], r["objects"], True
        except (OSError, ValueError, KeyError, AttributeError):
            pass  # unreadable: compile again
    out.mkdir(parents=True, exist_ok=True)
    # -MD: each object's dependency list beside it (gcc writes it while compiling, at no extra pass)
    proc = subprocess.run([compiler, *flags, "-MD", "-c", f"-I{kernels}", *map(str, sources)], cwd=out,
                          capture_output=True, text=True, timeout=600)
    diagnostics = (proc.stdout + proc.stderr).strip()
    objects = sorted(p.stem for p in out.glob("*.o"))
    if record is not None and proc.returncode == 0 and not diagnostics:
        _store(record, {"returncode": 0, "diagnostics": "", "objects": objects,
                        "outside_files": _outside_files(out, kernels)})
    return flags, proc.returncode, diagnostics, objects, False


def _store(record: Path, data: dict) -> None:
    record.parent.mkdir(parents=True, exist_ok=True)
    tmp = record.with_name(f".{record.stem}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, record)  # atomic: a parallel worker never reads half a record
    kept = sorted(record.parent.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in kept[MAX_RECORDS:]:
        old.unlink(missing_ok=True)


@pytest.mark.skipif(ARM_GCC is None, reason="arm-none-eabi-gcc not installed")
@pytest.mark.parametrize("arch,opt", COMBINATIONS)
def test_all_kernels_build_warning_free(arch: str, opt: str, tmp_path) -> None:
    flags, returncode, diagnostics, objects, _ = _build(arch, opt, tmp_path / "objects")
    assert {"-std=c99", "-Wall", "-Wextra", "-Wpedantic", "-Wconversion", "-Werror"} <= set(flags)
    assert returncode == 0 and not diagnostics, f"{arch} {opt}: {' '.join(flags)}\n{diagnostics[:4000]}"
    assert len(objects) >= 30 and objects == [s.stem for s in kernel_sources()]


@pytest.mark.skipif(ARM_GCC is None or CLANG is None, reason="arm-none-eabi-gcc (newlib's headers) or clang missing")
@pytest.mark.parametrize("lang,arch,opt", CLANG_COMBINATIONS)
def test_all_kernels_build_warning_free_with_clang(lang: str, arch: str, opt: str, tmp_path) -> None:
    flags = _clang_flags(lang, arch, opt)
    _, returncode, diagnostics, objects, _ = _build(arch, opt, tmp_path / "objects", compiler=CLANG, flags=flags)
    assert {"--target=arm-none-eabi", "-Wall", "-Wextra", "-Wpedantic", "-Wconversion", "-Werror"} <= set(flags)
    assert returncode == 0 and not diagnostics, f"clang {lang} {arch} {opt}: {' '.join(flags)}\n{diagnostics[:4000]}"
    assert len(objects) >= 30 and objects == [s.stem for s in kernel_sources()]


@pytest.mark.skipif(ARM_GCC is None, reason="arm-none-eabi-gcc not installed")
def test_a_changed_kernel_is_compiled_again_and_a_failed_build_is_not_recorded(tmp_path, monkeypatch) -> None:
    """The record is keyed by what the build reads: a copy of one kernel and the headers, unchanged, is read from
    the record the first build left; with a toolchain header other than the one recorded, or with one line added to
    a kernel header, it compiles again (the line is an error under -Werror), and that failure is not recorded."""
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    for path in [KERNELS / "tinyaot_softmax_s8.c", *KERNELS.glob("*.h")]:
        shutil.copy(path, kernels)
    monkeypatch.setenv("TINYAOT_CACHE", str(tmp_path / "cache"))
    arch, opt = "v6-M", "-O0"
    first = _build(arch, opt, tmp_path / "a", kernels)
    assert first[1:] == (0, "", ["tinyaot_softmax_s8"], False)
    assert _build(arch, opt, tmp_path / "b", kernels)[1:] == (0, "", ["tinyaot_softmax_s8"], True)
    # a toolchain header that is not what the record read (its recorded hash altered here) compiles again
    (record,) = (tmp_path / "cache" / "kernel_matrix").glob("*.json")
    r = json.loads(record.read_text())
    assert any(p.endswith("/stdint.h") for p in r["outside_files"]), r["outside_files"]
    r["outside_files"] = {p: "0" * 64 for p in r["outside_files"]}
    record.write_text(json.dumps(r))
    assert _build(arch, opt, tmp_path / "b2", kernels)[1:] == (0, "", ["tinyaot_softmax_s8"], False)
    with (kernels / "tinyaot_nn_support.h").open("a") as f:
        f.write("\nstatic int tinyaot_matrix_unused_probe;\n")  # -Wunused-variable: -Werror fails the build
    changed = _build(arch, opt, tmp_path / "c", kernels)
    assert changed[1] != 0 and "tinyaot_matrix_unused_probe" in changed[2] and changed[4] is False
    assert _build(arch, opt, tmp_path / "d", kernels)[4] is False  # the failure was not recorded


def test_the_suite_subset_and_the_full_matrix_in_ci() -> None:
    """The test command's cells are cells of the full matrix, build the inline-assembly cores' debug builds and both
    clang languages, and .ci/run builds the full matrix (every feature set, level and language) after the suite."""
    assert set(SUITE_COMBINATIONS) <= set(ALL_COMBINATIONS)
    assert {(a, o) for a, o in SUITE_COMBINATIONS if o in (DEBUG, DEBUG_O1)} == {
        (a, o) for a, o in ALL_COMBINATIONS if o in (DEBUG, DEBUG_O1)}  # the inline-assembly cores' debug builds
    assert set(SUITE_CLANG_COMBINATIONS) <= set(ALL_CLANG_COMBINATIONS)
    assert {c[0] for c in SUITE_CLANG_COMBINATIONS} == {c[0] for c in ALL_CLANG_COMBINATIONS}
    ci = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    assert "TINYAOT_FULL_MATRIX=1" in ci and "tests/sanitize/test_kernel_build_matrix.py" in ci
