"""Patch-based execution (tinyaot/plan/patch.py, pipeline/schedule.py): the bands each stripe computes, the
schedule the arena budget picks, and the generated C of a patch stage (host-compiled) == the numpy reference.

The model is tests/models/invres96.onnx (made by tests/models/make_invres96.py): a 96x96x3 inverted-residual
network (NCHW input, so the stage starts with the input's Transpose; residual Adds inside the stage, read at a row
offset of their band) whose layer-by-layer arena is 187,616 B."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tinyaot.boards import load_board
from tinyaot.errors import TinyaotError
from tinyaot.oracle.reference import run_reference
from tinyaot.ops.registry import RowWindow, get_op
from tinyaot.pipeline.compile import compile_model, with_budget
from tinyaot.plan import check_plan, lower_bound
from tinyaot.plan.patch import make_stage, schedule_buffers, split_points, stage_macs, stripe_rows, tile
from tinyaot.toolchain.hostjit import HostModel

MODELS = Path(__file__).resolve().parent.parent / "models"
sys.path.insert(0, str(MODELS))
from make_invres96 import calibration_images  # noqa: E402

INVRES = MODELS / "invres96.onnx"


@pytest.fixture(scope="module")
def cal(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("invres") / "cal.npz"
    np.savez(path, x=calibration_images(4))
    return path


@pytest.fixture(scope="module")
def compiled(cal):
    return compile_model(INVRES, cal)


def test_row_window_needs_and_stripes():
    w = RowWindow(kernel=3, stride=2, pad_top=1)
    assert w.needs(0, 1, 96) == (0, 2)      # row 0 reads -1 (padding), 0, 1
    assert w.needs(5, 8, 96) == (9, 16)
    assert w.needs(47, 48, 96) == (93, 96)  # the last reads 93..95
    assert RowWindow().needs(3, 7, 10) == (3, 7)
    assert stripe_rows(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert stripe_rows(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_split_points_need_one_crossing_tensor(compiled):
    g = compiled.graph
    points = split_points(g)
    # after the input's transpose, the stem, each block's end, and inside blocks without a residual Add; never
    # inside block 1 or 3, where the block's input crosses to its Add
    assert points[:4] == [1, 2, 6, 7]
    for k in points:
        made = {n.outputs[0] for n in g.nodes[:k]}
        read_after = {i for n in g.nodes[k:] for i in n.inputs} | set(g.outputs)
        assert made & read_after == {g.nodes[k - 1].outputs[0]}
    assert all(get_op(n.op).row_window(n, g) is None for n in g.nodes[16:])  # pooling, FC, softmax


@pytest.mark.parametrize("k, n", [(6, 3), (9, 5), (16, 4)])
def test_stripes_computed_with_the_reference_equal_the_whole_layers(compiled, k, n):
    """Each stripe's bands computed layer by layer with the numpy reference on the band's shapes and padding
    (plan/patch.tile) give exactly the whole tensors' rows: the geometry changes no arithmetic."""
    g = compiled.graph
    x = compiled.quantize_input(compiled.samples[compiled.input][0])
    full = run_reference(g, {compiled.input: x})
    stage = make_stage(g, k, n)
    out = stage.output
    got = np.zeros_like(full[out])
    for s in range(n):
        bands = {}
        lo, hi = stage.rows[s][compiled.input]
        bands[compiled.input] = np.take(x, range(lo, hi), axis=stage.axes.get(compiled.input, 1))
        for j in range(k):
            t = tile(g, stage, s, j)
            node = g.nodes[j]
            ins = []
            for i in node.inputs:
                if not i:
                    ins.append(None)
                elif g.tensors[i].is_const:
                    ins.append(g.tensors[i].data)
                else:
                    tensor, (h0, _), first = next(v for v in t.views if v[0] == i)
                    rows = t.graph.tensors[i].shape[stage.axes.get(i, 1)]
                    ins.append(np.take(bands[i], range(first - h0, first - h0 + rows), axis=stage.axes.get(i, 1)))
            y = get_op(node.op).reference(t.node, t.graph, ins)[0].reshape(t.graph.tensors[node.outputs[0]].shape)
            bands[node.outputs[0]] = y
            a, b = t.out[1]
            assert np.array_equal(y, full[node.outputs[0]][:, a:b]), (s, j, node.name)
        a, b = stage.rows[s][out]
        got[:, a:b] = bands[out]
    assert np.array_equal(got, full[out])
    done, once = stage_macs(g, stage)
    assert done > once  # the halo is recomputed


def test_schedule_buffers_plan_soundly_and_below_layer_by_layer(compiled):
    g = compiled.graph
    stage = make_stage(g, 9, 6)
    buffers, labels = schedule_buffers(g, stage)
    assert len(labels) == 6 * 9 + len(g.nodes) - 9 + 1
    from tinyaot.plan import plan
    p = plan(buffers)
    check_plan(buffers, p)
    assert lower_bound(buffers).bytes < compiled.lower_bound == 187616
    # each band lives within its stripe; the stage output from its first band to its last reader
    for b in buffers:
        if "@" in b.name:
            s = int(b.name.rsplit("@", 1)[1])
            assert s * 9 <= b.first <= b.last < (s + 1) * 9


def test_budget_picks_layer_by_layer_when_it_fits_else_a_fitting_stage(compiled):
    same = with_budget(compiled, compiled.plan.arena_bytes)
    assert same.patch is None and same.plan == compiled.plan
    fit = with_budget(compiled, 100_000)
    assert fit.patch is not None and fit.plan.arena_bytes <= 100_000
    assert fit.layer_by_layer == (187616, 187616)
    check_plan(fit.buffers, fit.plan)
    with pytest.raises(TinyaotError) as err:
        with_budget(compiled, 4000)
    msg = str(err.value)
    assert msg.startswith("no schedule fits the arena budget of 4000 B: the smallest found (the first ")
    smallest = int(msg.split("needs an arena of ")[1].split(" B")[0])
    assert f"{smallest - 4000} bytes over" in msg and smallest < 187616


@pytest.mark.parametrize("board", [None, "mps2-an386", "mps3-an547"])  # generic kernels, fold/dw3x3, Helium (C)
def test_patched_c_on_the_host_equals_the_reference(cal, board, tmp_path):
    target = load_board(board).target() if board else None
    c = with_budget(compile_model(INVRES, cal, target=target), 90_000)
    assert c.patch is not None and c.plan.arena_bytes <= 90_000
    host = HostModel(c.graph, c.plan.offsets, c.plan.arena_bytes, c.lower_bound, c.patch)
    for x in calibration_images(2, seed=7):
        q = c.quantize_input(x)
        ref = run_reference(c.graph, {c.input: q})[c.output]
        assert np.array_equal(host(q), ref.reshape(host.out_shape))
