"""Weight clustering in the int8 domain, after per-channel quantization (so every per-channel scale stays exact).

The values are int8, so a tensor has at most 255 distinct values and 1-D clustering can be solved *exactly*: a
histogram of the values (each weighted by its channel's scale^2, so that the error is in real units), then the
optimal partition into K contiguous intervals by dynamic programming, each interval represented by the integer
nearest its weighted mean (for a quadratic cost the best integer centre of an interval is its rounded mean, and
nearest-centre assignment always gives contiguous intervals, so the DP over intervals finds the global optimum
over integer codebooks). No random seeding, no iterations to tune.

Zero stays exact: when a group holds zeros (pruned weights, or weights that quantize to 0), the interval that
contains 0 is centred at 0, so clustering never destroys sparsity.

Codebook sharing (`cluster_layer`): one codebook per group of `group_size` output channels, for group sizes
1, 4, 16 and the whole tensor. A codebook costs K bytes and each weight ceil(log2 K) bits (rows padded to whole
bytes); smaller groups fit each channel better but pay K bytes per group, which for K = 16 is as much as the
indices of a 32-weight row. The rule that picks the group size trades bytes against error at the exchange rate of
quantization itself (squared error falls 4x per extra bit per weight, D ~ 2^(-2R)):

    minimise  8 * nbytes / N  +  0.5 * log2((E + E0) / E0)

with N the weights, E the scale^2-weighted squared error of the clustering (real units) and E0 = sum_c s_c^2/12 * row
the error the int8 rounding already put in (so E is measured against the float weights' own noise and a lossless
grouping is not infinitely good). Said as "the smallest bytes within a factor of the best": a grouping that saves
b bits per weight is taken when its total error is within a factor 4^b of the grouping with more bytes. A fixed
small factor (1.5, 2) was measured to pick one codebook per channel on most layers of kws_dscnn and ic_resnet8
(16 bytes of codebook per 32 bytes of indices), paying 2 bits per weight for an error that one extra index bit would
cut by more; see tests/compress/test_cluster.py and issue 4's closing figures.

Budget (what compile_model uses; `choose` above is the per-layer rule when no budget plan exists): the per-layer
rule spends bytes at one fixed exchange rate in every layer, so it cannot put the bytes where the model's output
needs them (on ic_resnet8 it gave one codebook per tensor almost everywhere, 0.502 of int8, 84 % top-1 against
89 %). Instead, `allocate` chooses every clustered layer's grouping at once, a multiple-choice knapsack:

    minimise  sum_l g_l * E_l / S_l   subject to   sum_l nbytes_l <= budget

with E_l the layer's output error on the calibration inputs (as above, through its input Hessian), S_l the energy
of its output signal (`output_energy`), so E_l / S_l is the layer's output noise-to-signal ratio, and g_l the
measured gain from that ratio to the model's output (compress/pipeline.py `_output_gains`: the layer's coarsest
clustering alone, run on to the output over the calibration samples). To first order the output noise-to-signal
ratio is the sum of the layers' contributions g_l * E_l / S_l, which is why that sum is the quantity to minimise;
a small layer (first conv, final fully connected) counts by its effect on the output, not by its size. Measured
gains (at the logits before the softmax, `_logits`): ic_resnet8 0.3 and 0.5 for the 1x1 shortcut convolutions,
2.6 for the final fully connected layer, 3 and 4.4 for the first two convolutions. Each layer's candidates are its
group sizes (a layer the user asked to cluster is clustered; staying dense int8 is not offered, and dense still
wins later only where clustering would not save bytes). The budget is the clustered layers'
weights times `clusters_budget` bits per weight, by default the index bits ceil(log2 K) plus 10 % (codebooks may
add a tenth to the indices: 4.4 bits, 0.55 of int8, for K = 16). A layer that --clusters puts on an evenly spaced
grid instead (compress/pipeline.py `grid_layers`: each weight used once per inference) is in the budget too, at
its fixed int4 (or, 5-bit grid, int5) bytes. The knapsack is solved by the Lagrangian greedy
along each layer's lower convex hull of (bytes, ratio). The plan is made on the int8 model's activations
(compress/pipeline.py `_plan_clusters`); the layers are then clustered in order against the inputs the
already-compressed layers give them, at the planned grouping.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinyaot.compress.encode import index_bits
from tinyaot.compress.storage import rows

GROUP_SIZES = (1, 4, 16)  # plus "all output channels"


def optimal_codebook(values: np.ndarray, weights: np.ndarray | None, k: int,
                     keep_zero: bool = True) -> tuple[np.ndarray, float]:
    """Optimal K-entry integer codebook of integer `values` (any shape) under the squared error weighted by
    `weights` (same shape; None: all 1). Returns (sorted int codebook of at most K distinct entries, error).
    With `keep_zero` and a 0 among the values, the interval holding 0 is centred at 0 exactly."""
    v = np.asarray(values, np.int64).reshape(-1)
    w = np.ones(v.shape, np.float64) if weights is None else np.asarray(weights, np.float64).reshape(-1)
    if v.size == 0:
        return np.zeros(0, np.int64), 0.0
    u, inv = np.unique(v, return_inverse=True)
    h = np.bincount(inv, weights=w, minlength=u.size)  # weight of each distinct value
    n = u.size
    if n <= k:
        return u, 0.0
    s0 = np.concatenate([[0.0], np.cumsum(h)])
    s1 = np.concatenate([[0.0], np.cumsum(h * u)])
    s2 = np.concatenate([[0.0], np.cumsum(h * u * u)])
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")  # interval u[i..j]
    valid = i <= j
    w0 = np.where(valid, s0[j + 1] - s0[np.minimum(i, j)], 1.0)
    w1 = np.where(valid, s1[j + 1] - s1[np.minimum(i, j)], 0.0)
    w2 = np.where(valid, s2[j + 1] - s2[np.minimum(i, j)], 0.0)
    centre = np.rint(w1 / np.where(w0 > 0, w0, 1.0))
    if keep_zero and 0 in u:
        holds_zero = valid & (u[i] <= 0) & (u[j] >= 0)
        centre = np.where(holds_zero, 0.0, centre)
    cost = np.where(valid, np.maximum(w2 - 2 * centre * w1 + centre * centre * w0, 0.0), np.inf)
    # best[m][j]: least cost of u[0..j] in m + 1 intervals; start[m][j]: where the last interval begins
    best = cost[0].copy()
    starts = []
    for _ in range(1, k):
        prev = np.concatenate([[np.inf], best[:-1]])  # cost of u[0..i-1] in m intervals, for i = 0..n-1
        total = prev[:, None] + cost  # [i, j]
        arg = np.argmin(total, axis=0)
        starts.append(arg)
        best = total[arg, np.arange(n)]
    # backtrack from the full range with k intervals
    book, j = [], n - 1
    for m in range(k - 1, -1, -1):
        i0 = int(starts[m - 1][j]) if m > 0 else 0
        book.append(int(centre[i0, j]))
        j = i0 - 1
        if j < 0:
            break
    return np.unique(np.asarray(book, np.int64)), float(best[n - 1])


def quantize_to_codebook(values: np.ndarray, book: np.ndarray, keep_zero: bool = True) -> np.ndarray:
    """Each value replaced by its nearest codebook entry (ties to the lower entry), zero kept as zero."""
    v = np.asarray(values, np.int64)
    book = np.sort(np.asarray(book, np.int64))
    d = np.abs(v[..., None] - book)
    out = book[np.argmin(d, axis=-1)]
    if keep_zero and 0 in book:
        out = np.where(v == 0, 0, out)
    return out


@dataclass
class Clustering:
    """One candidate grouping of a layer's clustered weights."""

    group_size: int
    values: np.ndarray  # int8, the tensor's clustered values in the IR layout
    codebooks: np.ndarray  # int8 [groups, k]
    k: int
    bits: int
    error: float  # scale_c^2-weighted squared error (through the layer's input Hessian when there is one)
    nbytes: int  # codebooks + packed indices


class InputHessian:
    """A layer's input Hessian H = E[x x^T] ([row_len, row_len] shared by every output channel, or
    [out_ch, row_len, row_len] for depthwise rows), damped by 1 % of its mean diagonal so that inputs that never
    fire keep it invertible, with what the assignment needs computed once: U upper triangular with U^T U = H^-1
    (the factor GPTQ uses) and the diagonal."""

    def __init__(self, h: np.ndarray):
        h = np.asarray(h, np.float64)
        self.shared = h.ndim == 2
        h3 = h[None] if self.shared else h
        diag = np.einsum("cii->ci", h3)
        damp = 0.01 * np.maximum(diag.mean(axis=1), 1e-12)
        self.h = h3 + damp[:, None, None] * np.eye(h3.shape[1])  # [1 or out_ch, n, n]
        self.diag = np.einsum("cii->ci", self.h)
        self.u = np.linalg.cholesky(np.linalg.inv(self.h)).transpose(0, 2, 1)

    def quad(self, d: np.ndarray) -> np.ndarray:
        """d_c^T H_c d_c per row of d [out_ch, n]."""
        if self.shared:
            return np.einsum("ci,ci->c", d @ self.h[0], d)
        return np.einsum("ci,cij,cj->c", d, self.h, d)


def error_feedback_assign(r: np.ndarray, book_rows: np.ndarray | None, hess: InputHessian,
                          fixed_zero: np.ndarray | None, qmax: int = 127) -> np.ndarray:
    """Assign each weight of `r` [out_ch, row_len] (values in int8 units, not necessarily integers) to an entry of
    its row's codebook `book_rows` [out_ch, K] (None: the integer grid [-qmax, qmax]), column by column, pushing
    each column's rounding error onto the columns not yet assigned through the inverse input Hessian: the
    optimal-brain-quantizer / GPTQ update, which minimises the layer's *output* error rather than the weights' own.
    Weights where `fixed_zero` is set are assigned 0 (pruned weights stay pruned, and the others compensate)."""
    w = np.asarray(r, np.float64).copy()
    out_ch, row_len = w.shape
    q = np.empty_like(w)
    rows_idx = np.arange(out_ch)
    u = hess.u  # [1 or out_ch, n, n]: broadcasts over rows when shared
    for j in range(row_len):
        col = w[:, j]
        if book_rows is None:
            pick = np.clip(np.rint(col), -qmax, qmax)
        else:
            pick = book_rows[rows_idx, np.argmin(np.abs(col[:, None] - book_rows), axis=1)].astype(np.float64)
        if fixed_zero is not None:
            pick = np.where(fixed_zero[:, j], 0.0, pick)
        q[:, j] = pick
        err = (col - pick) / u[:, j, j]
        w[:, j + 1:] -= err[:, None] * u[:, j, j + 1:]
    return q.astype(np.int64)


REFINE_ROUNDS = 2


def refit_codebooks(r: np.ndarray, assigned: np.ndarray, book_rows: np.ndarray, hess: InputHessian, s2: np.ndarray,
                    group_size: int, keep_zero) -> np.ndarray:
    """New codebook entries for a fixed assignment: per group, the least-squares values b minimising
    sum_c s_c^2 (r_c - M_c b)^T H (r_c - M_c b) (M_c: which entry each weight of row c uses), rounded to int8.
    An entry no weight uses, and the 0 entry of a group that keeps its zeros (`keep_zero`: a bool for every group,
    or one per group), stay as they are."""
    out_ch, row_len = r.shape
    k = book_rows.shape[1]
    new_rows = book_rows.copy()
    kz = np.broadcast_to(np.asarray(keep_zero, bool), (-(-out_ch // group_size),))
    for g0 in range(0, out_ch, group_size):
        a = np.zeros((k, k))
        v = np.zeros(k)
        for c in range(g0, min(out_ch, g0 + group_size)):
            # M^T H M (M: the one-hot [row_len, k] assignment) as two matrix products: k is at most 256, and
            # BLAS beats np.add.at's per-element scatter by two orders of magnitude on a 576-long row
            idx = np.argmax(assigned[c][:, None] == book_rows[c][None, :], axis=1)  # the first equal entry
            onehot = np.zeros((row_len, k))
            onehot[np.arange(row_len), idx] = 1.0
            mh = onehot.T @ (hess.h[0] if hess.shared else hess.h[c])
            mhm = mh @ onehot
            a += s2[c] * mhm
            v += s2[c] * (mh @ r[c])
        b = book_rows[g0].astype(np.float64)
        free = (np.diag(a) > 0) & ~((b == 0) & kz[g0 // group_size])
        if free.any():
            rhs = v[free] - a[np.ix_(free, ~free)] @ b[~free]
            b[free] = np.linalg.lstsq(a[np.ix_(free, free)], rhs, rcond=None)[0]
        new_rows[g0:g0 + group_size] = np.clip(np.rint(b), -127, 127).astype(np.int64)
    return new_rows


def cluster_grouped(q: np.ndarray, scales: np.ndarray, k: int, group_size: int, depthwise: bool,
                    keep_zero: bool = True, hess: InputHessian | None = None,
                    target: np.ndarray | None = None) -> Clustering:
    """Cluster int8 weights `q` with one optimal codebook per `group_size` output channels.

    Without `hess` each weight counts scale_c^2 and takes its nearest codebook entry. With the layer's input
    Hessian each weight counts scale_c^2 * H_ii in the codebook, the entries are assigned by
    `error_feedback_assign`, and the error is the output error sum_c s_c^2 dq_c^T H dq_c, measured against
    `target` ([out_ch, row_len] rows in int8 units, e.g. the float weights over their scales) when given, so the
    int8 rounding is not compounded with the clustering.

    A row that is all zero (a dead filter: per-channel quantization gives it a tiny scale and a bias near 2^31) stays
    all zero, and its group's codebook keeps 0, with or without `keep_zero`: any value there would serve no output
    (the row's error weighs next to nothing at its scale) and would put the channel's accumulator bound near 2^31,
    out of the fold kernels' exact requantization (ops/common.py fold_requant_table), so the whole layer would fall
    back to a slower kernel."""
    r = rows(np.asarray(q), depthwise).astype(np.int64)  # [out_ch, row_len]
    out_ch, row_len = r.shape
    s2 = np.asarray(scales, np.float64).reshape(-1) ** 2
    imp = np.ones((out_ch, row_len)) if hess is None else np.broadcast_to(hess.diag, (out_ch, row_len))
    dead = ~r.any(axis=1)
    zero_groups = [keep_zero or bool(dead[g0:g0 + group_size].any()) for g0 in range(0, out_ch, group_size)]
    books = []
    for g0 in range(0, out_ch, group_size):
        block = r[g0:g0 + group_size]
        book, _ = optimal_codebook(block, s2[g0:g0 + group_size, None] * imp[g0:g0 + group_size], k,
                                   zero_groups[g0 // group_size])
        books.append(book)
    # groups with fewer distinct values than the largest codebook repeat their last entry (never indexed)
    kk = max(len(b) for b in books)
    cb = np.array([np.concatenate([b, np.full(kk - len(b), b[-1] if len(b) else 0)]) for b in books], np.int8)
    book_rows = cb[np.arange(out_ch) // group_size].astype(np.int64)
    if hess is None:
        new = np.empty_like(r)
        for g, g0 in enumerate(range(0, out_ch, group_size)):
            new[g0:g0 + group_size] = quantize_to_codebook(r[g0:g0 + group_size], books[g], zero_groups[g])
        err = float(np.sum(s2[:, None] * (new - r) ** 2))
    else:
        goal = r.astype(np.float64) if target is None else np.asarray(target, np.float64)
        fixed = (r == 0) if keep_zero else (np.broadcast_to(dead[:, None], r.shape) if dead.any() else None)
        new = error_feedback_assign(goal, book_rows, hess, fixed)
        err = float(np.sum(s2 * hess.quad(new - goal)))
        for _ in range(REFINE_ROUNDS):  # re-fit the codebooks to the assignment, keep only what lowers the error
            books2 = refit_codebooks(goal, new, book_rows, hess, s2, group_size, zero_groups)
            new2 = error_feedback_assign(goal, books2, hess, fixed)
            err2 = float(np.sum(s2 * hess.quad(new2 - goal)))
            if err2 >= err:
                break
            new, err, book_rows = new2, err2, books2
        cb = book_rows[::group_size].astype(np.int8)
    bits = index_bits(kk)
    row_bytes = (row_len * bits + 7) // 8
    values = _back(new.astype(np.int8), np.asarray(q).shape, depthwise)
    return Clustering(group_size, values, cb, kk, bits, err, int(cb.size + out_ch * row_bytes))


def _back(r: np.ndarray, shape, depthwise: bool) -> np.ndarray:
    return np.ascontiguousarray(r.T).reshape(shape) if depthwise else r.reshape(shape)


def candidate_group_sizes(out_ch: int) -> list[int]:
    return sorted({g for g in GROUP_SIZES if g < out_ch} | {out_ch})


def cluster_layer(q: np.ndarray, scales: np.ndarray, k: int, depthwise: bool, keep_zero: bool = True,
                  hessian: np.ndarray | None = None, target: np.ndarray | None = None,
                  group_sizes: list[int] | None = None) -> tuple[Clustering, list[Clustering]]:
    """All candidate groupings of one layer (or only `group_sizes`) and the one the per-layer rule (`choose`)
    picks among them. `hessian`: the layer's input Hessian (compress/hessian.py), or None to measure the weights'
    own error; `target`: see cluster_grouped."""
    out_ch, row_len = rows(np.asarray(q), depthwise).shape
    hess = None if hessian is None else InputHessian(hessian)
    sizes = candidate_group_sizes(out_ch) if group_sizes is None else group_sizes
    cands = [cluster_grouped(q, scales, k, g, depthwise, keep_zero, hess, target) for g in sizes]
    return choose(cands, out_ch * row_len, int8_noise(scales, row_len, hess)), cands


def output_energy(q: np.ndarray, scales: np.ndarray, depthwise: bool, hessian: np.ndarray | None = None,
                  target: np.ndarray | None = None) -> float:
    """The energy of the layer's output signal (before bias) in the units of Clustering.error:
    sum_c s_c^2 w_c^T H w_c with w_c the row the clustering approximates (`target`, else the int8 row), H the
    input Hessian (identity without one). error / energy is the layer's output noise-to-signal ratio."""
    r = rows(np.asarray(q), depthwise).astype(np.float64) if target is None else np.asarray(target, np.float64)
    s2 = np.asarray(scales, np.float64).reshape(-1) ** 2
    quad = np.sum(r * r, axis=1) if hessian is None else InputHessian(hessian).quad(r)
    return float(max(np.sum(s2 * quad), np.finfo(np.float64).tiny))


def allocate(options: list[list[tuple[int, float]]], budget: float) -> list[int]:
    """Multiple-choice knapsack by the Lagrangian (convex hull) greedy: `options[l]` lists layer l's candidates as
    (bytes, noise-to-signal ratio); returns one index per layer minimising the sum of the ratios with the total
    bytes at most `budget` (or the fewest bytes of every layer when even that exceeds it). Starting from each
    layer's smallest candidate, upgrades along each layer's lower convex hull are taken in order of error saved
    per byte while they fit; a layer whose next upgrade does not fit stops there."""
    pick, hulls = [], []
    for opts in options:
        order = sorted(range(len(opts)), key=lambda i: (opts[i][0], opts[i][1]))
        hull = [order[0]]
        for i in order[1:]:
            if opts[i][1] >= opts[hull[-1]][1]:
                continue  # more bytes, no less error: never worth it
            while len(hull) >= 2:  # drop points above the segment from hull[-2] to i
                a, b = opts[hull[-2]], opts[hull[-1]]
                if (b[1] - a[1]) * (opts[i][0] - a[0]) >= (opts[i][1] - a[1]) * (b[0] - a[0]):
                    hull.pop()
                else:
                    break
            hull.append(i)
        hulls.append(hull)
        pick.append(0)
    used = sum(options[l][h[0]][0] for l, h in enumerate(hulls))
    steps = []  # (error saved per byte, layer, hull position)
    for l, h in enumerate(hulls):
        for j in range(1, len(h)):
            (b0, e0), (b1, e1) = options[l][h[j - 1]], options[l][h[j]]
            steps.append(((e0 - e1) / max(b1 - b0, 1e-9), l, j))
    stopped = set()
    for _, l, j in sorted(steps, key=lambda t: -t[0]):  # slopes fall along a hull, so j comes after j - 1
        if l in stopped or pick[l] != j - 1:
            continue
        extra = options[l][hulls[l][j]][0] - options[l][hulls[l][j - 1]][0]
        if used + extra > budget:
            stopped.add(l)
            continue
        used += extra
        pick[l] = j
    return [hulls[l][j] for l, j in enumerate(pick)]


def rd_cost(c: Clustering, n_weights: int, e0: float) -> float:
    """The rule's cost of a candidate: bits per weight plus half the log2 of its error over the int8 noise."""
    return 8.0 * c.nbytes / max(n_weights, 1) + 0.5 * np.log2((c.error + e0) / e0)


def choose(cands: list[Clustering], n_weights: int, e0: float) -> Clustering:
    return min(cands, key=lambda c: (rd_cost(c, n_weights, e0), c.nbytes, -c.group_size))


def int8_noise(scales: np.ndarray, row_len: int, hess: InputHessian | None = None) -> float:
    """Expected squared error (real units) of rounding to the int8 grid: s_c^2 / 12 per weight, times the energy
    of the weight's input (the Hessian's diagonal) when the error is measured at the output."""
    s2 = np.asarray(scales, np.float64).reshape(-1) ** 2
    energy = np.full(s2.shape, float(row_len)) if hess is None else np.broadcast_to(hess.diag.sum(axis=1), s2.shape)
    return float(max(np.sum(s2 * energy) / 12.0, np.finfo(np.float64).tiny))


__all__ = ["GROUP_SIZES", "optimal_codebook", "quantize_to_codebook", "Clustering", "cluster_grouped",
           "cluster_layer", "choose", "allocate", "output_energy", "rd_cost", "int8_noise", "candidate_group_sizes",
           "InputHessian", "error_feedback_assign"]
