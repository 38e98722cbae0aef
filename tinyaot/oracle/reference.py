"""Run a quantized graph with the ops' numpy int8 references: the bit-exact expectation for the generated C."""
from __future__ import annotations

import numpy as np

from tinyaot.ir import Graph, Node
from tinyaot.ops.registry import get_op

# Samples per reference call where an op takes a block of them (run_node): the calls' fixed cost shared, the im2col
# patches of one block still small (ic_resnet8's first convolution: 16 x 147,456 int64 values).
RUN_BLOCK = 16


def run_reference(graph: Graph, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """int8 graph inputs (physical shapes) -> every activation tensor's int8 value."""
    return run_reference_many(graph, [inputs])[0]


def run_reference_many(graph: Graph, feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """run_reference of each feed, the same values, with the nodes whose op takes a batch run once per block of
    samples (run_node)."""
    values = []
    for feed in feeds:
        v = {}
        for name in graph.inputs:
            a = np.asarray(feed[name])
            assert a.dtype == np.int8, f"input {name} must be int8"
            v[name] = a.reshape(graph.tensors[name].shape)
        values.append(v)
    for node in graph.nodes:
        run_node(graph, node, values)
        for name in node.outputs:
            t = graph.tensors[name]
            for v in values:
                assert v[name].dtype == np.dtype(t.dtype) and v[name].shape == tuple(t.shape), (
                    f"{node.op} reference gave {v[name].dtype}{v[name].shape} for {name}")
    return values


def run_node(graph: Graph, node: Node, values: list[dict[str, np.ndarray]], block: int | None = None) -> None:
    """Run `node`'s reference for every sample's values ({tensor name: value}, its inputs there or constants in the
    graph) and add its outputs to them. Where the op declares that its reference takes a batch
    (OpSpec.batches_reference) and every activation the node reads or writes is one sample (batch axis 1), the
    samples go through one call per block of `block` (RUN_BLOCK), stacked on axis 0; otherwise one call each."""
    spec = get_op(node.op)
    block = block or RUN_BLOCK
    if len(values) > 1 and batches(graph, node, values[0]):
        for s in range(0, len(values), block):
            part = values[s:s + block]
            args = [np.concatenate([v[i] for v in part]) if i in part[0] else
                    graph.tensors[i].data if i else None for i in node.inputs]
            for name, value in zip(node.outputs, spec.reference(node, graph, args)):
                value = np.asarray(value)
                for k, v in enumerate(part):
                    v[name] = value[k:k + 1]
        return
    for v in values:
        args = [v[i] if i in v else graph.tensors[i].data if i else None for i in node.inputs]
        for name, value in zip(node.outputs, spec.reference(node, graph, args)):
            v[name] = np.asarray(value)


def batches(graph: Graph, node: Node, sample: dict) -> bool:
    """Whether run_node runs `node` once for a block of samples (`sample`: one sample's values so far)."""
    acts = [i for i in node.inputs if i and i in sample] + list(node.outputs)
    return all(graph.tensors[t].shape and graph.tensors[t].shape[0] == 1 for t in acts) and \
        get_op(node.op).batches_reference(node, graph)


__all__ = ["RUN_BLOCK", "run_reference", "run_reference_many", "run_node", "batches"]
