"""Render a finished (graph, plan, board) into C sources. Decides nothing: every number comes from the graph's
quantized tensors and node parameters, or from the plan.

The folder it writes is vendorable: the model's own files are `<name>.h` and `<name>.c` and every symbol and macro in
them starts with `tinyaot_<name>_` / `TINYAOT_<NAME>_`, so any number of models link into one image; the kernel
files (`tinyaot_*.c/.h`) are byte-identical copies of templates/kernels, the same in every folder written by the
same tinyaot version, so merging two folders never has to choose between two versions of a file."""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tinyaot import __version__
from tinyaot.ir import Graph
from tinyaot.paths import TEMPLATES
from tinyaot.plan.liveness import scratch_name

from tinyaot.core.cfmt import c_comment, c_ident
from tinyaot.ops.registry import get_op

from .env import environment
from .layers import kernel_declaration, render_layer

KERNEL_HEADERS = ["tinyaot_compiler.h", "tinyaot_nn.h", "tinyaot_nn_types.h", "tinyaot_nn_support.h"]


@dataclass
class EmittedLayer:
    index: int
    node: str
    op: str
    kernel: str
    code: str
    consts: list[str]
    op_comment: str


@dataclass
class Emitted:
    prefix: str  # tinyaot_<name>: the C prefix of every symbol of the model
    name: str = ""  # <name>: the model's file names, <name>.h and <name>.c
    files: list[Path] = field(default_factory=list)  # <name>.c, <name>.h and the kernels, in out_dir
    layers: list[EmittedLayer] = field(default_factory=list)  # nodes that execute code (aliases excluded)
    kernels: list[str] = field(default_factory=list)

    @property
    def header(self) -> Path:
        return self.files[0]

    @property
    def source(self) -> Path:
        return self.files[1]

    @property
    def sources(self) -> list[Path]:
        """The .c files to compile: the model's and its kernels'."""
        return [p for p in self.files if p.suffix == ".c"]


def model_name(graph: Graph) -> str:
    """The model's C name (from the model file's name): `<name>.h`, `<name>.c`, `tinyaot_<name>_invoke`."""
    return c_ident(graph.name).lower()


def model_prefix(graph: Graph) -> str:
    return "tinyaot_" + model_name(graph)


def model_file_stem(name: str) -> str:
    """`name`, unless `<name>.c` or `<name>.h` would be the name of a shared kernel file (a model file called
    tinyaot_nn.onnx): then `<name>_model`, so the model's files never overwrite a kernel's."""
    shared = {p.stem for p in (TEMPLATES / "kernels").iterdir()}
    return f"{name}_model" if name in shared else name


def emit_model(graph: Graph, offsets: dict[str, int], arena_bytes: int, lower_bound: int, board_comment: str,
               out_dir: Path) -> Emitted:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    prefix = model_prefix(graph)
    stem = model_file_stem(model_name(graph))
    result = Emitted(prefix, stem)
    used_names: set[str] = set()
    kernel_files: list[str] = []
    declared: set[str] = set()

    def ptr(tensor: str) -> str:
        return f"(arena + {offsets[tensor]})"

    for k, node in enumerate(graph.nodes):
        spec = get_op(node.op)
        cname = c_ident(f"l{k}_{node.name}", 40)
        while cname in used_names:
            cname += "_"
        used_names.add(cname)
        comment = c_comment(f"step {k}: {node.op} '{node.name}' -> {list(graph.tensors[node.outputs[0]].shape)}")
        if spec.is_alias(node, graph):
            result.layers.append(EmittedLayer(k, node.name, node.op, "", "", [], comment + " (alias, no code)"))
            continue
        call = spec.render(node, graph, cname)
        data_inputs = [i for i in node.inputs if i and not graph.tensors[i].is_const]
        buffers = {f"in{j}": ptr(i) for j, i in enumerate(data_inputs)}
        buffers.update({f"out{j}": ptr(o) for j, o in enumerate(node.outputs)})
        sname = scratch_name(node.name)
        buffers.update(scratch=ptr(sname) if sname in offsets else "NULL",
                       scratch_size=str(spec.scratch_bytes(node, graph)))
        code, consts = render_layer(call, buffers)
        decl = kernel_declaration(call.kernel, tuple(call.files))
        if decl is not None and decl not in declared:  # a kernel file the shared headers do not declare
            declared.add(decl)
            consts = [decl] + consts
        kernel_files += [f for f in call.files if f not in kernel_files]
        result.layers.append(EmittedLayer(k, node.name, node.op, call.kernel, code, consts, comment))

    (inp,), (outp,) = graph.inputs, graph.outputs
    ti, to = graph.tensors[inp], graph.tensors[outp]
    env = environment()
    ctx = dict(
        prefix=prefix, PREFIX=prefix.upper(), name=stem, version=__version__, model_comment=c_comment(graph.name),
        board_comment=c_comment(board_comment), sha256=graph.meta.get("sha256", ""),
        arena_bytes=arena_bytes, lower_bound=lower_bound, layers=result.layers,
        input_comment=c_comment(repr(inp)), input_shape_comment=c_comment(f"shape {list(ti.shape)}"),
        input_size=ti.size, input_scale=repr(float(ti.quant.s)), input_zp=ti.quant.zp,
        output_comment=c_comment(repr(outp)), output_shape_comment=c_comment(f"shape {list(to.shape)}"),
        output_size=to.size, output_scale=repr(float(to.quant.s)), output_zp=to.quant.zp,
        input_offset=offsets[inp], output_offset=offsets[outp],
    )
    for template, name in (("model/model.h.j2", f"{stem}.h"), ("model/model.c.j2", f"{stem}.c")):
        path = out_dir / name
        path.write_text(env.get_template(template).render(**ctx))
        result.files.append(path)
    for name in KERNEL_HEADERS + kernel_files:
        dst = out_dir / name
        shutil.copyfile(TEMPLATES / "kernels" / name, dst)
        result.files.append(dst)
    result.kernels = [f[:-2] for f in kernel_files if f.endswith(".c")]  # not shared headers
    return result
