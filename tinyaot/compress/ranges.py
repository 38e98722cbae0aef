"""Calibration methods: from a tensor's calibration values to the range (lo, hi) its int8 parameters come from.

    minmax            every calibration value representable
    percentile[:P]    the P-th percentile at the top and the (100 - P)-th at the bottom (P default 99.99)
    entropy           the range whose quantized histogram has the least KL divergence from the float one
    mse               the range with the least expected squared quantization error over the histogram
    auto              per tensor, whichever of the above least changes the model's output on the calibration
                      samples, with every tensor fake-quantized (compress/output_ranges.py)
    auto-input        min/max for every tensor but the graph inputs, whose range is their min/max or percentile
                      range, judged as `auto` judges (the default, chosen by measurement: README "Calibration
                      methods", ci/accuracy_comparison.py)

All methods but minmax work on one histogram per tensor of HIST_BINS bins over [min(lo, 0), max(hi, 0)] (the
range tinyaot's asymmetric activations always cover, core/quant.activation_qparams), built from the values
collected in the one onnxruntime pass of compress/calibrate.collect_ranges.

The error every method is judged by (`quant_mse`) is the one tinyaot's quantizer really makes: activation_qparams
of the candidate range (scale (hi - lo) / 255, zero point rounded), each value rounded to the grid and
saturated to int8, squared difference, weighted by the bin's count (each bin's values spread over SUBPOINTS
points of it).
"""
from __future__ import annotations

import numpy as np

from tinyaot.core.quant import QMAX, QMIN, activation_qparams
from tinyaot.errors import TinyaotError

HIST_BINS = 2048
METHODS = ("minmax", "percentile", "entropy", "mse", "auto", "auto-input")
DEFAULT_PERCENTILE = 99.99
SUBPOINTS = 16  # points per bin in `quant_mse`
MSE_COARSE, MSE_FINE = 25, 21  # clip fractions tried per side by `mse_range`: a coarse grid, then a fine one
# By measurement over every labelled model (README "Calibration methods"): min/max, with auto CLE
# (compress/equalize.py), except for the graph inputs, whose range is clipped where that measurably lowers the
# model's output error. The clipping methods lower each tensor's own error, but their clipping is a biased error
# that adds up over layers: mse loses 3 points on pt_mbv3_se (whose rare outliers later layers need) and a sample
# each on ic_resnet8_large and pt_frames_attention, where min/max keeps float's or onnxruntime's top-1; `auto` on
# every tensor lowers the output error but not the top-1 (pt_mbv3_se 87.5 %). A graph input's tails are the data's
# noise, not features a layer computed: clipping them gained pt_shapes_resnet 2 samples, lost none anywhere.
DEFAULT_METHOD = "auto-input"


def parse_method(text: str | None) -> tuple[str, float | None]:
    """'minmax' | 'percentile' | 'percentile:99.9' | 'entropy' | 'mse' | 'auto' | 'auto-input' -> (name,
    percentile)."""
    if text is None or text == "":
        text = DEFAULT_METHOD
    name, _, arg = str(text).partition(":")
    name = name.strip().lower()
    if name not in METHODS:
        raise TinyaotError(f"--calibrate must be one of {', '.join(METHODS)} (percentile:P for a percentile P), "
                           f"got {text!r}")
    if name != "percentile":
        if arg:
            raise TinyaotError(f"--calibrate {name} takes no argument, got {text!r}")
        return name, None
    if not arg:
        return name, DEFAULT_PERCENTILE
    try:
        p = float(arg)
    except ValueError:
        raise TinyaotError(f"--calibrate percentile:P needs a number P, got {arg!r}") from None
    if not 50.0 < p <= 100.0:
        raise TinyaotError(f"--calibrate percentile:P needs 50 < P <= 100, got {p:g}")
    return name, p


class Histogram:
    """Counts of HIST_BINS equal bins over [lo, hi], where lo <= 0 <= hi."""

    def __init__(self, values: np.ndarray, lo: float | None = None, hi: float | None = None, bins: int = HIST_BINS):
        v = np.asarray(values, np.float64).ravel()
        self.lo = min(float(v.min()) if lo is None else lo, 0.0)
        self.hi = max(float(v.max()) if hi is None else hi, 0.0)
        # an all-zero tensor: its histogram gets a nominal width, but no method may clip that width (a range of
        # ~1e-15 would give a scale whose rescaling factors no kernel can encode); choose_range keeps (0, 0)
        self.degenerate = self.hi <= self.lo
        if self.degenerate:
            self.hi = self.lo + 1e-12
        self.counts, self.edges = np.histogram(v, bins=bins, range=(self.lo, self.hi))
        self.counts = self.counts.astype(np.float64)
        self.centres = 0.5 * (self.edges[:-1] + self.edges[1:])
        self._points = None

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """([non-empty bins, SUBPOINTS], their counts): each bin's values taken as spread evenly over it. With an
        outlier a bin can be wider than the int8 step of a clipped range, and its centre alone would then
        misjudge the rounding error."""
        if self._points is None:
            nz = self.counts > 0
            w = self.edges[1] - self.edges[0]
            self._points = (self.edges[:-1][nz, None] + (np.arange(SUBPOINTS) + 0.5)[None, :] * (w / SUBPOINTS),
                            self.counts[nz])
        return self._points


def quant_mse(h: Histogram, lo: float, hi: float) -> float:
    """Mean squared error of tinyaot's int8 quantization with range (lo, hi) over the histogram's values (each
    value taken at its bin centre)."""
    qp = activation_qparams(lo, hi)
    s, zp = float(np.float32(qp.scale)), qp.zp
    x, counts = h.points()
    q = np.clip(np.rint(x / s) + zp, QMIN, QMAX)
    err = (q - zp) * s - x
    return float(np.sum(counts[:, None] * err * err) / SUBPOINTS / max(h.counts.sum(), 1.0))


def percentile_range(h: Histogram, p: float) -> tuple[float, float]:
    """The value below which p % of the samples lie (top), and (100 - p) % (bottom), from the cumulative
    histogram (the edge where the cumulative count first reaches the fraction)."""
    c = np.cumsum(h.counts) / h.counts.sum()
    top = float(h.edges[1:][np.searchsorted(c, p / 100.0)]) if p < 100 else h.hi
    bottom = float(h.edges[1:][np.searchsorted(c, 1.0 - p / 100.0)]) if p < 100 else h.lo
    if p < 100 and h.lo >= 0.0:
        bottom = 0.0  # nothing below zero to clip; zero itself must stay exact
    return min(bottom, 0.0), max(top, 0.0)


def mse_range(h: Histogram) -> tuple[float, float]:
    """The clip range minimising `quant_mse`: each side scaled by a fraction in (0, 1], the sides searched in
    turn (the top first, then the bottom given the top, then the top again), on a grid of MSE_COARSE fractions
    and then MSE_FINE around the best of them."""
    lo, hi = h.lo, h.hi
    coarse = np.linspace(1.0, 1.0 / MSE_COARSE, MSE_COARSE)
    for side in ("hi", "lo", "hi"):
        base = h.hi if side == "hi" else h.lo
        if base == 0.0:
            continue

        def best(fractions):
            cands = [(quant_mse(h, lo, f * base) if side == "hi" else quant_mse(h, f * base, hi), -f, f)
                     for f in fractions]
            return min(cands)[2]  # ties: the widest range (-f sorts the larger fraction first)

        # coarse grid, then a fine one around its best (the error is smooth in the clip at this resolution)
        f0 = best(coarse)
        step = 1.0 / MSE_COARSE
        f = best(np.clip(np.linspace(f0 - step, f0 + step, MSE_FINE), 1.0 / (MSE_COARSE * MSE_FINE), 1.0))
        if side == "hi":
            hi = f * base
        else:
            lo = f * base
    return lo, hi


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    m = p > 0
    return float(np.sum(p[m] * np.log(p[m] / q[m])))


def entropy_range(h: Histogram) -> tuple[float, float]:
    """The KL-divergence threshold search TensorRT describes, on tinyaot's asymmetric range: the values are
    folded onto |x| (a one-sided tensor, e.g. after a ReLU, folds onto itself) and a threshold of i of the
    HIST_BINS bins is judged by KL(P || Q): P the first i bins with everything beyond added to the last, Q those
    i bins merged into as many groups as int8 has levels on that side (256 one-sided, 128 two-sided) and each
    group's count spread evenly over its non-empty bins. The least KL wins; the range is the threshold clipped to
    the tensor's own extent on each side."""
    two_sided = h.lo < 0.0 < h.hi
    amax = max(-h.lo, h.hi)
    # |x| histogram over [0, amax], HIST_BINS bins: re-bin the signed histogram's values (bin centres)
    mag, edges = np.histogram(np.abs(h.centres), bins=HIST_BINS, range=(0.0, amax), weights=h.counts)
    levels = 128 if two_sided else QMAX - QMIN + 1
    if mag.sum() == 0 or HIST_BINS <= levels:
        return h.lo, h.hi
    best = (np.inf, HIST_BINS)
    for i in range(levels, HIST_BINS + 1):
        p = mag[:i].copy()
        p[-1] += mag[i:].sum()  # outliers clipped to the threshold
        # merge the i bins into `levels` groups (np.array_split-like boundaries), spread over non-empty bins
        bounds = np.linspace(0, i, levels + 1).astype(np.int64)
        src = mag[:i]
        nonzero = (src > 0).astype(np.float64)
        group_sum = np.add.reduceat(src, bounds[:-1])
        group_nz = np.add.reduceat(nonzero, bounds[:-1])
        per_bin = np.where(group_nz > 0, group_sum / np.maximum(group_nz, 1), 0.0)
        q = np.repeat(per_bin, np.diff(bounds)) * nonzero
        ps, qs = p.sum(), q.sum()
        if qs == 0:
            continue
        pn, qn = p / ps, q / qs
        # P may be positive where Q is zero only in the last bin (the clipped outliers on an empty bin): give Q a
        # tiny mass there rather than an infinite divergence, as the usual implementations smooth it
        qn = np.where((pn > 0) & (qn == 0), 1e-12, qn)
        d = _kl(pn, qn)
        if d < best[0]:
            best = (d, i)
    t = float(edges[best[1]])
    return max(h.lo, -t), min(h.hi, t)


def calibration_record(graph_meta: dict, calibrate: str | None, cle: bool | str) -> dict:
    """What report.json (`quantization.calibration`) and evaluate's result say about how the ranges were made:
    the method (the default resolved), its percentile, the graph inputs' ranges, and whether CLE and bias
    correction ran (bias correction is left to compression's own fitting when weights are pruned, clustered or
    4-bit)."""
    name, pct = parse_method(calibrate)
    eq = graph_meta.get("equalization")
    return {"method": name, "percentile": pct, "default": calibrate is None,
            "cle": "auto" if cle == "auto" else bool(cle),
            "cle_pairs": eq["pairs"] if eq else 0, "input_ranges": graph_meta.get("input_ranges", {}),
            "bias_correction": "bias_corrected" in graph_meta,
            "bias_corrected_layers": len(graph_meta.get("bias_corrected", ()))}


CANDIDATES = ("minmax", "percentile", "mse", "entropy")


def candidate_ranges(h: Histogram, percentile: float | None = None,
                     methods: tuple[str, ...] = CANDIDATES) -> dict[str, tuple[float, float]]:
    """The range of each of `methods` (of CANDIDATES; all: what `auto` chooses among) for the tensor, min/max
    first."""
    if h.degenerate:
        return {"minmax": (h.lo, h.lo)}
    make = {"minmax": lambda: (h.lo, h.hi),
            "percentile": lambda: percentile_range(h, percentile or DEFAULT_PERCENTILE),
            "mse": lambda: mse_range(h), "entropy": lambda: entropy_range(h)}
    return {m: make[m]() for m in CANDIDATES if m in methods}


def choose_range(h: Histogram, method: str, percentile: float | None = None) -> tuple[tuple[float, float], str]:
    """(lo, hi) for a tensor by `method`, and the method that set it (for auto, the one it picked)."""
    if method in ("minmax", "auto-input") or h.degenerate:  # auto-input: an inner tensor (collect_ranges)
        return (h.lo, h.lo if h.degenerate else h.hi), "minmax"
    if method == "percentile":
        return percentile_range(h, DEFAULT_PERCENTILE if percentile is None else percentile), "percentile"
    if method == "entropy":
        return entropy_range(h), "entropy"
    if method == "mse":
        return mse_range(h), "mse"
    if method == "auto":  # without the model to judge by (compress/output_ranges.py): the least own error
        cands = candidate_ranges(h, percentile)
        name = min(cands, key=lambda k: (quant_mse(h, *cands[k]), list(cands).index(k)))
        return cands[name], name
    raise TinyaotError(f"unknown calibration method {method!r}")
