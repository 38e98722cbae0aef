from tinyaot.ops.pool import avgpool_s8, maxpool_s8
import numpy as np
from onnx import helper

from tinyaot.codegen.cfmt import c_dims
from tinyaot.compress.quantize import activation_clamp
from tinyaot.errors import TinyaotError
from tinyaot.ops.common import activation_nodes, nhwc_oracle, spatial_out
from tinyaot.ops.registry import KernelCall, OracleLayer, OpSpec, register
# ---- appended below the reference kernels ------------------------------------------------------------------


class _Pool(OpSpec):
    """Shared by MaxPool, AveragePool and GlobalAveragePool: NHWC int8 pooling that keeps the input's
    quantization parameters (as TFLite's int8 pooling does), so no requantization is needed."""

    kernel = ""

    def _geometry(self, node, graph):
        if node.op == "GlobalAveragePool":
            _, h, w, _ = graph.tensors[node.inputs[0]].shape
            return (h, w), (1, 1), [0, 0, 0, 0]
        a = node.attrs
        if int(a.get("ceil_mode", 0)):
            raise TinyaotError(f"{node.op} node {node.name!r}: ceil_mode=1 is not supported yet")
        if tuple(a.get("dilations", (1, 1))) != (1, 1):
            raise TinyaotError(f"{node.op} node {node.name!r}: dilated pooling is not supported")
        pads = list(a.get("pads", (0, 0, 0, 0)))
        if node.op == "AveragePool" and int(a.get("count_include_pad", 0)) and any(pads):
            raise TinyaotError(f"AveragePool node {node.name!r}: count_include_pad=1 with padding is not supported")
        return tuple(a["kernel_shape"]), tuple(a.get("strides", (1, 1))), pads

    def infer_shapes(self, node, graph):
        if graph.layout != "NHWC":
            return None
        n, h, w, c = graph.tensors[node.inputs[0]].shape
        k, s, p = self._geometry(node, graph)
        return [(n, *spatial_out((h, w), k, s, p), c)]

    def quantize(self, node, graph, ranges):
        q = graph.tensors[node.inputs[0]].quant
        graph.tensors[node.outputs[0]].quant = q
        node.attrs["act_min"], node.attrs["act_max"] = activation_clamp(q, node.attrs.get("activation"))

    def reference(self, node, graph, inputs):
        k, s, p = self._geometry(node, graph)
        out = graph.tensors[node.outputs[0]].shape
        fn = maxpool_s8 if node.op == "MaxPool" else avgpool_s8
        return [fn(inputs[0], kernel_hw=k, stride_hw=s, pad_top_left=(p[0], p[1]), output_hw=out[1:3],
                   act_min=node.attrs["act_min"], act_max=node.attrs["act_max"])]

    def scratch_bytes(self, node, graph):
        return int(node.attrs.get("scratch_bytes", 0))

    def macs(self, node, graph):
        k, _, _ = self._geometry(node, graph)
        return int(np.prod(graph.tensors[node.outputs[0]].shape) * k[0] * k[1])

    def render(self, node, graph, cname):
        k, s, p = self._geometry(node, graph)
        x = graph.tensors[node.inputs[0]].shape
        o = graph.tensors[node.outputs[0]].shape
        a = node.attrs
        code = f"""static const tinyaot_pool_params pool_params = {{
    .stride = {{{s[0]}, {s[1]}}}, .padding = {{{p[0]}, {p[1]}}}, .activation = {{{a['act_min']}, {a['act_max']}}}}};
static const tinyaot_dims input_dims = {c_dims(*x)}, filter_dims = {c_dims(1, k[0], k[1], 1)},
                          output_dims = {c_dims(*o)};
const tinyaot_context ctx = {{{{scratch}}, {{scratch_size}}}};
status |= {self.kernel}(&ctx, &pool_params, &input_dims, {{in0}}, &filter_dims, &output_dims, {{out0}});"""
        return KernelCall(self.kernel, code, [self.kernel + ".c"], [])

    def oracle(self, node, graph):
        k, s, p = self._geometry(node, graph)

        def core(ins):
            attrs = dict(kernel_shape=list(k), strides=list(s), pads=list(p))
            if node.op != "MaxPool":
                attrs["count_include_pad"] = 0
            pool = helper.make_node("MaxPool" if node.op == "MaxPool" else "AveragePool", ins, ["pool_out"], **attrs)
            n2, i2, out = activation_nodes(node, "pool_out")
            return [pool] + n2, i2, out

        nodes, inits, out = nhwc_oracle(graph, node, core)
        return OracleLayer(nodes, inits, out)


@register("MaxPool")
class MaxPool(_Pool):
    kernel = "tinyaot_max_pool_s8"


@register("AveragePool")
class AveragePool(_Pool):
    kernel = "tinyaot_avgpool_s8"


@register("GlobalAveragePool")
class GlobalAveragePool(_Pool):
    kernel = "tinyaot_avgpool_s8"
