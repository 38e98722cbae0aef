"""The gate: two sweep reports compared config by config, metric by metric.

A regression is top-1 dropping, or flash, arena, instructions or weights growing, by more than the metric's
tolerance. Defaults (DEFAULT_TOLERANCES, also in the README and `tinyaot compare --help`):

    top1          may drop by at most 0.005 (0.5 percentage points, absolute)
    flash_bytes   may grow by at most 1 %
    arena_bytes   may not grow at all (the memory plan is deterministic)
    instructions  may grow by at most 1 % (QEMU counts are deterministic; 1 % leaves room for a toolchain update)
    weights_bytes may not grow at all

A tolerances file (TOML) overrides any of them:

    [top1]
    max_drop = 0.01        # absolute, top-1 as a fraction
    [flash_bytes]
    max_growth = 0.02      # relative to the baseline

A config of the baseline missing from the current report, a config whose flags changed under the same name, or a
metric the baseline measured and the current report did not (e.g. instructions after --no-qemu), fails too: a gate
that silently stops checking, or compares two different settings, is no gate. Those are *mismatches* (the
baseline does not fit this sweep: exit code 2, the job is misconfigured), told apart from *regressions* (exit
code 1, the model got worse).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tinyaot.errors import TinyaotError
from tinyaot.files import sha256_file
from tinyaot.sweep.grid import read_toml

# metric -> (kind, allowed change). "drop": absolute decrease allowed; "growth": relative increase allowed.
DEFAULT_TOLERANCES: dict[str, tuple[str, float]] = {
    "top1": ("drop", 0.005),
    "flash_bytes": ("growth", 0.01),
    "arena_bytes": ("growth", 0.0),
    "instructions": ("growth", 0.01),
    "weights_bytes": ("growth", 0.0),
}
METRICS = tuple(DEFAULT_TOLERANCES)


def tolerances_help() -> str:
    """One line of the defaults, for --help."""
    parts = []
    for metric, (kind, value) in DEFAULT_TOLERANCES.items():
        parts.append(f"{metric} drop <= {value:g}" if kind == "drop" else f"{metric} growth <= {100 * value:g} %")
    return "; ".join(parts)


def load_tolerances(path: str | Path | None) -> dict[str, tuple[str, float]]:
    tol = dict(DEFAULT_TOLERANCES)
    if path is None:
        return tol
    path = Path(path)
    data = read_toml(path, "tolerances file")
    for metric, entry in data.items():
        if metric not in tol:
            raise TinyaotError(f"{path}: unknown metric {metric!r}; known: {', '.join(METRICS)}")
        kind = tol[metric][0]
        key = "max_drop" if kind == "drop" else "max_growth"
        if not isinstance(entry, dict) or set(entry) != {key}:
            raise TinyaotError(f"{path}: [{metric}] takes exactly one key, {key}")
        value = entry[key]
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise TinyaotError(f"{path}: [{metric}] {key} must be a number >= 0, got {value!r}")
        tol[metric] = (kind, float(value))
    return tol


def load_report(path: str | Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise TinyaotError(f"sweep report not found: {path}")
    if not path.is_file():
        raise TinyaotError(f"{path} is not a file; give a sweep's report.json")
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise TinyaotError(f"{path} is not a JSON file ({type(exc).__name__})") from None
    except OSError as exc:
        raise TinyaotError(f"cannot read {path}: {exc.strerror}") from None
    configs = data.get("configs") if isinstance(data, dict) else None
    if not isinstance(configs, list) or not all(isinstance(c, dict) and isinstance(c.get("name"), str)
                                                for c in configs):
        raise TinyaotError(f"{path} is not a sweep report: it needs a 'configs' list of objects with a 'name'")
    for c in configs:
        for metric in METRICS:
            v = c.get(metric)
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)):
                raise TinyaotError(f"{path}: config {c['name']}: {metric} must be a number or null, got {v!r}")
    return data


@dataclass
class Row:
    config: str
    metric: str
    baseline: float | None
    current: float | None
    allowed: str
    ok: bool
    note: str = ""
    # "ok", "regression" (the model got worse), "mismatch" (the baseline does not fit this sweep) or
    # "failed:<error kind>" (the setting failed in the current sweep; its kind decides the exit code)
    kind: str = "ok"

    @property
    def change(self) -> str:
        if self.baseline is None or self.current is None:
            return "-"
        if self.metric == "top1":
            return f"{100 * (self.current - self.baseline):+.2f} pp"
        if self.baseline == 0:
            return f"{self.current - self.baseline:+g}"
        return f"{100 * (self.current / self.baseline - 1):+.2f} %"


def _fmt(metric: str, v) -> str:
    if v is None:
        return "-"
    return f"{100 * v:.2f} %" if metric == "top1" else f"{int(v):,}"


def flags_identity(config: dict):
    """What makes two settings the same setting: their flags, a per-layer spec file by its contents
    (`flags_digest`, recorded by the sweep) or, in a report without it, by its file name."""
    if config.get("flags_digest"):
        return config["flags_digest"]
    flags = dict(config.get("flags") or {})
    if "compression" in flags:
        flags["compression"] = Path(str(flags["compression"])).name
    return json.dumps(flags, sort_keys=True)


def flags_digest(flags: dict) -> str:
    """The sweep's record of a setting's flags, a spec file by its sha256 (compare's `flags_identity`)."""
    flags = dict(flags)
    if "compression" in flags:
        try:
            flags["compression"] = sha256_file(Path(flags["compression"]))
        except OSError:
            pass
    return json.dumps(flags, sort_keys=True)


def _same_flags(base: dict, cur: dict) -> bool:
    if base.get("flags_digest") and cur.get("flags_digest"):
        return base["flags_digest"] == cur["flags_digest"]
    b, c = dict(base), dict(cur)
    b.pop("flags_digest", None)
    c.pop("flags_digest", None)
    return flags_identity(b) == flags_identity(c)


def compare(baseline: dict, current: dict, tolerances: dict[str, tuple[str, float]] | None = None) -> list[Row]:
    """One row per (baseline config, metric the baseline measured); `ok` False for a regression or a mismatch
    (`kind` says which)."""
    tol = tolerances or DEFAULT_TOLERANCES
    now = {c["name"]: c for c in current["configs"]}
    rows: list[Row] = []
    for base in baseline["configs"]:
        name = base["name"]
        cur = now.get(name)
        if cur is None:
            rows.append(Row(name, "(config)", None, None, "-", False, "missing from the current report",
                            "mismatch"))
            continue
        if cur.get("error"):
            rows.append(Row(name, "(config)", None, None, "-", False, f"failed in the current sweep: {cur['error']}",
                            "failed:" + str(cur.get("error_kind") or "input")))
            continue
        if "flags" in base and "flags" in cur and not _same_flags(base, cur):
            rows.append(Row(name, "(config)", None, None, "-", False,
                            f"flags changed: baseline {base.get('command_line') or base['flags']}, current "
                            f"{cur.get('command_line') or cur['flags']}; not compared", "mismatch"))
            continue
        for metric in METRICS:
            kind, limit = tol[metric]
            b, c = base.get(metric), cur.get(metric)
            if b is None:
                continue  # the baseline did not measure it: nothing to hold the current report to
            allowed = f"drop <= {100 * limit:g} pp" if kind == "drop" else f"growth <= {100 * limit:g} %"
            if c is None:
                rows.append(Row(name, metric, b, c, allowed, False, "not measured in the current report",
                                "mismatch"))
                continue
            if kind == "drop":
                # a tiny epsilon: top-1 is a ratio of counts, its float difference can carry rounding noise
                ok = b - c <= limit + 1e-12
            else:
                ok = c <= b * (1 + limit) + 1e-9
            rows.append(Row(name, metric, b, c, allowed, ok, "" if ok else
                            ("top-1 dropped" if kind == "drop" else f"{metric} grew"),
                            "ok" if ok else "regression"))
    return rows


def input_notes(baseline: dict, current: dict) -> list[str]:
    """Lines saying where the two reports were measured differently (model, board, samples): the comparison still
    runs, but a reader should know that a top-1 change may come from the data rather than the compiler."""
    notes = []
    for key, what in (("model_sha256", "model file contents"), ("board", "board"), ("samples", "number of "
                      "evaluation samples"), ("qemu", "QEMU runs")):
        if key in baseline and key in current and baseline[key] != current[key]:
            notes.append(f"note: different {what}: baseline {baseline[key]}, current {current[key]}")
    bv, cv = baseline.get("versions"), current.get("versions")
    if isinstance(bv, dict) and isinstance(cv, dict):
        for tool in ("tinyaot", "gcc", "qemu", "onnxruntime", "numpy"):
            if tool in bv and tool in cv and bv[tool] != cv[tool]:
                notes.append(f"Warning: {tool} differs from the baseline's: baseline {bv[tool]}, current {cv[tool]} "
                             "(figures may move with it)")
    elif isinstance(cv, dict):
        notes.append("Warning: the baseline does not record the toolchain that measured it (made before tinyaot "
                     "recorded versions); figures may differ with the toolchain")
    return notes


def table(rows: list[Row]) -> str:
    """The rows as a fixed-width text table."""
    head = ("config", "metric", "baseline", "current", "change", "tolerance", "status")
    body = [(r.config, r.metric, _fmt(r.metric, r.baseline), _fmt(r.metric, r.current), r.change, r.allowed,
             _status(r)) for r in rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(head, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(x, widths)).rstrip() for x in body]
    return "\n".join(lines)


def _status(r: Row) -> str:
    if r.ok:
        return "ok"
    return f"{'CHANGED' if r.note.startswith('flags changed') else 'FAIL'} ({r.note})"


def failures(rows: list[Row]) -> list[str]:
    """One line per regression, naming config and metric."""
    out = []
    for r in rows:
        if r.ok:
            continue
        if r.metric == "(config)":
            out.append(f"config {r.config}: {r.note}")
        elif r.current is None:
            out.append(f"config {r.config}: {r.metric} {r.note}")
        else:
            out.append(f"config {r.config}: {r.metric} {_fmt(r.metric, r.baseline)} -> {_fmt(r.metric, r.current)}"
                       f" ({r.change}; allowed {r.allowed})")
    return out


# Exit codes (README "Exit codes"): a regression 1; a mismatch 2; a failed setting by its error kind (run.py).
_KIND_CODES = {"ok": 0, "regression": 1, "mismatch": 2, "failed:verification": 1, "failed:input": 2,
               "failed:environment": 2, "failed:internal": 3}


def exit_code_of(kind: str) -> int:
    """The exit code a row (or a failed setting's `failed:<kind>`) stands for; the sweep exits with the highest
    (a bug over a misconfiguration over a regression)."""
    return _KIND_CODES.get(kind, 2)


@dataclass
class Verdict:
    """The gate's outcome: `passed`, the exit code a CI reads (0; 1 a regression; 2 a mismatch: the baseline does
    not fit this sweep), the text printed (notes, table, verdict lines) and its parts for the reports."""
    passed: bool
    exit_code: int
    text: str
    rows: list[Row]
    notes: list[str]
    lines: list[str]
    baseline: str

    def section(self) -> dict:
        """report.json's `gate` (report.md and report.html render it)."""
        return {"baseline": self.baseline, "passed": self.passed, "exit_code": self.exit_code, "notes": self.notes,
                "verdict": self.lines,
                "rows": [{"config": r.config, "metric": r.metric, "baseline": r.baseline, "current": r.current,
                          "baseline_text": _fmt(r.metric, r.baseline), "current_text": _fmt(r.metric, r.current),
                          "change": r.change, "tolerance": r.allowed, "status": _status(r), "ok": r.ok,
                          "kind": r.kind} for r in self.rows]}


def judge(baseline: dict, current: dict, tolerances: dict[str, tuple[str, float]], baseline_name: str) -> Verdict:
    """Compare `current` against `baseline`: notes on differing inputs and toolchains, the table, then either one
    line per regression or mismatch, or an OK line."""
    rows = compare(baseline, current, tolerances)
    notes = input_notes(baseline, current)
    bad = failures(rows)
    mismatch = any(r.kind == "mismatch" for r in rows)
    if bad:
        kinds = [k for k, present in (("regression(s)", any(r.kind == "regression" for r in rows)),
                                      ("mismatch(es)", mismatch),
                                      ("failed setting(s)", any(r.kind.startswith("failed") for r in rows)))
                 if present]
        lines = [f"FAIL: {len(bad)} {' and '.join(kinds)} against {baseline_name}:"] + [f"  {line}" for line in bad]
        if mismatch:
            lines.append("  (a mismatch: the baseline does not fit this sweep's settings; if the change is "
                         "intended, update the baseline)")
    else:
        lines = [f"OK: {len({r.config for r in rows})} configs within tolerance of {baseline_name}"]
    code = max((exit_code_of(r.kind) for r in rows), default=0)
    text = "\n".join(notes + [table(rows)] + lines)
    return Verdict(not bad, code, text, rows, notes, lines, baseline_name)


def gate(baseline: dict, current: dict, tolerances: dict[str, tuple[str, float]],
         baseline_name: str) -> tuple[bool, str]:
    """(passed, the text to print) of `judge`."""
    v = judge(baseline, current, tolerances, baseline_name)
    return v.passed, v.text
