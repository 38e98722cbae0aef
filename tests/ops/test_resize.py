"""Resize (mode nearest) end to end: the compile-time index maps against onnxruntime's float Resize over every
coordinate_transformation_mode and nearest_mode tinyaot supports (scales and sizes inputs, opset 10's Resize), tiny
models deployed for mps2-an386 (C under QEMU == numpy reference; a copy of int8 values under the input's parameters
equals onnxruntime's QDQ Resize exactly, 0 LSB), the C kernel against the reference on the host, and the refusals
(linear, cubic, tf_crop_and_resize, resizing channels) with a one-line error naming the node."""
from __future__ import annotations

import ctypes

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tinyaot.api import compile_model
from tinyaot.errors import TinyaotError
from tinyaot.ops.resize import COORDINATE_MODES, NEAREST_MODES, nearest_index_map, resize_nearest_s8
from tinyaot.oracle.sessions import session_options  # one thread, as tinyaot's own sessions

from op_models import calibration, conv_node, deploy_verified, save_model
from spatial_models import Dims, float_model_gap, host_kernels, layer_diff, ptr, ref


def _ort_index_map(in_size, scale=None, size=None, opset=13, **attrs) -> np.ndarray:
    """The input index onnxruntime's float Resize copies to each output index along H (W is left alone), read off
    an input whose values are their own indices."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, in_size, 1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    if opset == 10:
        inits = [numpy_helper.from_array(np.array([1, 1, scale, 1], np.float32), "s")]
        names = ["x", "s"]
    elif scale is not None:
        inits = [numpy_helper.from_array(np.array([1, 1, scale, 1], np.float32), "s")]
        names = ["x", "", "s"]
    else:
        inits = [numpy_helper.from_array(np.array([1, 1, size, 1], np.int64), "z")]
        names = ["x", "", "", "z"]
    model = helper.make_model(helper.make_graph([helper.make_node("Resize", names, ["y"], mode="nearest", **attrs)],
                                                "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", opset)])
    opts = session_options()
    opts.log_severity_level = 3  # tf_half_pixel_for_nn is deprecated since opset 13: a warning per session
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": np.arange(in_size, dtype=np.float32).reshape(1, 1, in_size, 1)})[0].ravel()


# Scales chosen to hit ties (x.5 coordinates, with float32 error around them: 2/7, 16/7), an unchanged size under
# a scale other than 1 (1.2 on 4 and 5 pixels), downscales and upscales.
SCALES = (2.0, 3.0, 0.5, 1.5, 1.2, 0.6, 2.5, np.float32(2 / 7), np.float32(16 / 7), 1 / 3)
IN_SIZES = (4, 5, 7)


@pytest.mark.parametrize("mode", COORDINATE_MODES)
def test_index_maps_match_onnxruntime_with_scales(mode):
    for nm in NEAREST_MODES:
        for in_size in IN_SIZES:
            for scale in SCALES:
                out = int(np.floor(np.float32(in_size) * np.float32(scale)))
                if out < 1:
                    continue
                want = _ort_index_map(in_size, scale=scale, coordinate_transformation_mode=mode, nearest_mode=nm)
                got = nearest_index_map(in_size, out, float(np.float32(scale)), mode, nm)
                assert got.tolist() == want.tolist(), (mode, nm, in_size, scale)


@pytest.mark.parametrize("mode", COORDINATE_MODES)
def test_index_maps_match_onnxruntime_with_sizes(mode):
    for nm in NEAREST_MODES:
        for in_size in IN_SIZES:
            for out in (1, 2, 3, 6, 9, 14):
                want = _ort_index_map(in_size, size=out, coordinate_transformation_mode=mode, nearest_mode=nm)
                scale = float(np.float32(out) / np.float32(in_size))  # what `sizes` means for the coordinates
                got = nearest_index_map(in_size, out, scale, mode, nm)
                assert got.tolist() == want.tolist(), (mode, nm, in_size, out)


def test_index_maps_match_onnxruntime_for_opset_10():
    for in_size in IN_SIZES:
        for scale in SCALES:
            out = int(np.floor(np.float32(in_size) * np.float32(scale)))
            if out >= 1:
                want = _ort_index_map(in_size, scale=scale, opset=10)
                got = nearest_index_map(in_size, out, float(np.float32(scale)), "asymmetric", "simple")
                assert got.tolist() == want.tolist(), (in_size, scale)


def test_float32_near_ties_round_like_onnxruntime():
    """1 / float32(2/7) is 3.4999998 in float32: onnxruntime still calls it a tie (round_prefer_ceil picks 4);
    plain float rounding would pick 3. And 4 pixels under scale 1.2 stay 4 pixels copied one to one."""
    assert nearest_index_map(7, 2, float(np.float32(2 / 7)), "asymmetric", "round_prefer_ceil").tolist() == [0, 4]
    assert nearest_index_map(7, 2, float(np.float32(2 / 7)), "asymmetric", "round_prefer_floor").tolist() == [0, 3]
    assert nearest_index_map(4, 4, 1.2, "asymmetric", "round_prefer_floor").tolist() == [0, 1, 2, 3]


def _resize_model(tmp_path, in_shape, out_shape, *, scales=None, sizes=None, opset=13, pre_conv=False, **attrs):
    inits, names = [], ["c" if pre_conv else "x"]
    if opset == 10:
        inits.append(numpy_helper.from_array(np.asarray(scales, np.float32), "scales"))
        names.append("scales")
    else:
        names.append("")
        if scales is not None:
            inits.append(numpy_helper.from_array(np.asarray(scales, np.float32), "scales"))
            names.append("scales")
        else:
            inits.append(numpy_helper.from_array(np.asarray(sizes, np.int64), "sizes"))
            names += ["", "sizes"]
    nodes = [helper.make_node("Resize", names, ["y"], name="up", **attrs)]
    x_shape = list(in_shape)
    if pre_conv:
        conv, conv_inits = conv_node("x", "c", "w", 2, in_shape[1])
        nodes.insert(0, conv)
        inits += conv_inits
        x_shape[1] = 2
    return save_model(tmp_path / "resize.onnx", nodes, x_shape, out_shape, inits, opset=opset)


@pytest.mark.parametrize("kind", ["upsample2x_after_conv", "sizes_half_pixel", "align_corners_mixed", "opset10"])
def test_resize_deploys_exactly(tmp_path, kind):
    in_shape = [1, 3, 4, 5]
    if kind == "upsample2x_after_conv":  # PyTorch's nn.Upsample(scale_factor=2) after a conv: stays NHWC
        m = _resize_model(tmp_path, in_shape, [1, 3, 8, 10], scales=[1, 1, 2, 2], pre_conv=True, mode="nearest",
                          coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    elif kind == "sizes_half_pixel":
        m = _resize_model(tmp_path, in_shape, [1, 3, 7, 3], sizes=[1, 3, 7, 3], mode="nearest",
                          coordinate_transformation_mode="half_pixel", nearest_mode="round_prefer_ceil")
    elif kind == "align_corners_mixed":
        m = _resize_model(tmp_path, in_shape, [1, 3, 2, 12], scales=[1, 1, 0.6, 2.5], mode="nearest",
                          coordinate_transformation_mode="align_corners")
    else:
        m = _resize_model(tmp_path, in_shape, [1, 3, 12, 7], scales=[1, 1, 3, 1.5], opset=10, mode="nearest")
    x_shape = [1, 2, 4, 5] if kind == "upsample2x_after_conv" else in_shape
    cal = calibration(tmp_path / "cal.npz", x_shape)
    report = deploy_verified(m, cal, tmp_path / "out")
    assert layer_diff(report, "Resize") == 0
    assert [l["kernel"] for l in report["layers"] if l["op"] == "Resize"] == ["tinyaot_resize_nearest_s8"]
    # against the float model: only the input's rounding remains (half an LSB; Resize copies)
    assert float_model_gap(m, cal) <= 0.5 + 1e-3 + (1.0 if kind == "upsample2x_after_conv" else 0.0)


@pytest.mark.parametrize("attrs, words", [
    (dict(mode="linear"), "mode 'linear' is not supported; only mode 'nearest'"),
    (dict(mode="cubic"), "mode 'cubic' is not supported; only mode 'nearest'"),
    (dict(mode="nearest", coordinate_transformation_mode="tf_crop_and_resize"), "'tf_crop_and_resize' is not"),
])
def test_refused_with_a_one_line_error_naming_the_node(tmp_path, attrs, words):
    m = _resize_model(tmp_path, [1, 3, 4, 5], [1, 3, 8, 10], scales=[1, 1, 2, 2], **attrs)
    with pytest.raises(TinyaotError) as err:
        compile_model(m, calibration(tmp_path / "cal.npz", [1, 3, 4, 5], n=2))
    msg = str(err.value)
    assert "Resize node 'up'" in msg and words in msg and "\n" not in msg


def test_resizing_channels_is_refused(tmp_path):
    m = _resize_model(tmp_path, [1, 3, 4, 5], [1, 6, 4, 5], scales=[1, 2, 1, 1], mode="nearest")
    with pytest.raises(TinyaotError, match="Resize node 'up': only H and W may be resized"):
        compile_model(m, calibration(tmp_path / "cal.npz", [1, 3, 4, 5], n=2))


def test_c_kernel_matches_reference_on_random_maps():
    lib = host_kernels("tinyaot_resize_nearest_s8.c")
    fn = lib.tinyaot_resize_nearest_s8
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p] * 6
    rng = np.random.default_rng(9)
    for _ in range(40):
        n, h, w, c = (int(v) for v in rng.integers(1, 6, 4))
        oh, ow = int(rng.integers(1, 12)), int(rng.integers(1, 12))
        y_map = np.sort(rng.integers(0, h, oh)).astype(np.int32)  # repeated rows take the row-copy path
        x_map = rng.integers(0, w, ow).astype(np.int32)
        x = rng.integers(-128, 128, (n, h, w, c), dtype=np.int8)
        out = np.full((n, oh, ow, c), 99, np.int8)
        in_d, o_d = Dims(n, h, w, c), Dims(n, oh, ow, c)
        fn(ptr(x), ref(in_d), ptr(y_map), ptr(x_map), ref(o_d), ptr(out))
        assert np.array_equal(out, resize_nearest_s8(x, y_map, x_map))
