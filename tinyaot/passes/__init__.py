"""The float graph passes, run as one named, ordered list with `verify()` between every two.

Each pass is `Graph -> Graph`, lives in its own file and states what it assumes. `--disable-pass NAME` skips
one; `--print-ir-after NAME` prints the IR after one.
"""
from __future__ import annotations

from collections.abc import Callable

from tinyaot.errors import TinyaotError
from tinyaot.ir import Graph, verify
from tinyaot.ops.registry import infer_shapes

from .absorb_qdq import absorb_qdq
from .batchnorm_to_conv import batchnorm_to_conv
from .div_to_mul import div_to_mul
from .drop_identity import drop_identity
from .fold_batchnorm import fold_batchnorm
from .fold_constants import fold_constants
from .fold_pad import fold_pad
from .fuse_activation import fuse_activation
from .fuse_bias_add import fuse_bias_add
from .fuse_fully_connected import fuse_fully_connected
from .fuse_swish import fuse_swish
from .index_moves import index_moves
from .lower_1d import lower_1d
from .mean_to_pool import mean_to_pool
from .remove_dead import remove_dead
from .to_nhwc import to_nhwc

PIPELINE: list[tuple[str, Callable[[Graph], Graph]]] = [
    ("drop_identity", drop_identity),
    ("fold_constants", fold_constants),
    ("div_to_mul", div_to_mul),
    ("fuse_swish", fuse_swish),
    ("fold_pad", fold_pad),
    ("mean_to_pool", mean_to_pool),
    ("index_moves", index_moves),
    ("absorb_qdq", absorb_qdq),
    ("lower_1d", lower_1d),
    ("fold_batchnorm", fold_batchnorm),
    ("fuse_fully_connected", fuse_fully_connected),
    ("fuse_bias_add", fuse_bias_add),
    ("batchnorm_to_conv", batchnorm_to_conv),
    ("fuse_activation", fuse_activation),
    ("to_nhwc", to_nhwc),
    ("remove_dead", remove_dead),
]
# Passes the product cannot work without: disabling them would leave ONNX-only ops that have no kernel.
REQUIRED = {"absorb_qdq", "fuse_fully_connected", "to_nhwc", "div_to_mul"}


def pass_names() -> list[str]:
    return [name for name, _ in PIPELINE]


def run_passes(graph: Graph, disable: set[str] | frozenset[str] = frozenset(),
               print_after: set[str] | frozenset[str] = frozenset(), echo: Callable[[str], None] = print) -> Graph:
    unknown = (set(disable) | set(print_after)) - set(pass_names())
    if unknown:
        raise TinyaotError(f"unknown pass(es) {sorted(unknown)}; passes are {', '.join(pass_names())}")
    required = set(disable) & REQUIRED
    if required:
        raise TinyaotError(f"pass(es) {sorted(required)} cannot be disabled: no kernel exists without them")
    verify(graph, "import", infer=infer_shapes)
    for name, fn in PIPELINE:
        if name in disable:
            continue
        graph = verify(fn(graph), name, infer=infer_shapes)
        if name in print_after:
            echo(format_ir(graph, f"IR after {name}"))
    return graph


def format_ir(graph: Graph, title: str = "IR") -> str:
    lines = [f"# {title}: {graph.name} ({graph.layout}{', int8' if graph.quantized else ''})"]
    for i in graph.inputs:
        lines.append(f"input  {i}: {list(graph.tensors[i].shape)}")
    for n in graph.nodes:
        ins = ", ".join(f"{i}{list(graph.tensors[i].shape)}" + ("=const" if graph.tensors[i].is_const else "")
                        for i in n.inputs if i)
        outs = ", ".join(f"{o}{list(graph.tensors[o].shape)}" for o in n.outputs)
        attrs = {k: v for k, v in n.attrs.items() if not k.startswith("_")}
        lines.append(f"{n.op:<20} {outs} <- {ins} {attrs if attrs else ''}")
    lines.append(f"output {', '.join(graph.outputs)}")
    return "\n".join(lines)
