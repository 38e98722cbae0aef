"""Host builds under AddressSanitizer and UndefinedBehaviorSanitizer: the promise that the generated C has no
undefined behaviour for any int8 input, checked by running it.

The generated C (<name>.c and its kernels, exactly as emitted for a board) is linked with a small runner into a
host executable built with `-fsanitize=address,undefined -fno-sanitize-recover=all`, so the first report (signed
overflow, a shift out of range, a misaligned access, a read or write past the arena, a weight table or the caller's
buffers) ends the process with a non-zero status. It runs as a subprocess with a timeout: a sanitized shared library
loaded with ctypes into a Python process would need libasan preloaded before the interpreter starts.

The runner reads int8 samples from a file and writes the outputs to another. Each sample gets heap buffers of
exactly the model's input and output sizes (a read past the input or a write past the output is a heap overflow
ASan sees), and runs twice, over an arena filled with 0x00 and then with 0xFF: outputs that differ read arena bytes
no step wrote first (stale data; the runner exits with status 4). Sanitizers cannot see that, since the arena is
one object.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tinyaot.codegen.emit import emit_model
from tinyaot.codegen.project import render_sanitize_runner
from tinyaot.oracle.reference import run_reference
from tinyaot.toolchain.proc import run_tool
from tinyaot.errors import TinyaotError

# Every report is fatal (-fno-sanitize-recover); frame pointers and -g make the reports name file and line.
SANITIZE_FLAGS = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-g")
# -O0: the sanitizers instrument the source as written at any level, and without optimisation the instrumented
# build compiles four times faster (measured: 2.4 s against 10 s at -O1 for a 20-file model), which pays for the
# slower run on these inputs. Warnings are errors, as in every other build of the generated C.
CFLAGS = ("-O0", "-std=c99", "-Wall", "-Wextra", "-Werror")
# Leak checking is off: the runner frees what it allocates, and LeakSanitizer cannot run under ptrace (debuggers,
# some containers). halt_on_error keeps ASan's own reports fatal too.
RUN_ENV = {"ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:abort_on_error=0",
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}
COMPILE_TIMEOUT_S = 600.0
RUN_TIMEOUT_S = 300.0


class SanitizerError(TinyaotError):
    """The sanitized build reported undefined behaviour or a bad memory access, or the runner failed."""


def _report_lines(stderr: str, limit: int = 6) -> str:
    """The lines of a sanitizer report that say what and where (the rest is stack frames and shadow bytes)."""
    keep = [ln.strip() for ln in stderr.splitlines()
            if "runtime error" in ln or "ERROR: AddressSanitizer" in ln or "SUMMARY" in ln or "runner:" in ln
            or ln.strip().startswith("#0") or ln.strip().startswith("#1")]
    return "\n".join(keep[:limit]) or stderr.strip()[-1000:] or "(no output)"


@dataclass
class SanitizedModel:
    """A model's generated C built with ASan and UBSan into an executable (`exe`), runnable on int8 samples."""

    exe: Path
    prefix: str
    in_size: int
    out_size: int
    out_shape: tuple[int, ...]

    def run(self, q_inputs: np.ndarray, timeout_s: float = RUN_TIMEOUT_S) -> np.ndarray:
        """Run every sample (int8, [n, ...] with n * in_size values); returns the outputs [n, *out_shape].
        Raises SanitizerError with the report's telling lines if the process fails."""
        x = np.ascontiguousarray(q_inputs, dtype=np.int8).reshape(-1)
        if x.size == 0 or x.size % self.in_size:
            raise ValueError(f"{x.size} input values is not a whole number of samples of {self.in_size}")
        n = x.size // self.in_size
        work = self.exe.parent
        (work / "input.bin").write_bytes(x.tobytes())
        out_file = work / "output.bin"
        if out_file.exists():
            out_file.unlink()
        env = {**os.environ, **RUN_ENV}
        try:  # run_tool: the runner dies with tinyaot and a timeout kills its process group
            proc = run_tool([str(self.exe), str(work / "input.bin"), str(out_file)], what=f"sanitized {self.prefix}",
                            timeout_s=timeout_s, timeout_hint=f" on {n} samples", cwd=work, env=env)
        except TinyaotError as exc:
            raise SanitizerError(str(exc)) from None
        if proc.returncode != 0:
            raise SanitizerError(f"sanitized {self.prefix} failed (exit {proc.returncode}):\n"
                                 f"{_report_lines(proc.stderr)}")
        y = np.frombuffer(out_file.read_bytes(), np.int8)
        if y.size != n * self.out_size:
            raise SanitizerError(f"sanitized {self.prefix} wrote {y.size} output values, expected {n * self.out_size}")
        return y.reshape(n, *self.out_shape)


def build_sanitized(graph, offsets: dict[str, int], arena_bytes: int, lower_bound: int, work_dir: Path, *,
                    timeout_s: float = COMPILE_TIMEOUT_S) -> SanitizedModel:
    """Emit the model's C into `work_dir` and build it with the runner under ASan and UBSan (host `cc`, or $CC)."""
    work_dir = Path(work_dir)
    emitted = emit_model(graph, offsets, arena_bytes, lower_bound, "host (ASan + UBSan)", work_dir)
    runner = render_sanitize_runner(emitted.prefix, emitted.header.name, work_dir)
    exe = work_dir / "sanitized"
    cc = os.environ.get("CC", "cc")
    sources = [str(p) for p in emitted.files if p.suffix == ".c"] + [str(runner)]
    cmd = [cc, *CFLAGS, *SANITIZE_FLAGS, f"-I{work_dir}", *sources, "-o", str(exe)]
    # run_tool: a timeout kills gcc's whole process group (cc1, as, ld), not only the driver
    proc = run_tool(cmd, what=f"host C compiler {cc} building {emitted.prefix} under ASan + UBSan",
                    timeout_s=timeout_s)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if "error" in ln.lower()] or proc.stderr.splitlines()
        raise TinyaotError(f"sanitized host build failed: {(lines or ['(no compiler output)'])[0].strip()}")
    (inp,), (outp,) = graph.inputs, graph.outputs
    return SanitizedModel(exe, emitted.prefix, graph.tensors[inp].size, graph.tensors[outp].size,
                          tuple(graph.tensors[outp].shape))


def probe_inputs(shape, n_random: int, seed: int = 0) -> np.ndarray:
    """int8 samples that stress a model's arithmetic: all -128, all 127, alternating -128 / 127 (both phases), then
    n_random uniform samples and n_random whose every value is -128 or 127 at random (the extremes where
    accumulators peak). [4 + 2 * n_random, *shape]."""
    shape = tuple(shape)
    size = int(np.prod(shape))
    rng = np.random.default_rng(seed)
    alt = np.where(np.arange(size) % 2 == 0, -128, 127)
    rows = [np.full(size, -128), np.full(size, 127), alt, -1 - alt]
    rows += list(rng.integers(-128, 128, size=(n_random, size)))
    rows += list(np.where(rng.random((n_random, size)) < 0.5, -128, 127))
    return np.stack(rows).astype(np.int8).reshape(-1, *shape)


def check_model(compiled, work_dir: Path, n_random: int = 3, seed: int = 0, extra_inputs=None) -> int:
    """Build `compiled` (tinyaot.api.Compiled) under the sanitizers, run it on probe_inputs (plus the quantized
    `extra_inputs`, float samples, if given) and require each output to equal the numpy reference. Returns the
    number of samples run; raises SanitizerError on a sanitizer report or a mismatch."""
    g = compiled.graph
    shape = g.tensors[compiled.input].shape
    q = probe_inputs(shape, n_random, seed)
    if extra_inputs is not None:
        q = np.concatenate([q, np.stack([compiled.quantize_input(x) for x in extra_inputs])])
    model = build_sanitized(g, compiled.plan.offsets, compiled.plan.arena_bytes, compiled.lower_bound, work_dir)
    got = model.run(q)
    for k, x in enumerate(q):
        want = run_reference(g, {compiled.input: x})[compiled.output]
        if not np.array_equal(got[k], want.reshape(got[k].shape)):
            diff = int(np.abs(got[k].astype(np.int32) - want.reshape(got[k].shape).astype(np.int32)).max())
            raise SanitizerError(f"sanitized host C differs from the numpy reference on sample {k} by up to "
                                 f"{diff} LSB")
    return len(q)
