"""The int8 reference run over many samples at once where an op says its reference takes a batch
(OpSpec.batches_reference: oracle/reference.run_node, behind run_reference_many and compress/hessian.SampleRunner)
gives every sample exactly what the graph's reference gives it alone."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tinyaot.api import compile_model
from tinyaot.compress.hessian import SampleRunner
from tinyaot.oracle import reference
from tinyaot.oracle.reference import batches, run_reference, run_reference_many

from shared_data import MODELS, few_calibration_samples

TEST_MODELS = Path(__file__).resolve().parent.parent / "models"


def _calibration(cal_dir, model):
    if (MODELS / f"{model}.onnx").exists():
        return MODELS / f"{model}.onnx", few_calibration_samples(cal_dir, model, 5)
    with np.load(TEST_MODELS / f"{model}_data.npz") as z:
        x = z["x"][:5]
    path = cal_dir / f"{model}_first5.npz"
    np.savez(path, x=x)
    return TEST_MODELS / f"{model}.onnx", path


# conv, depthwise, pools, fully connected, softmax, reshape (kws); residual adds (ic); hard swish / sigmoid tables,
# the squeeze-excitation multiply, global pooling (mbv3); 1-D convolutions lifted to 2-D (cnn1d); attention
# (batch matmul, transposes: not batched, run per sample beside batched neighbours)
@pytest.mark.parametrize("model", ["kws_dscnn", "ic_resnet8", "pt_mbv3_se", "pt_sensor_cnn1d", "pt_frames_attention"])
def test_batched_runner_equals_the_reference_sample_by_sample(model, cal_dir, monkeypatch):
    onnx_path, cal = _calibration(cal_dir, model)
    c = compile_model(onnx_path, cal)
    g = c.graph
    feeds = [c.quantize_inputs(c.feed(k)) for k in range(5)]
    monkeypatch.setattr(reference, "RUN_BLOCK", 3)  # blocks of 3 and 2: a block boundary inside the samples
    runner = SampleRunner(g, feeds)
    batched = 0
    for node in g.nodes:
        batched += batches(g, node, runner.values[0])
        runner.run(node)
    assert batched > 0
    many = run_reference_many(g, feeds)
    for k, feed in enumerate(feeds):
        want = run_reference(g, feed)  # one sample: every node called for it alone
        for got_all in (runner.values[k], many[k]):
            assert set(got_all) == set(want)
            for name, value in want.items():
                got = got_all[name]
                assert got.dtype == value.dtype and got.shape == value.shape, (name, got.shape, value.shape)
                assert np.array_equal(got, value), (model, k, name)
