"""Every Cortex-M class: the same generated C builds for v6-M (no DSP), v7-M, v7E-M, v8-M and v8.1-M and is
bit-exact under QEMU on each board."""
from __future__ import annotations

import pytest

from tinyaot.api import deploy
from tinyaot.boards import list_boards
from shared_data import MODELS, calibration_file


@pytest.mark.parametrize("board", [b.name for b in list_boards()])
def test_sine_model_verifies_on_every_board(board, tmp_path, cal_dir):
    r = deploy(MODELS / "tflm_hello_world_sine.onnx", board, calibration_file(cal_dir, "tflm_hello_world_sine"),
               tmp_path / "out").report
    assert r["board"]["name"] == board
    assert r["verify"]["outputs_match"] and r["verify"]["exit_code"] == 0


@pytest.mark.parametrize("model,board", [("kws_dscnn", "mps2-an385"), ("kws_dscnn", "mps2-an505"),
                                         ("mnist8_opset13", "mps3-an547")])
def test_models_verify_on_other_cores(model, board, tmp_path, cal_dir):
    r = deploy(MODELS / f"{model}.onnx", board, calibration_file(cal_dir, model), tmp_path / "out").report
    v = r["verify"]
    # a sanity floor on the count: the widest int8 multiply-accumulate the core has does 16 MACs (Helium's VMLADAVA.S8
    # on v8.1-M), 2 with the DSP extension (SMLAD), 1 otherwise
    per_instruction = {"mps3-an547": 16, "mps2-an385": 1}.get(board, 2)
    assert v["outputs_match"] and v["max_abs_diff_vs_onnxruntime"] <= 1
    assert v["instructions"] > r["macs"] / per_instruction
