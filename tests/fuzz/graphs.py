"""Random small float graphs for differential fuzzing (hypothesis strategies), and the check each one must pass.

A graph is drawn as a plain `spec` dict (what hypothesis shrinks and prints, so a failure reads as a minimal
graph), then built with onnx.helper: an NCHW input, a chain of layers (conv, depthwise conv, max / average /
global average pooling, activations, a residual add, a channel concat), optionally flattened into a fully
connected layer and a softmax. Weights, biases and the calibration data take ordinary and degenerate forms:
weight scales from 1e-4 to 5 with all-zero channels, constant calibration inputs (a zero-width range), tiny and
huge ranges, one-sided ones.

The extended draws (graph_specs' default; the suite keeps extended=False) add the shapes the kernel variants take:
1x1 convs, depthwise 3x3 at strides 1 and 2 with padding on any side, thin first convs on 1 or 3 channels, channel
counts on and just off multiples of 4 and 16, images of > 256 positions before a global average pool, weights that
are all +-scale (every one quantizes to +-127: the largest sums), and compressed weight storage.

`check_spec` compiles the graph with tinyaot.api.compile_model on its calibration data and requires, on the
calibration samples and on extreme inputs (all -128, all 127, alternating), the generated C built for the host
under ASan + UBSan (tinyaot/toolchain/sanitize.py) to equal the numpy reference bit for bit, and every layer to be
within 1 LSB of onnxruntime run on the same int8 input. `check_variants_host` compiles it again for Cortex-M3, -M4
and -M55 targets with every layer forced onto a non-generic kernel variant and holds the host C of those to the
reference too (ci/fuzz.py runs the same builds under QEMU).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

ACTIVATIONS = ("Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish")
WEIGHT_SCALES = (1e-4, 0.05, 0.5, 5.0)
BIAS_SCALES = (0.0, 0.1, 10.0)
DATA_KINDS = ("normal", "constant", "tiny", "huge", "positive", "negative")
# channel counts the kernel variants branch on: multiples of 4 (fold in place) and of 16 (Helium direct and full
# vectors), and counts just off them (tails: 5, 17, 20 = 16 + 4)
CHANNELS = (1, 2, 3, 4, 5, 6, 8, 12, 16, 17, 20)


# --------------------------------------------------------------------------------------------------------------
# Strategies: each layer is drawn knowing the current (C, H, W), and returns the shape it leaves.
# --------------------------------------------------------------------------------------------------------------
def _window(draw, size: int) -> dict:
    """Kernel, stride and pads along one axis of `size`, with at least one output position."""
    k = draw(st.integers(1, 3))
    pad0 = draw(st.integers(0, k - 1))  # ONNX pools want pads below the kernel; convs get the same
    pad1 = max(draw(st.integers(0, k - 1)), k - size - pad0)  # <= k - 1 since size >= 1
    return {"k": k, "s": draw(st.integers(1, 2)), "p": (pad0, pad1)}


def _window3(draw, size: int, s: int) -> dict:
    """A 3-tap window with stride s and pads 0..2 on each side (at least one output position)."""
    pad0 = draw(st.integers(0, 1))
    pad1 = max(draw(st.integers(0, 1)), 3 - size - pad0)  # <= 2 since size >= 1
    return {"k": 3, "s": s, "p": (pad0, pad1)}


def _out(size: int, win: dict) -> int:
    return (size + win["p"][0] + win["p"][1] - win["k"]) // win["s"] + 1


@st.composite
def _weights(draw, extended: bool = True) -> dict:
    w = {"scale": draw(st.sampled_from(WEIGHT_SCALES)), "bias": draw(st.sampled_from(BIAS_SCALES)),
         "zero_channel": draw(st.booleans())}
    if extended and draw(st.integers(0, 3)) == 0:
        w["signs"] = True  # every weight +-scale: all quantize to +-127, the largest accumulators the bounds allow
    return w


@st.composite
def _layer(draw, c: int, h: int, w: int, extended: bool = True):
    kinds = ["conv", "depthwise", "maxpool", "avgpool", "act", "add", "concat"]
    kinds += (["conv1x1", "dw3x3"] if extended else []) + (["gap"] if h * w > 1 else [])
    op = draw(st.sampled_from(kinds))
    if op == "conv1x1":  # the fold / mve_1x1 kernels' shape: a 1x1 stride-1 convolution, channel counts as above
        layer = {"op": "conv", "out": draw(st.sampled_from(CHANNELS)), "wh": _ONE, "ww": _ONE,
                 "weights": draw(_weights()), "act": draw(st.sampled_from((None, "Relu", "Clip")))}
        return layer, (layer["out"], h, w)
    if op == "dw3x3":  # the dw3x3 / dw3x3_fold / mve_dw kernels' shape: depthwise 3x3, one stride, any padding
        s = draw(st.integers(1, 2))
        wh, ww = _window3(draw, h, s), _window3(draw, w, s)
        layer = {"op": "depthwise", "out": c, "wh": wh, "ww": ww, "weights": draw(_weights()),
                 "act": draw(st.sampled_from((None, "Relu", "Clip")))}
        return layer, (c, _out(h, wh), _out(w, ww))
    if op in ("conv", "depthwise"):
        wh, ww = _window(draw, h), _window(draw, w)
        out = c if op == "depthwise" else draw(st.one_of(st.integers(1, 6), st.sampled_from(CHANNELS))
                                               if extended else st.integers(1, 6))
        layer = {"op": op, "out": out, "wh": wh, "ww": ww, "weights": draw(_weights(extended)),
                 "act": draw(st.sampled_from((None,) + ACTIVATIONS))}
        return layer, (out, _out(h, wh), _out(w, ww))
    if op in ("maxpool", "avgpool"):
        wh, ww = _window(draw, h), _window(draw, w)
        # ONNX: pads smaller than the kernel (so every window sees an input)
        layer = {"op": op, "wh": wh, "ww": ww, "count_include_pad": draw(st.booleans())}
        return layer, (c, _out(h, wh), _out(w, ww))
    if op == "gap":
        return {"op": "gap"}, (c, 1, 1)
    if op == "act":
        return {"op": "act", "act": draw(st.sampled_from(ACTIVATIONS))}, (c, h, w)
    if op == "add":  # x + relu?(conv1x1(x)): a residual join of two differently quantized tensors
        layer = {"op": "add", "weights": draw(_weights(extended)), "act": draw(st.sampled_from((None, "Relu")))}
        return layer, (c, h, w)
    out = draw(st.integers(1, 4))  # concat(x, conv1x1(x)) along channels
    return {"op": "concat", "out": out, "weights": draw(_weights(extended))}, (c + out, h, w)


@st.composite
def graph_specs(draw, max_layers: int = 4, extended: bool = True) -> dict:
    """extended=False: the draws before the kernel variants (small shapes, no variant-shaped layers, no sign
    weights, no compression), which the suite's fixed budget keeps; ci/fuzz.py draws the extended graphs."""
    shape = draw(st.sampled_from(("small", "small", "small", "thin", "wide", "big"))) if extended else "small"
    if shape == "small":
        c, h, w = draw(st.integers(1, 5)), draw(st.integers(1, 8)), draw(st.integers(1, 8))
    elif shape == "thin":  # a first convolution on 1 or 3 input channels (audio / RGB): the thin fold path
        c, h, w = draw(st.sampled_from((1, 3))), draw(st.integers(3, 10)), draw(st.integers(3, 8))
    elif shape == "wide":  # channel counts the variants branch on, on a small image
        c, h, w = draw(st.sampled_from(CHANNELS)), draw(st.integers(1, 7)), draw(st.integers(1, 7))
    else:  # more than 256 positions: a global average pool of > 256 taps (the requantizing pools' long sums)
        c, h, w = draw(st.integers(1, 3)), draw(st.integers(16, 18)), draw(st.integers(16, 18))
    spec = {"input": (c, h, w), "layers": []}
    if shape == "thin":
        wh, ww = _window(draw, h), _window(draw, w)
        first = {"op": "conv", "out": draw(st.sampled_from(CHANNELS)), "wh": wh, "ww": ww,
                 "weights": draw(_weights()), "act": draw(st.sampled_from((None, "Relu")))}
        spec["layers"].append(first)
        c, h, w = first["out"], _out(h, wh), _out(w, ww)
    elif shape == "big" and draw(st.booleans()):
        spec["layers"].append({"op": "gap"})
        h = w = 1
    for _ in range(draw(st.integers(1, max_layers))):
        layer, (c, h, w) = draw(_layer(c, h, w, extended))
        spec["layers"].append(layer)
    if draw(st.booleans()):
        out = draw(st.one_of(st.integers(1, 5), st.integers(6, 8)) if extended else st.integers(1, 8))
        spec["head"] = {"out": out, "weights": draw(_weights(extended)), "softmax": draw(st.booleans())}
    spec["data"] = {"kind": draw(st.sampled_from(DATA_KINDS)), "samples": draw(st.integers(1, 6)),
                    "offset": draw(st.sampled_from((0.0, 0.5, -3.0)))}
    spec["seed"] = draw(st.integers(0, 2 ** 16))
    compress = draw(st.sampled_from((None, None, None, "clusters16", "int4", "prune0.5", "prune0.5_block",
                                       "prune0.5_block2x1", "clusters32"))) \
        if extended else None
    if compress:  # compressed weight storage: the compressed kernels (their depthwise 3x3 path too), the block
        # kernels, and the dense variants on decoded int4 / clustered weights
        spec["compress"] = compress
    return spec


# clusters16 keeps codebooks in fully connected layers too (cluster_fc "codebook"): the default grid there runs the
# int4 kernels, which "int4" fuzzes already
COMPRESSION = {"clusters16": {"clusters": 16, "cluster_fc": "codebook"}, "int4": {"weight_bits": 4},
               "prune0.5": {"prune": 0.5},
               "prune0.5_block": {"prune": 0.5, "prune_pattern": "block"},
               "prune0.5_block2x1": {"prune": 0.5, "prune_pattern": "block2x1"},
               # the 5-bit grid (int5) of the fully connected layers at batch 1; codebooks of 32 elsewhere
               "clusters32": {"clusters": 32}}


def compression(spec: dict):
    """compile_model's `compression` argument for the spec (None: dense int8)."""
    return COMPRESSION[spec["compress"]] if spec.get("compress") else None


# --------------------------------------------------------------------------------------------------------------
# Building the ONNX model and its calibration data
# --------------------------------------------------------------------------------------------------------------
class _Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.k = 0

    def name(self, stem: str) -> str:
        self.k += 1
        return f"{stem}{self.k}"

    def const(self, value, stem: str) -> str:
        name = self.name(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def weights(self, shape, wspec: dict) -> tuple[str, str]:
        w = self.rng.standard_normal(shape) * wspec["scale"]
        if wspec.get("signs"):
            w = np.where(w < 0, -wspec["scale"], wspec["scale"])
        if wspec["zero_channel"] and shape[0] > 1:
            w[self.rng.integers(shape[0])] = 0.0  # a dead channel: its bias alone decides its output
        b = self.rng.standard_normal(shape[0]) * wspec["bias"]
        return self.const(w, "w"), self.const(b, "b")

    def node(self, op: str, inputs, **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=out, **attrs))
        return out

    def act(self, x: str, act: str | None) -> str:
        if act is None:
            return x
        if act == "Clip":
            return self.node("Clip", [x, self.const(-1.0, "lo"), self.const(2.0, "hi")])
        if act == "LeakyRelu":
            return self.node("LeakyRelu", [x], alpha=0.1)
        if act == "HardSigmoid":
            return self.node("HardSigmoid", [x], alpha=0.25, beta=0.4)
        return self.node(act, [x])

    def conv(self, x: str, c_in: int, c_out: int, wh: dict, ww: dict, wspec: dict, group: int = 1) -> str:
        w, b = self.weights((c_out, c_in // group, wh["k"], ww["k"]), wspec)
        return self.node("Conv", [x, w, b], kernel_shape=[wh["k"], ww["k"]], strides=[wh["s"], ww["s"]],
                         pads=[wh["p"][0], ww["p"][0], wh["p"][1], ww["p"][1]], group=group)


_ONE = {"k": 1, "s": 1, "p": (0, 0)}


def build_model(spec: dict, path: Path) -> Path:
    b = _Builder(spec["seed"])
    c, h, w = spec["input"]
    x = "x"
    for layer in spec["layers"]:
        op = layer["op"]
        if op in ("conv", "depthwise"):
            group = c if op == "depthwise" else 1
            x = b.act(b.conv(x, c, layer["out"], layer["wh"], layer["ww"], layer["weights"], group), layer["act"])
            c = layer["out"]
        elif op in ("maxpool", "avgpool"):
            wh, ww = layer["wh"], layer["ww"]
            attrs = dict(kernel_shape=[wh["k"], ww["k"]], strides=[wh["s"], ww["s"]],
                         pads=[wh["p"][0], ww["p"][0], wh["p"][1], ww["p"][1]])
            if op == "avgpool":
                attrs["count_include_pad"] = int(layer["count_include_pad"])
            x = b.node("MaxPool" if op == "maxpool" else "AveragePool", [x], **attrs)
        elif op == "gap":
            x = b.node("GlobalAveragePool", [x])
        elif op == "act":
            x = b.act(x, layer["act"])
        elif op == "add":
            branch = b.act(b.conv(x, c, c, _ONE, _ONE, layer["weights"]), layer["act"])
            x = b.node("Add", [x, branch])
        else:  # concat
            branch = b.conv(x, c, layer["out"], _ONE, _ONE, layer["weights"])
            x = b.node("Concat", [x, branch], axis=1)
            c += layer["out"]
    y_shape = None
    head = spec.get("head")
    if head is not None:
        flat = b.node("Flatten", [x], axis=1)
        size = int(np.prod(_shape_after(spec)))
        wt, bias = b.weights((head["out"], size), head["weights"])
        x = b.node("Gemm", [flat, wt, bias], transB=1)
        if head["softmax"]:
            x = b.node("Softmax", [x], axis=1)
        y_shape = [1, head["out"]]
    b.nodes[-1].output[0] = "y"  # the last node writes the graph output
    if y_shape is None:
        y_shape = [1, *_shape_after(spec)]
    graph = helper.make_graph(b.nodes, path.stem,
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, *spec["input"]])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])  # HardSwish: opset 14
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


def _shape_after(spec: dict) -> tuple[int, int, int]:
    c, h, w = spec["input"]
    for layer in spec["layers"]:
        op = layer["op"]
        if op in ("conv", "depthwise", "maxpool", "avgpool"):
            h, w = _out(h, layer["wh"]), _out(w, layer["ww"])
            c = layer.get("out", c)
        elif op == "gap":
            h = w = 1
        elif op == "concat":
            c += layer["out"]
    return c, h, w


def calibration_data(spec: dict) -> np.ndarray:
    d = spec["data"]
    rng = np.random.default_rng(spec["seed"] + 1)
    shape = (d["samples"], 1, *spec["input"])
    if d["kind"] == "constant":
        x = np.full(shape, 0.75)
    elif d["kind"] == "tiny":
        x = rng.standard_normal(shape) * 1e-5
    elif d["kind"] == "huge":
        x = rng.standard_normal(shape) * 1e3
    elif d["kind"] == "positive":
        x = rng.uniform(0.0, 2.0, shape)
    elif d["kind"] == "negative":
        x = -rng.uniform(0.0, 2.0, shape)
    else:
        x = rng.standard_normal(shape)
    return (x + d["offset"]).astype(np.float32)


# --------------------------------------------------------------------------------------------------------------
# The check
# --------------------------------------------------------------------------------------------------------------
def check_spec(spec: dict, work: Path) -> dict:
    """Compile the spec's graph and hold it to the numerics contract (see the module docstring). Returns figures
    for the caller's statistics; raises AssertionError (or SanitizerError) on a violation. TinyaotError from
    compile_model propagates: the caller decides which refusals are legitimate."""
    from tinyaot.api import compile_model
    from tinyaot.toolchain.sanitize import build_sanitized, probe_inputs
    from tinyaot.oracle.onnxruntime_layers import check_layers
    from tinyaot.oracle.reference import run_reference

    work.mkdir(parents=True, exist_ok=True)
    model = build_model(spec, work / "graph.onnx")
    cal = work / "cal.npz"
    np.savez(cal, x=calibration_data(spec))
    compiled = compile_model(model, cal, compression=compression(spec))
    g = compiled.graph
    q = [compiled.quantize_input(x) for x in compiled.samples[compiled.input]]
    q += list(probe_inputs(g.tensors[compiled.input].shape, 1, seed=spec["seed"]))
    refs = [run_reference(g, {compiled.input: x}) for x in q]
    host = build_sanitized(g, compiled.plan.offsets, compiled.plan.arena_bytes, compiled.lower_bound, work / "c")
    got = host.run(np.stack(q))
    for k, r in enumerate(refs):
        want = r[compiled.output].reshape(got[k].shape)
        assert np.array_equal(got[k], want), (
            f"host C != numpy reference on input {k}: max diff "
            f"{int(np.abs(got[k].astype(np.int32) - want.astype(np.int32)).max())}")
    layers = check_layers(g, refs)
    worst = max(layers, key=lambda c: c.max_abs_diff, default=None)
    bad = [c for c in layers if c.max_abs_diff > min(1, c.tolerance)]
    assert not bad, "layers beyond 1 LSB of onnxruntime: " + ", ".join(
        f"{c.node} ({c.op}) {c.max_abs_diff} LSB on {c.differing}/{c.elements}" for c in bad)
    return {"layers": len(layers), "inputs": len(q), "ops": sorted({n.op for n in g.nodes}),
            "worst_lsb": worst.max_abs_diff if worst else 0}


# --------------------------------------------------------------------------------------------------------------
# The kernel variants (issue 10): the same graph compiled for the cores whose variants differ
# --------------------------------------------------------------------------------------------------------------
# board -> the variants its target offers: M3 (no DSP: fold / dw3x3_fold / fast add in plain C), M4 (DSP paths,
# which run only on the target; their C twins on the host) and M55 (Helium, plain-C fallbacks on the host)
VARIANT_BOARDS = ("mps2-an385", "mps2-an386", "mps3-an547")


def forced_choices(graph, target, seed: int) -> dict[str, str]:
    """{node: variant}: every layer that lists a variant besides "generic" takes one of those, so a graph reaches
    the variant kernels whatever the cost model would pick; the others keep "generic". The pick rotates with the
    layer's position and `seed` (seeds s and s + 1 give a layer with two candidates both), so successive layers
    with the same list take different variants."""
    from tinyaot.pipeline.variants import candidates

    choices = {}
    for i, node in enumerate(graph.nodes):
        names = [v.name for v in candidates(node, graph, target) if v.name != "generic"]
        choices[node.name] = names[(seed + i) % len(names)] if names else "generic"
    return choices


def compile_variants(spec: dict, work: Path, board_name: str):
    """The spec's graph compiled for the board's target with every layer on a non-generic variant where one is
    listed (forced_choices). Returns (compiled, {node: variant})."""
    from tinyaot.api import compile_model
    from tinyaot.boards import load_board
    from tinyaot.pipeline.compile import with_variants

    work.mkdir(parents=True, exist_ok=True)
    model = work / "graph.onnx"
    if not model.exists():
        build_model(spec, model)
    cal = work / "cal.npz"
    if not cal.exists():
        np.savez(cal, x=calibration_data(spec))
    target = load_board(board_name).target()
    compiled = compile_model(model, cal, target=target, compression=compression(spec))
    compiled = with_variants(compiled, target, forced_choices(compiled.graph, target, spec["seed"]))
    return compiled, {n.name: n.attrs.get("variant", "generic") for n in compiled.graph.nodes}


def variant_inputs(compiled, spec: dict, n_random: int = 1) -> np.ndarray:
    """The calibration samples plus the extremes (all -128, all 127, alternating) and n_random random ones."""
    from tinyaot.toolchain.sanitize import probe_inputs

    q = [compiled.quantize_input(x) for x in compiled.samples[compiled.input]]
    q += list(probe_inputs(compiled.graph.tensors[compiled.input].shape, n_random, seed=spec["seed"]))
    return np.stack(q)


def check_variants_host(spec: dict, work: Path, boards=VARIANT_BOARDS) -> dict:
    """For each board: the graph compiled with forced variants (compile_variants), its C (the variants' portable
    paths) built for the host under ASan + UBSan, == the numpy reference on variant_inputs, and that reference ==
    the generic graph's (a variant must not change the numerics). Returns {board: (compiled, variants used)}."""
    from tinyaot.toolchain.sanitize import build_sanitized
    from tinyaot.oracle.reference import run_reference

    out = {}
    generic_refs = None
    for board in boards:
        compiled, used = compile_variants(spec, work, board)
        g = compiled.graph
        q = variant_inputs(compiled, spec)
        refs = np.stack([run_reference(g, {compiled.input: x})[compiled.output].reshape(-1) for x in q])
        if generic_refs is None:
            from tinyaot.api import compile_model
            base = compile_model(work / "graph.onnx", work / "cal.npz", compression=compression(spec))
            generic_refs = np.stack([run_reference(base.graph, {base.input: x})[base.output].reshape(-1)
                                     for x in q])
        assert np.array_equal(refs, generic_refs), f"{board}: the variants' graph changed the reference"
        host = build_sanitized(g, compiled.plan.offsets, compiled.plan.arena_bytes, compiled.lower_bound,
                               work / f"c_{board}")
        got = host.run(q).reshape(len(q), -1)
        for k in range(len(q)):
            assert np.array_equal(got[k], refs[k]), (
                f"{board} host C (variants {sorted(set(used.values()) - {'generic'})}) != numpy reference on "
                f"input {k}: max diff {int(np.abs(got[k].astype(np.int32) - refs[k].astype(np.int32)).max())}")
        out[board] = (compiled, used)
    return out
