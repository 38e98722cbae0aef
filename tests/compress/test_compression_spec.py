"""Per-layer compression settings: the options object, spec files (TOML; YAML only with PyYAML), precedence, the
checked example examples/compression.toml on the model it is written for, the CLI flags and the reports."""
from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from tinyaot.api import compile_model, evaluate
from tinyaot.cli.main import app
from tinyaot.compress.options import CompressionOptions, LayerRule, options_from_flags
from tinyaot.compress.prune import layer_kind, layer_nodes
from tinyaot.errors import TinyaotError

from compress_models import calibration, conv_relu_conv_gap_gemm
from shared_data import DATA, ROOT

EXAMPLE = ROOT / "examples" / "compression.toml"
KWS = ROOT / "examples" / "kws_dscnn.onnx"
KWS_CAL = ROOT / "calibration_data" / "kws_dscnn.npz"


def test_defaults_rules_and_precedence():
    o = CompressionOptions(prune=0.5, clusters=16, prune_exclude=("skip*",), rules=(
        LayerRule(pattern="conv*", sparsity=0.3),
        LayerRule(pattern="conv2", clusters=0, weight_bits=4),
        LayerRule(pattern="*", op="fully_connected", exclude=True),
        LayerRule(pattern="conv2", sparsity=0.1),  # a later entry overrides an earlier one for the keys it sets
    ))
    assert o.for_layer("other", "conv").sparsity == 0.5 and o.for_layer("other", "conv").shared_threshold
    c1 = o.for_layer("conv1", "conv")
    assert (c1.sparsity, c1.shared_threshold, c1.clusters, c1.weight_bits) == (0.3, False, 16, 8)
    c2 = o.for_layer("conv2", "conv")
    assert (c2.sparsity, c2.clusters, c2.weight_bits) == (0.1, None, 4)
    assert o.for_layer("fc", "fully_connected").excluded
    assert o.for_layer("fc", "fully_connected").clusters is None
    assert o.for_layer("skip_me", "conv").sparsity == 0.0 and o.for_layer("skip_me", "conv").clusters == 16
    assert o.unmatched([("conv1", "conv"), ("fc", "fully_connected")]) == ["skip*", "conv2", "conv2"]
    assert not CompressionOptions().active and CompressionOptions(weight_bits=4).active


@pytest.mark.parametrize("kwargs,message", [
    (dict(prune=1.0), "--prune must be in"), (dict(prune=-0.1), "--prune must be in"),
    (dict(clusters=1), "from 2 to 256"), (dict(clusters=300), "from 2 to 256"),
    (dict(weight_bits=2), "8 or 4"), (dict(prune_scope="model"), "'global' or 'layer'"),
    (dict(prune_channels=1.5), "--prune-channels"), (dict(cluster_fc="lut"), "cluster_fc must be 'grid'"),
    (dict(rules=({"pattern": "x", "sparsity": 2},)), "sparsity must be in"),
    (dict(rules=({"pattern": "x", "op": "matmul"},)), "op must be one of"),
    (dict(rules=({"pattern": "x", "bits": 4},)), "unknown key"),
    (dict(rules=({"sparsity": 0.5},)), "no 'pattern'"),
])
def test_invalid_options(kwargs, message):
    with pytest.raises(TinyaotError, match=message):
        CompressionOptions(**kwargs)


def test_spec_file_and_flag_overrides(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text('prune = 0.4\nclusters = 8\nprune_exclude = ["a*"]\ncluster_fc = "codebook"\n'
                    '[[layer]]\npattern = "b"\nexclude = true\n')
    o = CompressionOptions.from_spec(spec)
    assert (o.prune, o.clusters, o.prune_exclude, o.rules[0].exclude) == (0.4, 8, ("a*",), True)
    assert o.cluster_fc == "codebook" and CompressionOptions().cluster_fc == "grid"
    o2 = options_from_flags(spec, prune=0.6, clusters=None, prune_exclude=("c*",))  # None: flag not given
    assert (o2.prune, o2.clusters, o2.prune_exclude) == (0.6, 8, ("a*", "c*"))
    assert options_from_flags(None, prune=None, clusters=None, prune_exclude=()) is None
    assert CompressionOptions.coerce({"clusters": 4}).clusters == 4
    assert CompressionOptions.coerce(str(spec)).prune == 0.4


@pytest.mark.parametrize("text,message", [("prune = [1\n", "not valid TOML"), ("clusterz = 4\n", "unknown key"),
                                          ("layer = 3\n", "must be a list")])
def test_bad_spec_files(tmp_path, text, message):
    spec = tmp_path / "s.toml"
    spec.write_text(text)
    with pytest.raises(TinyaotError, match=message):
        CompressionOptions.from_spec(spec)
    with pytest.raises(TinyaotError, match="not found"):
        CompressionOptions.from_spec(tmp_path / "missing.toml")
    (tmp_path / "s.json").write_text("{}")
    with pytest.raises(TinyaotError, match=r"must be \.toml"):
        CompressionOptions.from_spec(tmp_path / "s.json")


def test_yaml_spec(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("clusters: 16\nlayer:\n  - pattern: '*dense*'\n    exclude: true\n")
    if importlib.util.find_spec("yaml") is None:
        with pytest.raises(TinyaotError, match="PyYAML.*TOML"):
            CompressionOptions.from_spec(spec)
    else:
        o = CompressionOptions.from_spec(spec)
        assert o.clusters == 16 and o.rules[0].exclude is True


@pytest.fixture(scope="module")
def kws_cal16(tmp_path_factory):
    """The first 16 samples of kws's shipped calibration file: what these tests check (which storage each layer
    gets, that evaluate takes the flags) follows from the settings, and clustering's reconstruction costs time in
    proportion to the samples (16 s for the example spec with all 100)."""
    path = tmp_path_factory.mktemp("kws_cal16") / "kws_dscnn_first16.npz"
    with np.load(KWS_CAL) as z:
        np.savez(path, **{k: z[k][:16] for k in z.files})
    return path


def test_example_spec_on_kws(kws_cal16):
    """examples/compression.toml on the model it is written for: every entry takes effect."""
    spec = CompressionOptions.from_spec(EXAMPLE)
    c = compile_model(KWS, kws_cal16, compression=EXAMPLE)
    plain = compile_model(KWS, kws_cal16)
    g, layers = c.graph, c.graph.meta["compression"]["layers"]
    masks = c.graph.meta["compression"]["pruned_masks"]
    assert c.graph.meta["compression"]["unmatched_patterns"] == []
    plain_w = {n.name: plain.graph.tensors[n.inputs[1]].data for n in layer_nodes(plain.graph)}
    for n in layer_nodes(g):
        w, info, kind = g.tensors[n.inputs[1]], layers[n.name], layer_kind(n)
        if n.name.endswith("/dense/MatMul"):  # excluded: plain int8, identical to the uncompressed model
            assert info["storage"] == "dense" and np.array_equal(w.data, plain_w[n.name])
        elif n.name.endswith("/conv2d/BiasAdd"):  # 4-bit instead of clustered
            assert info["storage"] == "int4" and info["weight_bits"] == 4 and info["clusters"] is None
        elif kind == "depthwise":  # clustered, not pruned
            assert info["storage"] == "clustered" and n.name not in masks
        else:  # pointwise: pruned by the global 20 % and clustered, the pruned zeros kept exactly
            assert info["storage"] == "clustered" and masks[n.name].any()
            assert np.all(w.data[masks[n.name]] == 0) and 0 in w.storage.arrays["codebooks"]
    assert spec.for_layer("Conv__95", "depthwise").sparsity == 0.0
    r = c.graph.meta["compression"]
    assert r["options"].spec == str(EXAMPLE)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("spec")
    return conv_relu_conv_gap_gemm(d / "m.onnx", c1=16, c2=16, k2=3), calibration(d / "cal.npz")


def test_cli_deploy_reports_compression(small, tmp_path):
    path, cal = small
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["deploy", str(path), "-c", str(cal), "--out", str(out), "--clusters", "16",
                                   "--prune", "0.3", "--prune-exclude", "dense"])
    assert res.exit_code == 0, res.output
    assert "compression: weights" in res.output
    r = json.loads((out / "report.json").read_text())
    c, m = r["compression"], r["memory"]
    # 30 % of the two convs' 2736 weights are zero; the excluded dense layer's 64 are not pruned
    assert c["clusters"] == 16 and 0.3 * 2736 / 2800 <= c["sparsity"] < 1 and c["weight_bits"] < 8
    assert c["options"]["prune_exclude"] == ["dense"]
    rows = {l["name"]: l for l in r["layers"]}
    # --prune-exclude stops pruning only: the dense layer is still clustered, on the 16-level grid a layer that uses
    # each weight once gets (cluster_fc "grid"): stored as int4, its 64 weights in 32 bytes
    assert rows["dense"]["storage"] == "int4" and rows["dense"]["weights_bytes"] == 64 // 2
    assert rows["dense"]["clusters"] == {"form": "grid", "k": 16, "levels": 15, "bits": 4}
    assert c["grid_layers"] == ["dense"] and "1 single-use layer on a grid (int4)" in res.output
    assert rows["conv2"]["storage"] in ("clustered", "sparse_bitmap")
    # weights_bytes counts every stored byte (codebooks, indices, bitmaps); biases and requantization apart
    assert m["weights_bytes"] == sum(l["weights_bytes"] for l in r["layers"]) == c["weights_bytes"]
    assert (c["weights_bytes_dense"] == sum(l.get("weights_bytes_dense", 0) for l in r["layers"])
            == 16 * 27 + 16 * 144 + 64)
    assert m["params_bytes"] == sum(l["params_bytes"] for l in r["layers"])
    assert "compression:" in (out / "report.md").read_text()


def test_cli_errors_are_one_line(small, tmp_path):
    path, cal = small
    for args, message in ((["--clusters", "1"], "from 2 to 256"), (["--weight-bits", "3"], "8 or 4"),
                          (["--compression", str(tmp_path / "no.toml")], "not found")):
        res = CliRunner().invoke(app, ["deploy", str(path), "-c", str(cal), "--out", str(tmp_path / "o"), *args])
        assert res.exit_code == 2 and res.output.strip().splitlines()[-1].startswith("Error: ")
        assert message in res.output and not (tmp_path / "o").exists()


def test_evaluate_takes_the_same_flags(kws_cal16, tmp_path):
    # what --clusters 16 costs in top-1 is a figure: ci/compression_benchmark.py holds it to 0.5 points of int8
    # on 900 held-out samples (ACCURACY_LINES); here the flags reach evaluate and its report
    with np.load(DATA / "kws01.npz") as z:
        np.savez(tmp_path / "eval.npz", x=z["x"][100:140], y=z["y"][100:140])
    plain = evaluate(KWS, kws_cal16, tmp_path / "eval.npz", compare_onnxruntime=False)
    r = evaluate(KWS, kws_cal16, tmp_path / "eval.npz", compare_onnxruntime=False, compression=dict(clusters=16))
    assert r["host_c_matches_reference"] and r["weights_bytes"] == r["compression"]["weights_bytes"]
    assert r["weights_bytes"] <= 0.55 * plain["weights_bytes"] and r["compression"]["clusters"] == 16
    assert r["samples"] == plain["samples"] == 40 and 0 <= r["int8_top1"] <= 1
    res = CliRunner().invoke(app, ["evaluate", str(KWS), "-c", str(kws_cal16), "-d", str(tmp_path / "eval.npz"),
                                   "--no-onnxruntime", "--weight-bits", "4", "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    assert "compression: weights" in res.output and "int4" in res.output
    assert json.loads((tmp_path / "r.json").read_text())["compression"]["weight_bits"] == 4.0
