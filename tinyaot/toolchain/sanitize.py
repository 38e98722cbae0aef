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
from tinyaot.oracle.reference import run_reference_many
from tinyaot.toolchain.objects import Deadline, compile_objects
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
    in_sizes: tuple[int, ...]  # per model input, in invoke's order
    out_shapes: tuple[tuple[int, ...], ...]  # per model output, in invoke's order

    @property
    def in_size(self) -> int:
        return sum(self.in_sizes)

    @property
    def out_size(self) -> int:
        return sum(int(np.prod(s)) for s in self.out_shapes)

    def run(self, q_inputs, timeout_s: float = RUN_TIMEOUT_S):
        """Run every sample and return the outputs. `q_inputs`: int8 [n, ...] (a single-input model; returns the
        output [n, *shape] of a single-output model) or a list with one [n, ...] array per input (returns a list with
        one [n, *shape] array per output). Raises SanitizerError with the report's telling lines if the process
        fails."""
        several = isinstance(q_inputs, (list, tuple))
        parts = [np.ascontiguousarray(a, dtype=np.int8) for a in (q_inputs if several else [q_inputs])]
        if len(parts) != len(self.in_sizes):
            raise ValueError(f"{len(parts)} input arrays for a model of {len(self.in_sizes)} inputs")
        count = len(parts[0])
        x = np.concatenate([p.reshape(count, -1) for p in parts], axis=1).reshape(-1)
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
        y = y.reshape(n, self.out_size)
        bounds = np.cumsum([0] + [int(np.prod(s)) for s in self.out_shapes])
        outs = [y[:, a:b].reshape(n, *s) for a, b, s in zip(bounds[:-1], bounds[1:], self.out_shapes)]
        return outs if several or len(outs) > 1 else outs[0]


def build_sanitized(graph, offsets: dict[str, int], arena_bytes: int, lower_bound: int, work_dir: Path, *,
                    timeout_s: float = COMPILE_TIMEOUT_S) -> SanitizedModel:
    """Emit the model's C into `work_dir` and build it with the runner under ASan and UBSan (host `cc`, or $CC)."""
    work_dir = Path(work_dir)
    emitted = emit_model(graph, offsets, arena_bytes, lower_bound, "host (ASan + UBSan)", work_dir)
    runner = render_sanitize_runner(emitted.prefix, emitted.header.name, work_dir,
                                    [p.macro for p in emitted.inputs], [p.macro for p in emitted.outputs])
    exe = work_dir / "sanitized"
    cc = os.environ.get("CC", "cc")
    sources = [p for p in emitted.files if p.suffix == ".c"] + [runner]
    flags = [*CFLAGS, *SANITIZE_FLAGS]
    # the object cache (toolchain/objects.py): the instrumented kernels are the same for every model; the Deadline's
    # tool runs kill gcc's whole process group (cc1, as, ld) on a timeout, not only the driver
    deadline = Deadline(f"host C compiler {cc} building {emitted.prefix} under ASan + UBSan", timeout_s)
    # -ffile-prefix-map: the objects (-g, and UBSan's source locations) name files relative to the model's folder,
    # not the folder the cached object was first compiled in
    objects, output, code = compile_objects(cc, flags, [f"-I{work_dir}", f"-ffile-prefix-map={work_dir}=."],
                                            sources, work_dir / "objects", deadline)
    if code == 0:
        link = deadline.run([cc, *flags, *map(str, objects), "-o", str(exe)])
        output, code = output + link.stdout + link.stderr, link.returncode
    if code != 0:
        lines = [ln for ln in output.splitlines() if "error" in ln.lower()] or output.splitlines()
        raise TinyaotError(f"sanitized host build failed: {(lines or ['(no compiler output)'])[0].strip()}")
    return SanitizedModel(exe, emitted.prefix, tuple(p.size for p in emitted.inputs),
                          tuple(p.shape for p in emitted.outputs))


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
    `extra_inputs`, float samples, if given: arrays of the first input, or feeds {input name: sample}) and require
    every output to equal the numpy reference. Each input gets its own probe (seeds `seed`, `seed + 1`, ...), so a
    model of several inputs sees the extremes on all of them at once. Returns the number of samples run; raises
    SanitizerError on a sanitizer report or a mismatch."""
    g = compiled.graph
    q = {name: probe_inputs(g.tensors[name].shape, n_random, seed + k) for k, name in enumerate(g.inputs)}
    if extra_inputs is not None:
        feeds = [x if isinstance(x, dict) else {compiled.input: x} for x in extra_inputs]
        extra = [compiled.quantize_inputs(f) for f in feeds]
        q = {name: np.concatenate([q[name], np.stack([e[name] for e in extra])]) for name in g.inputs}
    model = build_sanitized(g, compiled.plan.offsets, compiled.plan.arena_bytes, compiled.lower_bound, work_dir)
    got = model.run([q[name] for name in g.inputs])
    count = len(q[g.inputs[0]])
    wants = run_reference_many(g, [{name: q[name][k] for name in g.inputs} for k in range(count)])
    for k, want in enumerate(wants):
        for out, values in zip(g.outputs, got):
            w = want[out].reshape(values[k].shape)
            if not np.array_equal(values[k], w):
                diff = int(np.abs(values[k].astype(np.int32) - w.astype(np.int32)).max())
                raise SanitizerError(f"sanitized host C differs from the numpy reference on sample {k}, output "
                                     f"{out!r}, by up to {diff} LSB")
    return count
