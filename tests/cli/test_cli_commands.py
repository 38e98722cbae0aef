"""The `tinyaot` commands doing their jobs: boards, passes, version, and real deploys that build the firmware with
arm-none-eabi-gcc (-Werror) and verify it under qemu-system-arm."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

import tinyaot
from tinyaot.cli.main import app

from shared_data import MODELS, ROOT

SINE = MODELS / "tflm_hello_world_sine.onnx"


def board_spec(name_or_alias: str) -> dict:
    """A board file of the repo, found by name or alias (read directly, not through tinyaot.boards)."""
    for f in sorted((ROOT / "boards").glob("*.toml")):
        spec = tomllib.loads(f.read_text())
        if name_or_alias in (spec["name"], *spec["aliases"]):
            return spec
    raise KeyError(name_or_alias)


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def ok(result) -> list[str]:
    """A successful command: exit 0, nothing on stderr, no exception; returns the stdout lines."""
    assert result.exit_code == 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.stderr == "", result.stderr
    return result.stdout.splitlines()


@pytest.fixture(scope="module")
def sine_cal(tmp_path_factory) -> Path:
    # The sine model's whole domain: 50 x values in [0, 2 pi].
    path = tmp_path_factory.mktemp("sine") / "sine_cal.npz"
    np.savez(path, x=np.random.default_rng(0).uniform(0, 2 * np.pi, (50, 1)).astype(np.float32))
    return path


# ---- boards, passes, version -------------------------------------------------------------------------------------

def test_boards_lists_every_board_with_aliases():
    lines = ok(run("boards"))
    files = sorted((ROOT / "boards").glob("*.toml"))
    assert len(files) == 8
    rows = {line.split()[0]: line for line in lines[1:] if line.strip()}
    assert len(rows) == 8, lines
    for f in files:
        spec = tomllib.loads(f.read_text())
        row = rows[spec["name"]]
        cols = row.split()
        for alias in spec["aliases"]:
            assert alias in cols[1].split(","), (alias, row)
        assert spec["qemu_machine"] in cols
        assert f"{spec['ram_bytes'] // 1024} KB" in row and f"{spec['flash_bytes'] // 1024} KB" in row
    stm32 = board_spec("stm32")
    assert "stm32" == stm32["name"] or "stm32" in rows[stm32["name"]].split()[1].split(",")


def test_passes_in_pipeline_order():
    from tinyaot.passes import PIPELINE, REQUIRED

    lines = [l for l in ok(run("passes")) if l.strip()]
    assert [l.split()[0] for l in lines] == [name for name, _ in PIPELINE]
    assert len(lines) >= 6
    for line in lines:
        assert ("(required)" in line) == (line.split()[0] in REQUIRED)
        assert len(line.split()) > 2, "each pass has a one-line description"


def test_version():
    lines = ok(run("version"))
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert lines == [tinyaot.__version__] == [pyproject["project"]["version"]]


def test_python_dash_m_help():
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "tinyaot", "--help"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    for cmd in ("deploy", "evaluate", "boards", "passes", "version"):
        assert cmd in p.stdout
    assert "Traceback" not in p.stderr


def test_python_dash_m_error_exit_code(tmp_path):
    # The real process, not the in-process runner: an error must reach the shell as a non-zero status.
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "tinyaot", "deploy", str(tmp_path / "nope.onnx"), "--out",
                        str(tmp_path / "out")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)  # an input error
    assert p.stdout == ""
    assert p.stderr.splitlines() == [f"Error: model file not found: {tmp_path / 'nope.onnx'}"]
    assert not (tmp_path / "out").exists()


# ---- deploy ------------------------------------------------------------------------------------------------------

# The report.json contract of the agreed design (DESIGN.md beside the project) ("Minimum keys; more are welcome").
REPORT_SCHEMA = {
    "tinyaot_version": str,
    "model": {"path": str, "sha256": str, "inputs": list, "outputs": list},
    "board": {"name": str, "cpu": str, "qemu_machine": str, "flash_bytes": int, "sram_bytes": int},
    "memory": {"arena_bytes": int, "arena_lower_bound_bytes": int, "weights_bytes": int, "params_bytes": int,
               "flash_bytes": (int, type(None)), "static_ram_bytes": (int, type(None)),
               "stack_bytes": (int, type(None))},
    "macs": int,
    "compression": {"sparsity": float, "clusters": (int, type(None)), "weight_bits": float},
    "layers": list,
    "verify": {"ran": bool, "qemu_machine": str, "exit_code": (int, type(None)), "outputs_match": (bool, type(None)),
               "max_abs_diff_vs_reference": (int, type(None)), "max_abs_diff_vs_onnxruntime": (int, type(None)),
               "output_diff_vs_onnxruntime": (int, type(None)),
               "top1_agreement_vs_onnxruntime": (float, type(None)), "instructions": (int, type(None)),
               "arena_high_water_bytes": (int, type(None)), "stack_high_water_bytes": (int, type(None)),
               "invoke_stack_bytes": (int, type(None)), "invoke_stack_bytes_o0": (int, type(None))},
    "files": {"model": list, "kernels": list, "build": list, "hal": list, "firmware": list, "report": list},
}
LAYER_KEYS = {"name", "op", "kernel", "output_shape", "macs", "weights_bytes", "instructions"}


def check_schema(report: dict, schema: dict = REPORT_SCHEMA, where: str = "") -> None:
    for key, want in schema.items():
        assert key in report, f"report.json lacks {where}{key}"
        if isinstance(want, dict):
            assert isinstance(report[key], dict), f"{where}{key}"
            check_schema(report[key], want, f"{where}{key}.")
        else:
            assert isinstance(report[key], want), f"{where}{key} = {report[key]!r}"
            assert not (want is int and isinstance(report[key], bool)), f"{where}{key}"


@pytest.fixture(scope="module")
def sine_deploy(tmp_path_factory, sine_cal):
    out = tmp_path_factory.mktemp("deploy") / "sine_stm32"
    r = run("deploy", SINE, "--board", "stm32", "--calibration", sine_cal, "--out", out)
    return r, out


def test_deploy_sine_verified(sine_deploy, sine_cal):
    r, out = sine_deploy
    lines = ok(r)
    stm32 = board_spec("stm32")
    assert any(f"-> {out}" in l and stm32["name"] in l for l in lines), lines
    assert any(l.startswith(f"verified under QEMU {stm32['qemu_machine']}") for l in lines), lines
    # the vendorable folder: the model's files carry its name, the HAL is there once (hal/), the verification
    # firmware has its own subfolder, and the folder has a checkout's permissions (not mkdtemp's 0700)
    for name in ("tflm_hello_world_sine.c", "tflm_hello_world_sine.h", "tflm_hello_world_sine.mk", "report.json",
                 "report.md", "Makefile", "CMakeLists.txt", "tinyaot_compiler.h"):
        assert (out / name).is_file(), name
    assert not (out / "model.c").exists() and not (out / "model.h").exists()
    for name in ("startup.c", "linker.ld", "tinyaot_hal.c", "tinyaot_hal.h"):
        assert (out / "hal" / name).is_file(), name
        assert not (out / "firmware" / name).exists(), name
    assert sorted(p.name for p in (out / "firmware").iterdir()) == ["firmware.elf", "firmware.map", "input.bin",
                                                                     "verify_main.c"]
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o777 & ~umask
    assert (out / "report.json").stat().st_mode & 0o777 == 0o666 & ~umask
    assert not list(out.parent.glob(".sine_stm32.*")), "staging folders left behind"

    report = json.loads((out / "report.json").read_text())
    check_schema(report)
    # report.json lists every file of the folder, each once, by role
    listed = sorted(f for group in report["files"].values() for f in group)
    assert listed == sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert report["files"]["model"] == ["tflm_hello_world_sine.h", "tflm_hello_world_sine.c"]
    v = report["verify"]
    assert v["ran"] is True and v["exit_code"] == 0
    assert v["outputs_match"] is True
    assert v["max_abs_diff_vs_reference"] == 0
    assert v["max_abs_diff_vs_onnxruntime"] <= 1
    assert v["qemu_machine"] == stm32["qemu_machine"] == report["board"]["qemu_machine"]
    assert report["board"]["name"] == stm32["name"]
    assert report["board"]["sram_bytes"] == stm32["ram_bytes"]
    assert v["instructions"] > 0 and v["stack_high_water_bytes"] > 0
    assert 0 < v["arena_high_water_bytes"] <= report["memory"]["arena_bytes"]
    assert report["model"]["inputs"] == [{"name": "serving_default_dense_input:0", "shape": [1, 1],
                                          "dtype": "float32"}]
    assert report["quantization"]["calibration_samples"] == 50
    assert report["macs"] == 16 + 16 * 16 + 16
    assert len(report["layers"]) == 3
    for layer in report["layers"]:
        assert LAYER_KEYS <= set(layer), layer
        assert isinstance(layer["instructions"], int)
    assert report["memory"]["flash_bytes"] > 0 and report["memory"]["static_ram_bytes"] > 0
    md = (out / "report.md").read_text()
    assert stm32["name"] in md and "outputs == numpy reference: True" in md
    # the stack of one invoke call as built (-O2) and as a debug build (-O0, built again and run on the first sample,
    # the same outputs), in report.json, report.md and the header's macros
    assert v["optimization"] == "-O2" and v["stack_o0_note"] is None
    assert 0 < v["invoke_stack_bytes"] < v["stack_high_water_bytes"]
    assert v["invoke_stack_bytes"] < v["invoke_stack_bytes_o0"] < v["stack_high_water_bytes_o0"]
    header = (out / "tflm_hello_world_sine.h").read_text()
    assert f"#define TINYAOT_TFLM_HELLO_WORLD_SINE_STACK_SIZE {v['invoke_stack_bytes']}\n" in header
    assert f"#define TINYAOT_TFLM_HELLO_WORLD_SINE_STACK_SIZE_O0 {v['invoke_stack_bytes_o0']}\n" in header
    assert f"{v['invoke_stack_bytes_o0']} B built at -O0" in md


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_deployed_makefile_builds_the_library(sine_deploy, tmp_path):
    # The folder is what an engineer vendors: its Makefile must build on its own (in a copy, to keep the
    # deploy folder pristine for the other tests).
    _, out = sine_deploy
    copy = tmp_path / "vendored"
    shutil.copytree(out, copy)
    p = subprocess.run(["make", "-C", str(copy)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert list(copy.glob("libtinyaot_*.a"))
    assert "warning" not in (p.stdout + p.stderr).lower()


def test_deploy_no_verify(tmp_path, sine_cal):
    out = tmp_path / "nv"
    lines = ok(run("deploy", SINE, "-b", "stm32", "-c", sine_cal, "-o", out, "--no-verify"))
    assert "not verified (--no-verify)" in lines
    report = json.loads((out / "report.json").read_text())
    check_schema(report)
    assert report["verify"]["ran"] is False
    assert report["verify"]["outputs_match"] is None
    assert "skipped" in (out / "report.md").read_text()
    header = (out / "tflm_hello_world_sine.h").read_text()
    assert "Stack: not measured" in header and "_STACK_SIZE" not in header
    assert (out / "tflm_hello_world_sine.c").is_file()


def test_redeploy_replaces_the_old_folder(tmp_path, sine_cal):
    out = tmp_path / "again"
    ok(run("deploy", SINE, "-c", sine_cal, "-o", out, "--no-verify"))
    (out / "tinyaot_old_kernel.c").write_text("written by an earlier run\n")  # listed in the manifest: tinyaot's
    manifest = json.loads((out / ".tinyaot-manifest.json").read_text())
    manifest["files"]["tinyaot_old_kernel.c"] = hashlib.sha256(b"written by an earlier run\n").hexdigest()
    (out / ".tinyaot-manifest.json").write_text(json.dumps(manifest))
    (out / "kernel.o").write_bytes(b"made by the folder's Makefile")
    ok(run("deploy", SINE, "-c", sine_cal, "-o", out, "--no-verify", "-b", "an386"))
    assert not (out / "tinyaot_old_kernel.c").exists() and not (out / "kernel.o").exists()
    assert json.loads((out / "report.json").read_text())["board"]["name"] == "mps2-an386"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again"]


def test_print_ir_after(tmp_path, sine_cal):
    out = tmp_path / "ir"
    lines = ok(run("deploy", SINE, "-c", sine_cal, "-o", out, "--no-verify", "--print-ir-after",
                   "fuse_fully_connected"))
    assert any("FullyConnected" in l for l in lines), lines


# ---- identifier safety ------------------------------------------------------------------------------------------

# Names that would break C if pasted raw: a comment terminator, a quote, a newline, a preprocessor line, spaces
# and statement separators. Each carries a marker so a leak can be found.
EVIL_NODE = 'conv */ int LEAKA = 1; /* "q" \n#define LEAKB 1 ;'
EVIL_RELU = 'relu*/ ; "\n#define LEAKC ; x'
EVIL_IN = 'in put */ "LEAKD";\n#define LEAKE'
EVIL_MID = 'mid */ LEAKF; /*'
EVIL_OUT = 'out "LEAKG" */\n#define LEAKH 2;'
EVIL_W = 'W */ LEAKI; #define'


def evil_model(path: Path) -> Path:
    """x [1, 2, 6, 6] -> Conv 3x3 (4 filters, pads 1, bias) -> Relu -> y [1, 4, 6, 6], every name hostile."""
    rng = np.random.default_rng(7)
    w = numpy_helper.from_array(rng.normal(0, 0.5, (4, 2, 3, 3)).astype(np.float32), EVIL_W)
    b = numpy_helper.from_array(rng.normal(0, 0.1, (4,)).astype(np.float32), 'bias "; */')
    g = helper.make_graph(
        [helper.make_node("Conv", [EVIL_IN, EVIL_W, 'bias "; */'], [EVIL_MID], name=EVIL_NODE, pads=[1, 1, 1, 1],
                          kernel_shape=[3, 3]),
         helper.make_node("Relu", [EVIL_MID], [EVIL_OUT], name=EVIL_RELU)],
        'graph */ "name"', [helper.make_tensor_value_info(EVIL_IN, TensorProto.FLOAT, [1, 2, 6, 6])],
        [helper.make_tensor_value_info(EVIL_OUT, TensorProto.FLOAT, [1, 4, 6, 6])], [w, b])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def split_c(text: str) -> tuple[str, list[str], list[str]]:
    """(the code with comments blanked and string literals emptied, the comment bodies, the string literals'
    bodies), lexing strings and char literals correctly."""
    code, comments, literals, i, n = [], [], [], 0, len(text)
    while i < n:
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            assert end >= 0, "unterminated comment"
            comments.append(text[i + 2:end])
            code.append(" ")
            i = end + 2
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            comments.append(text[i + 2:end])
            i = end
        elif text[i] in "\"'":
            q, j = text[i], i + 1
            while text[j] != q:
                assert text[j] != "\n", "newline inside a literal"
                j += 2 if text[j] == "\\" else 1
            if q == '"':
                literals.append(text[i + 1:j])
                code.append('""')
            else:
                code.append(text[i:j + 1])
            i = j + 1
        else:
            code.append(text[i])
            i += 1
    return "".join(code), comments, literals


def test_hostile_names_cannot_inject_c(tmp_path):
    model = evil_model(tmp_path / 'evil "model"; x.onnx')
    cal = tmp_path / "cal.npz"
    np.savez(cal, x=np.random.default_rng(3).normal(size=(12, 1, 2, 6, 6)).astype(np.float32))
    out = tmp_path / "out"
    lines = ok(run("deploy", model, "--board", "mps2-an386", "--calibration", cal, "--out", out))
    # Verification built the model's C with -Werror and ran it under QEMU: that the C compiles and matches the
    # reference is the main proof. The checks below say where a leak would be if it happened.
    assert any(l.startswith("verified under QEMU mps2-an386") for l in lines), lines
    report = json.loads((out / "report.json").read_text())
    assert report["verify"]["outputs_match"] is True and report["verify"]["max_abs_diff_vs_reference"] == 0
    names = [l["name"] for l in report["layers"]]
    assert EVIL_NODE in names or EVIL_RELU in names, names  # the report keeps the real names

    decoded = set()  # the string literals of the model's files, C's escapes undone
    for name in report["files"]["model"]:
        text = (out / name).read_text()
        code, comments, literals = split_c(text)
        # A marker may survive inside a sanitised identifier (`l0_conv_int_LEAKA_1_...`) or as data inside a
        # string literal (the layer-name table invoke's status names the failing layer with), never as a token of
        # its own or after a #define.
        for token in re.findall(r"[A-Za-z0-9_]*LEAK[A-Za-z0-9_]*", code):
            assert not re.fullmatch(r"LEAK[A-I]", token), f"{token} escaped into the code of {name}"
        assert not re.search(r"#\s*define\s+LEAK", code), name
        decoded |= {re.sub(r"\\(.)", r"\1", body) for body in literals}
        for body in comments:
            assert "/*" not in body, f"nested comment opener in {name}: {body!r}"
        assert "*/" not in code
        # Every preprocessor line is one the generator meant: no #define built from a name.
        for line in code.splitlines():
            if line.lstrip().startswith("#"):
                assert re.match(r"\s*#\s*(include|define TINYAOT_\w+|ifndef|ifdef|endif|if|else|elif|undef)\b",
                                line), f"unexpected preprocessor line in {name}: {line!r}"
        # Identifiers are plain ASCII C identifiers.
        assert all(ch == "\n" or 32 <= ord(ch) < 127 for ch in text)
    # A name kept as data (the layer-name table) is the name with every character outside printable ASCII replaced
    # by '?': no newline, and no quote that could end its literal early.
    kept = [n for n in (EVIL_NODE, EVIL_RELU) if n in names]
    assert kept and all("".join(ch if 32 <= ord(ch) < 127 else "?" for ch in n) in decoded for n in kept), decoded


def test_conv_with_4d_output_verifies(tmp_path):
    # A 4-D graph output is computed in NHWC and moved back to NCHW by a tensor the passes add: it needs the
    # calibrated range of the output (this used to fail with "calibration produced no range for 'y_nhwc'").
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.normal(0, 0.5, (3, 2, 3, 3)).astype(np.float32), "W")
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "W"], ["c"], name="conv", strides=[2, 2], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"], name="relu")],
        "conv4d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 7, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])], [w])
    model = tmp_path / "conv4d.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(model))
    cal = tmp_path / "cal.npz"
    np.savez(cal, x=rng.normal(size=(10, 1, 2, 7, 7)).astype(np.float32))
    out = tmp_path / "out"
    ok(run("deploy", model, "--board", "an386", "--calibration", cal, "--out", out))
    v = json.loads((out / "report.json").read_text())["verify"]
    assert v["outputs_match"] is True and v["max_abs_diff_vs_reference"] == 0
    assert v["max_abs_diff_vs_onnxruntime"] <= 1


# ---- evaluate ----------------------------------------------------------------------------------------------------

def test_evaluate_writes_json(tmp_path, sine_cal):
    # The sine model regresses, so "top-1" over its one output is trivially 1.0; this checks the plumbing.
    data = tmp_path / "data.npz"
    np.savez(data, x=np.linspace(0.1, 6.2, 20, dtype=np.float32).reshape(20, 1), y=np.zeros(20, np.int64))
    js = tmp_path / "figures.json"
    lines = ok(run("evaluate", SINE, "-c", sine_cal, "-d", data, "--json", js, "--no-onnxruntime"))
    figures = json.loads(js.read_text())
    assert figures["samples"] == 20 and figures["calibration_samples"] == 50
    assert figures["host_c_matches_reference"] is True
    assert figures["onnxruntime_int8_top1"] is None
    assert lines and lines[0].startswith("20 samples: float 100.00 %")


def test_deploy_with_clusters_budget(tmp_path, sine_cal):
    """--clusters-budget bounds the bits per weight (codebooks included) that clustering may spend: a tighter
    budget never stores more bytes than a looser one, and both verify. The sine model's layers are fully connected
    at batch 1, which --clusters puts on an evenly spaced grid by default: the spec keeps their codebooks."""
    stored = {}
    spec = tmp_path / "codebook.toml"
    spec.write_text('cluster_fc = "codebook"\n')
    for budget in ("2.5", "8"):
        out = tmp_path / f"out{budget}"
        r = run("deploy", MODELS / "tflm_hello_world_sine.onnx", "--board", "stm32", "--calibration", sine_cal,
                "--out", out, "--clusters", "4", "--clusters-budget", budget, "--compression", spec)
        assert r.exit_code == 0, r.output
        report = json.loads((out / "report.json").read_text())
        assert report["verify"]["outputs_match"] and report["compression"]["clusters"] == 4
        assert "clustered" in {l.get("storage") for l in report["layers"]}
        stored[budget] = report["memory"]["weights_bytes"]
    assert stored["2.5"] <= stored["8"] < 288  # 288 = the three layers' weights as dense int8
    bad = run("deploy", MODELS / "tflm_hello_world_sine.onnx", "--calibration", sine_cal, "--out", tmp_path / "b",
              "--clusters", "4", "--clusters-budget", "0")
    assert bad.exit_code != 0 and "clusters_budget" in bad.output and not (tmp_path / "b").exists()


def test_deploy_aligned_only(tmp_path, sine_cal):
    """--aligned-only: every build of the folder compiles with -mno-unaligned-access (its Makefile and CMakeLists
    too), the header and both reports say so, and the verification firmware runs invoke with CCR.UNALIGN_TRP set
    (the harness's store to 0xE000ED14 is in the ELF only for a build without unaligned access)."""
    out = tmp_path / "aligned"
    ok(run("deploy", SINE, "-b", "stm32", "-c", sine_cal, "-o", out, "--aligned-only", "--verify-samples", "2"))
    report = json.loads((out / "report.json").read_text())
    assert report["target"]["aligned_only"] is True and report["verify"]["outputs_match"] is True
    assert "-mno-unaligned-access" in (out / "Makefile").read_text() + (out / "tflm_hello_world_sine.mk").read_text()
    assert "-mno-unaligned-access" in (out / "CMakeLists.txt").read_text()
    assert "This folder is built aligned-only" in (out / "tflm_hello_world_sine.h").read_text()
    assert "built aligned-only" in (out / "report.md").read_text()
    lines = subprocess.run(["arm-none-eabi-objdump", "-d", str(out / "firmware" / "firmware.elf")],
                           capture_output=True, text=True, timeout=60).stdout.splitlines()
    # CCR (0xE000ED14, at 0xd14 from the SCS base) read, bit 3 (UNALIGN_TRP) set, written back
    sets = [k for k, line in enumerate(lines) if re.search(r"\borr(\.w)?\s+(\w+), \2, #8$", line)
            and any(re.search(r"\bstr(\.w)?\s+" + re.search(r"orr(?:\.w)?\s+(\w+),", line).group(1)
                              + r", \[\w+, #3348\]", later) for later in lines[k + 1:k + 4])]
    assert sets, "no CCR.UNALIGN_TRP set in the verification firmware"


def test_aligned_only_is_automatic_without_unaligned_access(tmp_path, sine_cal):
    """A Cortex-M0 board has no unaligned access: its folder is aligned-only without asking, and asking otherwise is
    a usage error (exit 2, one line); a Cortex-M4 folder is not, by default."""
    r = run("deploy", SINE, "-b", "microbit", "-c", sine_cal, "-o", tmp_path / "m0", "--no-verify")
    ok(r)
    report = json.loads((tmp_path / "m0" / "report.json").read_text())
    assert report["target"]["aligned_only"] is True
    assert "-mno-unaligned-access" in (tmp_path / "m0" / "CMakeLists.txt").read_text()
    r = run("deploy", SINE, "-b", "microbit", "-c", sine_cal, "-o", tmp_path / "no", "--no-aligned-only")
    assert r.exit_code == 2 and "has no unaligned access" in r.output and not (tmp_path / "no").exists()
    ok(run("deploy", SINE, "-b", "stm32", "-c", sine_cal, "-o", tmp_path / "m4", "--no-verify"))
    assert json.loads((tmp_path / "m4" / "report.json").read_text())["target"]["aligned_only"] is False
    assert "-mno-unaligned-access" not in (tmp_path / "m4" / "CMakeLists.txt").read_text()
