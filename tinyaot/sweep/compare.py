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

A config of the baseline missing from the current report, or a metric the baseline measured and the current report
did not (e.g. instructions after --no-qemu), fails too: a gate that silently stops checking is no gate.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tinyaot.errors import TinyaotError
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
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TinyaotError(f"{path} is not a JSON file ({type(exc).__name__})") from None
    configs = data.get("configs") if isinstance(data, dict) else None
    if not isinstance(configs, list) or not all(isinstance(c, dict) and "name" in c for c in configs):
        raise TinyaotError(f"{path} is not a sweep report: it needs a 'configs' list of objects with a 'name'")
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


def compare(baseline: dict, current: dict, tolerances: dict[str, tuple[str, float]] | None = None) -> list[Row]:
    """One row per (baseline config, metric the baseline measured); `ok` False for a regression."""
    tol = tolerances or DEFAULT_TOLERANCES
    now = {c["name"]: c for c in current["configs"]}
    rows: list[Row] = []
    for base in baseline["configs"]:
        name = base["name"]
        cur = now.get(name)
        if cur is None:
            rows.append(Row(name, "(config)", None, None, "-", False, "missing from the current report"))
            continue
        for metric in METRICS:
            kind, limit = tol[metric]
            b, c = base.get(metric), cur.get(metric)
            if b is None:
                continue  # the baseline did not measure it: nothing to hold the current report to
            allowed = f"drop <= {100 * limit:g} pp" if kind == "drop" else f"growth <= {100 * limit:g} %"
            if c is None:
                rows.append(Row(name, metric, b, c, allowed, False, "not measured in the current report"))
                continue
            if kind == "drop":
                # a tiny epsilon: top-1 is a ratio of counts, its float difference can carry rounding noise
                ok = b - c <= limit + 1e-12
            else:
                ok = c <= b * (1 + limit) + 1e-9
            rows.append(Row(name, metric, b, c, allowed, ok, "" if ok else
                            ("top-1 dropped" if kind == "drop" else f"{metric} grew")))
    return rows


def input_notes(baseline: dict, current: dict) -> list[str]:
    """Lines saying where the two reports were measured differently (model, board, samples): the comparison still
    runs, but a reader should know that a top-1 change may come from the data rather than the compiler."""
    notes = []
    for key, what in (("model_sha256", "model file contents"), ("board", "board"), ("samples", "number of "
                      "evaluation samples"), ("qemu", "QEMU runs")):
        if key in baseline and key in current and baseline[key] != current[key]:
            notes.append(f"note: different {what}: baseline {baseline[key]}, current {current[key]}")
    return notes


def table(rows: list[Row]) -> str:
    """The rows as a fixed-width text table."""
    head = ("config", "metric", "baseline", "current", "change", "tolerance", "status")
    body = [(r.config, r.metric, _fmt(r.metric, r.baseline), _fmt(r.metric, r.current), r.change, r.allowed,
             "ok" if r.ok else f"FAIL ({r.note})") for r in rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(head, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(x, widths)).rstrip() for x in body]
    return "\n".join(lines)


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


def gate(baseline: dict, current: dict, tolerances: dict[str, tuple[str, float]], baseline_name: str) -> tuple[bool, str]:
    """(passed, the text to print) of comparing `current` against `baseline`: notes on differing inputs, the table,
    then either one line per regression or an OK line. The `compare` command and `sweep --baseline` print this."""
    rows = compare(baseline, current, tolerances)
    lines = input_notes(baseline, current) + [table(rows)]
    bad = failures(rows)
    if bad:
        lines.append(f"FAIL: {len(bad)} regression(s) against {baseline_name}:")
        lines += [f"  {line}" for line in bad]
    else:
        lines.append(f"OK: {len({r.config for r in rows})} configs within tolerance of {baseline_name}")
    return not bad, "\n".join(lines)
