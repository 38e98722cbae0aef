"""The settings a sweep runs: a default grid, or one read from a TOML file (examples/sweep_grid.toml):

    [[config]]
    name = "clusters16_prune0.3"
    flags = { clusters = 16, prune = 0.3 }

`flags` takes the compression flags of `deploy` / `evaluate` by their Python names (prune, prune_scope,
prune_method, prune_pattern, prune_exclude, prune_channels, clusters, weight_bits, clusters_budget) and
`compression`, a per-layer spec file (relative paths are relative to the grid file), and the quantization
settings calibrate ("mse", "minmax", "percentile:99.9", ...), cle and bias_correction (true/false), activation_bits
(8 or 16), and optimize ("speed" or "size": the kernel variants deploy chooses).
An empty table is plain int8 with the defaults.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from tinyaot.compress.ranges import parse_method
from tinyaot.errors import TinyaotError
from tinyaot.files import check_name

FLAG_KEYS = ("prune", "prune_scope", "prune_method", "prune_pattern", "prune_exclude", "prune_channels", "clusters",
             "weight_bits", "clusters_budget", "compression", "calibrate", "cle", "bias_correction", "optimize",
             "activation_bits")
# quantization settings (compress/ranges.py, equalize.py; activation_bits 8 or 16: compress/precision.py)
QUANT_KEYS = ("calibrate", "cle", "bias_correction", "activation_bits")
DEPLOY_KEYS = ("optimize",)  # deploy only: which kernel variants (pipeline/variants.py)


@dataclass(frozen=True)
class Config:
    name: str
    flags: dict = field(default_factory=dict)

    @property
    def command_line(self) -> str:
        """The flags as `deploy` / `evaluate` take them (what a user would type to reproduce this row)."""
        parts = []
        for key in FLAG_KEYS:
            if key not in self.flags:
                continue
            values = self.flags[key] if isinstance(self.flags[key], list) else [self.flags[key]]
            parts += [(f"--{'' if v else 'no-'}{key.replace('_', '-')}" if isinstance(v, bool) else
                       f"--{key.replace('_', '-')} {v}") for v in values]
        return " ".join(parts) or "(int8)"


# At least 8 settings: plain int8, each compression alone, and the mixes a team would weigh against each other;
# pruning three ways (compress/pattern.py): 2x1 blocks (the speed form that keeps accuracy), whole 4x4 blocks the
# kernels skip (fewest instructions) and any weight (fewer bytes).
DEFAULT_GRID = (
    Config("int8", {}),
    Config("clusters16", {"clusters": 16}),
    Config("clusters32", {"clusters": 32}),
    Config("int4", {"weight_bits": 4}),
    Config("prune0.3", {"prune": 0.3}),
    Config("prune0.5", {"prune": 0.5}),
    Config("prune0.5_block2x1", {"prune": 0.5, "prune_pattern": "block2x1"}),
    Config("prune0.5_block", {"prune": 0.5, "prune_pattern": "block"}),
    Config("prune0.7_block", {"prune": 0.7, "prune_pattern": "block"}),
    Config("channels0.25", {"prune_channels": 0.25}),
    Config("clusters16_prune0.3", {"clusters": 16, "prune": 0.3}),
    Config("int4_prune0.3", {"weight_bits": 4, "prune": 0.3}),
    Config("channels0.25_clusters16", {"prune_channels": 0.25, "clusters": 16}),
)

def check_config(c: Config, where: str) -> Config:
    # a config's name is also a file and a folder name in the sweep's folder (configs/<name>.json, configs/<name>/)
    try:
        check_name(c.name, "config name")
    except TinyaotError as exc:
        raise TinyaotError(f"{where}: {exc}") from None
    if not isinstance(c.flags, dict):
        raise TinyaotError(f"{where}: config {c.name}: flags must be a table")
    unknown = sorted(set(c.flags) - set(FLAG_KEYS))
    if unknown:
        raise TinyaotError(f"{where}: config {c.name}: unknown flag(s) {', '.join(unknown)}; known: "
                           f"{', '.join(FLAG_KEYS)}")
    if c.flags.get("calibrate") is not None:  # a bad method fails when the grid is read, not after other runs
        try:
            parse_method(str(c.flags["calibrate"]))
        except TinyaotError as exc:
            raise TinyaotError(f"{where}: config {c.name}: {exc}") from None
    return c


def read_toml(path: Path, what: str) -> dict:
    """A TOML file's contents, or a one-line TinyaotError saying it is missing or not valid TOML."""
    if not path.exists():
        raise TinyaotError(f"{what} not found: {path}")
    if not path.is_file():
        raise TinyaotError(f"{what} {path} is not a file")
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TinyaotError(f"{path} is not valid TOML: {' '.join(str(exc).split())}") from None
    except OSError as exc:
        raise TinyaotError(f"cannot read {what} {path}: {exc.strerror}") from None


def load_grid(path: str | Path | None) -> list[Config]:
    """The grid file's configs, or DEFAULT_GRID when `path` is None."""
    if path is None:
        return list(DEFAULT_GRID)
    path = Path(path)
    data = read_toml(path, "grid file")
    entries = data.get("config")
    if not isinstance(entries, list) or not entries:
        raise TinyaotError(f"{path}: needs at least one [[config]] table with a name and flags")
    configs, seen = [], set()
    for entry in entries:
        if not isinstance(entry, dict) or "name" not in entry or set(entry) - {"name", "flags"}:
            raise TinyaotError(f"{path}: each [[config]] takes 'name' and 'flags', got {entry!r}")
        if not isinstance(entry.get("flags", {}), dict):
            raise TinyaotError(f"{path}: config {entry['name']!r}: flags must be a table, e.g. "
                               f"flags = {{ clusters = 16 }}, got {entry['flags']!r}")
        flags = dict(entry.get("flags", {}))
        if "compression" in flags:  # a spec file beside the grid
            flags["compression"] = str((path.parent / flags["compression"]).resolve())
        c = check_config(Config(entry["name"], flags), str(path))
        if c.name.lower() in seen:  # case-insensitive: two names one file on macOS or Windows
            raise TinyaotError(f"{path}: config name {c.name} appears twice")
        seen.add(c.name.lower())
        configs.append(c)
    return configs
