"""Models of several inputs and outputs, end to end (issue 21, item 1).

`tests/models/pt_halves_two_heads.onnx` (made by tests/models/make_models_multi_io.py; torch is not imported here)
takes an MNIST digit as two inputs, its top and bottom halves, and returns two outputs: `digit`, the 10-class
logits, and `odd`, a sigmoid head's probability that the digit is odd. It was trained on digits the fixture
`tests/fixtures/data/mnist01.npz` does not hold; the first 100 of the fixture's digits calibrate, the other 200
evaluate. It deploys on stm32 and every output is verified under QEMU; evaluate scores the first output, or the
one `--label-output` names; the header, the invoke call and report.json name every input and output.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper, numpy_helper

from tinyaot.api import compile_model, deploy, evaluate
from tinyaot.cli.main import app
from tinyaot.codegen.io import model_ports
from tinyaot.errors import TinyaotError
from tinyaot.oracle.reference import run_reference
from tinyaot.toolchain.hostjit import HostModel
from tinyaot.toolchain.sanitize import check_model

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "pt_halves_two_heads.onnx"
N_CAL = 100


def _halves(x: np.ndarray) -> dict[str, np.ndarray]:
    return {"top": x[:, :, :14, :], "bottom": x[:, :, 14:, :]}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("halves")
    with np.load(ROOT / "fixtures" / "data" / "mnist01.npz") as z:
        x, y = z["x"], z["y"]
    cal, data, odd = tmp / "cal.npz", tmp / "data.npz", tmp / "odd.npz"
    np.savez(cal, **_halves(x[:N_CAL]))
    np.savez(data, **_halves(x[N_CAL:]), y=y[N_CAL:])
    np.savez(odd, **_halves(x[N_CAL:]), y=y[N_CAL:] % 2)
    return {"cal": cal, "data": data, "odd": odd, "tmp": tmp}


def test_the_model_has_two_inputs_and_two_outputs():
    m = onnx.load(str(MODEL))
    assert [i.name for i in m.graph.input] == ["top", "bottom"]
    assert [o.name for o in m.graph.output] == ["digit", "odd"]
    assert {"Concat", "Sigmoid", "Gemm", "Conv", "BatchNormalization"} <= {n.op_type for n in m.graph.node}


def test_deploys_on_stm32_and_verifies_every_output(files):
    out = files["tmp"] / "stm32"
    report = deploy(MODEL, "stm32", files["cal"], out).report
    v = report["verify"]
    assert v["ran"] and v["outputs_match"] and v["max_abs_diff_vs_onnxruntime"] <= 1
    assert [o["name"] for o in v["outputs"]] == ["digit", "odd"]
    assert all(o["max_abs_diff_vs_reference"] == 0 for o in v["outputs"])
    q = report["quantization"]
    assert [(p["name"], p["parameter"], p["size"]) for p in q["inputs"]] == [("top", "in_top", 392),
                                                                            ("bottom", "in_bottom", 392)]
    assert [(p["name"], p["parameter"], p["size"]) for p in q["outputs"]] == [("digit", "out_digit", 10),
                                                                             ("odd", "out_odd", 1)]
    assert q["outputs"][1]["scale"] == 1 / 256 and q["outputs"][1]["zero_point"] == -128  # the sigmoid's fixed grid
    # every port in the arena, none overlapping another (the plan keeps each alive at its end of invoke)
    spans = sorted((p["arena_offset"], p["arena_offset"] + p["size"]) for p in q["inputs"] + q["outputs"]
                   if p in q["outputs"])
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    header = (out / "pt_halves_two_heads.h").read_text()
    assert ("tinyaot_status tinyaot_pt_halves_two_heads_invoke(const int8_t *in_top, const int8_t *in_bottom, "
            "int8_t *out_digit, int8_t *out_odd);") in header
    for macro in ("INPUT_COUNT 2", "OUTPUT_COUNT 2", "INPUT_TOP_SIZE 392", "INPUT_BOTTOM_SIZE 392",
                  "OUTPUT_DIGIT_SIZE 10", "OUTPUT_ODD_SIZE 1", "OUTPUT_ODD_SCALE 0.00390625f",
                  "OUTPUT_ODD_ZERO_POINT (-128)"):
        assert f"#define TINYAOT_PT_HALVES_TWO_HEADS_{macro}" in header
    # the unnamed single-port macros exist only for a model with one input (output)
    assert not re.search(r"_INPUT_SIZE\b|_OUTPUT_SIZE\b", header)
    md = (out / "report.md").read_text()
    assert "output `odd` (invoke's `out_odd`)" in md and "- output `digit`: max diff vs reference 0" in md


def test_evaluate_scores_the_first_output_or_the_named_one(files):
    r = evaluate(MODEL, files["cal"], files["data"])
    assert r["label_output"] == "digit" and r["host_c_matches_reference"]
    assert r["int8_top1"] >= r["float_top1"] - 0.02 and r["float_top1"] > 0.7  # 82.5 % float when made
    odd = evaluate(MODEL, files["cal"], files["odd"], label_output="odd", compare_onnxruntime=False)
    # one value per sample: a sigmoid head, class 1 above 0.5 (91 % float when made)
    assert odd["label_output"] == "odd" and odd["float_top1"] > 0.8
    assert abs(odd["int8_top1"] - odd["float_top1"]) <= 0.02
    with pytest.raises(TinyaotError, match=r"--label-output 'probs' is not an output of the model; its outputs "
                                           r"are 'digit', 'odd'"):
        evaluate(MODEL, files["cal"], files["data"], label_output="probs", compare_onnxruntime=False)


def test_host_c_and_sanitizers_see_every_input_and_output(files):
    c = compile_model(MODEL, files["cal"])
    host = HostModel(c.graph, c.plan.offsets, c.plan.arena_bytes, c.lower_bound)
    for k in range(3):
        q = c.quantize_inputs(c.feed(k))
        ref, got = run_reference(c.graph, q), host.run(q)
        assert set(got) == {"digit", "odd"}
        for name in got:
            assert np.array_equal(ref[name].reshape(got[name].shape), got[name])
    # probes on both inputs at once, plus two calibration samples, under ASan + UBSan
    assert check_model(c, files["tmp"] / "san", n_random=1, extra_inputs=[c.feed(0), c.feed(1)]) == 8


def test_data_files_name_every_input(files, tmp_path):
    x = np.load(files["data"])
    np.savez(tmp_path / "only_top.npz", top=x["top"], y=x["y"])
    with pytest.raises(TinyaotError, match=r"needs one array per model input \('top', 'bottom'\) and 'y'"):
        evaluate(MODEL, files["cal"], tmp_path / "only_top.npz")
    np.savez(tmp_path / "ragged.npz", top=x["top"][:5], bottom=x["bottom"][:4])
    with pytest.raises(TinyaotError, match=r"different sample counts \('top' 5, 'bottom' 4\)"):
        compile_model(MODEL, tmp_path / "ragged.npz")


def test_cli_label_output(files, capsys):
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["evaluate", str(MODEL), "-c", str(files["cal"]), "-d", str(files["odd"]),
                                      "--label-output", "odd", "--no-onnxruntime", "--limit", "40"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("40 samples: float ")


def _graph_with_io(tmp_path: Path, inputs: list[str], outputs: list[str]) -> Path:
    """x_k -> Relu for every input, and each output the sum of all of them (Add chain): names only matter."""
    nodes, acts = [], []
    for k, name in enumerate(inputs):
        nodes.append(helper.make_node("Relu", [name], [f"r{k}"]))
        acts.append(f"r{k}")
    total = acts[0]
    for k, a in enumerate(acts[1:]):
        nodes.append(helper.make_node("Add", [total, a], [f"s{k}"]))
        total = f"s{k}"
    for k, name in enumerate(outputs):
        nodes.append(helper.make_node("Mul", [total, f"c{k}"], [name]))
    inits = [numpy_helper.from_array(np.asarray(k + 1.0, np.float32), f"c{k}") for k in range(len(outputs))]
    g = helper.make_graph(nodes, "io", [helper.make_tensor_value_info(n, T.FLOAT, [1, 4]) for n in inputs],
                          [helper.make_tensor_value_info(n, T.FLOAT, [1, 4]) for n in outputs], inits)
    path = tmp_path / "io.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "cal.npz", **{n: rng.normal(size=(8, 1, 4)).astype(np.float32) for n in inputs})
    return path


def test_port_names_are_sanitised_and_unique(tmp_path):
    """Names that sanitise alike get _2, _3...; keywords and C-hostile characters never reach the C; a model
    returning one value under two names keeps both (each its own port)."""
    model = _graph_with_io(tmp_path, ["a.b", "a_b", "A-B", "int", "9lives"], ["out", "OUT", "status"])
    c = compile_model(model, tmp_path / "cal.npz")
    ins, outs = model_ports(c.graph)
    assert [p.c_name for p in ins] == ["a_b", "a_b_2", "A_B_3", "int", "t_9lives"]
    assert [p.param for p in ins] == ["in_a_b", "in_a_b_2", "in_A_B_3", "in_int", "in_t_9lives"]
    assert [p.macro for p in outs] == ["OUTPUT_OUT", "OUTPUT_OUT_2", "OUTPUT_STATUS"]
    host = HostModel(c.graph, c.plan.offsets, c.plan.arena_bytes, c.lower_bound)  # compiles with -Werror
    q = c.quantize_inputs(c.feed(0))
    ref = run_reference(c.graph, q)
    got = host.run(q)
    assert all(np.array_equal(ref[o].reshape(got[o].shape), got[o]) for o in c.graph.outputs)
