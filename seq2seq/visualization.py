"""Attention heatmaps and comparison plots as matplotlib figures.

Every function returns a `Figure` and neither saves nor shows it: the caller sends it to
TensorBoard (`SummaryWriter.add_figure`) or writes it with `figure_to_png`. Figures are built
without pyplot's global figure registry, so a training loop can make thousands of them.
Labels are set in `fonts.FONT` (seq2seq/fonts.py: DejaVu Sans, then a CJK font where one is
installed or a Korean corpus's build fetched one).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib import font_manager, rcParams
from matplotlib import pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.textpath import TextToPath
from torch import Tensor

from seq2seq import fonts

CMAP = "viridis"
CELL_INCHES = 0.32  # size of one attention cell
MAX_SIDE_INCHES = 24.0
GRID_COLUMNS = 4  # heads per row in `head_grid`
SUPTITLE_ROOM = 0.9  # the share of the figure's width a line of its title may take
AXES_TITLE_ROOM = 0.7  # the same for an axis's title (the axis sits off centre, beside its labels)

Matrix = Tensor | np.ndarray


def _to_numpy(attn: Matrix) -> np.ndarray:
    if isinstance(attn, Tensor):
        return attn.detach().float().cpu().numpy()
    return np.asarray(attn, dtype=np.float32)


def _check_matrix(attn: np.ndarray, src_labels: list[str], tgt_labels: list[str]) -> None:
    expected = (len(tgt_labels), len(src_labels))
    if attn.shape != expected:
        raise ValueError(
            f"attention of shape {attn.shape} does not match {expected[0]} target and "
            f"{expected[1]} source labels"
        )


def _font_size(num_tgt: int, num_src: int) -> float:
    """Tick font size that shrinks as the matrix grows: 10 pt for short sentences, 5 pt floor."""
    return float(np.clip(11.0 - max(num_tgt, num_src) / 8.0, 5.0, 10.0))


def _panel_inches(num_tgt: int, num_src: int) -> tuple[float, float]:
    """Width and height of one heatmap panel, room for rotated labels included."""
    width = min(MAX_SIDE_INCHES, max(3.0, CELL_INCHES * num_src + 1.5))
    height = min(MAX_SIDE_INCHES, max(2.5, CELL_INCHES * num_tgt + 1.5))
    return width, height


def _text_points(text: str, fontsize: float) -> float:
    """The width of `text` in points, set in fonts.FONT at `fontsize`."""
    prop = font_manager.FontProperties(family=fonts.FONT, size=fontsize)
    return TextToPath().get_text_width_height_descent(text, prop, ismath=False)[0]


def _wrapped(text: str, width_points: float, fontsize: float) -> str:
    """`text` broken into lines no wider than `width_points` at `fontsize`: at spaces, and a
    word wider than a line by itself at characters; its own line breaks stay."""
    lines: list[str] = []
    for paragraph in text.split("\n"):
        lines.append("")
        for word in paragraph.split():
            joined = f"{lines[-1]} {word}" if lines[-1] else word
            if _text_points(joined, fontsize) <= width_points:
                lines[-1] = joined
                continue
            if lines[-1]:
                lines.append("")
            while len(word) > 1 and _text_points(word, fontsize) > width_points:
                cut = next(i for i in range(len(word) - 1, 0, -1)
                           if _text_points(word[:i], fontsize) <= width_points or i == 1)
                lines[-1] = word[:cut]
                lines.append("")
                word = word[cut:]
            lines[-1] = word
    return "\n".join(lines)


def _suptitle(fig: Figure, title: str) -> None:
    """The figure's title, wrapped to fit its width (a long one would run off both edges)."""
    size = font_manager.FontProperties(size=rcParams["figure.titlesize"]).get_size_in_points()
    room = fig.get_figwidth() * 72 * SUPTITLE_ROOM
    fig.suptitle(_wrapped(title, room, size), fontfamily=fonts.FONT, fontsize=size)


def _axes_title(ax: Axes, title: str) -> None:
    """An axis's title, wrapped to fit its figure's width (see `_suptitle`)."""
    size = font_manager.FontProperties(size=rcParams["axes.titlesize"]).get_size_in_points()
    room = ax.get_figure().get_figwidth() * 72 * AXES_TITLE_ROOM
    ax.set_title(_wrapped(title, room, size), fontsize=size)


def _draw(
    ax: Axes,
    attn: np.ndarray,
    src_labels: list[str],
    tgt_labels: list[str],
    fontsize: float,
    show_tgt_labels: bool = True,
) -> AxesImage:
    """Draw one heatmap: source pieces along the top (rotated), target pieces down the side."""
    image = ax.imshow(attn, cmap=CMAP, vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    ax.xaxis.tick_top()
    ax.set_xticks(range(len(src_labels)), labels=src_labels, rotation=90, fontsize=fontsize)
    ax.set_yticks(
        range(len(tgt_labels)),
        labels=tgt_labels if show_tgt_labels else [],
        fontsize=fontsize,
    )
    for label in ax.get_xticklabels() + ax.get_yticklabels():
        label.set_fontfamily(fonts.FONT)
    return image


def attention_heatmap(
    attn: Matrix, src_labels: list[str], tgt_labels: list[str], title: str | None = None
) -> Figure:
    """One attention matrix as a heatmap with a colorbar.

    Args:
        attn: (T, S) weights in [0, 1]; row t is the attention while writing target piece t.
        src_labels: the S source pieces (x axis, on top).
        tgt_labels: the T target pieces (y axis).
        title: optional figure title.

    Returns:
        A figure with two axes: the heatmap and its colorbar.
    """
    matrix = _to_numpy(attn)
    _check_matrix(matrix, src_labels, tgt_labels)
    fig = Figure(figsize=_panel_inches(*matrix.shape), layout="constrained")
    ax = fig.add_subplot()
    image = _draw(ax, matrix, src_labels, tgt_labels, _font_size(*matrix.shape))
    fig.colorbar(image, ax=ax, fraction=0.05)
    if title:
        _suptitle(fig, title)
    return fig


def head_grid(
    attn: Matrix, src_labels: list[str], tgt_labels: list[str], title: str | None = None
) -> Figure:
    """One heatmap per attention head (e.g. the Transformer's last cross-attention layer).

    Args:
        attn: (H, T, S) weights in [0, 1].
        src_labels: the S source pieces, shown on every panel.
        tgt_labels: the T target pieces, shown on the first panel of each row.
        title: optional figure title.

    Returns:
        A figure with H heatmap axes titled "head h" and one shared colorbar.
    """
    heads = _to_numpy(attn)
    if heads.ndim != 3:
        raise ValueError(f"expected attention of shape (H, T, S), got {heads.shape}")
    _check_matrix(heads[0], src_labels, tgt_labels)
    num_heads = heads.shape[0]
    ncols = min(num_heads, GRID_COLUMNS)
    nrows = math.ceil(num_heads / ncols)
    width, height = _panel_inches(*heads.shape[1:])
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    fontsize = _font_size(*heads.shape[1:])
    for head, ax in enumerate(axes[:num_heads]):
        image = _draw(ax, heads[head], src_labels, tgt_labels, fontsize, head % ncols == 0)
        ax.set_title(f"head {head}", fontsize=fontsize + 1)
    for ax in axes[num_heads:]:
        fig.delaxes(ax)
    fig.colorbar(image, ax=list(axes[:num_heads]), fraction=0.05)
    if title:
        _suptitle(fig, title)
    return fig


def heads_figure(matrices: dict[str, list[list[float]]], title: str) -> Figure:
    """One panel per attention (encoder self, decoder self, cross), its layers down and heads
    across, each cell a head's figure written on it (`seq2seq.heads`)."""
    fig = Figure(figsize=(3.2 * len(matrices), 0.6 * max(len(m) for m in matrices.values()) + 1.6),
                 layout="constrained")
    axes = fig.subplots(1, len(matrices), squeeze=False)[0]
    values = np.array([x for m in matrices.values() for row in m for x in row], dtype=float)
    low, high = float(np.nanmin(values)), float(np.nanmax(values))
    for ax, (kind, matrix) in zip(axes, matrices.items(), strict=True):
        data = np.array(matrix, dtype=float)
        image = ax.imshow(data, cmap=CMAP, vmin=low, vmax=high if high > low else low + 1)
        for (layer, head), value in np.ndenumerate(data):
            ax.text(head, layer, "–" if value != value else f"{value:.2f}", ha="center",
                    va="center", fontsize=7, color="white" if value < (low + high) / 2 else "black")
        ax.set_title(kind, fontsize=9)
        ax.set_xlabel("head", fontsize=8)
        ax.set_ylabel("layer", fontsize=8)
        ax.set_xticks(range(data.shape[1]))
        ax.set_yticks(range(data.shape[0]))
    fig.colorbar(image, ax=list(axes), fraction=0.05)
    _suptitle(fig, title)
    return fig


def side_by_side(
    heatmaps: dict[str, tuple[Matrix, list[str], list[str]]], title: str | None = None
) -> Figure:
    """The same probe sentence's attention under each variant, one panel per variant.

    Args:
        heatmaps: variant name -> `(attn (T, S), src_labels, tgt_labels)`; each variant may
            write a different hypothesis, so each panel has its own target labels.
        title: optional figure title.

    Returns:
        A figure with one heatmap axis per variant, titled with its name, and one colorbar.
    """
    if not heatmaps:
        raise ValueError("side_by_side needs at least one heatmap")
    panels = []
    for name, (attn, src_labels, tgt_labels) in heatmaps.items():
        matrix = _to_numpy(attn)
        _check_matrix(matrix, src_labels, tgt_labels)
        panels.append((name, matrix, src_labels, tgt_labels))
    num_tgt = max(matrix.shape[0] for _, matrix, _, _ in panels)
    num_src = max(matrix.shape[1] for _, matrix, _, _ in panels)
    width, height = _panel_inches(num_tgt, num_src)
    fig = Figure(figsize=(width * len(panels), height), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False).ravel()
    fontsize = _font_size(num_tgt, num_src)
    for ax, (name, matrix, src_labels, tgt_labels) in zip(axes, panels, strict=True):
        image = _draw(ax, matrix, src_labels, tgt_labels, fontsize)
        ax.set_title(name, fontsize=fontsize + 1)
    fig.colorbar(image, ax=list(axes), fraction=0.05)
    if title:
        _suptitle(fig, title)
    return fig


def bleu_bars(results: dict[str, float], title: str) -> Figure:
    """BLEU of each variant as labelled bars.

    Args:
        results: variant name -> BLEU (0-100).
        title: axis title, e.g. "de→en, test = tst2010-2015".
    """
    fig = Figure(figsize=(max(4.0, 1.2 * len(results) + 2.0), 3.5), layout="constrained")
    ax = fig.add_subplot()
    bars = ax.bar(list(results), list(results.values()), color="C0")
    ax.bar_label(bars, fmt="%.1f")
    ax.set_ylabel("BLEU")
    ax.set_ylim(0, max([*results.values(), 1.0]) * 1.15)
    _axes_title(ax, title)
    return fig


def bleu_curves(curves: dict[str, list[tuple[float, float]]], title: str | None = None) -> Figure:
    """Validation BLEU against training time, one line per variant.

    Args:
        curves: variant name -> `[(seconds, bleu), ...]` in time order.
        title: optional axis title.
    """
    fig = Figure(figsize=(6.0, 4.0), layout="constrained")
    ax = fig.add_subplot()
    for name, points in curves.items():
        seconds = [point[0] for point in points]
        bleu = [point[1] for point in points]
        ax.plot(seconds, bleu, marker="o", markersize=3, label=name)
    ax.set_xlabel("training time (s)")
    ax.set_ylabel("BLEU")
    ax.grid(alpha=0.3)
    if curves:
        ax.legend()
    if title:
        _axes_title(ax, title)
    return fig


def _bucket_start(label: str) -> int:
    """Lower bound of a length bucket label such as "6-10" or "31+"."""
    return int(label.split("-")[0].rstrip("+"))


def length_plot(buckets: dict[str, list[dict]], title: str | None = None) -> Figure:
    """BLEU by source-length bucket, grouped bars per variant.

    Args:
        buckets: variant name -> rows of `metrics.bleu_by_length`
            (`{"bucket": "1-5", "n": 12, "bleu": 31.4}`).
        title: optional axis title.
    """
    labels = sorted({row["bucket"] for rows in buckets.values() for row in rows}, key=_bucket_start)
    positions = np.arange(len(labels))
    width = 0.8 / max(1, len(buckets))
    fig = Figure(
        figsize=(max(5.0, 0.9 * len(labels) * max(1, len(buckets)) + 2.0), 4.0),
        layout="constrained",
    )
    ax = fig.add_subplot()
    for i, (name, rows) in enumerate(buckets.items()):
        by_label = {row["bucket"]: row["bleu"] for row in rows}
        heights = [by_label.get(label, np.nan) for label in labels]
        ax.bar(positions + (i - (len(buckets) - 1) / 2) * width, heights, width, label=name)
    ax.set_xticks(positions, labels=labels)
    ax.set_xlabel("source length (words)")
    ax.set_ylabel("BLEU")
    if buckets:
        ax.legend()
    if title:
        _axes_title(ax, title)
    return fig


def figure_to_png(fig: Figure, path: str | Path) -> None:
    """Write a figure to a PNG file (creating its folder) and release it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)
