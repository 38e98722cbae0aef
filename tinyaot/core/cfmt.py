"""Formatting of C constants. Every identifier that comes from a model name goes through `c_ident`, so a node
name can never inject text into the generated C."""
from __future__ import annotations

import re

import numpy as np

_C_KEYWORDS = {"auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum",
               "extern", "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return",
               "short", "signed", "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void",
               "volatile", "while",
               # C++ (the generated C also compiles as C++)
               "alignas", "alignof", "bool", "catch", "class", "constexpr", "decltype", "delete", "explicit",
               "false", "friend", "mutable", "namespace", "new", "noexcept", "nullptr", "operator", "private",
               "protected", "public", "template", "this", "throw", "true", "try", "typeid", "typename", "using",
               "virtual"}


def c_ident(name: str, max_len: int = 48) -> str:
    """A valid C identifier made only of [A-Za-z0-9_] from any string."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", name)
    s = re.sub(r"_+", "_", s).strip("_") or "t"
    if s[0].isdigit():
        s = "t_" + s
    if s in _C_KEYWORDS:
        s += "_"
    return s[:max_len].rstrip("_") or "t"


def c_comment(text: str) -> str:
    """Text safe inside a /* */ comment: no comment terminator, no newlines, printable ASCII only."""
    s = "".join(ch if 32 <= ord(ch) < 127 else "?" for ch in text)
    return s.replace("*/", "* /").replace("/*", "/ *")


def c_string(text: str) -> str:
    """The body of a C string literal holding `text` (without the quotes): printable ASCII, the rest as '?',
    backslash, quote and question mark escaped (no trigraph can form)."""
    s = "".join(ch if 32 <= ord(ch) < 127 else "?" for ch in text)
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("?", "\\?")


def c_array(ctype: str, name: str, values, per_line: int = 16) -> str:
    """`static const <ctype> name[N] TINYAOT_WEIGHTS_ATTR = {...};` (int arrays only; the generated code has no
    float)."""
    flat = np.asarray(values).ravel()
    if flat.size == 0:
        flat = np.zeros(1, np.int64)
    width = {"int8_t": 4, "int32_t": 11, "int16_t": 6, "uint8_t": 3}.get(ctype, 11)
    # INT32_MIN has no literal in C (2147483648 does not fit int), so it is written as an expression.
    items = [(str(int(v)) if int(v) != -2 ** 31 else "(-2147483647 - 1)").rjust(width) for v in flat]
    rows = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
    body = ",\n    ".join(rows)
    # TINYAOT_WEIGHTS_ATTR: the model file's placement macro (empty unless a weights section is asked for)
    return f"static const {ctype} {name}[{flat.size}] TINYAOT_WEIGHTS_ATTR = {{\n    {body}\n}};"

