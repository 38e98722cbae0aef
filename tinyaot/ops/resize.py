"""Resize with mode "nearest": every output pixel copies one input pixel, so the int8 op is a gather through two
index maps (one per spatial axis) computed at compile time. The output keeps the input's scale and zero point
(copying a value cannot change its range), so the int8 result equals onnxruntime's QDQ result exactly.

The maps follow ONNX's definitions (coordinate_transformation_mode asymmetric, half_pixel, pytorch_half_pixel,
align_corners, tf_half_pixel_for_nn; nearest_mode round_prefer_floor, round_prefer_ceil, floor, ceil; opset 10's
Resize: asymmetric, truncating when upsampling and rounding up when downsampling), evaluated the way onnxruntime
evaluates them, because onnxruntime is what calibrates the model and checks each layer, and one different index
moves a whole row:
  - coordinates in float32 (with `sizes`, the scale is the float32 ratio out / in);
  - an axis whose size does not change is copied as is, whatever the scale says (scale 1.2 on 4 pixels gives 4);
  - round_prefer_floor / round_prefer_ceil call a value within 1e-6 of k + 0.5 a tie, so that 1 / float32(2/7) =
    3.4999998 rounds like 3.5 (measured on onnxruntime 1.32 in tests/ops/test_resize.py; the ONNX reference
    evaluator, with plain float rounding, disagrees there).
Linear and cubic modes, tf_crop_and_resize, half_pixel_symmetric, keep_aspect_ratio_policy other than stretch,
and resizing N or C are refused with the node's name.
"""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from tinyaot.core.errors import TinyaotError
from tinyaot.ops.common import new_float32_const, new_int64_const, nhwc_oracle
from tinyaot.ops.registry import ConstArray, KernelCall, OpSpec, OracleLayer, register, Traits

KERNEL = "tinyaot_resize_nearest_s8"
COORDINATE_MODES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
TIE_TOLERANCE = 1e-6  # onnxruntime's: see the module docstring


def original_coordinates(out_size: int, in_size: int, scale: float, mode: str) -> np.ndarray:
    """ONNX's x_original for every output index, in float32 as onnxruntime computes it."""
    f = np.float32
    x = np.arange(out_size, dtype=f)
    s = f(scale)
    if mode == "asymmetric":
        return x / s
    if mode == "half_pixel":
        return (x + f(0.5)) / s - f(0.5)
    if mode == "pytorch_half_pixel":
        return (x + f(0.5)) / s - f(0.5) if out_size > 1 else np.zeros(out_size, f)
    if mode == "tf_half_pixel_for_nn":
        return (x + f(0.5)) / s
    if mode == "align_corners":
        return x * f(in_size - 1) / f(out_size - 1) if out_size > 1 else np.zeros(out_size, f)
    raise ValueError(f"unknown coordinate_transformation_mode {mode!r}")


def nearest_index_map(in_size: int, out_size: int, scale: float, mode: str, nearest_mode: str) -> np.ndarray:
    """The input index each output index copies (int32), clamped to the input. nearest_mode "simple" is opset 10's:
    truncate when upsampling, round up when downsampling."""
    if out_size == in_size:
        return np.arange(out_size, dtype=np.int32)
    xo = original_coordinates(out_size, in_size, scale, mode).astype(np.float64)
    fl = np.floor(xo)
    if nearest_mode == "simple":
        idx = np.ceil(xo) if np.float32(scale) < 1 else np.trunc(xo)
    elif nearest_mode == "floor":
        idx = fl
    elif nearest_mode == "ceil":
        idx = np.ceil(xo)
    elif nearest_mode in ("round_prefer_floor", "round_prefer_ceil"):
        frac = xo - fl
        tie = np.abs(frac - 0.5) < TIE_TOLERANCE
        idx = np.where(tie, fl + (nearest_mode == "round_prefer_ceil"), np.where(frac > 0.5, fl + 1, fl))
    else:
        raise ValueError(f"unknown nearest_mode {nearest_mode!r}")
    return np.clip(idx, 0, in_size - 1).astype(np.int32)


def resize_nearest_s8(input: np.ndarray, y_map, x_map) -> np.ndarray:
    """int8 NHWC nearest resize: output[n, y, x, c] = input[n, y_map[y], x_map[x], c]."""
    x = np.asarray(input)
    return np.ascontiguousarray(x[:, np.asarray(y_map)][:, :, np.asarray(x_map)])


def _const(graph, node, k: int, what: str):
    if len(node.inputs) <= k or not node.inputs[k]:
        return None
    t = graph.tensors[node.inputs[k]]
    if not t.is_const:
        raise TinyaotError(f"Resize node {node.name!r}: its {what} input must be a constant (computed at compile "
                           "time)")
    data = np.asarray(t.data).reshape(-1)
    return data if data.size else None


def prepare_resize(node, graph, in_logical, out_logical) -> None:
    """Validate a Resize and compute its index maps before the layout changes (the `to_nhwc` pass calls this, while
    shapes are still NCHW). Stores the maps and what the onnxruntime oracle needs in node.attrs and keeps only the
    data input."""
    a = node.attrs
    where = f"Resize node {node.name!r}"
    mode = a.get("mode", "nearest")
    if mode != "nearest":
        raise TinyaotError(f"{where}: mode {mode!r} is not supported; only mode 'nearest' is (int8 index maps)")
    if len(in_logical) != 4:
        raise TinyaotError(f"{where}: only 4-D NCHW inputs are supported, got {list(in_logical)}")
    opset10 = len(node.inputs) == 2  # Resize-10 is (X, scales); from opset 11 on roi comes second
    scales = _const(graph, node, 1 if opset10 else 2, "scales")
    sizes = None if opset10 else _const(graph, node, 3, "sizes")
    ctm = "asymmetric" if opset10 else a.get("coordinate_transformation_mode", "half_pixel")
    nearest = "simple" if opset10 else a.get("nearest_mode", "round_prefer_floor")
    if ctm not in COORDINATE_MODES:
        raise TinyaotError(f"{where}: coordinate_transformation_mode {ctm!r} is not supported (supported: "
                           f"{', '.join(COORDINATE_MODES)})")
    if nearest not in NEAREST_MODES + ("simple",):
        raise TinyaotError(f"{where}: nearest_mode {nearest!r} is not supported")
    if a.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise TinyaotError(f"{where}: keep_aspect_ratio_policy {a['keep_aspect_ratio_policy']!r} is not supported "
                           "(only 'stretch')")
    axes = [int(x) % 4 for x in a.get("axes", [0, 1, 2, 3])]

    def full(values, default):  # opset 18's axes: values for the listed axes only
        out = list(default)
        for ax, v in zip(axes, values):
            out[ax] = v
        return out

    if scales is not None:
        scales = np.asarray(full(scales.astype(np.float32), [1.0] * 4), np.float32)
        axis_scales = [float(scales[2]), float(scales[3])]
    elif sizes is not None:
        sizes = np.asarray(full(sizes.astype(np.int64), in_logical), np.int64)
        axis_scales = [float(np.float32(sizes[i]) / np.float32(in_logical[i])) for i in (2, 3)]
    else:
        raise TinyaotError(f"{where}: neither scales nor sizes is given")
    if tuple(out_logical[:2]) != tuple(in_logical[:2]) or (scales is not None and list(scales[:2]) != [1.0, 1.0]):
        raise TinyaotError(f"{where}: only H and W may be resized (input {list(in_logical)}, output "
                           f"{list(out_logical)})")
    maps = [nearest_index_map(in_logical[2 + i], out_logical[2 + i], axis_scales[i], ctm, nearest) for i in (0, 1)]
    if nearest == "simple":  # the same rule in opset 13's words, for the oracle (unchanged axes are copies)
        shrinks = {axis_scales[i] < 1 for i in (0, 1) if out_logical[2 + i] != in_logical[2 + i]}
        if len(shrinks) > 1:
            raise TinyaotError(f"{where}: an opset-10 Resize that shrinks one axis and grows the other is not "
                               "supported")
        nearest = "ceil" if shrinks == {True} else "floor"
    a.clear()
    a.update(coordinate_transformation_mode=ctm, nearest_mode=nearest, _y_map=maps[0], _x_map=maps[1],
             _scales=scales, _sizes=sizes)
    node.inputs[:] = node.inputs[:1]


@register("Resize", traits=Traits(layout="spatial", layer_1d=True, kernels=("tinyaot_resize_nearest_s8",)))
class Resize(OpSpec):
    """ONNX Resize, mode nearest, in NHWC after `to_nhwc` (see `prepare_resize`)."""

    def layout(self, node, ctx):
        """NHWC, its index maps prepared here, before shapes turn physical."""
        prepare_resize(node, ctx.graph, ctx.logical[node.inputs[0]], ctx.graph.tensors[node.outputs[0]].shape)
        ctx.spatial(node)
        return True

    def lift_1d(self, node, graph):
        """axes, or roi / scales / sizes, gain the new H axis (roi 0..1, scale 1.0, size 1) before L."""
        a = node.attrs
        if "axes" in a:
            a["axes"] = [3 if int(x) % 3 == 2 else int(x) % 3 for x in a["axes"]]
            return
        for k, fill in ((1, None), (2, 1.0), (3, 1)):
            name = node.inputs[k] if len(node.inputs) > k else ""
            if not name or graph.tensors[name].data is None or graph.tensors[name].data.size == 0:
                continue
            v = np.asarray(graph.tensors[name].data).reshape(-1)
            if k == 1 and len(node.inputs) > 2:  # roi: [begins..., ends...]
                if v.size == 6:
                    v = np.concatenate([v[:2], [0], v[2:5], [1], v[5:]])
                node.inputs[k] = new_float32_const(graph, name + "_2d", v)
                continue
            if k == 1:  # Resize-10: (X, scales)
                fill = 1.0
            v = np.concatenate([v[:2], [fill], v[2:]])
            node.inputs[k] = (new_int64_const if k == 3 else new_float32_const)(graph, name + "_2d", v)

    def infer_shapes(self, node, graph):
        if graph.layout != "NHWC":
            return None
        n, _, _, c = graph.tensors[node.inputs[0]].shape
        return [(n, len(node.attrs["_y_map"]), len(node.attrs["_x_map"]), c)]

    def quantize(self, node, graph, ranges):
        # a copy of input values: the input's parameters represent the output exactly
        graph.tensors[node.outputs[0]].quant = graph.tensors[node.inputs[0]].quant

    def reference(self, node, graph, inputs):
        return [resize_nearest_s8(inputs[0], node.attrs["_y_map"], node.attrs["_x_map"])]

    def params_bytes(self, node, graph):
        return 4 * (len(node.attrs["_y_map"]) + len(node.attrs["_x_map"]))

    def render(self, node, graph, cname):
        x = graph.tensors[node.inputs[0]].shape
        o = graph.tensors[node.outputs[0]].shape
        consts = [ConstArray("int32_t", f"{cname}_y_map", node.attrs["_y_map"]),
                  ConstArray("int32_t", f"{cname}_x_map", node.attrs["_x_map"])]
        return KernelCall(KERNEL, files=[KERNEL + ".c"], consts=consts, template="layers/resize.c.j2",
                          params={"input_dims": list(x), "output_dims": list(o), "y_map": f"{cname}_y_map",
                                  "x_map": f"{cname}_x_map"})

    def oracle(self, node, graph):
        a = node.attrs

        def core(ins):
            inits, names = [], [ins[0], ""]
            if a["_scales"] is not None:
                inits.append(numpy_helper.from_array(a["_scales"], node.name + "_scales"))
                names.append(inits[-1].name)
            else:
                inits.append(numpy_helper.from_array(a["_sizes"], node.name + "_sizes"))
                names += ["", inits[-1].name]
            resize = helper.make_node("Resize", names, ["resize_out"], mode="nearest",
                                      coordinate_transformation_mode=a["coordinate_transformation_mode"],
                                      nearest_mode=a["nearest_mode"])
            return [resize], inits, "resize_out"

        nodes, inits, out = nhwc_oracle(graph, node, core)
        return OracleLayer(nodes, inits, out)
