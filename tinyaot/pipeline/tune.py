"""`--tune`: each layer's kernel variant chosen by measuring the candidates under QEMU on the target board.

Only layers whose op lists more than one variant (`OpSpec.variants`) are tuned. Rather than one benchmark firmware
per layer and variant, the whole model is built once per *round*: in round k every such layer runs its k-th
candidate (the cost model's choice is candidate 0, so round 0 is exactly the default deploy; a layer with fewer
candidates keeps its last one), re-planned for those variants (a variant's scratch and in-place offset change the
arena). Each round runs the first verification samples under QEMU with the harness's per-layer instruction marks
(counted on the first, as report.json counts), and its outputs must equal the numpy reference; a round that does
not (or does not build or run) rejects the variants it tried for the first time, since which of them is wrong
cannot be told apart. Per layer the variant with the fewest instructions among the bit-exact ones wins (ties keep the
cost model's choice), so the tuned model is never slower than the default layer by layer; `api.deploy` checks the
whole-model count too and falls back to the default choice if the tuned firmware runs more instructions than round 0
did.

Results are records keyed by a layer signature: op, tensor shapes and dtypes, the attributes and quantization
parameters that select code paths (offsets, clamps, the signs of the requantization shifts; not the weight values
or multipliers), the weight storage kind, the candidate variants with a hash of their kernel sources and the
shared kernel headers, the board, its compiler flags and the tinyaot version. They are kept in $TINYAOT_CACHE/tune/ (one
JSON file per signature) so a second deploy measures nothing, and `--tuning-log FILE` reads and writes the same records
as JSON lines (sorted by signature: a committed log diffs cleanly). Without `--tune` a log only supplies choices; the
layers it does not know keep the cost model's.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tinyaot import __version__
from tinyaot.boards import Board
from tinyaot.core.target import Target
from tinyaot.errors import TinyaotError, VerificationError
from tinyaot.ir import Graph, Node
from tinyaot.oracle.reference import run_reference_many
from tinyaot.ops.registry import get_op, variant_of
from tinyaot.options import Options
from tinyaot.paths import TEMPLATES
from tinyaot.toolchain.firmware import compile_flags
from tinyaot.cache import CHECKSUM, read_record, seal, unsealed, warn, write_record
from tinyaot.files import check_file_target, write_file
from tinyaot.toolchain.qemu import cache_dir, run_qemu, split_segments

from .build import build_verification_firmware
from .compile import Compiled, with_variants
from .stage import FIRMWARE_DIR, stage_model
from .variants import candidates

RECORD_FORMAT = 1
# Samples each round runs (all must equal the reference; the counts are the first one's, the sample whose counts
# report.json gives). More would only lengthen the QEMU runs: the deploy's own verification checks its samples.
ROUND_SAMPLES = 4
# Firmware builds made for tuning since import: tests count them (a second deploy must make none).
FIRMWARE_BUILDS = 0


def tune_cache_dir() -> Path:
    return cache_dir() / "tune"


# ---- layer signatures --------------------------------------------------------------------------------------
def _describe(value):
    """A JSON-able, code-path-relevant description of an attribute value: per-channel arrays (multipliers, shifts)
    differ between any two models, so only their shape and the signs they contain count (a positive shift takes
    the requantization's left-shift path)."""
    if isinstance(value, np.ndarray):
        if value.size <= 1:
            return _describe(value.reshape(-1).tolist())
        return {"array": list(value.shape), "dtype": str(value.dtype),
                "signs": sorted({int(s) for s in np.sign(value.astype(np.float64)).reshape(-1)})}
    if isinstance(value, (list, tuple)):
        return [_describe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _describe(v) for k, v in sorted(value.items())}
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return type(value).__name__  # an object attribute: its kind, never its address


def _tensor(graph: Graph, name: str) -> dict:
    t = graph.tensors[name]
    out = {"shape": list(t.shape), "dtype": t.dtype, "const": t.is_const}
    q = t.quant
    if q is not None and q.axis is None and not t.is_const:
        out["zero_point"] = int(q.zp)
    if t.storage is not None:
        out["storage"] = {"kind": t.storage.kind, "meta": _describe(t.storage.meta)}
    return out


_HEADERS_HASH: str | None = None


def _file_hash(names) -> str:
    h = hashlib.sha256()
    for name in sorted(set(names)):
        path = TEMPLATES / "kernels" / name
        h.update(name.encode() + b"\0" + (path.read_bytes() if path.is_file() else b"<missing>") + b"\0")
    return h.hexdigest()[:16]


def _headers_hash() -> str:
    global _HEADERS_HASH
    if _HEADERS_HASH is None:
        _HEADERS_HASH = _file_hash(p.name for p in (TEMPLATES / "kernels").glob("*.h"))
    return _HEADERS_HASH


def _kernel_files(node: Node, graph: Graph, variant: str) -> list[str]:
    """The kernel files a variant's C call uses (rendered with that variant chosen, then the choice restored)."""
    saved = node.attrs.get("variant")
    node.attrs["variant"] = variant
    try:
        return list(get_op(node.op).render(node, graph, "sig").files)
    finally:
        if saved is None:
            node.attrs.pop("variant", None)
        else:
            node.attrs["variant"] = saved


def layer_signature(node: Node, graph: Graph, board: Board, names: list[str]) -> tuple[str, dict]:
    """(sha256 hex, the described layer) of everything that decides which variant is fastest for this layer."""
    desc = {"op": node.op,
            "inputs": [_tensor(graph, i) for i in node.inputs if i],
            "outputs": [_tensor(graph, o) for o in node.outputs],
            "attrs": {k: _describe(v) for k, v in sorted(node.attrs.items()) if k != "variant"
                      and not k.startswith("_")},
            "variants": {v: _file_hash(_kernel_files(node, graph, v)) for v in names},
            "headers": _headers_hash(), "board": board.name, "cflags": compile_flags(board),
            "tinyaot_version": __version__,
            "format": RECORD_FORMAT}
    blob = json.dumps(desc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest(), desc


# ---- records: the cache folder and the tuning log ------------------------------------------------------------
# Records are sealed with a checksum (tinyaot/cache.py) in the cache and in a log: a damaged one is ignored with a
# warning and measured again. A log is a hint, never a measurement: whatever it says, the deploy's default choice
# is measured too (tune_variants), and the tuned choice is kept only if it runs fewer instructions.
def valid_record(rec) -> bool:
    """Whether `rec` has the shape best_variant and the report read (a well-formed JSON object may still not)."""
    if not isinstance(rec, dict) or not isinstance(rec.get("signature"), str):
        return False
    variants, counts, rejected = rec.get("variants"), rec.get("instructions"), rec.get("rejected", {})
    return (isinstance(variants, list) and all(isinstance(v, str) for v in variants)
            and isinstance(counts, dict) and all(isinstance(k, str) and (n is None or (isinstance(n, int) and not
                                                                                       isinstance(n, bool) and n >= 0))
                                                  for k, n in counts.items())
            and isinstance(rejected, dict) and all(isinstance(k, str) for k in rejected))


def _load_log(path: Path) -> tuple[dict[str, dict], list[int], bool]:
    """(records by signature, line numbers that are not good records, whether the file is a tuning log at all: text
    whose non-empty lines include at least one record, or an empty file)."""
    if path.is_dir():
        raise TinyaotError(f"tuning log {path} is a folder; give a file name")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}, [], True
    except OSError as exc:
        raise TinyaotError(f"cannot read tuning log {path}: {exc.strerror}") from None
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return {}, [], False
    records, bad = {}, []
    for k, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            bad.append(k)
            continue
        if isinstance(rec, dict) and CHECKSUM in rec:
            rec = unsealed(rec)  # a checksum that does not match: the record was altered
        if not valid_record(rec):
            bad.append(k)
            continue
        records[rec["signature"]] = rec
    return records, bad, bool(records) or not bad


def check_log(path: Path | None, writing: bool) -> None:
    """Refuse now, before any work: a --tuning-log that is a folder, or (when the run will write it, --tune) an
    existing file that is no tuning log, or one in a folder tinyaot cannot write in."""
    if path is None:
        return
    path = Path(path)
    if path.is_dir():
        raise TinyaotError(f"--tuning-log {path} is a folder; give a file name")
    if writing:
        check_file_target(path, "--tuning-log", replaceable=lambda p: _load_log(p)[2])


def read_log(path: Path) -> dict[str, dict]:
    """The good records of a tuning log (JSON lines), by signature; {} when the file does not exist yet. A line
    that is not a good record (not JSON, altered, the wrong shape), or a file that is no tuning log, is ignored
    with one warning line: a log is only a hint."""
    path = Path(path)
    records, bad, is_log = _load_log(path)
    if not is_log:
        warn(f"tuning log {path} is not a tuning log (no tuning records in it); ignored")
    elif bad:
        warn(f"tuning log {path}: line(s) {', '.join(map(str, bad[:8]))}{' ...' if len(bad) > 8 else ''} "
             "are not good tuning records (damaged or altered); ignored")
    return records


def write_log(path: Path, records: dict[str, dict]) -> None:
    """Merge `records` into the tuning log at `path` (theirs replace older ones of the same signature; lines that
    were not good records are dropped), sealed, written atomically. A file that is no tuning log is not replaced."""
    path = Path(path)
    old, _, is_log = _load_log(path)
    if not is_log:
        raise TinyaotError(f"--tuning-log {path} exists and is not a tuning log; remove it or choose another path")
    merged = {**old, **records}
    text = "".join(json.dumps(seal(merged[s]), sort_keys=True) + "\n" for s in sorted(merged))
    write_file(path, text, what="tuning log")


def _cache_get(sig: str) -> dict | None:
    path = tune_cache_dir() / f"{sig}.json"
    rec, why = read_record(path)
    if why is not None or (rec is not None and (not valid_record(rec) or rec.get("signature") != sig)):
        warn(f"cached tuning record {path} is damaged ({why or 'wrong shape'}); measuring it again")
        return None
    return rec


def _cache_put(rec: dict) -> None:
    write_record(tune_cache_dir() / f"{rec['signature']}.json", rec)  # best effort: a miss costs a re-measure


def best_variant(rec: dict, default: str) -> str:
    """The bit-exact variant with the fewest instructions; ties keep `default` (then the first listed)."""
    measured = {v: n for v, n in rec["instructions"].items() if n is not None and v not in rec.get("rejected", {})}
    if not measured:
        return default
    low = min(measured.values())
    return default if measured.get(default) == low else next(v for v in rec["variants"] if measured.get(v) == low)


# ---- measuring ---------------------------------------------------------------------------------------------
def _round(compiled: Compiled, board: Board, target: Target, choices: dict[str, str], work: Path,
           timeout: float, reference: np.ndarray, q_inputs: list[np.ndarray]
           ) -> tuple[dict[str, int] | None, int | None, str]:
    """Build and run one round's firmware; ({layer: instructions}, total, "") when its output equals the
    reference, else (None, None, why)."""
    global FIRMWARE_BUILDS
    c = with_variants(compiled, target, choices)
    folder = work
    shutil.rmtree(folder, ignore_errors=True)
    try:
        emitted = stage_model(c, board, folder)
        FIRMWARE_BUILDS += 1
        elf = build_verification_firmware(emitted, board, folder)
        fw = folder / FIRMWARE_DIR
        (fw / "input.bin").write_bytes(b"".join(q.tobytes() for q in q_inputs))
        result = run_qemu(elf, board, fw, timeout_s=timeout)
    except TinyaotError as exc:
        return None, None, f"build or run failed: {str(exc).splitlines()[0][:200]}"
    if result.exit_code != 0:
        return None, None, f"firmware exited with code {result.exit_code} ({result.exit_meaning})"
    out = np.frombuffer((fw / "output.bin").read_bytes(), np.int8)
    if out.size != reference.size or not np.array_equal(out, reference):
        return None, None, "outputs differ from the numpy reference"
    if not result.segments:
        return None, None, "no instruction counts"
    first = split_segments(result.segments, len(q_inputs))[0]
    counts = emitted.layer_instructions(first)
    if counts is None:
        return None, None, "instruction marks do not match the layers"
    return dict(zip([layer.node for layer in emitted.coded()], counts)), int(sum(first)), ""


@dataclass
class Tuning:
    """What --tune / --tuning-log chose: the model re-planned for the choice, report.json's `tuning` section (its
    `instructions_tuned` is filled in by deploy, `finish`), and the cost model's choice to fall back to."""

    compiled: Compiled
    section: dict
    default_choice: dict[str, str]  # {node name: variant}


def tune_variants(compiled: Compiled, board: Board, target: Target, options: Options) -> Tuning:
    """Choose the variants of `compiled` (already chosen by the cost model for `target`) from measurements:
    records from the cache and `compile.tuning_log`, and with `compile.tune` QEMU rounds for the layers they do not
    cover."""
    measure, log = options.compile.tune, options.compile.tuning_log
    timeout, echo = options.verification.qemu_timeout_s, options.output.echo
    g = compiled.graph
    default = {n.name: variant_of(n) for n in g.nodes}
    section = {"enabled": bool(measure), "log": str(log) if log is not None else None, "layers_tuned": 0,
               "variants_tried": 0, "measured_now": 0, "rounds": 0, "firmware_builds": 0, "from_cache": False,
               "from_cache_layers": 0, "instructions_default": None, "instructions_tuned": None,
               "instructions_default_source": None, "layers": [], "rejected": []}
    if target.optimize == "size":
        section["note"] = "--optimize size keeps the generic kernels: nothing to tune"
        return Tuning(compiled, section, default)
    tunable: list[tuple[Node, list[str], str, dict]] = []
    costs: dict[str, dict[str, float | None]] = {}
    for node in g.nodes:
        listed = candidates(node, g, target)
        names = [v.name for v in listed]
        if len(names) > 1:
            costs[node.name] = {v.name: v.cost for v in listed}
            # the cost model's choice first: round 0 is the default deploy
            names = [default[node.name]] + [v for v in names if v != default[node.name]]
            sig, desc = layer_signature(node, g, board, names)
            tunable.append((node, names, sig, desc))
    section["layers_tuned"] = len(tunable)
    section["signatures"] = len({t[2] for t in tunable})
    logged = read_log(Path(log)) if log is not None else {}
    records: dict[str, dict] = {}
    for node, names, sig, desc in tunable:
        rec = logged.get(sig) or _cache_get(sig)
        if rec is not None and set(rec.get("instructions", {})) | set(rec.get("rejected", {})) >= set(names):
            records[sig] = rec
    section["from_cache_layers"] = sum(1 for t in tunable if t[2] in records)  # layers, not signatures
    missing = [t for t in tunable if t[2] not in records]
    total_default = None

    def reference_run():
        # as the harness reads and writes them: per sample every input (output) back to back in invoke's order
        count = min(ROUND_SAMPLES, len(compiled.samples[compiled.input]))
        feeds = [compiled.quantize_inputs(compiled.feed(k)) for k in range(count)]
        qs = [np.concatenate([f[name].reshape(-1) for name in g.inputs]) for f in feeds]
        refs = run_reference_many(g, feeds)
        return qs, np.concatenate([r[o].reshape(-1) for r in refs for o in g.outputs]).astype(np.int8)

    if missing and measure:
        rounds = max(len(names) for _, names, _, _ in missing)
        qs, reference = reference_run()
        fresh = {sig: {"signature": sig, "op": node.op, "layer": node.name, "board": board.name,
                       "tinyaot_version": __version__, "variants": names, "default": names[0],
                       "instructions": {}, "rejected": {}, "shapes": {"in": desc["inputs"][0]["shape"],
                                                                       "out": desc["outputs"][0]["shape"]}}
                 for node, names, sig, desc in missing}
        known = {node.name: best_variant(records[sig], names[0]) for node, names, sig, _ in tunable
                 if sig in records}
        with tempfile.TemporaryDirectory(prefix="tinyaot-tune-") as tmp:
            for k in range(rounds):
                # round 0: the default everywhere (its total is the default's instruction count)
                choices = dict(default) if k == 0 else {**default, **known}
                trying = {}
                for node, names, sig, _ in missing:
                    choices[node.name] = names[min(k, len(names) - 1)]
                    if k < len(names):
                        trying[node.name] = (sig, names[k])
                per_layer, total, why = _round(compiled, board, target, choices, Path(tmp) / f"round{k}",
                                               timeout, reference, qs)
                section["rounds"] += 1
                section["firmware_builds"] += 1
                echo(f"tuning round {k + 1}/{rounds}: " + (f"{total} instructions" if why == "" else why))
                for name, (sig, variant) in trying.items():
                    if per_layer is None:
                        fresh[sig]["rejected"][variant] = why
                    else:
                        fresh[sig]["instructions"][variant] = per_layer[name]
                if k == 0:
                    if per_layer is None:
                        # the default choice itself failed: a kernel bug the deploy's own verification reports
                        raise VerificationError(f"tuning: the default variants do not verify under QEMU "
                                           f"{board.qemu_machine}: {why} (a tinyaot bug)")
                    total_default = total
        for sig, rec in fresh.items():
            if rec["default"] in rec["rejected"]:
                continue  # never cache a verdict against the default choice
            records[sig] = rec
            _cache_put(rec)
        # (signature, variant) pairs measured: layers of one signature (kws_dscnn's four pointwise convs) share them
        section["measured_now"] = sum(len(r["instructions"]) + len(r["rejected"]) for r in fresh.values())
    choices = dict(default)
    for node, names, sig, desc in tunable:
        rec = records.get(sig)
        if rec is None:
            continue
        pick = best_variant(rec, default[node.name])
        choices[node.name] = pick
        section["variants_tried"] += len(rec["instructions"]) + len(rec.get("rejected", {}))
        section["layers"].append({"name": node.name, "op": node.op, "variant": pick, "default": default[node.name],
                                  "candidates": names, "instructions": rec["instructions"],
                                  "rejected": rec.get("rejected", {}), "costs": costs[node.name]})
        for variant, why in rec.get("rejected", {}).items():
            section["rejected"].append({"layer": node.name, "variant": variant, "why": why})
    section["from_cache"] = bool(tunable) and not missing
    # how often the cost model alone would have chosen what the measurements chose (kernel authors calibrate by it)
    section["cost_model_agrees"] = sum(1 for layer in section["layers"] if layer["variant"] == layer["default"])
    if total_default is not None:
        section["instructions_default"] = total_default
        section["instructions_default_source"] = "measured (tuning round 0)"
    elif choices != default:
        # the choice came from records (the cache or a log), which are hints: measure the default too, so the deploy
        # keeps the tuned choice only if it really runs fewer instructions (api.deploy, finish)
        qs, reference = reference_run()
        with tempfile.TemporaryDirectory(prefix="tinyaot-tune-") as tmp:
            per_layer, total, why = _round(compiled, board, target, default, Path(tmp) / "default", timeout,
                                           reference, qs)
        section["firmware_builds"] += 1
        if per_layer is None:
            raise VerificationError(f"tuning: the default variants do not verify under QEMU {board.qemu_machine}: "
                                    f"{why} (a tinyaot bug)")
        echo(f"tuning: the default choice runs {total} instructions")
        section["instructions_default"] = total
        section["instructions_default_source"] = "measured (the default firmware; the choice came from records)"
    if log is not None and measure and records:  # --tune writes what it measured (and what it took) to the log
        write_log(Path(log), {sig: rec for sig, rec in records.items()})
    return Tuning(with_variants(compiled, target, choices), section, default)


def finish(section: dict, instructions: int | None) -> bool:
    """Fill in the tuned count from the deploy's verification run; True when the deploy must fall back to the
    default choice: the tuned firmware ran more instructions than the default did, or (no verification run) it
    differs from the default and nothing measured it against the default."""
    section["instructions_tuned"] = instructions
    changed = any(layer["variant"] != layer["default"] for layer in section["layers"])
    if section["instructions_default"] is None:  # nothing measured the default: only the default itself is safe
        if not changed and instructions is not None:
            section["instructions_default"] = instructions
            section["instructions_default_source"] = "measured (the choice is the default)"
        return changed
    if instructions is None:
        # not verified under QEMU: the tuned choice stands only if this run measured it layer by layer (--tune)
        return changed and section["instructions_default_source"] != "measured (tuning round 0)"
    return instructions > section["instructions_default"]
