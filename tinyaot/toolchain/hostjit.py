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
        self._invoke.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self._invoke.restype = ctypes.c_int
        self.in_size = graph.tensors[graph.inputs[0]].size
        self.out_shape = graph.tensors[graph.outputs[0]].shape
        self.out_size = graph.tensors[graph.outputs[0]].size

    def __call__(self, q: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(q, dtype=np.int8).reshape(-1)
        assert x.size == self.in_size, f"input has {x.size} values, the model takes {self.in_size}"
        y = np.empty(self.out_size, np.int8)
        status = self._invoke(x.ctypes.data, y.ctypes.data)
        if status != 0:
            raise RuntimeError(f"generated model returned status {status}")
        return y.reshape(self.out_shape)
