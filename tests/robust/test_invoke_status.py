"""invoke returns at the first kernel that reports an error, with its status, and names the step: the layers after it
do not run, the output is not written, tinyaot_<m>_failed_layer() is the step and tinyaot_<m>_layer_name() the node's
name. The sine model's generated C, with step 1's fully connected call told a wrong output size (the kernel checks it
and returns TINYAOT_ARG_ERROR before writing), is built for the host with TINYAOT_TRACE and a runner that counts the
per-layer marks."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tinyaot.api import compile_model
from tinyaot.boards import load_board
from tinyaot.pipeline.stage import stage_model

ROOT = Path(__file__).resolve().parents[2]
SINE = ROOT / "examples" / "tflm_hello_world_sine.onnx"
SINE_CAL = ROOT / "calibration_data" / "tflm_hello_world_sine.npz"

RUNNER = r"""#include <stdio.h>
#include <string.h>
#include "tflm_hello_world_sine.h"

static int marks;
void tinyaot_mark(void) { ++marks; }

int main(void)
{
    int8_t in[TINYAOT_TFLM_HELLO_WORLD_SINE_INPUT_SIZE] = {0};
    int8_t out[TINYAOT_TFLM_HELLO_WORLD_SINE_OUTPUT_SIZE];
    memset(out, 0x55, sizeof out);
    tinyaot_status status = tinyaot_tflm_hello_world_sine_invoke(in, out);
    int32_t step = tinyaot_tflm_hello_world_sine_failed_layer();
    printf("%d %d %d %d\n%s\n", (int)status, marks, out[0] == 0x55, (int)step,
           tinyaot_tflm_hello_world_sine_layer_name(step));
    return 0;
}
"""


@pytest.mark.parametrize("broken", [False, True])
def test_invoke_stops_at_the_first_failing_kernel(tmp_path, broken):
    cc = shutil.which("cc")
    assert cc, "no host C compiler"
    compiled = compile_model(SINE, SINE_CAL)
    emitted = stage_model(compiled, load_board("stm32"), tmp_path, harness=False)
    layers = len([layer for layer in emitted.layers if layer.code])
    assert layers == 3
    if broken:
        text = emitted.source.read_text()
        body = text.index("/* step 1:", text.index("_run("))
        end = text.index("/* step 2:", body)
        step = text[body:end]
        assert step.count("output_dims = {1, 1, 1, 16}") == 1  # the premise: step 1 writes 16 channels
        emitted.source.write_text(text[:body] + step.replace("output_dims = {1, 1, 1, 16}",
                                                             "output_dims = {1, 1, 1, 15}") + text[end:])
    (tmp_path / "runner.c").write_text(RUNNER)
    exe = tmp_path / "runner"
    p = subprocess.run([cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-DTINYAOT_TRACE", f"-I{tmp_path}",
                        *map(str, emitted.sources), str(tmp_path / "runner.c"), "-o", str(exe)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    first, name = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30).stdout.split("\n")[:2]
    status, marks, untouched, step = map(int, first.split())
    if broken:
        # two marks (before steps 0 and 1), then the error (TINYAOT_ARG_ERROR): step 2 and the copy-out never ran
        assert (status, marks, untouched, step) == (-1, 2, 1, 1)
        assert name == compiled.graph.nodes[1].name == "sequential/dense_1/MatMul;sequential/dense_1/Relu;" \
            "sequential/dense_1/BiasAdd"
    else:
        assert (status, marks, untouched, step, name) == (0, layers + 1, 0, -1, "")
