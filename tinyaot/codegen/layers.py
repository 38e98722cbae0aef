"""Per-layer C: an op's KernelCall (data: kernel, arguments, parameter fields, typed constants) rendered through
the layer templates in templates/layers/ with the one jinja environment (codegen/env.py). The ops never write C."""
from __future__ import annotations

import functools
import re

from tinyaot.core.cfmt import c_array
from tinyaot.ops.registry import Buffer, ConstArray, ConstStruct, KernelCall
from tinyaot.paths import TEMPLATES

from .env import render

# Headers every generated folder carries; a kernel they declare needs no declaration in the model's file.
_DECLARING_HEADERS = ("tinyaot_nn.h", "tinyaot_nn_compressed.h")


def const_definition(const) -> str:
    """The file-scope C definition of a ConstArray / ConstStruct (core/cfmt formats the literals)."""
    if isinstance(const, ConstArray):
        return c_array(const.ctype, const.name, const.values)
    if isinstance(const, ConstStruct):
        return f"static const {const.ctype} {const.name} = {{{', '.join(str(f) for f in const.fields)}}};"
    raise TypeError(f"not a constant: {const!r}")


@functools.lru_cache(maxsize=None)
def _header_text() -> str:
    return "\n".join((TEMPLATES / "kernels" / h).read_text() for h in _DECLARING_HEADERS)


@functools.lru_cache(maxsize=None)
def kernel_declaration(kernel: str, files: tuple[str, ...]) -> str | None:
    """None when the shared headers declare `kernel`; otherwise its prototype, taken from its definition in its own
    kernel file, so a new kernel is one self-contained file (nothing to add to tinyaot_nn.h)."""
    if re.search(rf"\b{re.escape(kernel)}\s*\(", _header_text()):
        return None
    for name in files:
        m = re.search(rf"^((?:int|void)\s+{re.escape(kernel)}\s*\([^)]*\))\s*\{{",
                      (TEMPLATES / "kernels" / name).read_text(), re.M)
        if m:
            return re.sub(r"\s+", " ", m.group(1)) + ";"
    raise ValueError(f"kernel {kernel} is neither declared in {_DECLARING_HEADERS} nor defined in {list(files)}")


def braces(values) -> str:
    """A C brace initializer: [1, 2] -> "{1, 2}"."""
    return "{" + ", ".join(str(v) for v in values) + "}"


def render_layer(call: KernelCall, buffers: dict[str, str]) -> tuple[str, list[str]]:
    """(the layer's C statements, its file-scope definitions). `buffers`: "in0", "out0", "scratch",
    "scratch_size", ... -> C expressions (arena addresses); a Buffer anywhere in the call's args or params becomes
    its expression."""

    def resolve(v):
        if isinstance(v, Buffer):
            return buffers["scratch" if v.kind == "scratch" else f"{v.kind}{v.index}"]
        if isinstance(v, (list, tuple)):
            return [resolve(x) for x in v]
        if isinstance(v, dict):
            return {k: resolve(x) for k, x in v.items()}
        return v

    code = render(call.template, kernel=call.kernel, args=[str(a) for a in resolve(list(call.args))],
                  params=resolve(call.params), returns_status=call.returns_status, braces=braces,
                  **buffers).rstrip("\n")
    return code, [const_definition(c) for c in call.consts]
