"""IndexCopy: out[i] = in[src[i]] over the flat int8 bytes, with a constant source map in flash. It is what a Slice,
Split (one per output), Gather with constant indices or Expand of an activation becomes (passes/index_moves.py
computes the map once at compile time by running the ONNX op on the element indices), so one small kernel
serves every such data movement whatever its axes, steps or broadcast. No arithmetic: the output keeps the
input's quantization, so it is bit-exact against onnxruntime. The map costs 4 bytes of flash per output element.
Kernel: templates/kernels/tinyaot_index_copy_s8.c."""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from .registry import IN0, OUT0, ConstArray, KernelCall, OpSpec, OracleLayer, Traits, register

KERNEL = "tinyaot_index_copy_s8"


@register("IndexCopy", traits=Traits(kernels=(KERNEL,)))
class IndexCopy(OpSpec):
    internal = True  # IR-only: made by a pass, never read from ONNX

    def infer_shapes(self, node, graph):
        return None if node.attrs["src"].size == graph.tensors[node.outputs[0]].size else [("src", "size")]

    def quantize(self, node, graph, ranges):
        graph.tensors[node.outputs[0]].quant = graph.tensors[node.inputs[0]].quant

    def reference(self, node, graph, inputs):
        out = graph.tensors[node.outputs[0]].shape
        return [np.ascontiguousarray(inputs[0].reshape(-1)[node.attrs["src"]].reshape(out))]

    def render(self, node, graph, cname):
        src = np.asarray(node.attrs["src"], np.int32)
        return KernelCall(KERNEL, [IN0, OUT0, f"{cname}_src", int(src.size), graph.tensors[node.inputs[0]].size],
                          [KERNEL + ".c"], consts=[ConstArray("int32_t", f"{cname}_src", src)])

    def oracle(self, node, graph):
        out = graph.tensors[node.outputs[0]].shape
        inits = [numpy_helper.from_array(np.asarray([-1], np.int64), node.name + "_flat"),
                 numpy_helper.from_array(np.asarray(node.attrs["src"], np.int64), node.name + "_src"),
                 numpy_helper.from_array(np.asarray(out, np.int64), node.name + "_shape")]
        nodes = [helper.make_node("Reshape", [node.inputs[0], inits[0].name], ["ic_flat"]),
                 helper.make_node("Gather", ["ic_flat", inits[1].name], ["ic_gather"], axis=0),
                 helper.make_node("Reshape", ["ic_gather", inits[2].name], ["ic_out"])]
        return OracleLayer(nodes, inits, "ic_out")
