"""plot_weights: one panel per head, token labels, a PNG that decodes; plot_entropy: a
line per head of the server's weight statistics."""

import io

import matplotlib.image
import numpy as np
import pytest

import attnserve
import torch

from reference import random

TOKENS = ["Life", "is", "short", ",", "eat", "dessert", "first"]


def colored_panels(png_bytes):
    """Heat-map panels in a PNG: connected regions of coloured (not grey) pixels
    that are roughly square; the colour bar is tall and thin, text is grey."""
    img = matplotlib.image.imread(io.BytesIO(png_bytes))[..., :3]
    colored = (img.max(axis=2) - img.min(axis=2)) > 0.15
    step = 2
    grid = colored[::step, ::step]
    seen = np.zeros_like(grid)
    panels = 0
    h, w = grid.shape
    for y0 in range(h):
        for x0 in range(w):
            if not grid[y0, x0] or seen[y0, x0]:
                continue
            stack, ys, xs = [(y0, x0)], [], []
            seen[y0, x0] = True
            while stack:
                y, x = stack.pop()
                ys.append(y)
                xs.append(x)
                for ny, nx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
                    if 0 <= ny < h and 0 <= nx < w and grid[ny, nx] and not seen[ny, nx]:
                        seen[ny, nx] = True
                        stack.append((ny, nx))
            height, width = max(ys) - min(ys) + 1, max(xs) - min(xs) + 1
            if height > 20 and width > 20 and 0.5 < width / height < 2:
                panels += 1
    return panels


@pytest.mark.parametrize("heads", [None, [1, 3]])
def test_heatmap_png_has_a_panel_per_head(client, heads):
    lq = len(TOKENS)
    q, k, v = (random((1, 4, lq, 16), seed=s) for s in range(3))
    _, weights = client.attend(q, k, v, is_causal=True, return_weights=True)
    fig = attnserve.plot_weights(weights, tokens=TOKENS, heads=heads)
    drawn = [0, 1, 2, 3] if heads is None else heads
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_images()]
    entropy = -(weights * np.log(np.where(weights > 0, weights, 1))).sum(-1)[0]
    assert [ax.get_title() for ax in panels] == [
        f"head {h}, entropy {entropy[h].mean():.2f}" for h in drawn]
    for ax in panels:
        assert [t.get_text() for t in ax.get_yticklabels()] == TOKENS
        assert [t.get_text() for t in ax.get_xticklabels()] == TOKENS
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=80)
    assert png.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"
    assert colored_panels(png.getvalue()) == len(drawn)


def test_plot_rejects_mismatched_labels():
    with pytest.raises(ValueError, match="tokens: 2 labels for Lq = 3 query rows"):
        attnserve.plot_weights(np.full((1, 2, 3, 3), 1 / 3, np.float32), tokens=["a", "b"])
    with pytest.raises(IndexError, match=r"heads: 5 is out of range \[0, 2\)"):
        attnserve.plot_weights(np.full((2, 3, 3), 1 / 3, np.float32), heads=[5])


def test_entropy_plot_draws_the_servers_statistics_per_head(client):
    # Head 0's queries are zeros (every key the same: ln 7), the others random.
    lq = len(TOKENS)
    q, k, v = (random((2, 3, lq, 16), seed=s) for s in range(3))
    q[:, 0] = 0
    _, stats = client.attend(q, k, v, return_weight_stats=True)
    fig = attnserve.plot_entropy(stats, batch=1, keys=lq, tokens=TOKENS, title="entropy")
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["head 0", "head 1", "head 2",
                                                   "ln(7): uniform"]
    np.testing.assert_allclose(lines[0].get_ydata(), np.full(lq, np.log(lq)), atol=1e-5)
    np.testing.assert_allclose(lines[2].get_ydata(), stats.entropy[1, 2])
    assert [t.get_text() for t in ax.get_xticklabels()] == TOKENS
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=80)
    assert png.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"
    # A session step's [Hq, Lnew] torch entropy, one head.
    one = attnserve.plot_entropy(torch.from_numpy(stats.entropy[0]), heads=[1])
    assert [line.get_label() for line in one.axes[0].get_lines()] == ["head 1"]
    with pytest.raises(ValueError, match=r"entropy: expected \[B, Hq, Lq\] or \[Hq, Lq\]"):
        attnserve.plot_entropy(np.zeros(3, np.float32))
    with pytest.raises(IndexError, match=r"batch: 2 is out of range \[0, 2\)"):
        attnserve.plot_entropy(stats, batch=2)
