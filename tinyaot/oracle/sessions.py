"""onnxruntime sessions as tinyaot opens them: one thread each.

tinyaot runs onnxruntime on one sample at a time (batch-1 models, the calibration's per-sample passes, the oracle's
layer-by-layer checks), where onnxruntime's default pool of one thread per core only spin-waits beside the work:
`tinyaot compile examples/kws_dscnn.onnx` measured 1.65 s of CPU with the default pool and 0.75 s with one thread
on a 2-core machine, every figure the same, and a sweep's workers already use every core. The same options object
is the place for anything every tinyaot session needs.
"""
from __future__ import annotations

import onnxruntime as ort


def session_options() -> ort.SessionOptions:
    """New SessionOptions with one intra-op and one inter-op thread (callers add their own settings)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return opts


__all__ = ["session_options"]
