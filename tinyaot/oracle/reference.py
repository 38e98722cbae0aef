"""Run a quantized graph with the ops' numpy int8 references: the bit-exact expectation for the generated C."""
from __future__ import annotations

import numpy as np

from tinyaot.ir import Graph
from tinyaot.ops.registry import get_op


def run_reference(graph: Graph, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """int8 graph inputs (physical shapes) -> every activation tensor's int8 value."""
    values: dict[str, np.ndarray] = {}
    for name in graph.inputs:
        a = np.asarray(inputs[name])
        assert a.dtype == np.int8, f"input {name} must be int8"
        values[name] = a.reshape(graph.tensors[name].shape)
    for node in graph.nodes:
        args = [values[i] if i in values else graph.tensors[i].data if i else None for i in node.inputs]
        outs = get_op(node.op).reference(node, graph, args)
        for name, value in zip(node.outputs, outs):
            value = np.asarray(value)
            assert (value.dtype == np.dtype(graph.tensors[name].dtype)
                    and value.shape == tuple(graph.tensors[name].shape)), (
                f"{node.op} reference gave {value.dtype}{value.shape} for {name}")
            values[name] = value
    return values
