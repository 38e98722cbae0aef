"""The kernel-variant interface: what choose_variants picks (cost model, --optimize size, explicit choices), that a
variant's scratch reaches the memory plan, and that the generic choice leaves the generated C as it was."""
from __future__ import annotations

import filecmp

import pytest

from tinyaot.boards import load_board
from tinyaot.core.target import GENERIC, Target
from tinyaot.errors import TinyaotError
from tinyaot.ir import Graph, Node
from tinyaot.ir.graph import Tensor
from tinyaot.ops import decoded, registry
from tinyaot.ops.conv import Conv
from tinyaot.ops.registry import OpSpec, Variant
from tinyaot.api import compile_model, with_variants
from tinyaot.pipeline.stage import stage_model
from tinyaot.pipeline.variants import choose_variants, cost_choice

from tests.shared_data import MODELS, calibration_file

TEST_OP = "TinyaotTestVariants"


class _Listed(OpSpec):
    """A test-only op whose variants are whatever the node's `_offer` attribute lists (names and costs), the
    DSP-only ones only when the target has DSP."""

    def variants(self, node, graph, target):
        return tuple(Variant(name, cost) for name, cost, dsp in node.attrs["_offer"] if target.has_dsp or not dsp)


@pytest.fixture
def listed(monkeypatch):
    monkeypatch.setitem(registry._REGISTRY, TEST_OP, _Listed())


def _graph(*offers) -> Graph:
    tensors = {f"t{k}": Tensor(f"t{k}", (1, 4), "int8") for k in range(len(offers) + 1)}
    nodes = [Node(TEST_OP, f"n{k}", [f"t{k}"], [f"t{k + 1}"], {"_offer": offer}) for k, offer in enumerate(offers)]
    return Graph("g", tensors, nodes, ["t0"], [f"t{len(offers)}"])


def test_cost_model_size_mode_and_choices(listed):
    dsp = Target(core="cortex-m4", has_dsp=True)
    g = _graph([("generic", 100.0, False), ("fast", 60.0, True), ("faster", 50.0, True)],   # lowest cost wins
               [("generic", None, False), ("guess", None, False)],                            # all unknown: first
               [("generic", None, False), ("known", 80.0, False)],                            # known beats unknown
               [("generic", 70.0, False), ("tie", 70.0, False)],                              # tie: first listed
               [("a", 10.0, False), ("generic", 10.0, False)])                                # first, not "generic"
    assert choose_variants(g, dsp) == {"n0": "faster", "n1": "generic", "n2": "known", "n3": "generic", "n4": "a"}
    assert [n.attrs["variant"] for n in g.nodes] == ["faster", "generic", "known", "generic", "a"]
    # without DSP the DSP-only variants are not offered
    assert choose_variants(g, Target(core="cortex-m3"))["n0"] == "generic"
    # --optimize size: generic everywhere, whatever the costs
    assert set(choose_variants(g, Target(core="cortex-m4", has_dsp=True, optimize="size")).values()) == {"generic"}
    # explicit choices (tuning) win; a choice no longer offered falls back to the cost model
    assert choose_variants(g, dsp, {"n0": "fast", "n2": "generic", "n3": "gone"}) == \
        {"n0": "fast", "n1": "generic", "n2": "generic", "n3": "generic", "n4": "a"}
    assert cost_choice((Variant("generic"),)) == "generic"


def test_an_op_must_list_generic_once(listed):
    for offer in ([("fast", 1.0, False)], [("generic", None, False), ("generic", 2.0, False)]):
        with pytest.raises(TinyaotError, match="a tinyaot bug"):
            choose_variants(_graph(offer), GENERIC)


def test_board_target_and_bad_optimize():
    t = load_board("mps3-an547").target()
    assert (t.core, t.has_dsp, t.has_mve, t.optimize) == ("cortex-m55", True, True, "speed")
    assert load_board("mps2-an385").target("size") == Target("cortex-m3", False, False, "size", 4096)
    with pytest.raises(TinyaotError, match="--optimize"):
        load_board("mps2-an386").target("fast")
    with pytest.raises(ValueError):
        Target(optimize="fast")


@pytest.fixture(scope="module")
def kws(tmp_path_factory):
    cal = calibration_file(tmp_path_factory.mktemp("cal"), "kws_dscnn")
    return compile_model(MODELS / "kws_dscnn.onnx", cal)


def test_generic_output_is_byte_identical(kws, tmp_path):
    """target=None (GENERIC) and --optimize size choose "generic" everywhere and write the same files, byte for
    byte (checked once against the tree before the variant interface: the same bytes)."""
    board = load_board("mps2-an386")
    assert {n.attrs["variant"] for n in kws.graph.nodes} == {"generic"}
    stage_model(kws, board, tmp_path / "generic")
    size = with_variants(kws, board.target("size"))
    assert {n.attrs["variant"] for n in size.graph.nodes} == {"generic"}
    stage_model(size, board, tmp_path / "size")
    cmp = filecmp.dircmp(tmp_path / "generic", tmp_path / "size")
    files = [p.relative_to(tmp_path / "generic") for p in (tmp_path / "generic").rglob("*") if p.is_file()]
    assert len(files) > 10
    for f in files:
        assert (tmp_path / "generic" / f).read_bytes() == (tmp_path / "size" / f).read_bytes(), f
    assert not cmp.left_only and not cmp.right_only


def test_a_variants_scratch_reaches_the_plan(kws, monkeypatch):
    """A variant that needs no scratch (the first conv read in place instead of through im2col) re-plans: its
    scratch buffer is gone from the plan."""
    first = next(n for n in kws.graph.nodes if n.op == "Conv")
    base_scratch = Conv().scratch_bytes(first, kws.graph)
    assert base_scratch > 0  # 1 input channel: im2col
    monkeypatch.setattr(Conv, "variants", lambda self, node, graph, target: (
        (Variant("generic", 2.0), Variant("direct", 1.0)) if node is first and target.has_dsp
        else (Variant("generic"),)))
    original = Conv.scratch_bytes
    monkeypatch.setattr(Conv, "scratch_bytes", lambda self, node, graph: 0 if node.attrs.get("variant") == "direct"
                        else original(self, node, graph))
    fast = with_variants(kws, Target("cortex-m4", True))
    assert first.attrs["variant"] == "direct"
    assert f"{first.name}::scratch" not in fast.plan.offsets
    back = with_variants(kws, GENERIC)
    assert first.attrs["variant"] == "generic" and f"{first.name}::scratch" in back.plan.offsets
    assert back.plan.arena_bytes == kws.plan.arena_bytes


def test_bad_optimize_is_a_one_line_error(tmp_path):
    from typer.testing import CliRunner

    from tinyaot.cli.main import app

    r = CliRunner().invoke(app, ["deploy", str(MODELS / "tflm_hello_world_sine.onnx"), "--board", "mps2-an386",
                                 "--optimize", "fast", "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and r.stderr.strip() == "Error: --optimize must be one of speed, size, got 'fast'"
    assert not (tmp_path / "o").exists()


def test_sweep_grid_takes_optimize(tmp_path):
    """A grid's `optimize` (and the quantization keys beside it) pass the up-front flag check; a bad value fails
    it in one line naming the setting, before any setting runs."""
    from tinyaot.sweep.grid import Config
    from tinyaot.api import sweep as run_sweep

    assert Config("s", {"optimize": "size", "clusters": 16}).command_line == "--clusters 16 --optimize size"
    configs = [Config("size", {"optimize": "size", "calibrate": "mse", "cle": True}),
               Config("bad", {"optimize": "fast"})]
    data = tmp_path / "d.npz"
    data.write_bytes(b"")
    with pytest.raises(TinyaotError, match="^setting bad: optimize must be speed or size, got 'fast'$"):
        run_sweep(MODELS / "tflm_hello_world_sine.onnx", "mps2-an386", data, data, tmp_path / "sweep", configs)


def test_decoded_variants_need_a_stack_that_holds_their_tile():
    # int4 / clustered weights run the dense fast paths on weights decoded into a stack tile (ops/decoded.py): only
    # where the board's stack reserve holds it, and then without arena scratch for a tile that fits
    assert decoded.stack_ok(load_board("mps2-an386").target()) and decoded.stack_ok(load_board("mps3-an547").target())
    assert not decoded.stack_ok(load_board("stm32vldiscovery").target()) and not decoded.stack_ok(Target())
    assert decoded.on_stack(decoded.STACK_TILE) and not decoded.on_stack(decoded.STACK_TILE + 1)
