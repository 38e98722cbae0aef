"""ReduceMean over the spatial axes (H, W of NCHW): the global average of each channel, TFLite MEAN style.

Unlike pooling that keeps its input's parameters, the mean gets its own calibrated output parameters: averaging
narrows the range, so at the input's scale most int8 codes would go unused. The integer algorithm is TFLite's
integer MEAN: sum (x + input_offset) over H*W in int32, then one requantization by the multiplier
s_in / (s_out * H * W) (the 1/(H*W) folded in) plus the output zero point. That is exactly average pooling with
a full H x W window, so the reference and the C kernel are the requantizing average pool's
(`pool.avgpool_requant_s8`, `tinyaot_avgpool_requant_s8`). Against onnxruntime's float mean, rounded half to even,
the two fixed-point roundings differ by at most one LSB.

Only axes {2, 3} of a 4-D tensor (either order, negative allowed), keepdims 0 or 1, are supported; any other
reduction is refused with the node's name.
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from tinyaot.core.errors import TinyaotError
from tinyaot.ops.common import NHWC, activation_nodes, batch_reshape, identity_perm, nhwc_oracle, out_params
from tinyaot.core.fixedpoint import quantize_multiplier
from tinyaot.core.quant import input_magnitude
from tinyaot.ops.intbounds import epilogue
from tinyaot.ops.pool import avgpool_requant_s8
from tinyaot.ops.registry import KernelCall, OpSpec, OracleLayer, register, Traits

KERNEL = "tinyaot_avgpool_requant_s8"


def check_spatial_mean(node, graph, in_logical) -> None:
    """Refuse, naming the node, a ReduceMean that is not the mean over H and W of a 4-D tensor. The axes come from
    the attribute (opset < 18) or the constant second input (opset 18); called by `to_nhwc` before the layout
    changes, while the axes still refer to NCHW."""
    where = f"ReduceMean node {node.name!r}"
    axes = node.attrs.get("axes")
    if len(node.inputs) > 1 and node.inputs[1]:
        t = graph.tensors[node.inputs[1]]
        if not t.is_const:
            raise TinyaotError(f"{where}: its axes input must be a constant")
        axes = [int(v) for v in np.asarray(t.data).reshape(-1)]
    rank = len(in_logical)
    if axes is None or len(axes) == 0:
        if int(node.attrs.get("noop_with_empty_axes", 0)):
            raise TinyaotError(f"{where}: an empty axes list with noop_with_empty_axes=1 (a no-op) is not supported")
        axes = list(range(rank))  # ONNX: no axes means every axis
    norm = sorted(int(a) % rank for a in axes)
    if rank != 4 or norm != [2, 3]:
        raise TinyaotError(f"{where}: only the mean over H and W (axes [2, 3] of a 4-D NCHW tensor) is supported, "
                           f"got axes {list(axes)} of a {rank}-D tensor {list(in_logical)}")
    node.attrs["keepdims"] = int(node.attrs.get("keepdims", 1))
    node.attrs.pop("axes", None)
    node.inputs[:] = node.inputs[:1]  # the axes are read; the int64 constant has no place in the int8 graph


@register("ReduceMean", traits=Traits(layout="spatial", fuses_activation=True, kernels=("tinyaot_avgpool_requant_s8",)))
class ReduceMean(OpSpec):
    """ONNX ReduceMean over H and W, in NHWC after `to_nhwc`: input [N, H, W, C], output [N, 1, 1, C] (keepdims 1)
    or [N, C] (keepdims 0), the same bytes either way."""

    def layer_class(self, node):
        return "pooling"  # a global average, as GlobalAveragePool

    def layout(self, node, ctx):
        """NHWC in; the output [N, C, 1, 1] (keepdims) or [N, C]: the same bytes either way."""
        check_spatial_mean(node, ctx.graph, ctx.logical[node.inputs[0]])
        node.inputs[0] = ctx.ensure(node.inputs[0], NHWC, node)
        out = node.outputs[0]
        shape = ctx.graph.tensors[out].shape
        ctx.set_out(out, shape, NHWC if len(shape) == 4 else identity_perm(len(shape)))
        ctx.emit(node)
        return True

    def lifts_1d(self, node, graph):
        """Over [N, C, L] only a mean over L (axes [2]) is the 1-D layer (a global average over L)."""
        axes = node.attrs.get("axes")
        if len(node.inputs) > 1 and node.inputs[1]:
            t = graph.tensors[node.inputs[1]]
            axes = [int(v) for v in np.asarray(t.data).reshape(-1)] if t.is_const else None
        return bool(axes) and sorted(int(a) % 3 for a in axes) == [2]

    def lift_1d(self, node, graph):
        node.inputs[:] = node.inputs[:1]
        node.attrs["axes"] = [2, 3]

    def infer_shapes(self, node, graph):
        if graph.layout != "NHWC":
            return None
        n, _, _, c = graph.tensors[node.inputs[0]].shape
        return [(n, 1, 1, c) if node.attrs["keepdims"] else (n, c)]

    def quantize(self, node, graph, ranges):
        q = graph.tensors[node.inputs[0]].quant
        qo, lo, hi = out_params(node, graph, ranges)
        _, h, w, _ = graph.tensors[node.inputs[0]].shape
        mult, shift = quantize_multiplier(np.float64(q.s) / (np.float64(qo.s) * h * w))
        node.attrs.update(input_offset=-q.zp, output_offset=qo.zp, output_mult=mult, output_shift=shift,
                          act_min=lo, act_max=hi)

    def reference(self, node, graph, inputs):
        a = node.attrs
        _, h, w, _ = inputs[0].shape
        y = avgpool_requant_s8(inputs[0], kernel_hw=(h, w), stride_hw=(1, 1), output_hw=(1, 1),
                               input_offset=a["input_offset"], output_offset=a["output_offset"],
                               mult=a["output_mult"], shift=a["output_shift"], act_min=a["act_min"],
                               act_max=a["act_max"])
        return [batch_reshape(y, graph.tensors[node.outputs[0]].shape)]

    def batches_reference(self, node, graph):
        return True  # the pool over H, W of [N, H, W, C]

    def macs(self, node, graph):
        return graph.tensors[node.inputs[0]].size

    def params_bytes(self, node, graph):
        return 8  # one multiplier and shift

    def int_bounds(self, node, graph):
        """The sum over the whole H x W plane, as average pooling's window sum."""
        a = node.attrs
        _, h, w, _ = graph.tensors[node.inputs[0]].shape
        s = input_magnitude(a["input_offset"]) * int(h) * int(w)
        items = [(f"sum over {h} x {w} values", s)]
        epilogue(items, [s], a["output_mult"], a["output_shift"], a["output_offset"])
        return items

    def render(self, node, graph, cname):
        a = node.attrs
        n, h, w, c = graph.tensors[node.inputs[0]].shape
        params = {"variant": "requant", "stride": [1, 1], "padding": [0, 0], "activation": [a["act_min"], a["act_max"]],
                  "input_dims": [n, h, w, c], "filter_dims": [1, h, w, 1], "output_dims": [n, 1, 1, c],
                  "input_offset": a["input_offset"], "output_offset": a["output_offset"],
                  "output_mult": a["output_mult"], "output_shift": a["output_shift"]}
        return KernelCall(KERNEL, files=[KERNEL + ".c"], template="layers/pool.c.j2", params=params)

    def oracle(self, node, graph):
        def core(ins):
            mean = helper.make_node("ReduceMean", ins[:1], ["mean_out"], axes=[2, 3],
                                    keepdims=node.attrs["keepdims"])
            n2, i2, out = activation_nodes(node, "mean_out")
            return [mean] + n2, i2, out

        nodes, inits, out = nhwc_oracle(graph, node, core)
        return OracleLayer(nodes, inits, out)
