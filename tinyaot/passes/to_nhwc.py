"""Choose the physical layout once, at compile time: images become NHWC (CMSIS's layout), weights are transposed
to OHWI (depthwise: 1HWC) here, and data-movement ops (Reshape, Flatten, Transpose, Squeeze, Unsqueeze) become
free aliases whenever the bytes they produce are the bytes they read.

Each tensor gets a permutation `perm` with physical = logical.transpose(perm). Graph inputs and outputs keep
ONNX's layout (the user feeds and reads ONNX-ordered data); a conversion is inserted where a layout must change,
and it is an alias when no byte moves (a single channel, or 1x1 spatial). A flatten whose byte order differs
from ONNX's NCHW order feeding a fully connected layer is absorbed by permuting that layer's weight columns.

After this pass every shape in the graph is physical and `graph.layout == "NHWC"`.
"""
from __future__ import annotations

import itertools

import numpy as np

from tinyaot.errors import TinyaotError
from tinyaot.ir import Graph, Node, Tensor
from tinyaot.ops.common import NHWC
from tinyaot.ops.registry import get_op, traits_of

# Which rule an op gets its op file says: its own (`OpSpec.layout`, through this pass's LayoutContext: Conv,
# ConvTranspose, Resize, ReduceMean, FullyConnected, Concat, Pad, Softmax), else the one of its traits' layout class
# (tinyaot/ops/registry.py Traits.layout): "spatial" ops run in NHWC, "elementwise" ones follow their data's layout
# (a broadcast operand that is a constant is permuted with it), "move"s become aliases or transposes, anything else
# keeps ONNX's layout.


def _is_spatial(node: Node) -> bool:
    return traits_of(node.op).layout == "spatial"


def _ident(rank: int) -> tuple[int, ...]:
    return tuple(range(rank))


def _phys_shape(shape, perm) -> tuple[int, ...]:
    return tuple(shape[p] for p in perm)


class _Layout:
    """The pass's state, and the LayoutContext (ops/registry.py) an op's own layout rule works through."""

    def __init__(self, graph: Graph):
        self.g = self.graph = graph
        self.consumers: dict[str, list[Node]] = {}
        self.perm: dict[str, tuple[int, ...]] = {}
        self.logical: dict[str, tuple[int, ...]] = {}
        self.colperm: dict[str, np.ndarray] = {}  # 2-D aliases whose columns a consumer FC must re-order
        self.converted: dict[tuple[str, tuple[int, ...]], str] = {}
        self.new_nodes: list[Node] = []
        for name in graph.inputs:
            self.perm[name] = _ident(len(graph.tensors[name].shape))
            self.logical[name] = graph.tensors[name].shape

    # A tensor in physical layout `perm`: converting it from its current layout, by alias or copy.
    def ensure(self, name: str, perm: tuple[int, ...], node: Node) -> str:
        if self.perm[name] == perm:
            if name in self.colperm:
                raise TinyaotError(f"node {node.name!r} ({node.op}) reads a flattened tensor in NHWC byte order; "
                                   "only fully connected layers can absorb that")
            return name
        key = (name, perm)
        if key in self.converted:
            return self.converted[key]
        logical = self.logical[name]
        new = self.g.add_tensor(f"{name}_{'nhwc' if perm == NHWC else 'onnx'}", _phys_shape(logical, perm))
        self.perm[new], self.logical[new] = perm, logical
        src = self._source_map(name, lambda a: a, logical, perm)
        self._emit_move(node.name + "_layout", name, new, src)
        self.converted[key] = new
        return new

    def _source_map(self, name, logical_op, out_logical, out_perm) -> np.ndarray:
        """For each physical output position, the physical input position it copies (flat indices)."""
        shape = self.g.tensors[name].shape
        idx = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)
        in_log = idx.transpose(np.argsort(self.perm[name]))
        out_log = np.asarray(logical_op(in_log)).reshape(out_logical)
        return out_log.transpose(out_perm).ravel()

    def _fresh(self, name: str) -> str:
        """A node name no node has, among the model's and the ones this pass has built so far."""
        return self.g.fresh_node_name(name, [n.name for n in self.new_nodes])

    def _emit_move(self, base: str, src_name: str, dst_name: str, src: np.ndarray, replaces: bool = False) -> None:
        # `replaces`: the move stands in for the node named `base`, which is dropped, so it keeps that name.
        first = base if replaces else self._fresh(base)
        if np.array_equal(src, np.arange(src.size)):
            self.new_nodes.append(Node("Reshape", first, [src_name], [dst_name], {}))
            return
        in_shape = self.g.tensors[src_name].shape
        out_shape = self.g.tensors[dst_name].shape
        for p in itertools.permutations(range(len(in_shape))):
            idx = np.arange(src.size).reshape(in_shape).transpose(p)
            if not np.array_equal(idx.ravel(), src):
                continue
            mid = _phys_shape(in_shape, p)
            if tuple(mid) == tuple(out_shape):
                self.new_nodes.append(Node("Transpose", first, [src_name], [dst_name], {"perm": list(p)}))
                return
            t = self.g.add_tensor(dst_name + "_t", mid)
            self.new_nodes.append(Node("Transpose", first, [src_name], [t], {"perm": list(p)}))
            self.new_nodes.append(Node("Reshape", self._fresh(base + "_reshape"), [t], [dst_name], {}))
            return
        raise TinyaotError(f"node {base!r}: data movement that is neither an alias nor a transpose is not supported")

    def run(self) -> Graph:
        g = self.g
        consumers = self.consumers
        for n in g.nodes:
            for i in n.inputs:
                consumers.setdefault(i, []).append(n)
        for node in g.nodes:
            if not get_op(node.op).layout(node, self):
                self._rule(node)(node, consumers)
        # Graph outputs go back to ONNX's layout.
        for k, name in enumerate(g.outputs):
            if self.perm[name] != _ident(len(self.logical[name])) or name in self.colperm:
                if name in self.colperm:
                    raise TinyaotError(f"graph output {name!r} would need a run-time re-ordering")
                inner = g.fresh_name(name + "_nhwc")
                t = g.tensors.pop(name)
                # both sides hold the same values: a pre-quantized model's parameters apply to each
                g.tensors[inner] = Tensor(inner, t.shape, quant=t.quant)
                for n in self.new_nodes:
                    n.outputs = [inner if o == name else o for o in n.outputs]
                    n.inputs = [inner if i == name else i for i in n.inputs]
                self.perm[inner], self.logical[inner] = self.perm[name], self.logical[name]
                g.tensors[name] = Tensor(name, self.logical[name], quant=t.quant)
                src = self._source_map(inner, lambda a: a, self.logical[name], _ident(len(self.logical[name])))
                self._emit_move(name + "_layout", inner, name, src)
        g.nodes = self.new_nodes
        g.layout = "NHWC"
        g.remove_unused_tensors()
        # each tensor's physical = logical.transpose(perm): `tinyaot analyze` puts values back in ONNX's order with
        # it (a shape alone cannot tell NHWC from NCHW when C == H == W)
        g.meta["nhwc_perm"] = {n: tuple(self.perm[n]) for n in g.tensors if n in self.perm}
        return g

    # --- the LayoutContext an op's own rule uses (ensure above) ---------------------------------------------
    def set_out(self, name: str, logical, perm) -> None:
        self.logical[name], self.perm[name] = tuple(logical), tuple(perm)
        self.g.tensors[name].shape = _phys_shape(logical, perm)

    def emit(self, node: Node) -> None:
        self.new_nodes.append(node)

    def readers(self, name: str) -> list[Node]:
        return self.consumers.get(name, [])

    def column_order(self, name: str) -> np.ndarray | None:
        return self.colperm.get(name)

    # --- the rules of the layout classes ---------------------------------------------------------------
    def _rule(self, node: Node):
        layout = traits_of(node.op).layout
        if layout == "spatial":
            return lambda n, consumers: self.spatial(n)
        return {"elementwise": self._elementwise, "move": self._move}.get(layout, self._default)

    def spatial(self, node: Node) -> None:
        x = node.inputs[0]
        if len(self.logical[x]) != 4:
            raise TinyaotError(f"node {node.name!r} ({node.op}): only 2-D images (4-D NCHW tensors) are supported")
        node.inputs[0] = self.ensure(x, NHWC, node)
        out = node.outputs[0]
        self.set_out(out, self.g.tensors[out].shape, NHWC)
        if traits_of(node.op).sliding_window:
            _explicit_pads(node, self.logical[x], self.logical[out])
        self.new_nodes.append(node)

    def const_transposed(self, name: str, suffix: str, perm) -> str:
        """A transposed copy of a weight. A pre-quantized weight keeps its quantization, its channel axis
        following the transpose (output channels: axis 0 of OIHW -> 0 of OHWI, 3 of depthwise 1HWC)."""
        t = self.g.tensors[name]
        new = self.g.add_const(name + suffix, np.ascontiguousarray(t.data.transpose(perm)))
        if t.quant is not None:
            q = t.quant
            self.g.tensors[new].quant = type(q)(q.scale, q.zero_point, None if q.axis is None else perm.index(q.axis))
        return new

    def _elementwise(self, node: Node, consumers) -> None:
        data = [i for i in node.inputs[:2] if i and not self.g.tensors[i].is_const]
        # The largest activation (of the highest rank, the output's) keeps its layout, so the big one is not
        # copied; smaller ones and constants follow it.
        perm = self.perm[max(data, key=lambda i: (len(self.logical[i]), self.g.tensors[i].size))]
        if traits_of(node.op).broadcast:
            for k, i in enumerate(node.inputs):
                t = self.g.tensors[i]
                if t.is_const:
                    node.inputs[k] = self.const_operand(i, perm)
                elif len(self.logical[i]) == len(perm):
                    node.inputs[k] = self.ensure(i, perm, node)
                elif not (perm == _ident(len(perm)) and self.perm[i] == _ident(len(self.logical[i]))
                          and i not in self.colperm):
                    # Both in ONNX order, numpy's right-aligned broadcasting holds on the physical shapes too;
                    # otherwise the lower-rank operand would need its own re-layout.
                    raise TinyaotError(f"{node.op} node {node.name!r}: broadcasting a rank-{len(self.logical[i])} "
                                       f"activation against a rank-{len(perm)} one in another layout is not "
                                       "supported")
        else:
            node.inputs[0] = self.ensure(data[0], perm, node)
        out = node.outputs[0]
        self.set_out(out, self.g.tensors[out].shape, perm)
        self.new_nodes.append(node)

    def const_operand(self, name: str, perm) -> str:
        """A constant operand of a broadcasting op in the layout of the data: ONNX's right-aligned broadcasting
        first (leading unit axes up to the data's rank), then the data's permutation; a per-tensor quantization
        of a pre-quantized constant stays as it is, a per-axis one follows its axis."""
        t = self.g.tensors[name]
        rank = len(perm)
        if t.data.ndim > rank:
            raise TinyaotError(f"constant {name!r} has a higher rank than the data it is combined with")
        lead = rank - t.data.ndim
        c = t.data.reshape((1,) * lead + t.data.shape).transpose(perm)
        new = self.g.add_const(name + "_phys", np.ascontiguousarray(c))
        if t.quant is not None:
            q = t.quant
            self.g.tensors[new].quant = type(q)(q.scale, q.zero_point,
                                                None if q.axis is None else perm.index(q.axis + lead))
        return new

    def _move(self, node: Node, consumers) -> None:
        x = node.inputs[0]
        out = node.outputs[0]
        out_logical = tuple(self.g.tensors[out].shape)
        if traits_of(node.op).reshape:
            op = lambda a: a.reshape(out_logical)  # noqa: E731
        else:  # a transpose
            perm_attr = node.attrs.get("perm") or list(reversed(range(len(self.logical[x]))))
            op = lambda a: a.transpose(perm_attr)  # noqa: E731
        readers = consumers.get(out, [])
        candidates = [_ident(len(out_logical))]
        if len(out_logical) == 4:
            if any(_is_spatial(r) for r in readers):
                candidates.insert(0, NHWC)
            else:
                candidates.append(NHWC)
        src = None
        for cand in candidates:
            src = self._source_map(x, op, out_logical, cand)
            if np.array_equal(src, np.arange(src.size)):
                self.set_out(out, out_logical, cand)
                self.new_nodes.append(Node("Reshape", node.name, [x], [out], {}))
                return
        src = self._source_map(x, op, out_logical, candidates[0])
        if (len(out_logical) == 2 and readers and out not in self.g.outputs
                and all(traits_of(r.op).absorbs_column_order and r.inputs[0] == out for r in readers)):
            # Keep the bytes where they are; the fully connected layers read them through permuted weights.
            self.set_out(out, out_logical, _ident(2))
            self.colperm[out] = src
            self.new_nodes.append(Node("Reshape", node.name, [x], [out], {}))
            return
        self.set_out(out, out_logical, candidates[0])
        self._emit_move(node.name, x, out, src, replaces=True)

    def _default(self, node: Node, consumers) -> None:
        for k, i in enumerate(node.inputs):
            if i and not self.g.tensors[i].is_const:
                node.inputs[k] = self.ensure(i, _ident(len(self.logical[i])), node)
        for o in node.outputs:
            self.set_out(o, self.g.tensors[o].shape, _ident(len(self.g.tensors[o].shape)))
        self.new_nodes.append(node)


def _explicit_pads(node: Node, in_logical, out_logical) -> None:
    """Resolve auto_pad into explicit [top, left, bottom, right] pads (ONNX order: begins then ends)."""
    auto = node.attrs.pop("auto_pad", "NOTSET")
    k = node.attrs["kernel_shape"]
    strides = node.attrs.get("strides", [1, 1])
    dil = node.attrs.get("dilations", [1, 1])
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads_b, pads_e = [], []
        for a in range(2):
            i, o = in_logical[2 + a], out_logical[2 + a]
            total = max(0, (o - 1) * strides[a] + (k[a] - 1) * dil[a] + 1 - i)
            small, big = total // 2, total - total // 2
            pads_b.append(small if auto == "SAME_UPPER" else big)
            pads_e.append(big if auto == "SAME_UPPER" else small)
        node.attrs["pads"] = pads_b + pads_e
    elif auto == "VALID":
        node.attrs["pads"] = [0, 0, 0, 0]
    node.attrs.setdefault("pads", [0, 0, 0, 0])


def to_nhwc(graph: Graph) -> Graph:
    if graph.layout == "NHWC":
        return graph
    return _Layout(graph).run()
