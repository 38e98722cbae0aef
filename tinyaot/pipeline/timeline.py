"""The memory plan as a picture: which tensors occupy which bytes of the arena at each step, the peak marked.

A step is one node of the graph (step k runs node k; the last step, one past the nodes, is the graph's output being
read). Tensors that alias another (a Reshape's output, an in-place activation) share their root's bytes, so the
timeline draws one region per root tensor, live from its first write to the last read of it or any alias.
`timeline(compiled)` gives report.json's `memory.timeline`; `timeline_text` draws it for report.md and
`timeline_png` for arena_timeline.png beside report.json.
"""
from __future__ import annotations

from pathlib import Path

from tinyaot.plan.liveness import graph_buffers

from .compile import Compiled

PNG_NAME = "arena_timeline.png"
COLUMNS = 48  # characters of the text map's arena axis
KEYS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def timeline(compiled: Compiled) -> dict:
    """Regions (root tensors with their aliases' lifetimes folded in), and per step the bytes live. With a patch
    stage the stage's steps run its layers stripe by stripe, each band of a tensor a region of its own (the bands of
    one tensor share its letter), and `patch` says which steps they are."""
    g = compiled.graph
    buffers = compiled.buffers or graph_buffers(g)
    labels = compiled.step_labels or [n.name for n in g.nodes] + ["(output read)"]
    by_name = {b.name: b for b in buffers}

    def root(b):
        while b.alias_of is not None:
            b = by_name[b.alias_of]
        return b

    regions: dict[str, dict] = {}
    for b in buffers:
        r = root(b)
        reg = regions.setdefault(r.name, {"name": r.name, "offset": int(compiled.plan.offsets[r.name]),
                                          "size": int(r.size), "first": int(r.first), "last": int(r.last),
                                          "aliases": []})
        if b is not r:
            reg["aliases"].append(b.name)
            reg["first"] = min(reg["first"], int(b.first))
            reg["last"] = max(reg["last"], int(b.last))
    ordered = sorted(regions.values(), key=lambda x: (x["first"], x["offset"]))
    keys: dict[str, str] = {}
    for reg in ordered:
        base = reg["name"].split("@")[0]  # a band `<tensor>@<stripe>` takes its tensor's letter
        if base not in keys:
            keys[base] = KEYS[len(keys)] if len(keys) < len(KEYS) else "#"
        reg["key"] = keys[base]
    steps_n = max([reg["last"] for reg in ordered], default=-1) + 1
    steps = []
    for s in range(steps_n):
        live = [reg for reg in ordered if reg["first"] <= s <= reg["last"]]
        steps.append({"step": s, "layer": labels[s] if s < len(labels) else "(output read)",
                      "live_bytes": int(sum(reg["size"] for reg in live)), "live": [reg["key"] for reg in live]})
    peak = max(steps, key=lambda x: x["live_bytes"], default=None)
    stage = compiled.patch
    return {"arena_bytes": int(compiled.plan.arena_bytes), "tensors": ordered, "steps": steps,
            "peak_step": None if peak is None else peak["step"],
            "peak_bytes": None if peak is None else peak["live_bytes"],
            "patch": None if stage is None else {"first_step": 0, "last_step": stage.stripes * stage.nodes - 1,
                                                 "stripes": stage.stripes, "layers": stage.nodes}}


def timeline_text(t: dict, columns: int = COLUMNS) -> str:
    """One line per step: the arena as `columns` characters (each tensor's letter where its bytes lie, '.' free),
    then a legend of the letters. The peak step is marked with '*'."""
    arena = max(t["arena_bytes"], 1)
    per = arena / columns
    lines = [f"arena {t['arena_bytes']} B, one character = {per:.0f} B; '*' marks the steps at the "
             f"peak ({t['peak_bytes']} B live, first at step {t['peak_step']})", ""]
    p = t.get("patch")
    if p:
        lines[1:1] = [f"patch stage: steps {p['first_step']}..{p['last_step']} run the first {p['layers']} layers "
                      f"once per stripe ({p['stripes']} stripes); a tensor's bands share its letter"]
    width = min(28, max([len(s["layer"]) for s in t["steps"]], default=5))
    regs = {r["key"]: r for r in t["tensors"]}
    for s in t["steps"]:
        row = ["."] * columns
        for key in s["live"]:
            r = regs[key]
            # integer arithmetic (a float column width puts an exact boundary one column off); ceil at the end
            # so a tensor of a few bytes still shows
            lo = r["offset"] * columns // arena
            hi = max(lo + 1, -(-(r["offset"] + r["size"]) * columns // arena))
            for c in range(lo, min(hi, columns)):
                row[c] = key
        layer = s["layer"] if len(s["layer"]) <= width else "..." + s["layer"][-(width - 3):]
        mark = "*" if s["live_bytes"] == t["peak_bytes"] else " "  # every step that reaches the peak
        lines.append(f"{mark}{s['step']:>4}  {layer:<{width}} |{''.join(row)}| {s['live_bytes']:>7} B")
    lines.append("")
    for r in t["tensors"]:
        alias = f" (+{len(r['aliases'])} alias{'es' if len(r['aliases']) > 1 else ''})" if r["aliases"] else ""
        lines.append(f"{r['key']}  {r['name']}{alias}: bytes {r['offset']}..{r['offset'] + r['size'] - 1} "
                     f"({r['size']} B), steps {r['first']}..{r['last']}")
    return "\n".join(lines)


def timeline_png(t: dict, dest: Path, title: str) -> Path:
    """Steps across, arena bytes up: each tensor a rectangle labelled with its letter, the peak step shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    cmap = plt.get_cmap("tab20")
    colours: dict[str, int] = {}  # one colour per letter: a tensor's bands in the patch stage share it
    for r in t["tensors"]:
        k = colours.setdefault(r["key"], len(colours))
        ax.add_patch(plt.Rectangle((r["first"], r["offset"]), r["last"] - r["first"] + 1, r["size"],
                                   facecolor=cmap(k % 20), edgecolor="black", linewidth=0.5))
        ax.text(r["first"] + (r["last"] - r["first"] + 1) / 2, r["offset"] + r["size"] / 2, r["key"],
                ha="center", va="center", fontsize=8)
    for s in t["steps"]:
        if s["live_bytes"] == t["peak_bytes"]:  # every step at the peak
            ax.axvspan(s["step"], s["step"] + 1, color="red", alpha=0.12)
    if t["peak_step"] is not None:
        ax.text(t["peak_step"] + 0.5, t["arena_bytes"], f"peak {t['peak_bytes']} B", ha="center", va="bottom",
                color="red", fontsize=8)
    p = t.get("patch")
    if p:  # the patch stage: its steps shaded, named below the peak label
        ax.axvspan(p["first_step"], p["last_step"] + 1, color="tab:blue", alpha=0.06)
        ax.text((p["first_step"] + p["last_step"] + 1) / 2, t["arena_bytes"] * 1.04,
                f"patch stage: {p['layers']} layers x {p['stripes']} stripes", ha="center", va="bottom",
                color="tab:blue", fontsize=8)
    ax.set_xlim(0, max(len(t["steps"]), 1))
    ax.set_ylim(0, max(t["arena_bytes"], 1) * 1.08)
    ax.set_xlabel("step (layer; in the patch stage, layer of a stripe)" if p else "step (layer)")
    ax.set_ylabel("arena offset (bytes)")
    ax.set_title(title, fontsize=10)
    # fixed margins that hold a 7-digit byte axis and the two labels: tight_layout measured every text first and
    # took a third of the plot's 0.65 s, which every deploy pays
    fig.subplots_adjust(left=0.11, right=0.98, bottom=0.11, top=0.92)
    fig.savefig(dest)
    plt.close(fig)
    return Path(dest)
