"""A model's inputs and outputs as the generated C names them: one `Port` per graph input and output, in the model's
own order, used by the header, the invoke function, the verification harness, the sanitizer runner and the host JIT
alike, so every one of them agrees on the names, the order and the sizes.

Names: each port's model name through `core.cfmt.c_ident` (only [A-Za-z0-9_], never a keyword), made unique
case-insensitively by `_2`, `_3`... in graph order (`a.b` and `a_b` both sanitise to `a_b`; the macros upper-case
it). invoke's parameters are `in_<name>` and `out_<name>`: the prefix keeps a model's name from ever colliding with
anything the function body or the header uses (C keywords, <stdint.h> macros, kernels, constants, locals).
"""
from __future__ import annotations

from dataclasses import dataclass

from tinyaot.core.cfmt import c_ident
from tinyaot.ir import Graph


@dataclass(frozen=True)
class Port:
    role: str  # "input" | "output"
    name: str  # the model's own tensor name
    c_name: str  # sanitised, unique among the ports: `in_<c_name>` / `out_<c_name>`, INPUT_<C_NAME>_...
    shape: tuple[int, ...]  # physical (the layout the C reads and writes)
    size: int  # int8 values (bytes)
    scale: float
    zero_point: int

    @property
    def param(self) -> str:
        """invoke's parameter for this port."""
        return ("in_" if self.role == "input" else "out_") + self.c_name

    @property
    def macro(self) -> str:
        """The macro stem after the model prefix: INPUT_<NAME> / OUTPUT_<NAME> (+ _SIZE, _SCALE, _ZERO_POINT)."""
        return f"{self.role.upper()}_{self.c_name.upper()}"


def model_ports(graph: Graph) -> tuple[list[Port], list[Port]]:
    """(inputs, outputs) of a quantized graph, each in the graph's order."""
    taken: set[str] = set()

    def unique(name: str) -> str:
        base = c_ident(name, 40)
        out, k = base, 1
        while out.upper() in taken:
            k += 1
            out = f"{base}_{k}"
        taken.add(out.upper())
        return out

    def port(role: str, name: str, c_name: str) -> Port:
        t = graph.tensors[name]
        return Port(role, name, c_name, tuple(t.shape), t.size, float(t.quant.s), int(t.quant.zp))

    ins = [(n, unique(n)) for n in graph.inputs]
    taken.clear()  # outputs have their own namespace (OUTPUT_..., out_...)
    outs = [(n, unique(n)) for n in graph.outputs]
    return [port("input", n, c) for n, c in ins], [port("output", n, c) for n, c in outs]
