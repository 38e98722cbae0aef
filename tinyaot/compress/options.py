"""What to compress, and how much, per layer: the options behind --prune, --prune-scope, --prune-exclude,
--prune-channels, --clusters, --weight-bits and --compression SPEC, as one object the API takes.

    CompressionOptions(prune=0.5)                          # 50 % of weights zeroed, one global threshold
    CompressionOptions(clusters=16, prune_exclude=("*dense*",))
    CompressionOptions.from_spec("examples/compression.toml", clusters=16)   # spec file, flag overriding it

A spec file (TOML, or YAML when PyYAML is installed) has the flags' names as top-level defaults and a list of
per-layer entries; see examples/compression.toml:

    prune = 0.5                  # top level: prune, prune_scope, prune_pattern, prune_exclude, prune_channels,
                                 # clusters, weight_bits, clusters_budget (bits per weight over the clustered
                                 # layers, compress/cluster.py), cluster_fc ("grid" or "codebook")
    [[layer]]
    pattern = "*conv2d_1*"       # fnmatch on the layer name (the names report.json's "layers" lists)
    op = "depthwise"             # optional: only layers of this kind (conv, depthwise, fully_connected)
    sparsity = 0.3               # any of: sparsity, prune_pattern, channels, clusters (0 = none), weight_bits
                                 # (8 or 4), exclude

Precedence, lowest first: built-in defaults (nothing compressed), the spec's top level, the flags given
explicitly, --prune-exclude, then the [[layer]] entries in file order (a later entry overrides an earlier one
for the keys it sets). `exclude = true` keeps a layer plain dense int8 (no pruning, clustering or 4-bit);
--prune-exclude only stops pruning. A layer whose sparsity comes from an entry is pruned at its own threshold;
the layers sharing the default --prune share one threshold when prune_scope is "global".
"""
from __future__ import annotations

import fnmatch
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from tinyaot.errors import TinyaotError

KINDS = ("conv", "depthwise", "fully_connected")
SCOPES = ("global", "layer")
PRUNE_METHODS = ("obs", "magnitude", "distill")
PATTERNS = ("unstructured", "block", "block2x1")  # compress/pattern.py
CLUSTER_FC = ("grid", "codebook")  # how --clusters K <= 16 stores a layer that uses each weight once


def _fraction(value, what: str) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise TinyaotError(f"{what} must be a number in [0, 1), got {value!r}") from None
    if not 0.0 <= f < 1.0:
        raise TinyaotError(f"{what} must be in [0, 1) (a fraction of the weights), got {value!r}")
    return f


def _clusters(value, what: str, allow_zero: bool) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TinyaotError(f"{what} must be an integer from 2 to 256, got {value!r}")
    if value == 0 and allow_zero:
        return 0
    if not 2 <= value <= 256:
        raise TinyaotError(f"{what} must be from 2 to 256 (a codebook of K int8 values), got {value}")
    return value


def _pattern(value, what: str) -> str:
    if value not in PATTERNS:
        raise TinyaotError(f"{what} must be 'block2x1' (pairs of output channels skipping an input together: "
                           f"faster and accurate), 'block' (4x4 blocks: faster, coarser) or 'unstructured' (any "
                           f"weight: smaller), got {value!r}")
    return value


def _bits(value, what: str) -> int:
    if isinstance(value, bool) or value not in (4, 8):
        raise TinyaotError(f"{what} must be 8 or 4, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class LayerRule:
    """One [[layer]] entry of a spec file. None means "not set by this entry"; clusters = 0 turns clustering off."""

    pattern: str = "*"
    op: str | None = None
    sparsity: float | None = None
    prune_pattern: str | None = None
    channels: float | None = None
    clusters: int | None = None
    weight_bits: int | None = None
    exclude: bool | None = None

    def __post_init__(self):
        where = f"layer entry {self.pattern!r}"
        if not isinstance(self.pattern, str) or not self.pattern:
            raise TinyaotError(f"a layer entry needs a non-empty 'pattern' string, got {self.pattern!r}")
        if self.op is not None and self.op not in KINDS:
            raise TinyaotError(f"{where}: op must be one of {', '.join(KINDS)}, got {self.op!r}")
        if self.sparsity is not None:
            object.__setattr__(self, "sparsity", _fraction(self.sparsity, f"{where}: sparsity"))
        if self.prune_pattern is not None:
            _pattern(self.prune_pattern, f"{where}: prune_pattern")
        if self.channels is not None:
            object.__setattr__(self, "channels", _fraction(self.channels, f"{where}: channels"))
        _clusters(self.clusters, f"{where}: clusters", allow_zero=True)
        if self.weight_bits is not None:
            _bits(self.weight_bits, f"{where}: weight_bits")
        if self.exclude is not None and not isinstance(self.exclude, bool):
            raise TinyaotError(f"{where}: exclude must be true or false, got {self.exclude!r}")

    def applies(self, name: str, kind: str) -> bool:
        return fnmatch.fnmatchcase(name, self.pattern) and (self.op is None or self.op == kind)


@dataclass(frozen=True)
class LayerSettings:
    """The resolved compression of one layer."""

    sparsity: float = 0.0
    shared_threshold: bool = False  # pruned with the global threshold of all layers at the default sparsity
    prune_pattern: str = "unstructured"  # which zeros: any weight, or whole blocks (compress/pattern.py)
    channels: float = 0.0
    clusters: int | None = None
    weight_bits: int = 8
    excluded: bool = False


@dataclass(frozen=True)
class CompressionOptions:
    prune: float = 0.0  # fraction of Conv/FullyConnected weights zeroed by magnitude
    prune_scope: str = "global"  # "global": one threshold over all layers; "layer": the fraction in each layer
    prune_method: str = "obs"  # "obs": masks by second-order saliency on the calibration data (compress/
    # reconstruct.py), the layers' sparsities by measured sensitivity; "magnitude": smallest |w| (LAMP across layers);
    # "distill": the "obs" masks and fit, then the float model distilled end to end with those masks to the dense
    # model's logits on the calibration data (compress/distill.py; also after --prune-channels)
    prune_pattern: str = "unstructured"  # "block": whole 4x4 blocks that the block kernels skip (conv and fully
    # connected layers; depthwise ones stay dense); "block2x1": blocks of 2 output channels x 1 input position in
    # convolutions (4x4 in fully connected layers, depthwise pruned unstructured but run dense); "unstructured": any
    # weight (compress/pattern.py)
    prune_exclude: tuple[str, ...] = ()  # fnmatch patterns of layers never pruned
    prune_channels: float = 0.0  # fraction of output channels removed in eligible layers (see compress/prune.py)
    clusters: int | None = None  # K, 2..256: int8 codebook clustering after quantization
    weight_bits: int = 8  # 8, or 4: per-channel symmetric int4 in [-7, 7]
    clusters_budget: float | None = None  # bits per weight (codebooks included) over the clustered layers; None:
    # the index bits plus 10 % (compress/cluster.py, "Budget")
    cluster_fc: str = "grid"  # with clusters K <= 16, a layer that uses each weight once per inference (fully
    # connected at batch 1, a convolution with one output pixel): "grid", K evenly spaced levels of each channel's
    # own scale stored and run as int4 (a codebook there costs a lookup per weight, never amortised); with
    # 16 < K <= 32 the same for fully connected layers on a 5-bit grid stored as int5; "codebook": clustered like
    # the other layers (compress/pipeline.py, grid_layers)
    rules: tuple[LayerRule, ...] = ()  # per-layer entries of a spec file, in order
    spec: str | None = None  # the spec file the defaults and rules came from, for the report

    def __post_init__(self):
        object.__setattr__(self, "prune", _fraction(self.prune, "--prune"))
        object.__setattr__(self, "prune_channels", _fraction(self.prune_channels, "--prune-channels"))
        if self.prune_method not in PRUNE_METHODS:
            raise TinyaotError(f"--prune-method must be 'obs', 'magnitude' or 'distill', got {self.prune_method!r}")
        _pattern(self.prune_pattern, "--prune-pattern")
        if self.prune_scope not in SCOPES:
            raise TinyaotError(f"--prune-scope must be 'global' or 'layer', got {self.prune_scope!r}")
        excl = (self.prune_exclude,) if isinstance(self.prune_exclude, str) else tuple(self.prune_exclude)
        object.__setattr__(self, "prune_exclude", excl)
        c = _clusters(self.clusters, "--clusters", allow_zero=True)
        object.__setattr__(self, "clusters", c or None)
        _bits(self.weight_bits, "--weight-bits")
        if self.cluster_fc not in CLUSTER_FC:
            raise TinyaotError(f"cluster_fc must be 'grid' (K evenly spaced levels, run as int4) or 'codebook', got "
                               f"{self.cluster_fc!r}")
        if self.clusters_budget is not None:
            if isinstance(self.clusters_budget, bool) or not isinstance(self.clusters_budget, (int, float)) \
                    or not 0 < self.clusters_budget <= 16:
                raise TinyaotError(f"clusters_budget must be a number of bits per weight in (0, 16], got "
                                   f"{self.clusters_budget!r}")
            object.__setattr__(self, "clusters_budget", float(self.clusters_budget))
        rules = tuple(r if isinstance(r, LayerRule) else _rule(r, "rules") for r in self.rules)
        object.__setattr__(self, "rules", rules)

    @property
    def active(self) -> bool:
        return bool(self.prune or self.prune_channels or self.clusters or self.weight_bits != 8 or self.rules)

    def for_layer(self, name: str, kind: str) -> LayerSettings:
        s = dict(sparsity=self.prune, shared_threshold=self.prune_scope == "global", prune_pattern=self.prune_pattern,
                 channels=self.prune_channels, clusters=self.clusters, weight_bits=self.weight_bits, excluded=False)
        if any(fnmatch.fnmatchcase(name, p) for p in self.prune_exclude):
            s.update(sparsity=0.0, channels=0.0)
        for r in self.rules:
            if not r.applies(name, kind):
                continue
            if r.sparsity is not None:
                s.update(sparsity=r.sparsity, shared_threshold=False)
            if r.prune_pattern is not None:
                s["prune_pattern"] = r.prune_pattern
            if r.channels is not None:
                s["channels"] = r.channels
            if r.clusters is not None:
                s["clusters"] = r.clusters or None
            if r.weight_bits is not None:
                s["weight_bits"] = r.weight_bits
            if r.exclude is not None:
                s["excluded"] = r.exclude
        if s["excluded"]:
            return LayerSettings(excluded=True)
        return LayerSettings(**s)

    def unmatched(self, layers: list[tuple[str, str]]) -> list[str]:
        """Patterns (of --prune-exclude and the spec's entries) that match none of `layers` (name, kind): most
        likely a typo, reported rather than silently ignored."""
        out = [p for p in self.prune_exclude if not any(fnmatch.fnmatchcase(n, p) for n, _ in layers)]
        out += [r.pattern for r in self.rules if not any(r.applies(n, k) for n, k in layers)]
        return out

    def to_json(self) -> dict:
        d = asdict(self)
        d["prune_exclude"] = list(self.prune_exclude)
        d["rules"] = [{k: v for k, v in asdict(r).items() if v is not None} for r in self.rules]
        return d

    @classmethod
    def from_spec(cls, path: str | Path, **overrides) -> "CompressionOptions":
        """Options from a spec file; keyword arguments that are not None (the flags given explicitly) override
        its top-level defaults. prune_exclude patterns from both are kept."""
        data = load_spec_file(Path(path))
        top = {k: v for k, v in data.items() if k != "layer"}
        unknown = set(top) - _TOP_KEYS
        if unknown:
            raise TinyaotError(f"{path}: unknown key(s) {sorted(unknown)}; the top level takes "
                               f"{', '.join(sorted(_TOP_KEYS))} and [[layer]] entries")
        entries = data.get("layer", [])
        if not isinstance(entries, list):
            raise TinyaotError(f"{path}: 'layer' must be a list of entries ([[layer]] in TOML)")
        rules = tuple(_rule(e, str(path)) for e in entries)
        excl = top.pop("prune_exclude", [])
        if isinstance(excl, str):
            excl = [excl]
        if not isinstance(excl, list) or not all(isinstance(p, str) for p in excl):
            raise TinyaotError(f"{path}: prune_exclude must be a list of patterns")
        given = {k: v for k, v in overrides.items() if v is not None and k != "prune_exclude"}
        excl = list(excl) + list(overrides.get("prune_exclude") or ())
        return cls(**{**top, **given, "prune_exclude": tuple(excl), "rules": rules, "spec": str(path)})

    @classmethod
    def coerce(cls, value) -> "CompressionOptions | None":
        """What the API's `compression=` accepts: None, CompressionOptions, a mapping of its fields, or the path of
        a spec file."""
        if value is None or isinstance(value, CompressionOptions):
            return value
        if isinstance(value, Mapping):
            unknown = set(value) - {f.name for f in fields(cls)}
            if unknown:
                raise TinyaotError(f"unknown compression option(s) {sorted(unknown)}")
            return cls(**value)
        if isinstance(value, (str, Path)):
            return cls.from_spec(value)
        raise TinyaotError(f"compression= takes CompressionOptions, a dict or a spec file path, not "
                           f"{type(value).__name__}")

    def with_(self, **changes) -> "CompressionOptions":
        return replace(self, **changes)


def options_from_flags(spec: str | Path | None = None, **flags) -> CompressionOptions | None:
    """The options the command line gives: `flags` are the flags' values, None where not given (so a spec file's
    top-level defaults stay); None when nothing asks for compression."""
    given = {k: v for k, v in flags.items() if v is not None and v != ()}
    if spec is not None:
        return CompressionOptions.from_spec(spec, **given)
    if not given:
        return None
    given["prune_exclude"] = tuple(given.get("prune_exclude", ()))
    return CompressionOptions(**given)


_TOP_KEYS = {"prune", "prune_scope", "prune_method", "prune_pattern", "prune_exclude", "prune_channels", "clusters",
             "weight_bits", "clusters_budget", "cluster_fc"}
_RULE_KEYS = {f.name for f in fields(LayerRule)}


def _rule(entry, where: str) -> LayerRule:
    if not isinstance(entry, Mapping):
        raise TinyaotError(f"{where}: each layer entry must be a table with a 'pattern', got {entry!r}")
    unknown = set(entry) - _RULE_KEYS
    if unknown:
        raise TinyaotError(f"{where}: layer entry {entry.get('pattern', '?')!r} has unknown key(s) "
                           f"{sorted(unknown)}; allowed: {', '.join(sorted(_RULE_KEYS))}")
    if "pattern" not in entry:
        raise TinyaotError(f"{where}: a layer entry has no 'pattern'")
    return LayerRule(**entry)


def load_spec_file(path: Path) -> dict:
    """A spec as a dict: TOML (tomllib) for .toml; YAML for .yaml/.yml, only if PyYAML is importable."""
    if not path.exists():
        raise TinyaotError(f"compression spec not found: {path}")
    suffix = path.suffix.lower()
    if suffix == ".toml":
        try:
            with path.open("rb") as f:
                data = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise TinyaotError(f"{path} is not valid TOML: {exc}") from None
    elif suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise TinyaotError(f"{path}: YAML specs need PyYAML, which is not installed; write the spec as TOML "
                               "(see examples/compression.toml), or pip install pyyaml") from None
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise TinyaotError(f"{path} is not valid YAML: {exc}") from None
    else:
        raise TinyaotError(f"{path}: a compression spec must be .toml (or .yaml with PyYAML installed)")
    if not isinstance(data, dict):
        raise TinyaotError(f"{path}: the spec must be a table of options")
    return data


__all__ = ["CompressionOptions", "LayerRule", "LayerSettings", "load_spec_file", "options_from_flags", "KINDS",
           "SCOPES", "PATTERNS", "CLUSTER_FC"]
