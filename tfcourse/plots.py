"""Plotting helpers for the notebooks (matplotlib only).

Nothing here selects a backend: notebooks use the inline backend, scripts and tests whatever
matplotlib picks (Agg when headless). Every function draws on ``ax`` when given one, otherwise
on a new figure, and returns what it drew on, so a notebook can add titles or lines afterwards.

Shapes use the course's symbols (docs/conventions.md): T queries, S keys, H heads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes

__all__ = ["attention_heatmap", "heatmap_grid", "line_plot"]


#: The widest figure a grid draws, in inches: about the width of a notebook's output area at
#: matplotlib's inline 100 dpi, so text is shown at its own size.
MAX_WIDTH = 11.0


def _to_numpy(x: Any) -> np.ndarray:
    """A float numpy copy of a tensor (any device, with or without grad) or array-like."""
    if hasattr(x, "detach"):  # torch.Tensor, without importing torch here
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=float)


def attention_heatmap(
    weights: Any,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    title: str | None = None,
    ax: Axes | None = None,
    annotate: bool | None = None,
    colorbar: bool = True,
    xlabel: str = "key (attended to)",
    ylabel: str = "query",
) -> Axes:
    """Draw attention weights as a heatmap: one row per query, one column per key.

    weights: (T, S) tensor or array (e.g. one head's softmax weights; any real values work).
    query_labels: T strings for the rows; key_labels: S strings for the columns (the tokens).
    annotate: write each value in its cell; default: only when T * S <= 100.
    xlabel, ylabel: the axes' names (attention's by default; a similarity matrix names its own).
    When all values lie in [0, 1] the colour scale is fixed to [0, 1], so heatmaps of
    different weights can be compared by colour.
    Returns the Axes. Raises ValueError if ``weights`` is not 2-D or a label list has the
    wrong length.
    """
    w = _to_numpy(weights)
    if w.ndim != 2:
        raise ValueError(
            f"weights must be 2-D (T, S); got shape {w.shape}. "
            "Select one batch element and head first, e.g. weights[0, 0]."
        )
    t_q, t_k = w.shape
    if query_labels is not None and len(query_labels) != t_q:
        raise ValueError(
            f"{len(query_labels)} query_labels for T = {t_q} rows of weights {w.shape}"
        )
    if key_labels is not None and len(key_labels) != t_k:
        raise ValueError(f"{len(key_labels)} key_labels for S = {t_k} columns of weights {w.shape}")
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 0.5 * t_k, 0.6 + 0.45 * t_q))

    finite = w[np.isfinite(w)]
    in_unit = finite.size > 0 and finite.min() >= 0.0 and finite.max() <= 1.0
    vmin, vmax = (0.0, 1.0) if in_unit else (None, None)
    image = ax.imshow(w, cmap="viridis", vmin=vmin, vmax=vmax)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)

    ax.set_xticks(range(t_k), labels=key_labels if key_labels is not None else range(t_k))
    ax.set_yticks(range(t_q), labels=query_labels if query_labels is not None else range(t_q))
    if key_labels is not None and max((len(str(s)) for s in key_labels), default=0) > 2:
        plt.setp(ax.get_xticklabels(), rotation=45, ha="right", rotation_mode="anchor")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title is not None:
        ax.set_title(title)

    if annotate is None:
        annotate = t_q * t_k <= 100
    if annotate:
        low, high = image.get_clim()
        middle = (low + high) / 2
        for i in range(t_q):
            for j in range(t_k):
                value = w[i, j]
                colour = "black" if np.isfinite(value) and value > middle else "white"
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8, color=colour)
    return ax


def heatmap_grid(
    weights: Any,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    *,
    titles: Sequence[str] | None = None,
    ncols: int = 4,
    annotate: bool | None = None,
    suptitle: str | None = None,
) -> np.ndarray:
    """Several attention heatmaps side by side, e.g. one per head.

    weights: (H, T, S) tensor or array, or a sequence of H (T_h, S_h) arrays (shapes may
    differ, e.g. masks of different alignments). titles: H strings (default "head h").
    Returns the 2-D array of Axes (unused panels are hidden). Raises ValueError if a tensor
    or array is not 3-D, there are no panels, ``titles`` has the wrong length, or a panel is
    not 2-D or its labels don't fit (see :func:`attention_heatmap`).
    """
    if getattr(weights, "ndim", 3) != 3:
        raise ValueError(
            f"weights must be (H, T, S) or a list of (T, S) panels; got shape {tuple(weights.shape)}"
        )
    panels = [_to_numpy(w) for w in weights]
    if not panels:
        raise ValueError("heatmap_grid needs at least one (T, S) panel")
    if titles is not None and len(titles) != len(panels):
        raise ValueError(f"{len(titles)} titles for {len(panels)} panels")
    ncols = max(1, min(ncols, len(panels)))
    nrows = math.ceil(len(panels) / ncols)
    t_max = max(p.shape[0] if p.ndim == 2 else 1 for p in panels)
    s_max = max(p.shape[-1] if p.ndim >= 1 else 1 for p in panels)
    width = ncols * (1.2 + 0.45 * s_max)
    # at most MAX_WIDTH inches wide: a wider figure is shrunk to the notebook's width on screen, and
    # its titles and ticks with it; constrained layout keeps the suptitle clear of the panels
    scale = min(1.0, MAX_WIDTH / width)
    _, axes = plt.subplots(
        nrows,
        ncols,
        squeeze=False,
        # each panel as tall as it is wide (square cells), plus room for its title and labels
        figsize=(width * scale, nrows * (0.9 + width * scale / ncols * t_max / s_max)),
        layout="constrained",
    )
    for h, ax in enumerate(axes.flat):
        if h >= len(panels):
            ax.set_visible(False)
            continue
        attention_heatmap(
            panels[h],
            query_labels,
            key_labels,
            ax=ax,
            annotate=annotate,
            colorbar=False,
            title=titles[h] if titles is not None else f"head {h}",
        )
    if suptitle is not None:
        axes.flat[0].figure.suptitle(suptitle)
    return axes


def line_plot(
    x: Sequence[float],
    ys: Mapping[str, Sequence[float]],
    *,
    xlabel: str,
    ylabel: str,
    title: str | None = None,
    logx: bool = False,
    logy: bool = False,
    ax: Axes | None = None,
    styles: Mapping[str, str] | None = None,
) -> Axes:
    """Plot one or more named series against a shared x, with a legend.

    x: N numbers; ys: {label: N numbers} (tensors and arrays work). styles: optional
    {label: matplotlib format string}, e.g. ``{"T² reference": "k--"}`` for a dashed
    reference line; series without a style get markers ("o-").
    logx / logy: logarithmic axes (for power laws: a slope-2 line on log-log axes is ~x²).
    Returns the Axes. Raises ValueError if ``ys`` is empty or a series' length is not N.
    """
    xs = _to_numpy(x)
    if not ys:
        raise ValueError("ys must hold at least one series, e.g. {'measured': times}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    styles = styles or {}
    for label, y in ys.items():
        values = _to_numpy(y)
        if values.shape != xs.shape:
            raise ValueError(
                f"series {label!r} has shape {values.shape}, but x has shape {xs.shape}"
            )
        ax.plot(xs, values, styles.get(label, "o-"), label=label)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title is not None:
        ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend()
    return ax
