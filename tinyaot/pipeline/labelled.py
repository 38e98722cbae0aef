"""Labelled samples (`--data DATA.npz`: one array per model input name, or `x` for a single-input model, and integer
labels `y`), checked against the model's inputs, for evaluate, analyze and the precision search (its own module:
evaluate imports the search, so the search cannot import evaluate). A model of several outputs is scored on one of
them: the first, unless `--label-output NAME` names another (`label_output`)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from tinyaot.compress.calibrate import load_samples
from tinyaot.errors import TinyaotError


def load_labelled(path: str | Path, inputs: list[dict]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """DATA.npz -> ({input name: samples [N, *shape]}, integer labels y [N])."""
    path = Path(path)
    if not path.exists():
        raise TinyaotError(f"data file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as z:
            files = set(z.files)
            y = z["y"] if "y" in files else None
    except Exception as exc:
        raise TinyaotError(f"{path} is not a readable .npz file ({type(exc).__name__})") from None
    names = [i["name"] for i in inputs]
    has_inputs = "x" in files if len(names) == 1 else False
    has_inputs = has_inputs or all(n in files for n in names)
    if y is None or not has_inputs:
        want = "arrays 'x' (inputs)" if len(names) == 1 else \
            f"one array per model input ({', '.join(map(repr, names))})"
        raise TinyaotError(f"{path} needs {want} and 'y' (integer labels); it has {sorted(files)}")
    xs = load_samples(path, inputs, skip=("y",))
    count = len(next(iter(xs.values())))
    y = np.asarray(y)
    if y.ndim != 1 or len(y) != count or not np.issubdtype(y.dtype, np.integer):
        raise TinyaotError(f"{path}: 'y' must be {count} integer labels, got {y.dtype}{list(y.shape)}")
    return xs, y


def label_output(outputs: list[str], name: str | None) -> str:
    """The output top-1 is scored on: `name` (--label-output), else the first one."""
    if name is None:
        return outputs[0]
    if name not in outputs:
        raise TinyaotError(f"--label-output {name!r} is not an output of the model; its outputs are "
                           f"{', '.join(map(repr, outputs))}")
    return name


def sample_count(xs: dict[str, np.ndarray]) -> int:
    return len(next(iter(xs.values())))


def take(xs: dict[str, np.ndarray], limit: int | None) -> dict[str, np.ndarray]:
    """The first `limit` samples of every input (all with None)."""
    return xs if limit is None else {n: a[:limit] for n, a in xs.items()}
