"""A sweep's files: report.json (the figures), report.md, Pareto plots (PNG) and one self-contained report.html
(tables and plots embedded as base64, for CI artifact viewers). Text goes through the one jinja environment
(tinyaot.codegen.env); the HTML template escapes every value that comes from the user (names, flags, paths)."""
from __future__ import annotations

import base64
import json
from pathlib import Path

from tinyaot.codegen.env import render

# x-axis metric -> (file name, axis label)
PLOTS = {"flash_bytes": ("pareto_flash.png", "flash (bytes, arm-none-eabi-size)"),
         "arena_bytes": ("pareto_arena.png", "arena (bytes)"),
         "instructions": ("pareto_instructions.png", "instructions (per inference, under QEMU)")}
MARKS = {"flash_bytes": "flash", "arena_bytes": "arena", "instructions": "instructions"}


def pareto(configs: list[dict], x: str) -> list[str]:
    """Names of the settings no other setting beats: none has top-1 at least as high with `x` at most as large,
    one of the two strictly. Settings without both figures take no part."""
    pts = [c for c in configs if c.get("top1") is not None and c.get(x) is not None]
    front = []
    for p in pts:
        dominated = any(q is not p and q["top1"] >= p["top1"] and q[x] <= p[x] and
                        (q["top1"] > p["top1"] or q[x] < p[x]) for q in pts)
        if not dominated:
            front.append(p["name"])
    return front


def plot(configs: list[dict], x: str, front: list[str], dest: Path, title: str) -> Path | None:
    """top-1 against `x`: every setting a grey dot, the Pareto-optimal ones red, joined and labelled."""
    import matplotlib

    matplotlib.use("Agg")  # no display: CI machines and worker processes have none
    import matplotlib.pyplot as plt

    pts = [c for c in configs if c.get("top1") is not None and c.get(x) is not None]
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    others = [c for c in pts if c["name"] not in front]
    best = sorted((c for c in pts if c["name"] in front), key=lambda c: c[x])
    ax.scatter([c[x] for c in others], [100 * c["top1"] for c in others], color="0.6", label="setting", zorder=2)
    ax.step([c[x] for c in best], [100 * c["top1"] for c in best], where="post", color="tab:red", alpha=0.5,
            zorder=1)
    ax.scatter([c[x] for c in best], [100 * c["top1"] for c in best], color="tab:red", marker="D",
               label="Pareto-optimal", zorder=3)
    for c in best:
        ax.annotate(c["name"], (c[x], 100 * c["top1"]), textcoords="offset points", xytext=(5, 5), fontsize=8,
                    color="tab:red")
    for c in others:
        ax.annotate(c["name"], (c[x], 100 * c["top1"]), textcoords="offset points", xytext=(5, -10), fontsize=7,
                    color="0.4")
    ax.margins(0.15)  # room for the labels of the points at the edges
    ax.set_xlabel(PLOTS[x][1])
    ax.set_ylabel("top-1 (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(dest)
    plt.close(fig)
    return dest


def _rows(report: dict) -> list[dict]:
    """The configs with their figures formatted for the tables."""
    rows = []
    for c in report["configs"]:
        marks = [label for x, label in MARKS.items() if c["name"] in report["pareto"][x]]
        rows.append({
            "name": c["name"], "flags": c["command_line"],
            "top1": "-" if c["top1"] is None else f"{100 * c['top1']:.2f} %",
            "weights": _num(c["weights_bytes"]), "flash": _num(c["flash_bytes"]), "arena": _num(c["arena_bytes"]),
            "instructions": _num(c["instructions"]), "pareto": ", ".join(marks) or "-",
            "error": c.get("error") or ""})
    return rows


def _num(v) -> str:
    return "-" if v is None else f"{v:,}"


def write_reports(report: dict, out: Path) -> dict[str, Path]:
    """report.json, the PNGs, report.md and report.html in `out`; returns them by role."""
    out = Path(out)
    report["pareto"] = {x: pareto(report["configs"], x) for x in PLOTS}
    written = {}
    title = f"{Path(report['model']).name} on {report['board']}: top-1 against "
    images = []
    for x, (name, label) in PLOTS.items():
        path = plot(report["configs"], x, report["pareto"][x], out / name, title + label.split(" ")[0])
        if path is not None:
            written[x] = path
            images.append({"file": name, "alt": f"top-1 against {label}",
                           "data": base64.b64encode(path.read_bytes()).decode("ascii")})
    report["plots"] = {x: p.name for x, p in written.items()}
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    ctx = {"r": report, "rows": _rows(report), "images": images, "model_file": Path(report["model"]).name}
    (out / "report.md").write_text(render("sweep/report.md.j2", **ctx))
    (out / "report.html").write_text(render("sweep/report.html.j2", **ctx))
    written.update(json=out / "report.json", md=out / "report.md", html=out / "report.html")
    return written
