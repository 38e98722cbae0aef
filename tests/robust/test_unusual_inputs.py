"""Valid but unusual models: float16 weights and inputs, node names exporters leave empty or repeat, names the
compiler's own passes would generate, and the tensors tinyaot cannot compile (zero-size dimensions, element types
it has no representation for), which must be refused with an error naming the tensor, its type and its shape."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tinyaot.api import compile_model, deploy, evaluate
from tinyaot.errors import TinyaotError
from tinyaot.frontend import import_model
from tinyaot.frontend.normalize import float16_to_float32
from tinyaot.ir import IRError, verify
from tinyaot.passes import run_passes

ROOT = Path(__file__).resolve().parents[2]
KWS = ROOT / "examples" / "kws_dscnn.onnx"


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def model_of(nodes, inputs, outputs, inits=(), opset: int = 13) -> onnx.ModelProto:
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                             opset_imports=[helper.make_opsetid("", opset)])


def conv_model(dtype, casts: bool) -> onnx.ModelProto:
    """x [1, 3, 8, 8] -> Conv 3x3 (8 filters) -> Relu -> depthwise Conv 3x3 stride 2 -> Relu -> GlobalAveragePool ->
    Flatten -> Gemm -> y [1, 4]. Weights in `dtype`; with `casts`, float32 graph inputs and outputs with Casts to and
    from float16 around the float16 body (the layout float16 converters write with keep_io_types)."""
    rng = np.random.default_rng(3)
    np_t = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np_t), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np_t), "b1"),
             numpy_helper.from_array(rng.normal(0, 0.3, (8, 1, 3, 3)).astype(np_t), "w2"),
             numpy_helper.from_array(rng.normal(0, 0.1, 8).astype(np_t), "b2"),
             numpy_helper.from_array(rng.normal(0, 0.5, (4, 8)).astype(np_t), "w3"),
             numpy_helper.from_array(rng.normal(0, 0.1, 4).astype(np_t), "b3")]
    nodes = [helper.make_node("Conv", ["xh", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="dw", group=8, strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
             helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
             helper.make_node("Gemm", ["flat", "w3", "b3"], ["yh"], name="fc", transB=1)]
    io = TensorProto.FLOAT if casts else dtype
    if casts:
        nodes = ([helper.make_node("Cast", ["x"], ["xh"], name="to_half", to=dtype)] + nodes
                 + [helper.make_node("Cast", ["yh"], ["y"], name="to_float", to=TensorProto.FLOAT)])
    else:
        nodes[0].input[0] = "x"
        nodes[-1].output[0] = "y"
    return model_of(nodes, [helper.make_tensor_value_info("x", io, [1, 3, 8, 8])],
                    [helper.make_tensor_value_info("y", io, [1, 4])], inits)


@pytest.fixture(scope="module")
def conv_cal(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cal") / "cal.npz"
    np.savez(path, x=np.random.default_rng(4).uniform(-1, 1, (16, 1, 3, 8, 8)).astype(np.float32))
    return path


# ---- float16 --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("casts", [False, True], ids=["float16-io", "float32-io-with-casts"])
def test_float16_model_imports_as_the_float32_model(tmp_path, casts):
    half = import_model(save(conv_model(TensorProto.FLOAT16, casts), tmp_path / "half.onnx")).graph
    assert half.meta["converted_from_float16"] > 0
    assert half.meta["inputs"] == [{"name": "x", "shape": [1, 3, 8, 8], "dtype": "float32"}]
    assert {t.dtype for t in half.tensors.values()} == {"float32"}
    # The weights are the float16 values exactly, widened.
    w1 = numpy_helper.to_array(next(i for i in conv_model(TensorProto.FLOAT16, casts).graph.initializer
                                    if i.name == "w1"))
    assert half.tensors["w1"].data.dtype == np.float32
    assert np.array_equal(half.tensors["w1"].data, w1.astype(np.float32))
    # The Casts between float32 and (what was) float16 are Identities now, which the passes drop.
    assert "Cast" not in {n.op for n in half.nodes}
    assert ("Identity" in {n.op for n in half.nodes}) == casts
    graph = run_passes(half, echo=lambda _: None)
    assert [n.op for n in graph.nodes if n.op in ("Identity", "Cast")] == []


def test_float16_kws_matches_float32_kws(tmp_path):
    # The shipped model with every initializer rounded to float16 and float16 inputs and outputs, as a float16
    # exporter writes it: the import is the float32 import's graph with the float16-rounded weights.
    model = onnx.load(str(KWS))
    for init in model.graph.initializer:
        if init.data_type == TensorProto.FLOAT:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float16), init.name))
    for vi in list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info):
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = TensorProto.FLOAT16
    half = import_model(save(model, tmp_path / "kws_fp16.onnx")).graph
    full = import_model(KWS).graph
    assert [(n.op, n.name) for n in half.nodes] == [(n.op, n.name) for n in full.nodes]
    for name, t in full.tensors.items():
        h = half.tensors[name]
        assert (h.shape, h.dtype) == (t.shape, t.dtype), name
        if t.data is not None and t.dtype == "float32":
            assert np.array_equal(h.data, t.data.astype(np.float16).astype(np.float32)), name


def test_float16_model_deploys_and_verifies(tmp_path, conv_cal):
    model = save(conv_model(TensorProto.FLOAT16, casts=True), tmp_path / "half.onnx")
    result = deploy(model, "stm32", conv_cal, tmp_path / "out")
    v = json.loads((tmp_path / "out" / "report.json").read_text())["verify"]
    assert result.report["verify"] == v
    assert v["ran"] is True and v["exit_code"] == 0 and v["outputs_match"] is True
    assert v["max_abs_diff_vs_reference"] == 0 and v["max_abs_diff_vs_onnxruntime"] <= 1
    assert [r["op"] for r in result.report["layers"]].count("Conv") == 2


def test_float16_model_evaluates_against_its_float32_rewrite(tmp_path, conv_cal):
    # onnxruntime cannot feed float32 samples to float16 inputs: evaluate's float and onnxruntime-int8 baselines run
    # the float32 rewrite tinyaot compiled, so they agree with the same float32 model saved by hand.
    half = save(conv_model(TensorProto.FLOAT16, casts=False), tmp_path / "half.onnx")
    rewritten = onnx.load(str(half))
    float16_to_float32(rewritten)
    full = save(rewritten, tmp_path / "full.onnx")
    x = np.load(conv_cal)["x"][:8]
    data = tmp_path / "data.npz"
    np.savez(data, x=x, y=np.arange(8) % 4)
    r_half = evaluate(half, conv_cal, data)
    r_full = evaluate(full, conv_cal, data)
    for key in ("float_top1", "int8_top1", "onnxruntime_int8_top1", "agreement", "host_c_matches_reference"):
        assert r_half[key] == r_full[key], key
    assert r_half["host_c_matches_reference"] is True and r_half["onnxruntime_int8_top1"] is not None


def test_cast_of_a_shape_is_folded_and_a_constant_output_refused(tmp_path):
    # Only float -> float casts are dropped at import; an int64 -> float16 Cast of Shape(x) is a constant subgraph
    # that the importer evaluates (frontend/fold_constants.py, static shapes), leaving an output that no int8 layer
    # computes: a clear refusal at import.
    m = model_of([helper.make_node("Shape", ["x"], ["s"], name="shape"),
                  helper.make_node("Cast", ["s"], ["y"], name="cast_shape", to=TensorProto.FLOAT16)],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 4])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2])])
    with pytest.raises(TinyaotError, match=r"graph output 'y' does not depend on the input data .*\[1\.0, 4\.0\]"):
        import_model(save(m, tmp_path / "m.onnx"))


# ---- node names -------------------------------------------------------------------------------------------------

def relu_chain(names: list[str]) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", [f"t{k}" if k else "x"], [f"t{k + 1}" if k + 1 < len(names) else "y"],
                              name=name) for k, name in enumerate(names)]
    return model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])


def test_empty_and_repeated_node_names_are_made_unique(tmp_path):
    # Exporters leave names empty or repeat them; "Relu_1" is also both a real name and what an unnamed node at
    # index 1 would have been called.
    names = ["a", "", "a", "Relu_1", "a_1", ""]
    g = import_model(save(relu_chain(names), tmp_path / "m.onnx")).graph
    got = [n.name for n in g.nodes]
    assert len(set(got)) == len(got) and all(got)
    assert got[0] == "a" and got[3] == "Relu_1" and got[4] == "a_1"  # real, first-seen names are kept
    assert got[1] == "Relu_1_1" and got[2] == "a_2" and got[5] == "Relu_5"
    verify(g, "import")


def test_verify_catches_duplicate_and_empty_names(tmp_path):
    g = import_model(save(relu_chain(["p", "q", "r"]), tmp_path / "m.onnx")).graph
    g.nodes[2].name = "p"
    with pytest.raises(IRError, match=r"node name 'p' is used by more than one node"):
        verify(g, "some_pass")
    g.nodes[2].name = ""
    with pytest.raises(IRError, match=r"empty name"):
        verify(g)
    g.nodes[2].name = "r"
    g.tensors["t1"].name = "other"
    with pytest.raises(IRError, match=r"stored under 't1' is named 'other'"):
        verify(g)


def test_generated_names_never_collide_with_the_models(tmp_path, conv_cal):
    # The layout pass names the conversion it adds in front of 'conv1' "conv1_layout" and the NHWC twin of a 4-D
    # graph output "<output>_nhwc": this model already uses both names, for a node and for a tensor.
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(np.zeros(4, np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y_nhwc"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["y_nhwc"], ["y"], name="conv1_layout")]
    m = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    compiled = compile_model(save(m, tmp_path / "m.onnx"), conv_cal)
    g = compiled.graph
    by_name = {n.name: n for n in g.nodes}
    assert len(by_name) == len(g.nodes)
    # The model's own names keep their nodes and tensors; the generated ones stepped aside.
    assert by_name["conv1"].op == "Conv" and by_name["conv1"].outputs == ["y_nhwc"]
    assert by_name["conv1_layout"].op == "Sigmoid" and by_name["conv1_layout"].inputs == ["y_nhwc"]
    assert by_name["conv1_layout_1"].op == "Transpose" and by_name["conv1_layout_1"].outputs == ["x_nhwc"]
    assert by_name["conv1_layout"].outputs == ["y_nhwc_1"] and g.outputs == ["y"]
    assert g.producer("y").inputs == ["y_nhwc_1"]


# ---- what cannot be compiled, said precisely ------------------------------------------------------------------------

@pytest.mark.parametrize("elem, dtype_name", [(TensorProto.INT64, "INT64"), (TensorProto.BFLOAT16, "BFLOAT16"),
                                              (TensorProto.STRING, "STRING"), (TensorProto.COMPLEX64, "COMPLEX64")])
def test_unsupported_input_types_are_named(tmp_path, elem, dtype_name):
    m = model_of([helper.make_node("Identity", ["tokens"], ["y"], name="id")],
                 [helper.make_tensor_value_info("tokens", elem, [1, 7])],
                 [helper.make_tensor_value_info("y", elem, [1, 7])])
    with pytest.raises(TinyaotError) as err:
        import_model(save(m, tmp_path / "m.onnx"))
    msg = str(err.value)
    assert "'tokens'" in msg and dtype_name in msg and "[1, 7]" in msg and "\n" not in msg


@pytest.mark.parametrize("make, dtype_name", [
    (lambda: numpy_helper.from_array(np.array([[1 + 2j, 3, 4, 5]], np.complex64), "weird_const"), "COMPLEX64"),
    (lambda: helper.make_tensor("weird_const", TensorProto.STRING, [1, 4], [b"a", b"b", b"c", b"d"]), "STRING"),
    (lambda: helper.make_tensor("weird_const", TensorProto.BFLOAT16, [1, 4], [1.0, 2.0, 3.0, 4.0]), "BFLOAT16"),
], ids=["complex64", "string", "bfloat16"])
def test_unsupported_constant_types_are_named(tmp_path, make, dtype_name):
    init = make()
    m = model_of([helper.make_node("Add", ["x", "weird_const"], ["y"], name="add")],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [init])
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))  # the checker passes it (it does not infer types); shape inference would complain
    with pytest.raises(TinyaotError) as err:
        import_model(path)
    msg = str(err.value)
    assert "'weird_const'" in msg and dtype_name in msg and "[1, 4]" in msg and "\n" not in msg


def test_zero_size_input_is_refused_with_its_shape(tmp_path):
    m = relu_chain(["r"])
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 0
    m.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 0
    with pytest.raises(TinyaotError) as err:
        import_model(save(m, tmp_path / "m.onnx"))
    msg = str(err.value)
    assert "'x'" in msg and "[1, 0]" in msg and "zero-size" in msg and "axis [1]" in msg


def test_zero_size_intermediate_is_refused_with_its_name(tmp_path):
    # Pad with negative pads crops [1, 4] down to [1, 0]: valid ONNX, but an activation with no data.
    pads = numpy_helper.from_array(np.array([0, 0, 0, -4], np.int64), "pads")
    m = model_of([helper.make_node("Pad", ["x", "pads"], ["cropped"], name="crop"),
                  helper.make_node("Relu", ["cropped"], ["y"], name="relu")],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 0])], [pads])
    with pytest.raises(TinyaotError) as err:
        import_model(save(m, tmp_path / "m.onnx"))
    msg = str(err.value)
    assert "'cropped'" in msg and "[1, 0]" in msg and "zero-size" in msg
