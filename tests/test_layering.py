"""The package's dependency graph, read from the source with `ast` (every `import`/`from ... import` of a tinyaot
module, module level or inside a function): it is acyclic, and the low layers import only what is below them:
the numerics core (tinyaot/core) nothing of tinyaot, the IR only the core, the ops only the core and the IR; at the
top, the CLI (tinyaot/cli) imports tinyaot.api and nothing else of tinyaot."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import tinyaot

PKG = Path(tinyaot.__file__).parent

# Allowed tinyaot imports per layer (a module may always import within its own package).
LAYERS = {
    "tinyaot.core": set(),
    "tinyaot.ir": {"tinyaot.core"},
    "tinyaot.ops": {"tinyaot.core", "tinyaot.ir"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_pkg else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@functools.lru_cache(maxsize=2)  # parsing the package takes ~2.5 s; the tests below read one graph, never change it
def import_graph(include_function_level: bool = True) -> dict[str, set[str]]:
    """module -> the tinyaot modules it imports. Imports inside functions count too (by default): a lazy import
    that would close a cycle at module level only hides the cycle, so it must not exist either."""
    modules = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        is_pkg = path.name == "__init__.py"
        in_function = {id(x) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                       for x in ast.walk(f)}
        # `if TYPE_CHECKING:` blocks never run
        type_only = {id(x) for b in ast.walk(tree) if isinstance(b, ast.If) and "TYPE_CHECKING" in ast.unparse(b.test)
                     for x in ast.walk(b)}
        for n in ast.walk(tree):
            if isinstance(n, ast.Import):
                targets = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom):
                base = _resolve(mod, is_pkg, n)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in n.names]
            else:
                continue
            if id(n) in type_only or (id(n) in in_function and not include_function_level):
                continue
            for t in targets:
                if not (t == "tinyaot" or t.startswith("tinyaot.")):
                    continue
                while t not in modules and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in modules and t != mod:
                    graph[mod].add(t)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (a list of modules, first == last), or None."""
    state: dict[str, int] = {}  # 1: on the DFS stack, 2: done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def _layer(mod: str) -> str | None:
    for layer in LAYERS:
        if mod == layer or mod.startswith(layer + "."):
            return layer
    return None


def test_the_checker_finds_a_cycle_and_a_layer_breach():
    # the checks below would pass on an empty or edge-less graph; make sure they can fail
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    graph = import_graph()
    assert "tinyaot.ir.graph" in graph["tinyaot.ir"] and "tinyaot.core.quant" in graph["tinyaot.ir.graph"]
    assert "tinyaot.ops.registry" in graph["tinyaot.passes.to_nhwc"]


def test_no_import_cycles_even_through_function_level_imports():
    cycle = _cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def cli_breaches(graph: dict[str, set[str]]) -> list[str]:
    """Imports by the CLI's modules of any tinyaot module but tinyaot.api (and the CLI's own)."""
    return sorted(f"{mod} imports {d}" for mod, deps in graph.items() if mod.startswith("tinyaot.cli")
                  for d in deps if d != "tinyaot.api" and not d.startswith("tinyaot.cli"))


def test_the_cli_imports_only_the_api():
    # the check can fail: a CLI that reaches around the API is caught
    assert cli_breaches({"tinyaot.cli.main": {"tinyaot.api", "tinyaot.sweep.grid"}}) == [
        "tinyaot.cli.main imports tinyaot.sweep.grid"]
    graph = import_graph()
    assert graph["tinyaot.cli.main"] == {"tinyaot.api"}
    assert not cli_breaches(graph), "\n".join(cli_breaches(graph))


def test_layers_import_only_below():
    bad = []
    for mod, deps in import_graph().items():
        layer = _layer(mod)
        if layer is None:
            continue
        for d in deps:
            if _layer(d) != layer and _layer(d) not in LAYERS[layer] and d != "tinyaot":
                bad.append(f"{mod} imports {d}")
    assert not bad, "\n".join(sorted(bad))



def test_every_onnxruntime_session_takes_tinyaot_session_options():
    """tinyaot's onnxruntime sessions run with one thread (tinyaot/oracle/sessions.py says why): only that module
    makes SessionOptions, and every module that opens a session takes them from it."""
    own = PKG / "oracle" / "sessions.py"
    found = []
    for path in PKG.rglob("*.py"):
        text = path.read_text()
        if path != own and "SessionOptions(" in text:
            found.append(f"{path.relative_to(PKG)} makes its own SessionOptions")
        if "InferenceSession(" in text and path != own and "session_options()" not in text:
            found.append(f"{path.relative_to(PKG)} opens a session without session_options()")
    assert not found, found
