"""ONNX's own backend test cases, as tinyaot sees them: loading, selection, and turning a case into something
tinyaot can compile (or a written reason why it cannot).

Sources: the `node` cases (generated in memory by the installed onnx package; several generators draw unseeded
data from numpy's global generator, so it is seeded with 0 for the load and restored afterwards), and the
`pytorch-converted` and `pytorch-operator` cases (folders with model.onnx and test_data_set_*/input_*.pb,
output_*.pb). Only the first data set of a case is used (every case selected today has exactly one).

Selection: a case is selected when every node's op type is one tinyaot accepts, i.e.
`tinyaot.ops.registry.registered_ops()` minus the ops flagged `internal` (IR-only ops such as FullyConnected),
plus Constant (no op: the importer turns it into a constant tensor).
It is decided at collection time, so an op another helper registers later brings its cases in by itself.

Preparation of a selected case (what `prepare` does, each step semantics-preserving):
- the first graph input stays the model input; every other graph input (weights, bias, reshape shape, squeeze axes,
  clip bounds, a second addend, ...) becomes an initializer holding the case's own value for it: most of them are
  weights and shapes that tinyaot's kernels take as constants, and these values are what the case feeds;
- a model whose ai.onnx opset is below 7 is converted to opset 13 with ONNX's own `onnx.version_converter`
  (onnxruntime 1.2x dropped the kernels of those old opsets, e.g. BatchNormalization-6, AveragePool-1, Gemm-6, and
  tinyaot calibrates with onnxruntime), completed where the converter falls short (see `_upgrade`). The test then
  checks that onnxruntime on the prepared model reproduces ONNX's expected output, so a preparation that changed
  the meaning of a case fails instead of testing something else;
- a graph input with a symbolic dimension gets its static shape from the case's data (`input_shapes`).
Every graph output is kept and checked (a Split's parts, an LSTM's Y and Y_h). Cases that cannot be made into a
float32 model with float32 outputs are excluded with the reason why.
"""
from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import onnx
from onnx import numpy_helper

KINDS = ("node", "pytorch-converted", "pytorch-operator")
OLDEST_OPSET_ONNXRUNTIME_RUNS = 7
CONVERT_TO_OPSET = 13


@dataclass
class BackendCase:
    id: str  # "<kind>/<name>", the pytest parameter id
    kind: str
    name: str
    model: onnx.ModelProto
    inputs: list  # first data set: one value per graph input (non-initializer), in graph order
    outputs: list  # first data set: one value per graph output
    data_sets: int
    rtol: float
    atol: float


@dataclass
class Prepared:
    model: onnx.ModelProto  # single input, every output, the other inputs folded to initializers
    input_name: str
    x: np.ndarray  # float32, the model input
    expected: list[np.ndarray]  # float32, ONNX's expected value of each graph output, in graph order
    input_shapes: dict | None  # for compile_model, when the model input has symbolic dimensions


@dataclass
class Excluded:
    reason: str  # one of EXCLUSION_REASONS' values (grouped in the summary)
    detail: str = ""


# Exclusions that follow from the case itself (its types, outputs, data), not from a tinyaot limitation.
EXCLUSION_REASONS = {
    "training_bn": "training-mode BatchNormalization (batch statistics and running-mean/var outputs; tinyaot "
                   "compiles inference graphs)",
    "training_dropout": "training-mode Dropout with ratio > 0: the expected output is one random mask draw "
                        "(tinyaot must reject such a model: see test_training_mode_dropout_is_rejected)",
    "no_input": "no graph input (the model computes a constant)",
    "non_tensor": "sequence- or optional-typed input/output (tinyaot compiles tensors)",
    "input_dtype": "the model input is not float32 (integer/float64/float16/8-bit-float input; tinyaot takes "
                   "float32 model inputs)",
    "output_dtype": "the output is not float32 (integer, quantized, low-precision float or float64 output; the "
                    "int8 model's error against it is not defined)",
    "zero_size": "a zero-size tensor (a dimension of 0)",
    "non_finite": "the input or the expected output holds NaN or inf (int8 has no encoding for them)",
}


def supported_ops() -> set[str]:
    from tinyaot.ops.registry import get_op, registered_ops

    # Constant is no registered op: the importer turns it into a constant tensor.
    return {op for op in registered_ops() if not getattr(get_op(op), "internal", False)} | {"Constant"}


def _graph_inputs(model: onnx.ModelProto) -> list:
    init = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in init]


def _read_data_sets(model_dir: str) -> list[tuple[list, list]]:
    sets = []
    for d in sorted(glob.glob(os.path.join(model_dir, "test_data_set_*"))):
        def read(kind: str) -> list:
            files = glob.glob(os.path.join(d, f"{kind}_*.pb"))
            files.sort(key=lambda p: int(re.findall(r"\d+", os.path.basename(p))[0]))
            return [numpy_helper.to_array(onnx.load_tensor(f)) for f in files]
        sets.append((read("input"), read("output")))
    return sets


# Node-case modules of onnx.backend.test.case.node whose every case is a model of this one op: skipped while tinyaot
# does not accept the op (none of their cases could be selected), because generating their expected outputs with
# ONNX's reference pooling costs each xdist worker seconds at collection (lppool 2.8 s of the 10 s all node cases
# take, onnx 1.23). Every export function seeds numpy's generator itself, so skipping a module changes no other case.
SINGLE_OP_MODULES = {"lppool": "LpPool"}


# The expected outputs of the 3-D pooling node cases (AveragePool/MaxPool over 5-D tensors) are not computed: ONNX's
# reference pooling loops in Python over every window (4.2 s of the 8.2 s all node cases take to generate in each
# xdist worker, onnx 1.23), and tinyaot refuses 3-D pooling (TINYAOT_LIMITS), so these cases check that refusal,
# which needs the model and its input but never the output. Their outputs are zeros of the right shape (finite, so
# the case still runs); the test fails if one of them ever compiles (`pools_in_3d`): then this shortcut must go.
POOL_OPS_3D = ("AveragePool", "MaxPool")


def pools_in_3d(case) -> bool:
    """A case whose expected output was not generated: a pooling op of POOL_OPS_3D over a 5-D input."""
    return case.kind == "node" and any(n.op_type in POOL_OPS_3D for n in case.model.graph.node) and \
        any(np.ndim(v) == 5 for v in case.inputs)


def _pool_2d_only(real):
    def pool(padded, x_shape, kernel, strides, out_shape, *args, **kwargs):
        if len(x_shape) > 4:  # 3-D pooling: zeros instead (see POOL_OPS_3D)
            return np.zeros([x_shape[0], x_shape[1], *out_shape], dtype=padded.dtype)
        return real(padded, x_shape, kernel, strides, out_shape, *args, **kwargs)
    return pool


def _load_node_cases() -> list:
    """onnx.backend.test.loader.load_model_tests(kind="node"), without the SINGLE_OP_MODULES of ops tinyaot does not
    accept, and without the 3-D pooling cases' outputs (POOL_OPS_3D)."""
    import importlib
    import pkgutil

    import onnx.backend.test.case.node as node
    import onnx.reference.ops.op_pool_common as pool_common
    from onnx.backend.test.case.utils import import_recursive

    ops = supported_ops()
    real_pool = pool_common.pool
    pool_common.pool = _pool_2d_only(real_pool)  # the node modules import it by name when imported below
    try:
        for _, name, ispkg in pkgutil.iter_modules(node.__path__):
            if name in SINGLE_OP_MODULES and SINGLE_OP_MODULES[name] not in ops:
                continue
            if name == "ai_onnx_ml" and not onnx.ONNX_ML:  # as import_recursive skips it
                continue
            module = importlib.import_module(f"{node.__name__}.{name}")
            if ispkg:
                import_recursive(module)
    finally:
        pool_common.pool = real_pool
    return node._NodeTestCases


@lru_cache(maxsize=1)
def _raw_cases() -> tuple:
    """Every case of the three kinds, with its model and data (module-level cache: loaded once a session)."""
    state = np.random.get_state()
    np.random.seed(0)  # the node-case generators draw from the global generator
    try:
        import warnings

        from onnx.backend.test.loader import load_model_tests

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the generators' own overflow/divide warnings (cast, reduce_log...)
            loaded = {kind: _load_node_cases() if kind == "node" else load_model_tests(kind=kind) for kind in KINDS}
    finally:
        np.random.set_state(state)
    out = []
    for kind in KINDS:
        for c in loaded[kind]:
            if c.model is not None:
                model, sets = c.model, [(list(i), list(o)) for i, o in c.data_sets]
            else:
                model, sets = onnx.load(os.path.join(c.model_dir, "model.onnx")), _read_data_sets(c.model_dir)
            out.append((kind, c.name, model, sets, c.rtol, c.atol))
    return tuple(out)


def selected_cases() -> list[BackendCase]:
    """The cases whose every op is one tinyaot accepts (decided now, from the registry as it is)."""
    ops = supported_ops()
    cases = []
    for kind, name, model, sets, rtol, atol in _raw_cases():
        if not all(n.domain in ("", "ai.onnx") and n.op_type in ops for n in model.graph.node):
            continue
        if not sets:
            continue
        ins, outs = ([np.asarray(v) if isinstance(v, np.generic) else v for v in vs] for vs in sets[0])  # 0-d
        cases.append(BackendCase(f"{kind}/{name}", kind, name, model, ins, outs, len(sets), rtol, atol))
    return cases


def _ai_onnx_opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def _is_training_dropout(model: onnx.ModelProto, values: dict) -> bool:
    for n in model.graph.node:
        if n.op_type != "Dropout" or len(n.input) < 3 or not n.input[2]:
            continue
        training = values.get(n.input[2])
        ratio = values.get(n.input[1]) if len(n.input) > 1 and n.input[1] else np.float32(0.5)
        if training is None or bool(np.asarray(training)) and float(np.asarray(ratio)) > 0:
            return True
    return False


def is_training_dropout_case(case: BackendCase) -> bool:
    inputs = _graph_inputs(case.model)
    values = {vi.name: v for vi, v in zip(inputs, case.inputs)}
    values.update({i.name: numpy_helper.to_array(i) for i in case.model.graph.initializer})
    return _is_training_dropout(case.model, values)


def fold_extra_inputs(case: BackendCase) -> onnx.ModelProto:
    """The case's model with every graph input but the first turned into an initializer holding the case's value."""
    m = onnx.ModelProto()
    m.CopyFrom(case.model)
    inputs = _graph_inputs(case.model)
    for vi, value in zip(inputs[1:], case.inputs[1:]):
        if isinstance(value, onnx.TensorProto):  # float8/int4/int2 values come as tensors already
            tensor = onnx.TensorProto()
            tensor.CopyFrom(value)
            tensor.name = vi.name
        else:
            tensor = numpy_helper.from_array(np.asarray(value), vi.name)
        m.graph.initializer.append(tensor)
    if m.ir_version >= 4:  # IR < 4 requires every initializer to be listed as a graph input too
        folded = {vi.name for vi in inputs[1:]}
        kept = [vi for vi in m.graph.input if vi.name not in folded]
        del m.graph.input[:]
        m.graph.input.extend(kept)
    return m


def _upgrade(m: onnx.ModelProto, input_rank: int) -> onnx.ModelProto:
    """Opset < 7 -> CONVERT_TO_OPSET with onnx.version_converter, plus what the converter leaves out:
    - PRelu-6 applies a slope of shape [C] per channel (axis 1); PRelu-7+ broadcasts numpy-style from the last
      axis, so the slope initializer becomes [C, 1, ..., 1] (only the single-node PyTorch exports use it);
    - the IR version is raised to the one the new opset needs, and initializers are no longer listed as graph
      inputs (IR < 4 required that; tinyaot and onnxruntime read them as constants either way)."""
    from onnx import helper, version_converter

    m = version_converter.convert_version(m, CONVERT_TO_OPSET)
    inits = {i.name: i for i in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "PRelu" and n.input[1] in inits and input_rank > 2:
            slope = numpy_helper.to_array(inits[n.input[1]])
            if slope.ndim == 1 and slope.size > 1:
                inits[n.input[1]].CopyFrom(numpy_helper.from_array(
                    slope.reshape((-1,) + (1,) * (input_rank - 2)), n.input[1]))
    m.ir_version = max(m.ir_version, helper.find_min_ir_version_for(list(m.opset_import)))
    kept = [vi for vi in m.graph.input if vi.name not in inits]
    del m.graph.input[:]
    m.graph.input.extend(kept)
    return m


def prepare(case: BackendCase) -> Prepared | Excluded:
    model = case.model
    inputs = _graph_inputs(model)
    values = {vi.name: v for vi, v in zip(inputs, case.inputs)}
    for init in model.graph.initializer:
        values.setdefault(init.name, numpy_helper.to_array(init))

    for n in model.graph.node:
        if n.op_type == "BatchNormalization":
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
            if attrs.get("training_mode", 0) or len(n.output) > 1:
                return Excluded("training_bn")
    if _is_training_dropout(model, values):
        return Excluded("training_dropout")
    if not inputs:
        return Excluded("no_input")
    if not all(vi.type.HasField("tensor_type") for vi in list(inputs) + list(model.graph.output)):
        return Excluded("non_tensor")
    # Judged by the declared element types: float8/int4/int2 data come as TensorProto, not numpy arrays.
    in_type = inputs[0].type.tensor_type.elem_type
    if in_type != onnx.TensorProto.FLOAT:
        return Excluded("input_dtype", f"input {inputs[0].name!r} is {onnx.TensorProto.DataType.Name(in_type)}")
    for vi in model.graph.output:
        if vi.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
            return Excluded("output_dtype", f"output {vi.name!r} is "
                            f"{onnx.TensorProto.DataType.Name(vi.type.tensor_type.elem_type)}")
    x, expected = case.inputs[0], list(case.outputs)
    assert len(expected) == len(model.graph.output), (len(expected), len(model.graph.output))
    assert x.dtype == np.float32 and all(e.dtype == np.float32 for e in expected), (x.dtype, expected)
    if x.size == 0 or any(e.size == 0 for e in expected):
        return Excluded("zero_size", f"input {list(x.shape)}, outputs {[list(e.shape) for e in expected]}")
    if not (np.all(np.isfinite(x)) and all(np.all(np.isfinite(e)) for e in expected)):
        return Excluded("non_finite")

    m = fold_extra_inputs(case)
    if _ai_onnx_opset(m) < OLDEST_OPSET_ONNXRUNTIME_RUNS:
        m = _upgrade(m, x.ndim)
    dims = inputs[0].type.tensor_type.shape.dim
    symbolic = len(dims) != x.ndim or any(not d.HasField("dim_value") or d.dim_value <= 0 for d in dims)
    input_shapes = {inputs[0].name: tuple(int(d) for d in x.shape)} if symbolic else None
    return Prepared(m, inputs[0].name, x, expected, input_shapes)
