"""The host JIT: the very C that goes to the board, compiled for this machine and called through ctypes, so
accuracy sweeps over thousands of samples run the generated code itself at native speed."""
from __future__ import annotations

import ctypes
import tempfile
from pathlib import Path

import numpy as np

from tinyaot.codegen.emit import emit_model
from tinyaot.toolchain.host import compile_shared


class HostModel:
    """One compiled model, callable on int8 inputs. The shared library is cached by a hash of its sources."""

    def __init__(self, graph, offsets: dict[str, int], arena_bytes: int, lower_bound: int, stage=None):
        """`stage`: the schedule's patch stage (plan/patch.py), None for layer by layer."""
        with tempfile.TemporaryDirectory(prefix="tinyaot-host-") as tmp:
            emitted = emit_model(graph, offsets, arena_bytes, lower_bound, "host", Path(tmp), stage)
            lib_path = compile_shared(emitted.sources, [Path(tmp)],
                                      extra_flags=["-Werror"])
        self._lib = ctypes.CDLL(str(lib_path))
        self._invoke = getattr(self._lib, emitted.prefix + "_invoke")
        self.inputs = {p.name: p.size for p in emitted.inputs}  # invoke's order
        self.outputs = {p.name: p.shape for p in emitted.outputs}
        self._invoke.argtypes = [ctypes.c_void_p] * (len(self.inputs) + len(self.outputs))
        self._invoke.restype = ctypes.c_int
        first_in, first_out = emitted.inputs[0], emitted.outputs[0]
        self.in_size = first_in.size
        self.out_shape = first_out.shape
        self.out_size = int(np.prod(first_out.shape))

    def run(self, q: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every model input's int8 values by name -> every output's int8 values by name (physical shapes)."""
        xs = []
        for name, size in self.inputs.items():
            x = np.ascontiguousarray(q[name], dtype=np.int8).reshape(-1)
            assert x.size == size, f"input {name!r} has {x.size} values, the model takes {size}"
            xs.append(x)
        ys = {name: np.empty(shape, np.int8) for name, shape in self.outputs.items()}
        status = self._invoke(*[x.ctypes.data for x in xs], *[y.ctypes.data for y in ys.values()])
        if status != 0:
            raise RuntimeError(f"generated model returned status {status}")
        return ys

    def __call__(self, q: np.ndarray) -> np.ndarray:
        """A single-input model's first output (the shorthand most callers use)."""
        assert len(self.inputs) == 1, f"the model has {len(self.inputs)} inputs: call run() with all of them"
        return next(iter(self.run({next(iter(self.inputs)): q}).values()))
