"""Per-layer C: an op's KernelCall (data: kernel, arguments, parameter fields, typed constants) rendered through
the layer templates in templates/layers/ with the one jinja environment (codegen/env.py). The ops never write C."""
from __future__ import annotations

import functools
import re

from tinyaot.core.cfmt import c_array
from tinyaot.ops.registry import BufferRef, ConstArray, ConstStruct, KernelCall
from tinyaot.paths import TEMPLATES

from .env import render

# The headers every generated folder carries that declare kernels (tinyaot_nn.h reaches the others): each kernel a
# model file calls is declared in one of them, inside extern "C", so that the model file compiles as C or C++.
DECLARING_HEADERS = ("tinyaot_nn.h", "tinyaot_nn_mve.h")


def const_definition(const) -> str:
    """The file-scope C definition of a ConstArray / ConstStruct (core/cfmt formats the literals)."""
    if isinstance(const, ConstArray):
        return c_array(const.ctype, const.name, const.values)
    if isinstance(const, ConstStruct):
        return f"static const {const.ctype} {const.name} = {{{', '.join(str(f) for f in const.fields)}}};"
    raise TypeError(f"not a constant: {const!r}")


@functools.lru_cache(maxsize=None)
def _header_text() -> str:
    return "\n".join((TEMPLATES / "kernels" / h).read_text() for h in DECLARING_HEADERS)


@functools.lru_cache(maxsize=None)
def check_declared(kernel: str) -> None:
    """Every kernel a model file calls has its prototype in the shared headers (the model file declares nothing
    itself); a kernel that has none is a tinyaot bug, found when the model is rendered rather than by a C compiler
    guessing an implicit declaration or a C++ compiler mangling the name."""
    if not re.search(rf"^tinyaot_status\s+{re.escape(kernel)}\s*\(", _header_text(), re.M):
        raise ValueError(f"kernel {kernel} is not declared (returning tinyaot_status) in {list(DECLARING_HEADERS)}: "
                         "add its prototype there (a tinyaot bug)")


def braces(values) -> str:
    """A C brace initializer: [1, 2] -> "{1, 2}"."""
    return "{" + ", ".join(str(v) for v in values) + "}"


def render_layer(call: KernelCall, buffers: dict[str, str]) -> tuple[str, list[str]]:
    """(the layer's C statements, its file-scope definitions). `buffers`: "in0", "out0", "scratch",
    "scratch_size", ... -> C expressions (arena addresses); a BufferRef anywhere in the call's args or params becomes
    its expression."""

    def resolve(v):
        if isinstance(v, BufferRef):
            return buffers["scratch" if v.kind == "scratch" else f"{v.kind}{v.index}"]
        if isinstance(v, (list, tuple)):
            return [resolve(x) for x in v]
        if isinstance(v, dict):
            return {k: resolve(x) for k, x in v.items()}
        return v

    code = render(call.template, kernel=call.kernel, args=[str(a) for a in resolve(list(call.args))],
                  params=resolve(call.params), braces=braces,
                  **buffers).rstrip("\n")
    return code, [const_definition(c) for c in call.consts]
