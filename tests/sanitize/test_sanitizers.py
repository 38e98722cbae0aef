"""The generated C under AddressSanitizer and UndefinedBehaviorSanitizer (tinyaot/toolchain/sanitize.py): every kernel,
and the shared models with each weight storage kind, built for the host with every sanitizer report fatal, fed
random and extreme int8 inputs (all -128, all 127, alternating, random extremes), must run clean and equal the
numpy reference bit for bit, also when the arena starts filled with 0x00 or 0xFF (no step reads stale bytes).

The suite keeps to the cheap cases: every kernel through one small graph whose layers take every weight storage
kind (tests/sanitize/kernel_models.py), and a subset of the (shared model, setting) pairs in which each setting
meets a real model; `ci/sanitize.py` runs all eight models with all four settings, and the kernels' DSP and MVE
paths under UBSan on the target.
"""
from __future__ import annotations

import copy
import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest

from sanitize import kernel_models
from shared_data import MODELS, calibration_file, few_calibration_samples
from tinyaot.api import compile_model, with_variants
from tinyaot.core.target import GENERIC, Target
from tinyaot.toolchain.sanitize import SanitizerError, build_sanitized, check_model, probe_inputs
from tinyaot.codegen.emit import emit_model
from tinyaot.paths import TEMPLATES

HOST_CC = shutil.which("cc")
pytestmark = pytest.mark.skipif(HOST_CC is None, reason="no host C compiler")

# prune0.5 by magnitude: the same sparse storage and kernels as the default method's masks, without the
# calibration-data reconstruction that choosing them costs (38 s of the suite for ad_fc_autoencoder alone)
SETTINGS = {"plain": None, "clusters16": {"clusters": 16}, "int4": {"weight_bits": 4},
            "prune0.5": {"prune": 0.5, "prune_method": "magnitude"}}
# (model, setting) pairs the suite runs, a few seconds each, so that each setting meets a real model;
# ci/sanitize.py runs all eight models with all four settings
SUITE_CASES = [
    ("kws_dscnn", "plain"),
    ("vww_mobilenetv1_025", "plain"),  # its near-zero channels once saturated biases and overflowed (issue 8)
    ("ad_fc_autoencoder", "int4"), ("ad_fc_autoencoder", "prune0.5"),
    ("mnist8_opset13", "clusters16"),
    ("tflm_hello_world_sine", "plain"), ("tflm_hello_world_sine", "clusters16"),
    ("tflm_hello_world_sine", "int4"), ("tflm_hello_world_sine", "prune0.5"),
]


# The graph is compiled for three targets, because the kernel variants a layer may use depend on the core: the
# generic kernels (no board), the DSP variants (an M4's choice) and the Helium ones (an M55's). On the host every
# variant kernel compiles its portable C path, which must equal the reference like the target paths do. The stack
# of the boards (4096 B): the decoded variants need one that holds their stack tile (ops/decoded.py).
TARGETS = {"generic": GENERIC, "dsp": Target("cortex-m4", has_dsp=True, stack_bytes=4096),
           "mve": Target("cortex-m55", has_dsp=True, has_mve=True, stack_bytes=4096)}


@pytest.fixture(scope="module")
def all_kernels_by_target(tmp_path_factory):
    d = tmp_path_factory.mktemp("all_kernels")
    model = kernel_models.all_kernels_model(d / "all_kernels.onnx")
    # 8 calibration samples: the kernels, variants and plan follow from the graph and its rules, and the compression's
    # fitting (its LSTM and GRU references above all) runs every sample it is given (11.2 s with 16, 6.6 s with 8,
    # the same 61 kernels, variants and arena)
    cal = kernel_models.calibration(d / "cal.npz", n=8)
    # compiled once (the compression's reconstruction, 14 s, is most of a compile and does not depend on the
    # target: compile_model chooses the variants last, pipeline/compile.py with_variants), then each target's
    # variants chosen on a copy of the graph, since with_variants rewrites the graph it is given
    generic = compile_model(model, cal, compression=kernel_models.COMPRESSION)
    return {name: with_variants(dataclasses.replace(generic, graph=copy.deepcopy(generic.graph)), t)
            for name, t in TARGETS.items()}


@pytest.fixture(scope="module", params=sorted(TARGETS))
def all_kernels(request, all_kernels_by_target):
    return all_kernels_by_target[request.param]


@pytest.fixture(scope="module")
def int5_by_target(cal_dir):
    """The 5-bit grid kernels (int5 storage: --clusters 32 on fully connected layers at batch 1, which the
    all-kernels graph keeps on codebooks with cluster_fc "codebook"): tflm_hello_world_sine, fully connected only
    (depths 1 and 16, 16 and 1 outputs), compiled once and its variants chosen for each target."""
    generic = compile_model(MODELS / "tflm_hello_world_sine.onnx",
                            few_calibration_samples(cal_dir, "tflm_hello_world_sine"), compression={"clusters": 32})
    return {name: with_variants(dataclasses.replace(generic, graph=copy.deepcopy(generic.graph)), t)
            for name, t in TARGETS.items()}


def test_every_kernel_is_under_the_sanitizers(all_kernels_by_target, int5_by_target, tmp_path: Path) -> None:
    """The graphs, over the three targets, reach every kernel file, so a new kernel cannot escape the sanitizers."""
    used = set()
    for name, c in [*all_kernels_by_target.items(), *((f"int5_{k}", v) for k, v in int5_by_target.items())]:
        used |= set(emit_model(c.graph, c.plan.offsets, c.plan.arena_bytes, c.lower_bound, "host",
                               tmp_path / name).kernels)
    # the 16x8 kernels need a 16-bit graph: tests/s16/test_s16_sanitize.py runs each of them under the sanitizers
    kernels = {p.stem for p in (TEMPLATES / "kernels").glob("*.c") if "s16" not in p.stem}
    assert kernels and not kernels - used, f"kernels no sanitizer test runs: {sorted(kernels - used)}"


def test_kernels_clean_under_sanitizers(all_kernels, tmp_path: Path) -> None:
    c = all_kernels
    samples = c.samples[c.input][:4]
    assert check_model(c, tmp_path, n_random=4, seed=1, extra_inputs=samples) == 16


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_int5_kernels_clean_under_sanitizers(int5_by_target, target: str, tmp_path: Path) -> None:
    c = int5_by_target[target]
    kinds = {c.graph.tensors[n.inputs[1]].storage.kind for n in c.graph.nodes if n.op == "FullyConnected"}
    assert kinds == {"int5"}, kinds
    samples = c.samples[c.input][:2]
    assert check_model(c, tmp_path, n_random=3, seed=0, extra_inputs=samples) == 12


@pytest.mark.parametrize("model,setting", SUITE_CASES)
def test_shared_model_clean_under_sanitizers(model: str, setting: str, cal_dir: Path, tmp_path: Path) -> None:
    # UB and overruns do not depend on how well the weights were fitted: 16 calibration samples (the compression
    # reconstruction runs all it is given, and ad_fc_autoencoder at --prune 0.5 took minutes with 100)
    compiled = compile_model(MODELS / f"{model}.onnx", few_calibration_samples(cal_dir, model),
                             compression=SETTINGS[setting])
    samples = compiled.samples[compiled.input][:2]
    assert check_model(compiled, tmp_path, n_random=3, seed=0, extra_inputs=samples) == 12


def test_sanitizers_catch_overflow_and_overrun(cal_dir: Path, tmp_path: Path) -> None:
    """The checks can fail: an int32 bias at INT32_MAX overflows the accumulator under UBSan, and a model built
    with an arena one byte smaller than its plan writes past it under ASan."""
    compiled = compile_model(MODELS / "tflm_hello_world_sine.onnx", calibration_file(cal_dir, "tflm_hello_world_sine"))
    g = compiled.graph
    fc = next(n for n in g.nodes if n.op in ("FullyConnected", "Gemm", "Conv") and len(n.inputs) > 2)
    bias = g.tensors[fc.inputs[2]]
    saved = bias.data.copy()
    extremes = probe_inputs(g.tensors[compiled.input].shape, 0)
    bias.data[:] = np.iinfo(np.int32).max
    try:
        overflow = build_sanitized(g, compiled.plan.offsets, compiled.plan.arena_bytes, compiled.lower_bound,
                                   tmp_path / "overflow")
    finally:
        bias.data[:] = saved
    with pytest.raises(SanitizerError, match="signed integer overflow"):
        overflow.run(extremes)
    short = build_sanitized(g, compiled.plan.offsets, compiled.plan.arena_bytes - 1, compiled.lower_bound,
                            tmp_path / "short")
    with pytest.raises(SanitizerError, match="AddressSanitizer"):
        short.run(extremes)
