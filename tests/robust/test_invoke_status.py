"""invoke returns at the first kernel that reports an error: the layers after it do not run and the output is not
written. The sine model's generated C, with step 0's fully connected call told a wrong output size (the kernel
checks it and returns -1 before writing), is built for the host with TINYAOT_TRACE and a runner that counts the
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
    int status = tinyaot_tflm_hello_world_sine_invoke(in, out);
    printf("%d %d %d\n", status, marks, out[0] == 0x55);
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
        body = text.index("/* step 0:", text.index("_invoke("))
        end = text.index("/* step 1:", body)
        step = text[body:end]
        assert step.count("output_dims = {1, 1, 1, 16}") == 1  # the premise: step 0 writes 16 channels
        emitted.source.write_text(text[:body] + step.replace("output_dims = {1, 1, 1, 16}",
                                                             "output_dims = {1, 1, 1, 15}") + text[end:])
    (tmp_path / "runner.c").write_text(RUNNER)
    exe = tmp_path / "runner"
    p = subprocess.run([cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-DTINYAOT_TRACE", f"-I{tmp_path}",
                        *map(str, emitted.sources), str(tmp_path / "runner.c"), "-o", str(exe)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    status, marks, untouched = map(int, subprocess.run([str(exe)], capture_output=True, text=True,
                                                       timeout=30).stdout.split())
    if broken:
        # one mark (before step 0), then the error: steps 1 and 2 and the copy-out never ran
        assert (status, marks, untouched) == (-1, 1, 1)
    else:
        assert (status, marks, untouched) == (0, layers + 1, 0)
