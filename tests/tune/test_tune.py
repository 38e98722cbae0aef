"""--tune under QEMU on a tiny two-conv model. Until the kernel helpers' variants exist, the tuned layer gets a
test-only variant made of two real, bit-exact code paths of the same kernel: "generic" (the first conv, 3 input
channels, reads its windows through the im2col scratch) and "direct" (no scratch planned: the kernel reads the taps
in place), plus "broken" (the generic kernel with a wrong output offset), which tuning must reject. The cost model
is told "direct" is cheaper, so it is the default; tuning measures all three and keeps the bit-exact one that runs
fewer instructions; a second deploy takes the choice from the cache, measuring only the default firmware (records
are hints: the tuned choice must beat the measured default); a tuning log written by one deploy gives the same
choice to another with an empty cache; a log whose counts lie cannot make a deploy slower."""
from __future__ import annotations

import json

import pytest
from onnx import helper

from tinyaot.api import deploy
from tinyaot.boards import load_board
from tinyaot.errors import TinyaotError
from tinyaot.ops.conv import Conv
from tinyaot.ops.registry import Variant
from tinyaot.pipeline import tune as tune_mod
from tinyaot.api import compile_model
from tinyaot.pipeline.tune import layer_signature, read_log, write_log

from tests.op_models import calibration, conv_node, save_model
from tests.shared_data import MODELS, cache_sharing_builds, calibration_file

BOARD = "mps2-an386"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("tune_model")
    c1, i1 = conv_node("x", "a", "w1", 3, 8, seed=1)
    c2, i2 = conv_node("r", "y", "w2", 8, 4, seed=2)
    m = save_model(d / "tiny_tune.onnx", [c1, helper.make_node("Relu", ["a"], ["r"]), c2], [1, 3, 8, 8],
                   [1, 4, 8, 8], i1 + i2)
    return m, calibration(d / "cal.npz", (1, 3, 8, 8), n=4)


@pytest.fixture
def direct_variant(monkeypatch):
    """Offer "direct" (cost 1, below generic's 2) on the first conv when the target has DSP, and "broken" (the
    generic kernel told a wrong output offset: not bit-exact), which tuning must reject."""
    original, render = Conv.scratch_bytes, Conv.render

    def variants(self, node, graph, target):
        few_channels = graph.tensors[node.inputs[0]].shape[3] < 8
        if target.has_dsp and few_channels:
            return (Variant("generic", 2.0), Variant("direct", 1.0), Variant("broken", 3.0))
        return (Variant("generic"),)

    def broken_render(self, node, graph, cname):
        call = render(self, node, graph, cname)
        if node.attrs.get("variant") == "broken":
            off = call.params["output_offset"]
            call.params["output_offset"] = off + 1 if off < 127 else off - 1
        return call

    monkeypatch.setattr(Conv, "variants", variants)
    monkeypatch.setattr(Conv, "render", broken_render)
    monkeypatch.setattr(Conv, "scratch_bytes", lambda self, node, graph: 0 if node.attrs.get("variant") == "direct"
                        else original(self, node, graph))


@pytest.fixture
def builds(monkeypatch):
    """Count the tuning firmware builds (the real build, wrapped)."""
    calls = []
    real = tune_mod.build_verification_firmware

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(tune_mod, "build_verification_firmware", counted)
    return calls


def test_tune_measures_keeps_the_fastest_and_caches(model, direct_variant, builds, tmp_path, monkeypatch):
    monkeypatch.setenv("TINYAOT_CACHE", str(cache_sharing_builds(tmp_path / "cache")))
    m, cal = model
    log = tmp_path / "tuning.jsonl"
    r = deploy(m, BOARD, cal, tmp_path / "one", verify_samples=2, tune=True, tuning_log=log).report
    t = r["tuning"]
    assert len(builds) == 3 and t["rounds"] == 3 and t["firmware_builds"] == 3 and not t["from_cache"]
    assert t["layers_tuned"] == 1 and t["variants_tried"] == 3 and t["measured_now"] == 3
    assert t["from_cache_layers"] == 0
    (layer,) = t["layers"]
    assert layer["rejected"] == {"broken": "outputs differ from the numpy reference"}
    assert t["rejected"] == [{"layer": layer["name"], "variant": "broken",
                              "why": "outputs differ from the numpy reference"}]
    counts = layer["instructions"]
    assert set(counts) == {"generic", "direct"} and counts["generic"] != counts["direct"]
    assert layer["default"] == "direct"  # the cost model's pick
    fastest = min(counts, key=counts.get)
    assert layer["variant"] == fastest
    row = next(x for x in r["layers"] if x["name"] == layer["name"])
    assert row["variant"] == fastest and row["instructions"] == counts[fastest]
    assert row["instructions_per_mac"] == round(counts[fastest] / row["macs"], 3)
    # round 0 was the default deploy; the tuned firmware is never slower
    assert t["instructions_default_source"].startswith("measured")
    assert t["instructions_tuned"] == r["verify"]["instructions"] <= t["instructions_default"]
    assert t["instructions_default"] - t["instructions_tuned"] == counts["direct"] - counts[fastest]
    assert layer["costs"] == {"generic": 2.0, "direct": 1.0, "broken": 3.0}
    assert t["cost_model_agrees"] == int(fastest == "direct")
    md = (tmp_path / "one" / "report.md").read_text()
    assert "## Kernel variants" in md and f"**{fastest}**" in md

    # second deploy: the choice from the cache, no tuning rounds; only the default firmware is built and measured
    # (when the choice differs from it), since a record is a hint
    default_builds = [1] if fastest != "direct" else []
    builds.clear()
    r2 = deploy(m, BOARD, cal, tmp_path / "two", verify_samples=2, tune=True).report
    t2 = r2["tuning"]
    assert builds == default_builds and t2["rounds"] == 0 and t2["from_cache"] and t2["measured_now"] == 0
    assert t2["from_cache_layers"] == 1 and t2["layers"][0]["rejected"] == layer["rejected"]
    assert t2["layers"][0]["variant"] == fastest and t2["instructions_tuned"] == t["instructions_tuned"]
    assert t2["instructions_default"] == t["instructions_default"]  # measured again, the same count
    assert t2["instructions_default_source"].startswith("measured")

    # the log alone (empty cache, no --tune) gives the same choice, measuring only the default
    monkeypatch.setenv("TINYAOT_CACHE", str(cache_sharing_builds(tmp_path / "empty_cache")))
    builds.clear()
    r3 = deploy(m, BOARD, cal, tmp_path / "three", verify_samples=1, tuning_log=log).report
    assert builds == default_builds and r3["tuning"]["from_cache"] and not r3["tuning"]["enabled"]
    assert next(x for x in r3["layers"] if x["name"] == layer["name"])["variant"] == fastest

    # a log whose counts lie (each record's counts swapped, checksum dropped so it reads as an old hand-written
    # log): the deploy measures the default and keeps it when the lying choice is slower; never slower than without
    lying = tmp_path / "lying.jsonl"
    recs = [json.loads(x) for x in log.read_text().splitlines()]
    for rec in recs:
        rec.pop("checksum")
        (a, na), (b, nb) = list(rec["instructions"].items())
        rec["instructions"] = {a: nb, b: na}
    lying.write_text("".join(json.dumps(rec) + "\n" for rec in recs))
    monkeypatch.setenv("TINYAOT_CACHE", str(cache_sharing_builds(tmp_path / "empty_cache2")))
    r6 = deploy(m, BOARD, cal, tmp_path / "six", verify_samples=1, tuning_log=lying).report
    assert r6["verify"]["instructions"] == t["instructions_tuned"]  # the fastest, whatever the log said
    assert r6["tuning"]["instructions_default"] == t["instructions_default"]

    # without --tune or a log the cost model picks; --optimize size keeps generic
    r4 = deploy(m, BOARD, cal, tmp_path / "four", verify_samples=1, verify=False).report
    assert r4["tuning"] == {"enabled": False, "choice": "cost model"}
    assert next(x for x in r4["layers"] if x["name"] == layer["name"])["variant"] == "direct"
    r5 = deploy(m, BOARD, cal, tmp_path / "five", verify=False, optimize="size").report
    assert {x["variant"] for x in r5["layers"]} == {"generic"} and r5["target"]["optimize"] == "size"


def test_log_round_trip_and_bad_log(tmp_path):
    log = tmp_path / "log.jsonl"
    recs = {s: {"signature": s, "variants": ["generic", "fast"], "instructions": {"generic": n, "fast": n - 1},
                "rejected": {}} for s, n in (("b" * 64, 10), ("a" * 64, 20))}
    write_log(log, recs)
    assert read_log(log) == recs
    lines = log.read_text().splitlines()
    assert [json.loads(x)["signature"] for x in lines] == ["a" * 64, "b" * 64]  # sorted: diffs stay small
    # a later write merges: the newer record of a signature replaces the older, the others stay
    newer = {"a" * 64: {**recs["a" * 64], "instructions": {"generic": 5, "fast": 7}}}
    write_log(log, newer)
    assert read_log(log) == {**recs, **newer}
    assert tune_mod.best_variant(read_log(log)["a" * 64], "fast") == "generic"
    assert tune_mod.best_variant({"variants": ["generic", "fast"], "instructions": {"generic": 3, "fast": 3}},
                                 "fast") == "fast"  # ties keep the default
    assert tune_mod.best_variant({"variants": ["generic", "fast"], "instructions": {"generic": 3, "fast": 1},
                                  "rejected": {"fast": "outputs differ"}}, "generic") == "generic"
    # a log is a hint: a damaged line is ignored with a warning, an altered record (checksum) too
    text = log.read_text().splitlines()
    altered = text[0].replace('"generic": 5', '"generic": 6')
    assert altered != text[0]
    log.write_text("\n".join([altered, text[1], "<<<<<<< HEAD"]) + "\n")
    assert read_log(log) == {"b" * 64: recs["b" * 64]}
    log.write_bytes(b"\x00\xff\xfe binary")
    assert read_log(log) == {}
    # ... but a file that is no tuning log is never overwritten
    with pytest.raises(TinyaotError, match="is not a tuning log"):
        write_log(log, newer)
    assert log.read_bytes() == b"\x00\xff\xfe binary"


def test_signature_tracks_code_paths_not_weights(tmp_path):
    """kws_dscnn's four depthwise layers have the same shapes, offsets and clamps but their own weights and
    multipliers: one signature, so one measurement serves all four (and the four pointwise layers another)."""
    g = compile_model(MODELS / "kws_dscnn.onnx", calibration_file(tmp_path, "kws_dscnn")).graph
    b = load_board("mps2-an386")
    dws = [n for n in g.nodes if n.op == "Conv" and n.attrs["depthwise"]]
    pws = [n for n in g.nodes if n.op == "Conv" and tuple(n.attrs["kernel_shape"]) == (1, 1)]
    assert len(dws) == len(pws) == 4
    sig_dw = {layer_signature(n, g, b, ["generic"])[0] for n in dws}
    sig_pw = {layer_signature(n, g, b, ["generic"])[0] for n in pws}
    assert len(sig_dw) == len(sig_pw) == 1 and sig_dw != sig_pw
    assert layer_signature(dws[0], g, load_board("mps2-an500"), ["generic"])[0] not in sig_dw  # another board
    dws[0].attrs["act_min"] = 0  # another clamp: another code path (ReLU-like output)
    assert layer_signature(dws[0], g, b, ["generic"])[0] not in sig_dw


def test_finish_keeps_the_default_when_the_tuned_firmware_is_slower():
    layers = [{"variant": "fast", "default": "generic", "instructions": {"generic": 70, "fast": 50}}]
    section = {"instructions_default": 1000, "instructions_default_source": "measured (tuning round 0)",
               "layers": layers}
    assert tune_mod.finish(dict(section), 1000) is False
    assert tune_mod.finish(dict(section), 1001) is True
    # not verified: a choice measured layer by layer in this run stands; one from records (hints) does not
    assert tune_mod.finish(dict(section), None) is False
    from_records = dict(section, instructions_default_source="measured (the default firmware; the choice came from "
                                                              "records)")
    assert tune_mod.finish(from_records, None) is True
    # nothing measured the default: only the default itself is kept
    assert tune_mod.finish({"instructions_default": None, "instructions_default_source": None,
                            "layers": layers}, 500) is True
    same = {"instructions_default": None, "instructions_default_source": None,
            "layers": [{"variant": "generic", "default": "generic", "instructions": {"generic": 9}}]}
    assert tune_mod.finish(same, 500) is False and same["instructions_default"] == 500
