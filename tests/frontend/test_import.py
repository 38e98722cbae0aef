"""ONNX import: static shapes for every real model, `--input-shape` parsing, and errors that name what to fix."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tinyaot.errors import TinyaotError
from tinyaot.frontend import import_model, load_onnx
from tinyaot.options import parse_input_shapes

from shared_data import MODELS

SHARED = sorted(MODELS.glob("*.onnx"))


def make(path: Path, nodes, inputs, outputs, inits=(), opset: int = 13) -> Path:
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                              opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


# ---- parse_input_shapes ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("specs, want", [
    (None, {}),
    ([], {}),
    (["x:1,4"], {"x": (1, 4)}),
    (["x:7"], {"x": (7,)}),
    (["input_1:1,49,10,1"], {"input_1": (1, 49, 10, 1)}),
    (["input_1:0:1,30,1,40"], {"input_1:0": (1, 30, 1, 40)}),  # the name itself contains ':'
    (["a:1,2", "b:3,4,5"], {"a": (1, 2), "b": (3, 4, 5)}),
    (["x: 1, 4"], {"x": (1, 4)}),
])
def test_parse_input_shapes_good(specs, want):
    assert parse_input_shapes(specs) == want


@pytest.mark.parametrize("spec", ["x", "x:", ":1,4", "x:1,,4", "x:0,4", "x:-1,4", "x:a,b", "x:1.5", "x:1,4,",
                                  "1,4"])
def test_parse_input_shapes_bad(spec):
    with pytest.raises(TinyaotError) as e:
        parse_input_shapes([spec])
    msg = str(e.value)
    assert repr(spec) in msg and "NAME:D1,D2" in msg
    assert "\n" not in msg


# ---- the shared models -------------------------------------------------------------------------------------------

def test_shared_models_present():
    assert len(SHARED) >= 8, SHARED


@pytest.mark.parametrize("path", SHARED, ids=[p.stem for p in SHARED])
def test_import_shared_model_static(path):
    g = import_model(path).graph
    onnx_model = onnx.load(str(path))
    init = {i.name for i in onnx_model.graph.initializer}
    onnx_inputs = [i for i in onnx_model.graph.input if i.name not in init]
    assert g.inputs == [i.name for i in onnx_inputs]
    assert g.outputs == [o.name for o in onnx_model.graph.output]
    for i in onnx_inputs:
        assert list(g.tensors[i.name].shape) == [d.dim_value for d in i.type.tensor_type.shape.dim]
    assert g.nodes, "no nodes imported"
    for name, t in g.tensors.items():
        assert t.shape == tuple(int(d) for d in t.shape), name
        assert all(d >= 1 for d in t.shape), (name, t.shape)
        if t.is_const:
            assert t.data is not None and tuple(t.data.shape) == t.shape, name
    # Every node's tensors are known, with static shapes.
    for n in g.nodes:
        for x in [*n.inputs, *n.outputs]:
            assert x == "" or x in g.tensors, (n.name, x)
    assert len({n.name for n in g.nodes}) == len(g.nodes), "node names must be unique"
    assert g.meta["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [i["shape"] for i in g.meta["inputs"]] == [list(g.tensors[n].shape) for n in g.inputs]


def test_import_leaves_file_alone():
    path = MODELS / "kws_dscnn.onnx"
    before = path.read_bytes()
    import_model(path, {"input_1": (1, 49, 10, 1)})
    assert path.read_bytes() == before


# ---- unsupported operators ---------------------------------------------------------------------------------------

def test_unsupported_ops_grouped_per_op(tmp_path):
    path = make(tmp_path / "m.onnx",
                [helper.make_node("Cos", ["x"], ["a"], name="c1"),
                 helper.make_node("Relu", ["a"], ["b"], name="ok_relu"),
                 helper.make_node("Cos", ["b"], ["c"], name="c2"),
                 helper.make_node("Sin", ["c"], ["d"], name="s1"),
                 helper.make_node("Cos", ["d"], ["e"], name="c3"),
                 helper.make_node("Cos", ["e"], ["y"], name="c4")],
                [vi("x", [1, 4])], [vi("y", [1, 4])])
    with pytest.raises(TinyaotError) as e:
        import_model(path)
    msg = str(e.value)
    assert "\n" not in msg
    # One group per op type, in order of first appearance, plural when several, at most three names listed.
    assert "Cos (nodes 'c1', 'c2', 'c3', ...); Sin (node 's1')" in msg
    assert "c4" not in msg and "ok_relu" not in msg
    listed = msg.split("Supported:", 1)[1]
    for op in ("Conv", "MatMul", "Relu", "Add", "Softmax"):
        assert op in listed
    assert "Cos" not in listed and "Sin" not in listed


def test_unsupported_op_without_name_and_custom_domain(tmp_path):
    model = helper.make_model(
        helper.make_graph([helper.make_node("Erf", ["x"], ["a"]),
                           helper.make_node("Relu", ["a"], ["y"], name="r", domain="com.example")],
                          "g", [vi("x", [1, 4])], [vi("y", [1, 4])]),
        opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    with pytest.raises(TinyaotError) as e:
        import_model(path)
    msg = str(e.value)
    # An unnamed node is located by its index; a same-named op from another domain is not ONNX's Relu.
    assert "Erf (node '#0')" in msg
    assert "Relu (node 'r')" in msg


# ---- dynamic shapes ----------------------------------------------------------------------------------------------

def dynamic_model(path: Path, dims=("batch", 4)) -> Path:
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "W")
    return make(path, [helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], [vi("x", list(dims))],
                [vi("y", [dims[0], 3])], [w])


def test_dynamic_dim_names_the_fix(tmp_path):
    path = dynamic_model(tmp_path / "d.onnx")
    with pytest.raises(TinyaotError) as e:
        import_model(path)
    msg = str(e.value)
    assert "'x'" in msg and "axis [0]" in msg and "--input-shape x:N,4" in msg


def test_unknown_dim_without_param(tmp_path):
    path = dynamic_model(tmp_path / "d.onnx", (None, 4))
    with pytest.raises(TinyaotError, match="--input-shape"):
        import_model(path)


def test_input_shape_makes_it_static(tmp_path):
    path = dynamic_model(tmp_path / "d.onnx")
    g = import_model(path, parse_input_shapes(["x:2,4"])).graph
    assert g.tensors["x"].shape == (2, 4)
    assert g.tensors["y"].shape == (2, 3)
    assert g.meta["inputs"] == [{"name": "x", "shape": [2, 4], "dtype": "float32"}]


def test_input_shape_wrong_rank(tmp_path):
    path = dynamic_model(tmp_path / "d.onnx")
    with pytest.raises(TinyaotError, match="rank 2, got 3"):
        import_model(path, {"x": (1, 4, 1)})


def test_input_shape_unknown_name(tmp_path):
    path = dynamic_model(tmp_path / "d.onnx")
    with pytest.raises(TinyaotError) as e:
        import_model(path, {"X": (1, 4)})
    assert "['X']" in str(e.value) and "['x']" in str(e.value)


def test_input_shape_contradicting_the_model(tmp_path):
    # Overriding a fixed dimension with one the graph cannot take fails in shape inference, as one line.
    path = dynamic_model(tmp_path / "d.onnx", (1, 4))
    with pytest.raises(TinyaotError) as e:
        import_model(path, {"x": (1, 5)})
    assert "\n" not in str(e.value)


# ---- malformed files ---------------------------------------------------------------------------------------------

def test_load_onnx_errors(tmp_path):
    with pytest.raises(TinyaotError, match="not found"):
        load_onnx(tmp_path / "none.onnx")
    with pytest.raises(TinyaotError, match="directory"):
        load_onnx(tmp_path)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\xffnot protobuf at all" * 10)
    with pytest.raises(TinyaotError, match="not a valid ONNX model"):
        load_onnx(junk)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(TinyaotError, match="not a valid ONNX model"):
        load_onnx(empty)


def test_checker_failure_is_one_line(tmp_path):
    # A node reading a tensor nothing produces: ONNX's checker refuses it.
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["nowhere"], ["y"], name="r")], "g",
                                                [vi("x", [1, 4])], [vi("y", [1, 4])]),
                              opset_imports=[helper.make_opsetid("", 13)])
    path = tmp_path / "bad.onnx"
    onnx.save(model, str(path))
    with pytest.raises(TinyaotError) as e:
        import_model(path)
    assert "not a valid ONNX model" in str(e.value) and "\n" not in str(e.value)
