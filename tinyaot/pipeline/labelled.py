"""Labelled samples (`--data DATA.npz`: `x` and integer `y`), checked against the model's input, for evaluate,
analyze and the precision search (its own module: evaluate imports the search, so the search cannot import
evaluate)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from tinyaot.compress.calibrate import load_samples
from tinyaot.errors import TinyaotError


def load_labelled(path: str | Path, inputs: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """DATA.npz with `x` (samples, first axis = sample) and integer labels `y`."""
    path = Path(path)
    if not path.exists():
        raise TinyaotError(f"data file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as z:
            files = set(z.files)
            y = z["y"] if "y" in files else None
    except Exception as exc:
        raise TinyaotError(f"{path} is not a readable .npz file ({type(exc).__name__})") from None
    if y is None or "x" not in files:
        raise TinyaotError(f"{path} needs arrays 'x' (inputs) and 'y' (integer labels); it has {sorted(files)}")
    x = load_samples(path, inputs)[inputs[0]["name"]]
    y = np.asarray(y)
    if y.ndim != 1 or len(y) != len(x) or not np.issubdtype(y.dtype, np.integer):
        raise TinyaotError(f"{path}: 'y' must be {len(x)} integer labels, got {y.dtype}{list(y.shape)}")
    return x, y
