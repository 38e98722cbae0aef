"""Operator knowledge lives in the op files (issue 19): the stages that work on any graph ask the registry
(tinyaot/ops/registry.py: traits, float evaluation, prune axis, 16-bit form, integer bounds, ...) and never name an
op type. Read from the source with `ast`: no string literal in compress/, pipeline/, plan/, codegen/ or sweep/
equals a registered op type."""
from __future__ import annotations

import ast
from pathlib import Path

import tinyaot
from tinyaot.ops.registry import get_op, int16_forms, is_registered, registered_ops

PKG = Path(tinyaot.__file__).parent
ASKING = ("compress", "pipeline", "plan", "codegen", "sweep")


def op_type_strings(source: str, op_types: set[str]) -> list[tuple[int, str]]:
    """(line, literal) of every string constant in `source` that is one of `op_types`."""
    return [(n.lineno, n.value) for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in op_types]


def test_the_scan_finds_op_type_strings():
    # the check below would pass on a scan that finds nothing; make sure it can fail
    ops = set(registered_ops())
    assert op_type_strings('if node.op in ("Conv", "FullyConnected"):\n    x = f"{a}Conv"\n', ops) == [
        (1, "Conv"), (1, "FullyConnected"), (2, "Conv")]
    assert op_type_strings('"""A Conv layer."""\nkind = "conv"\n', ops) == []


def test_no_op_type_string_in_the_stages_that_ask_the_registry():
    ops = set(registered_ops())
    found = [f"{path.relative_to(PKG.parent)}:{line}: {value!r}"
             for folder in ASKING for path in sorted((PKG / folder).rglob("*.py"))
             for line, value in op_type_strings(path.read_text(), ops)]
    assert sum(1 for folder in ASKING for _ in (PKG / folder).rglob("*.py")) > 30  # the folders were scanned
    assert not found, "ask the op registry instead:\n" + "\n".join(found)


def test_every_16_bit_form_is_declared_by_a_registered_op_for_a_registered_op():
    forms = int16_forms()
    assert forms["Conv"] == "ConvS16" and forms["GlobalAveragePool"] == "AveragePoolS16"
    for op, form in forms.items():
        assert is_registered(op) and op in get_op(form).traits.int16_form_of
        assert not get_op(op).traits.int16_form_of, f"{op} is itself a 16-bit form"
