"""Layer-wise post-training reconstruction: each compressed layer refitted to the dense model's output from the
inputs the compressed model gives it, then masked, put on its grid and rounded with second-order compensation.

The problem of one layer (one weighted layer, visited in schedule order while the compressed int8 model and the
dense int8 model both run the calibration samples, compress/pipeline.py):

    minimise over the stored row u   E[(u . x'~ - r . x~)^2]

with x~ = [x, kappa] the dense model's input patch (plus a constant for the bias), x'~ the compressed model's,
r = [w, b / kappa] the dense layer's float row (real units) and u the compressed one. Expanding it,

    E = (u - r*)^T H (u - r*) + const,   H = E[x'~ x'~^T] + lambda I,   r* = H^-1 (E[x'~ x~^T] r + lambda r0)

so every later step is the same quadratic around one target r*: the unconstrained least-squares refit (a ridge
lambda, 1 % of H's mean diagonal, pulls it toward r0, the layer's own float row). r* absorbs what the layers
before have already lost (the cross moment), which a fit of u to r itself through E[x' x'^T] cannot: that was
what the earlier pipeline did, and why it kept 41.6 % top-1 on kws_dscnn at --prune 0.5. The bias is the last
column: never pruned, never rounded (int32), so every pruning and rounding error of the row flows into it too.

A mask (`obs_prune`, SparseGPT-like: Frantar & Alistarh 2023, after Optimal Brain Surgeon and Optimal Brain
Compression) is chosen over groups of a pattern (`Pattern`: unstructured, or blocks of output channels x input
elements that a kernel can skip whole), by the second-order saliency of each group within a block of columns,
with the remaining columns updated as each one is pruned. The kept weights are then solved exactly for that mask
(`masked_solve`). Rounding to the integer grid (`gptq_round`, GPTQ: Frantar et al. 2023) goes column by column,
each rounding error pushed onto the columns not yet rounded through the Cholesky factor of H^-1.

Everything here is float numpy over arrays; which layers, which inputs and which scales is compress/pipeline.py's.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DAMP = 0.01  # ridge / damping, relative to the mean diagonal of the input second moment
BLOCK = 128  # columns per mask-selection block (SparseGPT's lazy block)
SHRINK = 1.0  # ridge per (weights per row / patches), see `damped`
STEP = 0.04  # fraction of a layer's groups removed per round of greedy_prune


@dataclass(frozen=True)
class Pattern:
    """Groups of weights pruned together: `rows` output channels x `cols` consecutive row elements (a row is one
    output channel's weights in the kernel's order; OHWI rows have input channels innermost). (1, 1) is
    unstructured pruning."""

    rows: int = 1
    cols: int = 1


UNSTRUCTURED = Pattern()


@dataclass
class Moments:
    """Second moments of one layer's augmented input patches: `h` = E[x'~ x'~^T] of the compressed model's
    inputs ([G, n+1, n+1]), `c` = E[x'~ x~^T] with the dense model's ([G, n+1, m+1]); G = 1 (every output channel
    reads the same patch) or the channel count (depthwise: one row of taps per channel). `kappa`: the constant
    standing for the bias input."""

    h: np.ndarray
    c: np.ndarray
    kappa: float
    count: int = 0  # patches the moments average (0: unknown)

    @property
    def shared(self) -> bool:
        return self.h.shape[0] == 1


def augmented_moments(xxt: np.ndarray, xdt: np.ndarray, mean_c: np.ndarray, mean_d: np.ndarray,
                      count: int = 0) -> Moments:
    """From E[x' x'^T] ([G, n, n]), E[x' x^T] ([G, n, m]) and the mean patches E[x'] ([G, n]), E[x] ([G, m]):
    the augmented moments, kappa the root mean square of the compressed inputs (so the bias column is on the
    scale of the others)."""
    g, n, _ = xxt.shape
    m = xdt.shape[2]
    kappa = float(np.sqrt(max(np.mean(np.einsum("gii->gi", xxt)), np.finfo(np.float64).tiny)))
    h = np.empty((g, n + 1, n + 1))
    h[:, :n, :n] = xxt
    h[:, :n, n] = h[:, n, :n] = kappa * mean_c
    h[:, n, n] = kappa * kappa
    c = np.empty((g, n + 1, m + 1))
    c[:, :n, :m] = xdt
    c[:, :n, m] = kappa * mean_c
    c[:, n, :m] = kappa * mean_d
    c[:, n, m] = kappa * kappa
    return Moments(h, c, kappa, int(count))


def damped(h: np.ndarray, damp: float = DAMP, count: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(H + lambda I, lambda per batch): lambda = (damp + SHRINK x weights per row / patches) x the mean diagonal
    (at least a tiny positive value). The second term is a ridge that grows where the calibration data determine
    a row poorly: a fully connected layer after global pooling sees one patch per sample, as many as its weights,
    and an unregularised refit of it overfits them (ic_resnet8, --prune-channels 0.25: 52 % top-1 with damp
    alone against 61 % without any int8 refit)."""
    diag = np.einsum("gii->gi", h)
    rel = damp + (SHRINK * h.shape[1] / count if count else 0.0)
    lam = rel * np.maximum(diag.mean(axis=1), 1e-12)
    return h + lam[:, None, None] * np.eye(h.shape[1]), lam


def refit_target(dense_rows: np.ndarray, own_rows: np.ndarray, mom: Moments,
                 damp: float = DAMP) -> tuple[np.ndarray, np.ndarray]:
    """(r*, H + lambda I): the least-squares rows [out, n+1] reproducing the dense rows `dense_rows` ([out, m+1],
    acting on the dense inputs) from the compressed inputs, ridge-pulled toward `own_rows` ([out, n+1])."""
    hl, lam = damped(mom.h, damp, mom.count)
    if mom.shared:
        rhs = dense_rows @ mom.c[0].T + lam[0] * own_rows
        return np.linalg.solve(hl[0], rhs.T).T, hl
    rhs = np.einsum("gij,gj->gi", mom.c, dense_rows) + lam[:, None] * own_rows
    return np.linalg.solve(hl, rhs[..., None])[..., 0], hl


def _hidx(hl: np.ndarray, out: int) -> np.ndarray:
    return np.zeros(out, np.int64) if hl.shape[0] == 1 else np.arange(out)


def objective(u: np.ndarray, rstar: np.ndarray, hl: np.ndarray) -> np.ndarray:
    """Per row, (u - r*)^T H (u - r*): the output error the row adds over its optimum."""
    d = u - rstar
    if hl.shape[0] == 1:
        return np.einsum("ri,ij,rj->r", d, hl[0], d)
    return np.einsum("ri,rij,rj->r", d, hl, d)


def inverse_factor(hl: np.ndarray) -> np.ndarray:
    """U upper triangular with U^T U = H^-1 (batched): the factor OBS/GPTQ updates walk along."""
    hinv = np.linalg.inv(hl)
    hinv = (hinv + hinv.transpose(0, 2, 1)) / 2
    return np.linalg.cholesky(hinv).transpose(0, 2, 1)


def group_ids(out: int, n: int, pattern: Pattern) -> np.ndarray:
    """[out, n] id of each weight's group (row blocks of pattern.rows channels, column blocks of pattern.cols)."""
    rb = np.arange(out) // pattern.rows
    cb = np.arange(n) // pattern.cols
    return rb[:, None] * ((n + pattern.cols - 1) // pattern.cols) + cb[None, :]


def obs_prune(rstar: np.ndarray, hl: np.ndarray, prunable: int, sparsity: float,
              pattern: Pattern = UNSTRUCTURED, block: int = BLOCK) -> np.ndarray:
    """Keep mask [out, n+1] removing round(sparsity x groups) of the pattern's groups among the first `prunable`
    columns, chosen block of columns by block of columns (each block removes its share of groups): a group's
    saliency is the sum over its weights of u_j^2 / U_jj^2 with u the row as updated by the pruning of the
    columns before (Optimal Brain Surgeon's error of removing a weight, SparseGPT's lazy mask selection). The
    updated values are not returned: `masked_solve` computes the kept weights exactly for the mask."""
    out, n1 = rstar.shape
    keep = np.ones((out, n1), bool)
    u = rstar.copy()
    f = inverse_factor(hl)
    h = _hidx(hl, out)
    diag = np.einsum("gii->gi", f)[h]  # [out, n+1]
    cols = pattern.cols
    block = max(cols, block // cols * cols)
    ids = group_ids(out, prunable, pattern)
    total = int(ids.max()) + 1 if ids.size else 0
    want = int(round(sparsity * total))
    done_groups, removed = 0, 0
    for j0 in range(0, prunable, block):
        j1 = min(prunable, j0 + block)
        sal = (u[:, j0:j1] / diag[:, j0:j1]) ** 2
        gid = ids[:, j0:j1]
        uniq, inv = np.unique(gid, return_inverse=True)
        score = np.bincount(inv.reshape(-1), weights=sal.reshape(-1), minlength=uniq.size)
        done_groups += uniq.size
        k = min(uniq.size, int(round(want * done_groups / max(total, 1))) - removed)
        if k > 0:
            gone = np.zeros(uniq.size, bool)
            gone[np.argsort(score, kind="stable")[:k]] = True
            keep[:, j0:j1] = ~gone[inv.reshape(gid.shape)]
            removed += k
        for j in range(j0, j1):
            pruned = ~keep[:, j]
            if not pruned.any():
                continue
            err = np.where(pruned, u[:, j] / diag[:, j], 0.0)
            u[:, j:] -= err[:, None] * f[h, j, j:]
    return keep


def greedy_prune(rstar: np.ndarray, hl: np.ndarray, prunable: int, sparsity: float,
                 pattern: Pattern = UNSTRUCTURED, step: float = STEP, curve: list | None = None) -> np.ndarray:
    """Keep mask [out, n+1] removing the pattern's groups (among the first `prunable` columns) greedily, in rounds
    of `step` x the groups, until `sparsity` of those weights are gone (Optimal Brain Surgeon over groups, as
    Optimal Brain Compression does it, several groups per round). Each round every kept group G of every block of
    rows is scored by the exact cost of removing it given the rows' kept set K,
    u_G^T [(H_KK)^-1]_GG^-1 u_G summed over the block's rows, with u the rows solved exactly for the mask
    (as `masked_solve`); the cheapest groups of the whole layer go, and each block's (H_KK)^-1 is downdated for
    them. Returns (keep, the rows solved exactly for it). `curve`, if given, receives (fraction removed, sum of
    the rows' objective, the keep mask then) before each round and at the end."""
    out, n1 = rstar.shape
    hidx = _hidx(hl, out)
    rp, cp = pattern.rows, pattern.cols
    n_rb, n_cb = (out + rp - 1) // rp, (prunable + cp - 1) // cp
    size = np.outer(np.minimum(rp, out - np.arange(n_rb) * rp), np.minimum(cp, prunable - np.arange(n_cb) * cp))
    want = sparsity * out * prunable
    rhs = np.einsum("rij,rj->ri", hl[hidx], rstar) if hl.shape[0] > 1 else rstar @ hl[0]
    # one state per (row block, Hessian): its rows, its kept columns K, (H_KK)^-1
    states = []
    inverse = {}
    for b in range(n_rb):
        rs = np.arange(b * rp, min(out, (b + 1) * rp))
        for hi in np.unique(hidx[rs]):
            if hi not in inverse:
                inverse[hi] = np.linalg.inv(hl[hi])
            states.append([b, rs[hidx[rs] == hi], np.arange(n1), inverse[hi]])
    alive = np.ones((n_rb, n_cb), bool)
    keep = np.ones((out, n1), bool)
    u = rstar.copy()
    removed = 0
    chunk = max(1, int(round(step * n_rb * n_cb)))
    cols_of = [np.arange(c * cp, min(prunable, (c + 1) * cp)) for c in range(n_cb)]
    full = prunable // cp  # groups 0..full-1 have cp columns
    pos = np.empty(n1, np.int64)
    while True:
        score = np.full((n_rb, n_cb), np.inf)
        for b, rr, kidx, hinv in states:
            uk = rhs[np.ix_(rr, kidx)] @ hinv  # H_KK^-1 (H r*)_K (H symmetric)
            u[rr] = 0.0
            u[np.ix_(rr, kidx)] = uk
            live = np.flatnonzero(alive[b])
            if not live.size:
                continue
            pos[kidx] = np.arange(kidx.size)
            sc = np.zeros(live.size)
            lf = live[live < full]
            if lf.size:
                cols = pos[lf[:, None] * cp + np.arange(cp)]  # [g, cp] positions within K
                ug = uk[:, cols]  # [rows, g, cp]
                if cp == 1:
                    sc[:lf.size] = np.sum(ug[..., 0] ** 2, axis=0) / hinv[cols[:, 0], cols[:, 0]]
                else:
                    sub = hinv[cols[:, :, None], cols[:, None, :]]
                    sol = np.linalg.solve(sub[None], ug[..., None])[..., 0]
                    sc[:lf.size] = np.sum(ug * sol, axis=(0, 2))
            if lf.size < live.size:
                cols = pos[cols_of[live[-1]]]
                ug = uk[:, cols]
                sc[-1] = np.sum(ug * np.linalg.solve(hinv[np.ix_(cols, cols)], ug.T).T)
            score[b, live] = sc
        if curve is not None:
            curve.append((removed / max(out * prunable, 1), float(np.sum(objective(u, rstar, hl))), keep.copy()))
        if removed >= want - 0.5 or not alive.any():
            break
        order = np.argsort(score, axis=None, kind="stable")
        gone: dict[int, list[int]] = {}
        for flat in order[:chunk]:
            b, c = divmod(int(flat), n_cb)
            if not alive[b, c] or removed + size[b, c] / 2 > want:
                break
            alive[b, c] = False
            removed += int(size[b, c])
            gone.setdefault(b, []).append(c)
        if not gone:
            break
        for st in states:
            b, rr, kidx, hinv = st
            if b not in gone:
                continue
            p = np.concatenate([cols_of[c] for c in gone[b]])
            keep[np.ix_(rr, p)] = False
            pos[kidx] = np.arange(kidx.size)
            q = pos[p]
            # (H_K'K')^-1 from (H_KK)^-1: the Schur downdate for the removed columns, then dropped from the state
            hinv = hinv - hinv[:, q] @ np.linalg.solve(hinv[np.ix_(q, q)], hinv[q, :])
            stay = np.ones(kidx.size, bool)
            stay[q] = False
            st[2], st[3] = kidx[stay], hinv[np.ix_(stay, stay)]
    return keep, u


def magnitude_keep(rstar: np.ndarray, prunable: int, sparsity: float, pattern: Pattern = UNSTRUCTURED,
                   scale: np.ndarray | None = None) -> np.ndarray:
    """Keep mask by plain magnitude (the named `magnitude` method): the round(sparsity x groups) groups with the
    least sum of |w| (each row over `scale`, e.g. its quantization scale, if given)."""
    out, n1 = rstar.shape
    w = np.abs(rstar[:, :prunable])
    if scale is not None:
        w = w / scale[:, None]
    ids = group_ids(out, prunable, pattern)
    score = np.bincount(ids.reshape(-1), weights=w.reshape(-1))
    gone = np.zeros(score.size, bool)
    gone[np.argsort(score, kind="stable")[:int(round(sparsity * score.size))]] = True
    keep = np.ones((out, n1), bool)
    keep[:, :prunable] = ~gone[ids]
    return keep


def masked_solve(rstar: np.ndarray, hl: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The rows minimising (u - r*)^T H (u - r*) with u = 0 where `keep` is False: per row,
    H_KK u_K = (H r*)_K."""
    out = rstar.shape[0]
    h = _hidx(hl, out)
    b = np.einsum("rij,rj->ri", hl[h], rstar) if hl.shape[0] > 1 else rstar @ hl[0]
    u = np.zeros_like(rstar)
    for r in range(out):
        k = keep[r]
        if k.all():
            u[r] = rstar[r]
            continue
        if k.any():
            hk = hl[h[r]][np.ix_(k, k)]
            u[r, k] = np.linalg.solve(hk, b[r, k])
    return u


def gptq_round(t: np.ndarray, hl: np.ndarray, qmax: int | np.ndarray, keep: np.ndarray | None = None,
               free: int = 1, act_order: bool = False) -> np.ndarray:
    """Round rows `t` [out, n+1] (grid units: each row over its channel's scale) to integers in [-qmax, qmax]
    column by column, every column's rounding error moved onto the later columns through the factor of H^-1
    (GPTQ); columns where `keep` is False become 0, and the last `free` columns (the bias) are not rounded but
    take what the others leave. `act_order`: the columns whose inputs carry the most energy (H's diagonal) go
    first, while the most columns remain to take their error (GPTQ's "act-order"). Returns float rows: integers,
    then the free columns."""
    w = np.asarray(t, np.float64).copy()
    out, n1 = w.shape
    n = n1 - free
    shared = hl.shape[0] == 1
    if act_order:
        diag = np.einsum("gii->gi", hl)[:, :n]
        order = np.argsort(-diag, axis=1, kind="stable")  # [G, n]
        perm = np.concatenate([order, np.broadcast_to(np.arange(n, n1), (order.shape[0], free))], axis=1)
        hl = np.stack([h[np.ix_(p, p)] for h, p in zip(hl, perm)])
        rows_perm = perm[np.zeros(out, np.int64)] if shared else perm
        w = np.take_along_axis(w, rows_perm, axis=1)
        keep = None if keep is None else np.take_along_axis(keep, rows_perm, axis=1)
    f = inverse_factor(hl)
    h = _hidx(hl, out)
    qm = np.broadcast_to(np.asarray(qmax, np.float64), (out,))
    for j in range(n):
        col = w[:, j]
        q = np.clip(np.rint(col), -qm, qm)
        if keep is not None:
            q = np.where(keep[:, j], q, 0.0)
        err = (col - q) / f[h, j, j]
        w[:, j] = q
        w[:, j + 1:] -= err[:, None] * f[h, j, j + 1:]
    if act_order:
        back = np.empty_like(w)
        np.put_along_axis(back, rows_perm, w, axis=1)
        w = back
    return w


def clip_search(t: np.ndarray, hl: np.ndarray, qmax: int, keep: np.ndarray | None = None,
                ratios=tuple(np.linspace(1.0, 0.5, 11))) -> np.ndarray:
    """Per row, the fraction alpha of max|w| that the grid's largest level should sit at: the one whose plain
    rounding (to alpha max|w| / qmax steps, clipped) leaves the least output error through H. Cheap, and what
    GPTQ's grid search does before its rounding."""
    out, n1 = t.shape
    w = t[:, :-1]
    amax = np.maximum(np.abs(w).max(axis=1), 1e-30)
    best, best_err = np.ones(out), np.full(out, np.inf)
    for a in ratios:
        step = a * amax / qmax
        q = np.clip(np.rint(w / step[:, None]), -qmax, qmax) * step[:, None]
        if keep is not None:
            q = np.where(keep[:, :-1], q, 0.0)
        d = np.concatenate([q - w, np.zeros((out, 1))], axis=1)
        err = objective(d, np.zeros_like(d), hl)
        better = err < best_err
        best = np.where(better, a, best)
        best_err = np.where(better, err, best_err)
    return best



def obs_channels(consumers: list[tuple[np.ndarray, np.ndarray]], channels: int, remove: int) -> np.ndarray:
    """The `remove` input channels of a channel group whose loss its consumers feel least, chosen greedily by
    Optimal Brain Surgeon over whole channels (He et al. 2017 / ThiNet choose channels by the consumers'
    reconstruction error too). `consumers`: (rows [out, n+1] in real units with the bias last, H = E[x~ x~^T]
    [n+1, n+1] of the consumer's augmented input patches, damped); column j < n reads channel j % `channels`
    (channels innermost, as every member of a group holds them). Each round the channel whose columns G cost
    least to remove, summed over the consumers as u_G^T [(H^-1)_GG]^-1 u_G over each consumer's output energy
    (folded batch norms scale consumers arbitrarily), goes; each consumer's rows then take the optimal update for
    its loss and its H^-1 is downdated. Returns the removed channels, sorted."""
    states = []
    for r, h in consumers:
        n = r.shape[1] - 1
        energy = float(max(np.sum(objective(r, np.zeros_like(r), h[None])), 1e-30))
        states.append([r.copy(), np.linalg.inv(h), np.arange(n + 1), energy])
    alive = list(range(channels))
    gone = []
    for _ in range(min(remove, channels - 1)):
        cost = np.zeros(len(alive))
        for u, hinv, cols, energy in states:
            for k, ch in enumerate(alive):
                g = np.flatnonzero((cols < cols[-1]) & (cols % channels == ch))
                ug = u[:, g]
                cost[k] += np.sum(ug * np.linalg.solve(hinv[np.ix_(g, g)], ug.T).T) / energy
        ch = alive.pop(int(np.argmin(cost)))
        gone.append(ch)
        for st in states:
            u, hinv, cols, _ = st
            g = np.flatnonzero((cols < cols[-1]) & (cols % channels == ch))
            sol = np.linalg.solve(hinv[np.ix_(g, g)], hinv[g, :])  # [(H^-1)_GG]^-1 (H^-1)_G:
            u = u - u[:, g] @ sol
            hinv = hinv - hinv[:, g] @ sol
            stay = np.ones(len(cols), bool)
            stay[g] = False
            st[0], st[1], st[2] = u[:, stay], hinv[np.ix_(stay, stay)], cols[stay]
    return np.sort(np.asarray(gone, np.int64))


__all__ = ["Pattern", "UNSTRUCTURED", "Moments", "augmented_moments", "damped", "refit_target", "objective",
           "inverse_factor", "group_ids", "obs_prune", "greedy_prune", "magnitude_keep", "masked_solve", "gptq_round",
           "clip_search", "obs_channels", "DAMP", "BLOCK"]
