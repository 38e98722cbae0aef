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
from tinyaot.plan.patch import PatchStage, row_bytes, tile

from tinyaot.core.cfmt import c_comment, c_ident, c_string
from tinyaot.ops.registry import ConstArray, get_op

from .env import environment
from .io import Port, model_ports
from .layers import check_declared, render_layer

# the headers every model folder carries (tinyaot_nn.h includes the others)
KERNEL_HEADERS = ["tinyaot_compiler.h", "tinyaot_status.h", "tinyaot_nn.h", "tinyaot_nn_types.h",
                  "tinyaot_nn_support.h", "tinyaot_window.h", "tinyaot_nn_mve.h"]


@dataclass
class EmittedLayer:
    index: int
    node: str
    op: str
    kernel: str
    code: str
    consts: list[str]
    op_comment: str

    @property
    def name_literal(self) -> str:
        """The node's name as the body of a C string literal (tinyaot_<name>_layer_name)."""
        return c_string(self.node)


@dataclass
class EmittedCall:
    """One block of invoke's body, between two instruction marks: a layer's call, or with a patch stage one layer's
    call on one stripe (the stripe's input rows copied in first when it is the stage's first layer)."""

    layer: int  # position of its layer in Emitted.coded()
    code: str
    comment: str
    step: int = 0  # its node's index in the schedule (what tinyaot_<name>_failed_layer reports)


@dataclass
class Emitted:
    prefix: str  # tinyaot_<name>: the C prefix of every symbol of the model
    name: str = ""  # <name>: the model's file names, <name>.h and <name>.c
    files: list[Path] = field(default_factory=list)  # <name>.c, <name>.h and the kernels, in out_dir
    layers: list[EmittedLayer] = field(default_factory=list)  # every node, aliases (no code) included
    kernels: list[str] = field(default_factory=list)
    calls: list[EmittedCall] = field(default_factory=list)  # invoke's body in order, one instruction mark each

    def coded(self) -> list[EmittedLayer]:
        """The layers that execute code, in schedule order of their first call."""
        return [layer for layer in self.layers if layer.code]

    def layer_instructions(self, segments: list[int]) -> list[int] | None:
        """Instructions per coded layer from one inference's segments (entry and copy-in, one per call, copy-out
        and return): a layer run on several stripes sums its calls. None when the counts do not match the calls."""
        if len(segments) != len(self.calls) + 2:
            return None
        out = [0] * len(self.coded())
        for call, n in zip(self.calls, segments[1:-1]):
            out[call.layer] += int(n)
        return out
    inputs: list[Port] = field(default_factory=list)  # the model's inputs and outputs as the C names them (io.py)
    outputs: list[Port] = field(default_factory=list)
    context: dict = field(default_factory=dict, repr=False)  # what <name>.h was rendered from (write_header)

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
               out_dir: Path, stage: PatchStage | None = None, layer_by_layer: int | None = None, *,
               aligned_only: bool = False) -> Emitted:
    """`stage`: the patch stage (plan/patch.py) whose layers run stripe by stripe, each band at its planned
    buffer (`<tensor>@<stripe>`), the graph input copied in band by band from the caller's buffer. `aligned_only`:
    the folder builds with -mno-unaligned-access (the header says so)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    prefix = model_prefix(graph)
    stem = model_file_stem(model_name(graph))
    result = Emitted(prefix, stem)
    used_names: set[str] = set()
    kernel_files: list[str] = []

    def ptr(tensor: str) -> str:
        return f"(arena + {offsets[tensor]})"

    cnames: list[str] = []
    for k, node in enumerate(graph.nodes):
        spec = get_op(node.op)
        cname = c_ident(f"l{k}_{node.name}", 40)
        while cname in used_names:
            cname += "_"
        used_names.add(cname)
        comment = c_comment(f"step {k}: {node.op} '{node.name}' -> {list(graph.tensors[node.outputs[0]].shape)}")
        if spec.is_alias(node, graph):
            result.layers.append(EmittedLayer(k, node.name, node.op, "", "", [], comment + " (alias, no code)"))
            cnames.append(cname)
            continue
        if stage is not None and k < stage.nodes:
            comment = c_comment(f"step {k}: {node.op} '{node.name}' -> {list(graph.tensors[node.outputs[0]].shape)}, "
                                f"in {stage.stripes} stripes")
        call = spec.render(node, graph, cname)
        data_inputs = [i for i in node.inputs if i and not graph.tensors[i].is_const]
        if stage is not None and k < stage.nodes:
            # the whole layer's call for its constants (its stripes' calls, rendered below, share them)
            buffers = {f"in{j}": "NULL" for j in range(len(data_inputs))}
            buffers.update({f"out{j}": "NULL" for j in range(len(node.outputs))}, scratch="NULL",
                           scratch_size="0")
        else:
            buffers = {f"in{j}": ptr(i) for j, i in enumerate(data_inputs)}
            buffers.update({f"out{j}": ptr(o) for j, o in enumerate(node.outputs)})
            sname = scratch_name(node.name)
            buffers.update(scratch=ptr(sname) if sname in offsets else "NULL",
                           scratch_size=str(spec.scratch_bytes(node, graph)))
        code, consts = render_layer(call, buffers)
        check_declared(call.kernel)
        kernel_files += [f for f in call.files if f not in kernel_files]
        result.layers.append(EmittedLayer(k, node.name, node.op, call.kernel, code, consts, comment))
        cnames.append(cname)
    inputs, outputs = model_ports(graph)
    result.inputs, result.outputs = inputs, outputs
    coded = {layer.index: pos for pos, layer in enumerate(result.coded())}
    first = stage.nodes if stage is not None else 0
    if stage is not None:
        run = [j for j in range(first) if result.layers[j].code]  # aliases (a no-op reshape) have no call
        keys = {j: _const_keys(get_op(graph.nodes[j].op).render(graph.nodes[j], graph, cnames[j])) for j in run}
        for st in range(stage.stripes):
            for j in run:
                t = tile(graph, stage, st, j)
                code = _band_code(graph, stage, st, j, t, cnames[j], offsets, keys[j], copy_input=j == run[0],
                                  source=inputs[0].param)
                result.calls.append(EmittedCall(coded[j], code, c_comment(
                    f"stripe {st + 1}/{stage.stripes}, step {j}: {t.node.op} '{t.node.name}' rows "
                    f"{t.out[1][0]}..{t.out[1][1] - 1} of {graph.tensors[t.out[0]].shape[1]}"), j))
    for layer in result.layers[first:]:
        if layer.code:
            result.calls.append(EmittedCall(coded[layer.index], layer.code, layer.op_comment, layer.index))


    def port_ctx(p: Port) -> dict:
        # the patch stage's input is copied in band by band (in its calls), not whole before them
        banded = stage is not None and p.role == "input" and p.name == graph.inputs[0]
        return dict(role=p.role, param=p.param, macro=p.macro, size=p.size, zero_point=p.zero_point,
                    scale_literal=repr(p.scale), offset=None if banded else offsets[p.name],
                    comment=c_comment(repr(p.name)), shape_comment=c_comment(f"shape {list(p.shape)}"))

    env = environment()
    ctx = dict(
        prefix=prefix, PREFIX=prefix.upper(), name=stem, version=__version__, model_comment=c_comment(graph.name),
        board_comment=c_comment(board_comment), sha256=graph.meta.get("sha256", ""),
        arena_bytes=arena_bytes, lower_bound=lower_bound, layers=result.layers, aligned_only=aligned_only,
        inputs=[port_ctx(p) for p in inputs], outputs=[port_ctx(p) for p in outputs], calls=result.calls,
        patch_comment=None if stage is None else c_comment(
            f"patch stage: steps 0..{stage.nodes - 1} run in {stage.stripes} stripes of rows, the input copied in "
            f"a band at a time (arena {arena_bytes} B; {layer_by_layer} B layer by layer)"),
    )
    result.context = ctx
    result.files.append(out_dir / f"{stem}.h")
    write_header(result, None)
    path = out_dir / f"{stem}.c"
    path.write_text(env.get_template("model/model.c.j2").render(**ctx))
    result.files.append(path)
    for name in KERNEL_HEADERS + [f for f in kernel_files if f not in KERNEL_HEADERS]:
        dst = out_dir / name
        shutil.copyfile(TEMPLATES / "kernels" / name, dst)
        result.files.append(dst)
    result.kernels = [f[:-2] for f in kernel_files if f.endswith(".c")]  # not shared headers
    return result


@dataclass(frozen=True)
class StackFigures:
    """The stack one invoke call needs beyond its caller's, measured under QEMU (pipeline/verify.py), for the header:
    built at `optimization` (the product build's level) and at -O0 (None, with `o0_note`, when not measured)."""
    compiler: str
    optimization: str
    invoke_bytes: int
    invoke_bytes_o0: int | None
    o0_note: str | None = None


def write_header(emitted: Emitted, stack: StackFigures | None) -> None:
    """(Re)write <name>.h, stating `stack` (None: not measured, as before verification or without it)."""
    emitted.header.write_text(environment().get_template("model/model.h.j2").render(
        **emitted.context, stack=stack, o0_note=None if stack is None or stack.o0_note is None
        else c_comment(stack.o0_note)))


def _const_keys(call) -> list:
    """What identifies a call's constants: names and values (arrays) or fields (structs)."""
    return [(c.name, c.values.tobytes() if isinstance(c, ConstArray) else tuple(str(f) for f in c.fields))
            for c in call.consts]


def _band_code(graph: Graph, stage: PatchStage, s: int, j: int, t, cname: str, offsets: dict[str, int],
               whole_keys: list, copy_input: bool, source: str) -> str:
    """The C of stage node j on stripe s: its kernel call with the band's dimensions, reading each input's view and
    writing its band (the stage output's band in place in the whole tensor); stripe s's input rows are copied in
    from invoke's argument `source` before its first layer. The call's constants must be the whole layer's
    (rendered once, at file scope)."""
    spec = get_op(t.node.op)
    call = spec.render(t.node, t.graph, cname)
    if _const_keys(call) != whole_keys:
        raise ValueError(f"{t.node.op} layer {t.node.name!r}: a band's call has other constants than the whole "
                         "layer's (a tinyaot bug)")
    x = graph.inputs[0]

    def at(tensor: str, row: int) -> str:
        if tensor == stage.output:
            return f"(arena + {offsets[tensor] + row * row_bytes(graph, tensor)})"
        held = stage.rows[s][tensor][0]
        return f"(arena + {offsets[f'{tensor}@{s}'] + (row - held) * row_bytes(graph, tensor)})"

    buffers = {f"in{i}": at(tensor, lo) for i, (tensor, _, lo) in enumerate(t.views)}
    buffers["out0"] = at(t.out[0], t.out[1][0])
    sname = f"{scratch_name(t.node.name)}@{s}"
    buffers.update(scratch=f"(arena + {offsets[sname]})" if sname in offsets else "NULL",
                   scratch_size=str(spec.scratch_bytes(t.node, t.graph)))
    code, _ = render_layer(call, buffers)
    if copy_input:
        lo, hi = stage.rows[s][x]
        dst = offsets[f"{x}@{s}"]
        if stage.axes.get(x, 1) == 1:
            rb = row_bytes(graph, x)
            copy = (f"memcpy(arena + {dst}, {source} + {lo * rb}, {(hi - lo) * rb}); "
                    f"/* input rows {lo}..{hi - 1} */\n")
        else:  # NCHW input: rows lo..hi-1 of each channel plane, planes one after another in the band
            _, c, h, w = graph.tensors[x].shape
            copy = (f"for (int plane = 0; plane < {c}; plane++) {{ /* input rows {lo}..{hi - 1} of each plane */\n"
                    f"    memcpy(arena + {dst} + plane * {(hi - lo) * w}, {source} + plane * {h * w} + {lo * w}, "
                    f"{(hi - lo) * w});\n}}\n")
        code = copy + code
    return code
