"""Issue 2's models end to end: compile, build with arm-none-eabi-gcc, run under QEMU; outputs == the numpy
reference, every layer within its tolerance of onnxruntime, report.json complete, arena at the lower bound."""
from __future__ import annotations

import json

import pytest

from tinyaot.api import deploy

from shared_data import MODELS, calibration_file

MODELS_2 = ["kws_dscnn", "ic_resnet8", "mnist8_opset13", "tflm_hello_world_sine"]

SCHEMA = {
    "tinyaot_version": None,
    "model": ["path", "sha256", "inputs", "outputs"],
    "board": ["name", "cpu", "qemu_machine", "flash_bytes", "sram_bytes"],
    "memory": ["arena_bytes", "arena_lower_bound_bytes", "weights_bytes", "params_bytes", "flash_bytes",
               "static_ram_bytes", "stack_bytes"],
    "macs": None,
    "compression": ["sparsity", "clusters", "weight_bits"],
    "layers": None,
    "verify": ["ran", "qemu_machine", "exit_code", "outputs_match", "max_abs_diff_vs_reference",
               "max_abs_diff_vs_onnxruntime", "output_diff_vs_onnxruntime", "top1_agreement_vs_onnxruntime",
               "instructions", "arena_high_water_bytes", "stack_high_water_bytes"],
}
LAYER_KEYS = ["name", "op", "kernel", "output_shape", "macs", "weights_bytes", "instructions"]


@pytest.mark.parametrize("board", ["stm32", "mps2-an386"])
@pytest.mark.parametrize("model", MODELS_2)
def test_deploy_verifies(model, board, tmp_path, cal_dir):
    out = tmp_path / "out"
    result = deploy(MODELS / f"{model}.onnx", board, calibration_file(cal_dir, model), out)
    report = json.loads((out / "report.json").read_text())
    assert report == json.loads(json.dumps(result.report))
    for key, sub in SCHEMA.items():
        assert key in report, key
        for k in sub or []:
            assert k in report[key], f"{key}.{k}"
    for layer in report["layers"]:
        assert all(k in layer for k in LAYER_KEYS)
    v, m = report["verify"], report["memory"]
    assert v["ran"] and v["exit_code"] == 0 and v["outputs_match"]
    assert v["max_abs_diff_vs_reference"] == 0
    assert all(l["max_abs_diff"] <= l["tolerance"] for l in v["layers_vs_onnxruntime"])
    assert v["max_abs_diff_vs_onnxruntime"] <= 1
    assert v["instructions"] > report["macs"] > 0
    # every layer with code has its own instruction count, and they add up to less than the whole inference
    counted = [l["instructions"] for l in report["layers"] if l["kernel"] != "alias"]
    assert all(c is not None and c > 0 for c in counted) and sum(counted) < v["instructions"]
    assert m["arena_bytes"] == m["arena_lower_bound_bytes"]
    # the firmware wrote exactly up to the planned arena size, never past it (the harness paints and scans)
    assert 0 < v["arena_high_water_bytes"] <= m["arena_bytes"]
    assert 0 < v["stack_high_water_bytes"] <= m["stack_bytes"]
    assert m["flash_bytes"] > m["weights_bytes"] + m["params_bytes"]
    for name in (f"{model}.c", f"{model}.h", "Makefile", "CMakeLists.txt", "report.md", "hal/linker.ld",
                 "hal/startup.c", "firmware/firmware.elf"):
        assert (out / name).exists(), name
    if model == "kws_dscnn":
        # TensorFlow Lite Micro needs a 16,000-byte activation arena for the int8 version of this network.
        assert m["arena_bytes"] <= 16000
