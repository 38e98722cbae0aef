"""Patch-based execution (MCUNetV2, NeurIPS 2021) of a prefix of the graph, in row stripes.

Layer by layer, a network's arena is set by its memory-heavy first layers (large feature maps). Run instead a prefix
of the graph (the *patch stage*, nodes [0, k)) once per stripe: stripe s computes rows [a_s, b_s) of the tensor
crossing the split (the stage output, whole in the arena, written band by band), and every tensor inside the stage
only the band of rows its consumers in that stripe read, recomputing the rows two stripes share (the halo). Only one
stripe's bands are live at a time; the graph input is copied into the arena a band at a time from the caller's
buffer; the rest of the graph then runs layer by layer.

Stripes split the rows only (a tile grid of n x 1): every band is whole rows of its NHWC tensor, so it is one
contiguous run of bytes, a kernel runs on it unchanged with the band's dimensions (its input view's height, the
padding the band keeps at the tensor's top or bottom edge), and a consumer that needs fewer rows of a band than it
holds (a residual Add beside a 3x3 convolution reading a halo) reads a sub-band at a row offset. Patching changes no
arithmetic: each output row is computed from the same input values by the same kernel code.

Pure geometry and buffers: which rows each layer computes per stripe (`make_stage`), the layer call of one stripe
(`tile`), and the planner's buffers for the whole schedule (`schedule_buffers`); the memory planner itself is
unchanged ((size, first, last) buffers in, offsets out).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace


from tinyaot.ir import Graph, Node
from tinyaot.ir.graph import Tensor
from tinyaot.ops.registry import RowWindow, get_op

from .liveness import graph_buffers, scratch_name
from .planner import Buffer

Rows = tuple[int, int]  # [start, stop)


@dataclass
class PatchStage:
    """graph.nodes[:nodes] run once per stripe; `rows[s][t]` are the rows of tensor t stripe s computes (the stage
    output's bands partition its rows; the graph input's are the rows copied in)."""

    nodes: int
    output: str
    rows: list[dict[str, Rows]]
    windows: list[RowWindow] = field(default_factory=list)  # per stage node
    axes: dict[str, int] = field(default_factory=dict)  # a tensor's row axis when not 1 (an NCHW graph input)

    @property
    def stripes(self) -> int:
        return len(self.rows)


@dataclass
class Tile:
    """Node j of the stage in stripe s, as the kernel call sees it: `node` and `graph` carry the band's shapes and
    padding; `views[i]` is (tensor, rows held in the stripe's band, first row the call reads) per data input, and
    `out` (tensor, rows written)."""

    node: Node
    graph: Graph
    views: list[tuple[str, Rows, int]]
    out: tuple[str, Rows]


def row_bytes(graph: Graph, tensor: str, axis: int = 1) -> int:
    """Bytes of one row of `tensor` along `axis` (all channels of it)."""
    t = graph.tensors[tensor]
    return t.nbytes // t.shape[axis]


def band_bytes(graph: Graph, stage: "PatchStage", s: int, tensor: str) -> int:
    lo, hi = stage.rows[s][tensor]
    return (hi - lo) * row_bytes(graph, tensor, stage.axes.get(tensor, 1))


def _data_inputs(node: Node, graph: Graph) -> list[str]:
    return [i for i in node.inputs if i and not graph.tensors[i].is_const]


def split_points(graph: Graph) -> list[int]:
    """The k for which nodes [0, k) can form a patch stage: every node runs on bands of rows (its op's
    `row_window`), exactly one tensor made in the stage is read after it (or is the graph output), the last node's
    output, with at least two rows, and the graph input is read only inside the stage."""
    if len(graph.inputs) != 1 or len(graph.tensors[graph.inputs[0]].shape) != 4:
        return []
    last_use: dict[str, int] = {}
    for j, node in enumerate(graph.nodes):
        for i in _data_inputs(node, graph):
            last_use[i] = j
    for o in graph.outputs:
        last_use[o] = len(graph.nodes)
    readers: dict[str, int] = {}
    for node in graph.nodes:
        for i in _data_inputs(node, graph):
            readers[i] = readers.get(i, 0) + 1
    points = []
    made = [graph.inputs[0]]
    for k, node in enumerate(graph.nodes, 1):
        spec = get_op(node.op)
        if len(node.outputs) != 1 or spec.row_window(node, graph) is None:
            break
        if spec.is_alias(node, graph) and readers.get(node.inputs[0], 0) != 1:
            break  # an alias's band is its input's: only where nothing else reads the input (rows equal)
        out = node.outputs[0]
        shape = graph.tensors[out].shape
        if len(shape) != 4 or shape[0] != 1:
            break
        made.append(out)
        crossing = [t for t in made if last_use.get(t, -1) >= k]
        if crossing == [out] and shape[1] >= 2 and graph.inputs[0] not in crossing:
            points.append(k)
    return points


def stripe_rows(height: int, stripes: int) -> list[Rows]:
    """`height` rows in `stripes` bands of equal size (the first ones one row larger when it does not divide)."""
    base, extra = divmod(height, stripes)
    out, start = [], 0
    for s in range(stripes):
        stop = start + base + (1 if s < extra else 0)
        out.append((start, stop))
        start = stop
    return out


def make_stage(graph: Graph, k: int, stripes: int) -> PatchStage | None:
    """The stage of nodes [0, k) in `stripes` stripes: per stripe, the rows each tensor needs, from the stage
    output's band back to the input (a tensor read by several layers holds the hull of what they read). None when
    some stripe would need no rows of a tensor (a band of padding only)."""
    nodes = graph.nodes[:k]
    output = nodes[-1].outputs[0]
    windows = [get_op(n.op).row_window(n, graph) for n in nodes]
    axes: dict[str, int] = {}
    readers: dict[str, int] = {}
    for node, win in zip(nodes, windows):
        for i in _data_inputs(node, graph):
            readers[i] = readers.get(i, 0) + 1
            if axes.setdefault(i, win.axis) != win.axis:
                return None
    # a band along another axis than 1 is not a run of whole rows of the tensor: only the graph input (copied in
    # plane by plane) read by one layer may have one
    if any(a != 1 and (t != graph.inputs[0] or readers[t] != 1) for t, a in axes.items()):
        return None
    rows = []
    for band in stripe_rows(graph.tensors[output].shape[1], stripes):
        need: dict[str, Rows] = {output: band}
        for node, win in zip(reversed(nodes), reversed(windows)):
            a, b = need[node.outputs[0]]
            for i in _data_inputs(node, graph):
                lo, hi = win.needs(a, b, graph.tensors[i].shape[win.axis])
                if hi <= lo:
                    return None
                if i in need:
                    lo, hi = min(lo, need[i][0]), max(hi, need[i][1])
                need[i] = (lo, hi)
        rows.append(need)
    return PatchStage(k, output, rows, windows, {t: a for t, a in axes.items() if a != 1})


def tile(graph: Graph, stage: PatchStage, s: int, j: int) -> Tile:
    """Node j in stripe s with its band's shapes: every data input is the view the call reads (rows
    [lo, hi) of what the stripe holds, lo >= the band's first row), the output the stripe's band, and a
    sliding window's top and bottom padding what remains of it at the tensor's edges."""
    node = graph.nodes[j]
    win = stage.windows[j]
    out = node.outputs[0]
    a, b = stage.rows[s][out]
    tensors: dict[str, Tensor] = {}
    views = []
    start = a * win.stride - win.pad_top
    end = (b - 1) * win.stride - win.pad_top + (win.kernel - 1) * win.dilation + 1
    for i in node.inputs:
        if not i:
            continue
        t = graph.tensors[i]
        if t.is_const:
            tensors[i] = t
            continue
        lo, hi = win.needs(a, b, t.shape[win.axis])
        views.append((i, stage.rows[s][i], lo))
        shape = list(t.shape)
        shape[win.axis] = hi - lo
        tensors[i] = replace(t, shape=tuple(shape))
    o = graph.tensors[out]
    tensors[out] = replace(o, shape=(o.shape[0], b - a, *o.shape[2:]))
    attrs = dict(node.attrs)
    if "pads" in attrs:  # what the band keeps of the padding: at the tensor's top and bottom edges only
        h_in = graph.tensors[views[0][0]].shape[win.axis]
        pads = list(attrs["pads"])
        pads[0], pads[2] = max(0, -start), max(0, end - h_in)
        attrs["pads"] = tuple(pads) if isinstance(node.attrs["pads"], tuple) else pads
    band_node = Node(node.op, node.name, list(node.inputs), list(node.outputs), attrs)
    band_graph = Graph(graph.name, tensors, [band_node], [v[0] for v in views], [out], layout=graph.layout,
                       quantized=graph.quantized, meta=graph.meta)
    return Tile(band_node, band_graph, views, (out, (a, b)))


def step_of(stage: PatchStage, s: int, j: int) -> int:
    """The schedule step of node j in stripe s (the rest of the graph follows at stripes * nodes + ...)."""
    return s * stage.nodes + j


def schedule_buffers(graph: Graph, stage: PatchStage | None,
                     scratch: dict[int, int] | None = None) -> tuple[list[Buffer], list[str]]:
    """The planner's buffers of the whole schedule and a label per step. Without a stage: graph_buffers (step k
    runs node k). With one: step s * k + j runs stage node j on stripe s, each band its own buffer
    `<tensor>@<s>` (`<node>::scratch@<s>` for scratch), live within its stripe; the stage output is one buffer
    from its first band on; then the rest of the graph as graph_buffers plans it, its steps shifted. `scratch`
    ({stage node index: bytes}) stands in for each band's own scratch size (a quick estimate while searching)."""
    if stage is None:
        return graph_buffers(graph), [n.name for n in graph.nodes] + ["(output read)"]
    k, n = stage.nodes, stage.stripes
    x = graph.inputs[0]
    buffers: list[Buffer] = []
    labels = []
    for s in range(n):
        live: dict[str, list[int]] = {x: [step_of(stage, s, 0), step_of(stage, s, 0)]}
        alias: dict[str, str] = {}
        for j in range(k):
            node = graph.nodes[j]
            step = step_of(stage, s, j)
            labels.append(f"{node.name} [stripe {s + 1}/{n}]")
            for i in _data_inputs(node, graph):
                live[i][1] = step
            if get_op(node.op).is_alias(node, graph):
                alias[node.outputs[0]] = node.inputs[0]
            if scratch is None:
                t = tile(graph, stage, s, j)
                size = 0 if get_op(node.op).is_alias(node, graph) else \
                    int(get_op(node.op).scratch_bytes(t.node, t.graph))
            else:
                size = scratch.get(j, 0)
            if size:
                buffers.append(Buffer(f"{scratch_name(node.name)}@{s}", size, step, step))
            if node.outputs[0] != stage.output:
                live[node.outputs[0]] = [step, step]
        for name, (first, last) in live.items():
            buffers.append(Buffer(f"{name}@{s}", band_bytes(graph, stage, s, name), first, last,
                                  alias_of=f"{alias[name]}@{s}" if name in alias else None))
    shift = n * k
    rest = Graph(graph.name, graph.tensors, graph.nodes[k:], [stage.output], list(graph.outputs),
                 layout=graph.layout, quantized=graph.quantized, meta=graph.meta)
    for b in graph_buffers(rest):
        first = step_of(stage, 0, k - 1) if b.name == stage.output else b.first + shift
        buffers.append(replace(b, first=first, last=b.last + shift))
    labels += [node.name for node in graph.nodes[k:]] + ["(output read)"]
    return buffers, labels


def stage_macs(graph: Graph, stage: PatchStage) -> tuple[int, int]:
    """(MACs the stage computes over all stripes, MACs of its layers run once): the difference is the halo's
    recomputation."""
    done = once = 0
    for j in range(stage.nodes):
        node = graph.nodes[j]
        full = get_op(node.op).macs(node, graph)
        h = graph.tensors[node.outputs[0]].shape[1]
        rows = sum(r[node.outputs[0]][1] - r[node.outputs[0]][0] for r in stage.rows)
        once += full
        done += full * rows // h
    return done, once


def band_rows(stage: PatchStage, tensor: str) -> list[Rows]:
    return [r[tensor] for r in stage.rows]


__all__ = ["PatchStage", "Tile", "band_bytes", "band_rows", "make_stage", "row_bytes", "schedule_buffers",
           "split_points", "stage_macs", "step_of", "stripe_rows", "tile"]
