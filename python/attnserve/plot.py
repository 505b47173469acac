"""attnserve.plot_weights and plot_entropy: attention weights as a matplotlib heat-map,
one panel per head, and each head's weight entropy along the queries."""

import math

import numpy as np

from . import _tensors as T


def _as_numpy(weights):
    if T.is_torch(weights):
        return weights.detach().cpu().float().numpy()
    return np.asarray(weights, dtype=np.float32)


def _entropy(rows):
    """-sum w ln w of each row of weights (the last axis), in nats."""
    rows = rows.astype(np.float64)
    logs = np.log(np.where(rows > 0, rows, 1.0))
    return -(rows * logs).sum(axis=-1)


def plot_entropy(stats, heads=None, *, batch=0, keys=None, tokens=None, title=None):
    """Draws each head's weight entropy (nats) along the query rows and returns the
    matplotlib Figure. A head whose entropy collapses to 0 (one key takes every row's
    weight) or stays at ln(keys) (every key the same) points at a broken positional
    encoding or temperature.

    stats: an attnserve.WeightStats (attend(..., return_weight_stats=True), no
    weights downloaded), or its entropy alone: [B, Hq, Lq] (attend) or [Hq, Lq] (a
    session step's [Hq, Lnew]). heads: which heads (default all); batch: which batch
    element. keys: the keys each row attends (draws ln(keys), the uniform
    ceiling). tokens: labels of the query rows.
    """
    from matplotlib.figure import Figure

    e = _as_numpy(getattr(stats, "entropy", stats))
    if e.ndim == 3:
        if not 0 <= batch < e.shape[0]:
            raise IndexError(f"batch: {batch} is out of range [0, {e.shape[0]})")
        e = e[batch]
    elif e.ndim != 2:
        raise ValueError(f"entropy: expected [B, Hq, Lq] or [Hq, Lq], got shape "
                         f"{list(e.shape)}")
    n_heads, lq = e.shape
    heads = list(range(n_heads)) if heads is None else [int(h) for h in heads]
    for h in heads:
        if not 0 <= h < n_heads:
            raise IndexError(f"heads: {h} is out of range [0, {n_heads})")
    if tokens is not None and len(tokens) != lq:
        raise ValueError(f"tokens: {len(tokens)} labels for Lq = {lq} query rows")
    fig = Figure(figsize=(7.0, 3.5), layout="constrained")
    ax = fig.subplots()
    for h in heads:
        ax.plot(range(lq), e[h], marker="." if lq <= 64 else None, label=f"head {h}")
    if keys is not None:
        ax.axhline(math.log(keys), color="grey", linestyle="--",
                   label=f"ln({keys}): uniform")
    ax.set_xlabel("query")
    ax.set_ylabel("entropy (nats)")
    ax.set_ylim(bottom=0)
    if tokens is not None:
        ax.set_xticks(range(lq), [str(t) for t in tokens], fontsize=8, rotation=90)
    ax.legend(fontsize=8, ncols=max(1, len(heads) // 8))
    if title:
        fig.suptitle(title)
    return fig


def plot_weights(weights, tokens=None, heads=None, *, batch=0, key_tokens=None,
                 columns=None, cmap="viridis", panel_size=3.0, title=None):
    """Draws weights [B, Hq, Lq, Lk] (or [Hq, Lq, Lk], or [Lq, Lk]) and returns the
    matplotlib Figure, one panel per head.

    tokens: labels of the query rows (and of the key columns too when Lq == Lk
    and key_tokens is not given). heads: which heads to draw (default all).
    batch: which batch element. columns: panels per row (default up to 4).
    Each panel's title carries the mean entropy of its rows' weights (in nats).
    Save with fig.savefig("w.png"); in a notebook the figure shows itself.
    """
    # Figure, not pyplot: no global state and no GUI backend, in scripts or notebooks.
    from matplotlib.figure import Figure

    w = _as_numpy(weights)
    if w.ndim == 4:
        if not 0 <= batch < w.shape[0]:
            raise IndexError(f"batch: {batch} is out of range [0, {w.shape[0]})")
        w = w[batch]
    elif w.ndim == 2:
        w = w[None]
    elif w.ndim != 3:
        raise ValueError(f"weights: expected [B, Hq, Lq, Lk], [Hq, Lq, Lk] or [Lq, Lk], "
                         f"got shape {list(w.shape)}")
    n_heads, lq, lk = w.shape
    heads = list(range(n_heads)) if heads is None else [int(h) for h in heads]
    for h in heads:
        if not 0 <= h < n_heads:
            raise IndexError(f"heads: {h} is out of range [0, {n_heads})")
    if not heads:
        raise ValueError("heads: nothing to draw")
    tokens = None if tokens is None else [str(t) for t in tokens]
    if tokens is not None and len(tokens) != lq:
        raise ValueError(f"tokens: {len(tokens)} labels for Lq = {lq} query rows")
    if key_tokens is None and tokens is not None and lk == lq:
        key_tokens = tokens
    key_tokens = None if key_tokens is None else [str(t) for t in key_tokens]
    if key_tokens is not None and len(key_tokens) != lk:
        raise ValueError(f"key_tokens: {len(key_tokens)} labels for Lk = {lk} keys")

    cols = columns or min(4, len(heads))
    rows = math.ceil(len(heads) / cols)
    fig = Figure(figsize=(panel_size * cols + 1.0, panel_size * rows + 0.5),
                 layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    image = None
    for i, ax in enumerate(axes.flat):
        if i >= len(heads):
            ax.set_visible(False)
            continue
        h = heads[i]
        image = ax.imshow(w[h], cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto",
                          interpolation="nearest")
        ax.set_title(f"head {h}, entropy {_entropy(w[h]).mean():.2f}")
        if tokens is not None:
            ax.set_yticks(range(lq), tokens, fontsize=8)
        if key_tokens is not None:
            ax.set_xticks(range(lk), key_tokens, fontsize=8, rotation=90)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="weight")
    if title:
        fig.suptitle(title)
    return fig
