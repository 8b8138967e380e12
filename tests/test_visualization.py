"""Plot functions return figures with the right axes and labels, and PNGs are written."""

import io
import shutil
import warnings

import matplotlib
import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ft2font import FT2Font
from matplotlib.text import Text

from seq2seq import fonts
from seq2seq.data import data_root
from seq2seq.data.docs.packages import FONT_PACKAGE, find_deb
from seq2seq.visualization import (
    attention_heatmap,
    bleu_bars,
    bleu_curves,
    figure_to_png,
    head_grid,
    length_plot,
    side_by_side,
)

SRC = ["▁Jane", "▁ging", "▁in", "▁den", "▁La", "den", ".", "</s>"]
TGT = ["▁Jane", "▁went", "▁to", "▁the", "▁store", ".", "</s>"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _attn(*shape: int) -> torch.Tensor:
    return torch.softmax(torch.randn(*shape), dim=-1)


def _labels(ticks) -> list[str]:
    return [tick.get_text() for tick in ticks]


def _render_strictly(fig: Figure) -> bytes:
    """Draw the figure with every warning (e.g. a missing glyph) raised as an error."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig.savefig(buffer, format="png")
    return buffer.getvalue()


def test_agg_backend_is_selected():
    assert matplotlib.get_backend().lower() == "agg"


def test_attention_heatmap_has_pieces_as_ticks_and_a_colorbar():
    attn = _attn(len(TGT), len(SRC))
    fig = attention_heatmap(attn, SRC, TGT, title="probe 0")
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 2  # heatmap + colorbar
    ax = fig.axes[0]
    assert _labels(ax.get_xticklabels()) == SRC
    assert _labels(ax.get_yticklabels()) == TGT
    image = ax.get_images()[0]
    assert image.get_clim() == (0.0, 1.0)
    np.testing.assert_allclose(image.get_array(), attn.numpy(), rtol=1e-6)
    assert fig._suptitle.get_text() == "probe 0"


def test_unicode_labels_render_without_missing_glyphs():
    src = ["▁Laden", "▁über", "▁Straße", "▁café", "«", "»"]
    fig = attention_heatmap(np.full((2, 6), 1 / 6), src, ["▁Ü", "ß"], title="ä ö ü")
    assert _render_strictly(fig).startswith(PNG_MAGIC)


def test_heatmap_rejects_labels_that_do_not_fit():
    with pytest.raises(ValueError, match="does not match 7 target and 7 source labels"):
        attention_heatmap(_attn(len(TGT), len(SRC)), SRC[:-1], TGT)


def test_font_shrinks_for_long_sentences():
    short = attention_heatmap(_attn(3, 3), SRC[:3], TGT[:3]).axes[0]
    many = [f"▁w{i}" for i in range(60)]
    long = attention_heatmap(_attn(60, 60), many, many).axes[0]
    assert long.get_xticklabels()[0].get_fontsize() < short.get_xticklabels()[0].get_fontsize()


def test_head_grid_has_one_panel_per_head():
    fig = head_grid(_attn(6, len(TGT), len(SRC)), SRC, TGT, title="layer 2")
    assert len(fig.axes) == 6 + 1  # six heads (grid cells left over are removed) + colorbar
    heads = fig.axes[:6]
    assert [ax.get_title() for ax in heads] == [f"head {h}" for h in range(6)]
    assert all(_labels(ax.get_xticklabels()) == SRC for ax in heads)
    # target labels on the first panel of each row (four per row)
    assert _labels(heads[0].get_yticklabels()) == TGT
    assert _labels(heads[4].get_yticklabels()) == TGT
    assert _labels(heads[1].get_yticklabels()) == [""] * len(TGT)
    assert _render_strictly(fig).startswith(PNG_MAGIC)


def test_side_by_side_has_one_panel_per_variant():
    luong_tgt = ["▁Jane", "▁goes", "</s>"]
    fig = side_by_side(
        {
            "bahdanau": (_attn(len(TGT), len(SRC)), SRC, TGT),
            "luong": (_attn(3, len(SRC)).numpy(), SRC, luong_tgt),
        },
        title="Jane ging in den Laden.",
    )
    assert len(fig.axes) == 3
    bahdanau, luong = fig.axes[:2]
    assert (bahdanau.get_title(), luong.get_title()) == ("bahdanau", "luong")
    assert _labels(bahdanau.get_yticklabels()) == TGT
    assert _labels(luong.get_yticklabels()) == luong_tgt
    assert _labels(luong.get_xticklabels()) == SRC
    with pytest.raises(ValueError, match="at least one"):
        side_by_side({})


def test_bleu_bars_label_each_variant():
    fig = bleu_bars({"vanilla": 3.5, "bahdanau": 14.2, "transformer": 21.0}, "de→en test")
    assert len(fig.axes) == 1
    ax = fig.axes[0]
    assert _labels(ax.get_xticklabels()) == ["vanilla", "bahdanau", "transformer"]
    assert [patch.get_height() for patch in ax.patches] == [3.5, 14.2, 21.0]
    assert ax.get_title() == "de→en test"


def test_bleu_curves_draw_one_line_per_variant():
    curves = {"vanilla": [(0.0, 0.0), (60.0, 2.0)], "luong": [(0.0, 0.0), (30.0, 4.0), (90.0, 9.0)]}
    fig = bleu_curves(curves)
    ax = fig.axes[0]
    assert len(fig.axes) == 1
    assert [line.get_label() for line in ax.get_lines()] == ["vanilla", "luong"]
    assert list(ax.get_lines()[1].get_xdata()) == [0.0, 30.0, 90.0]
    assert ax.get_xlabel() == "training time (s)"


def test_length_plot_orders_buckets_by_length():
    buckets = {
        "vanilla": [
            {"bucket": "1-5", "n": 3, "bleu": 20.0},
            {"bucket": "31+", "n": 2, "bleu": 1.0},
        ],
        "bahdanau": [
            {"bucket": "6-10", "n": 4, "bleu": 12.0},
            {"bucket": "1-5", "n": 3, "bleu": 25.0},
        ],
    }
    fig = length_plot(buckets)
    ax = fig.axes[0]
    assert len(fig.axes) == 1
    assert _labels(ax.get_xticklabels()) == ["1-5", "6-10", "31+"]
    assert len(ax.patches) == 2 * 3


def test_figure_to_png_writes_a_png(tmp_path):
    path = tmp_path / "plots" / "probe.png"
    figure_to_png(attention_heatmap(_attn(3, 4), SRC[:4], TGT[:3]), path)
    assert path.read_bytes()[:8] == PNG_MAGIC


PROBE = "Jane ging in den Laden."
LONG_SOURCE = ("Wenn die Konfigurationsdatei fehlt , schreibt der Dienst beim ersten Start eine "
               "neue Datei mit den Standardwerten in das Verzeichnis des Benutzers und meldet "
               "dies einmal im Systemprotokoll .")  # 32 words
LONG_TARGET = ("If the configuration file is missing , the service writes a new file with the "
               "default values to the user's directory at its first start and reports this "
               "once in the system log .").split()


def _texts_off_the_canvas(fig: Figure) -> list[tuple[str, tuple[float, ...]]]:
    """Every drawn, non-empty Text artist whose window extent leaves the figure's canvas, after
    drawing it as TensorBoard does (an Agg canvas); tick labels of ticks outside their axis's
    view (made but not drawn) are left out."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    undrawn = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                loc = tick.get_loc()
                if loc is None or not low - 1e-9 <= loc <= high + 1e-9:
                    undrawn |= {id(tick.label1), id(tick.label2)}
    box = fig.bbox
    off = []
    for text in fig.findobj(Text):
        if not text.get_visible() or not text.get_text() or id(text) in undrawn:
            continue
        extent = text.get_window_extent(renderer)
        if (extent.x0 < box.x0 - 0.5 or extent.x1 > box.x1 + 0.5
                or extent.y0 < box.y0 - 0.5 or extent.y1 > box.y1 + 0.5):
            off.append((text.get_text(), tuple(round(v) for v in extent.extents)))
    return off


def _probe_title(step: int) -> str:
    """The teacher-forced probe heatmap's title as training writes it (reference_probe)."""
    return (f"step {step}, teacher-forced, cross-attention, step predicting the word: "
            "Jane→Jane 0.91, store→Laden 0.64")


def _figures() -> dict[str, Figure]:
    """Each figure the module makes, with realistic long labels and titles."""
    probe_src, probe_tgt = PROBE.split() + ["</s>"], "Jane went to the store .".split()
    long_src = ["▁" + w for w in LONG_SOURCE.split()] + ["</s>"]
    long_tgt = ["▁" + w for w in LONG_TARGET] + ["</s>"]
    variants = ("vanilla", "bahdanau", "luong", "transformer")
    return {
        "probe heatmap": attention_heatmap(_attn(len(probe_tgt), len(probe_src)), probe_src,
                                           probe_tgt, title=_probe_title(12_000)),
        "probe translation": attention_heatmap(
            _attn(len(long_tgt), len(long_src)), long_src, long_tgt,
            title="step 12000: " + " ".join(LONG_TARGET)),
        "translate": attention_heatmap(_attn(len(long_tgt), len(long_src)), long_src,
                                       long_tgt, title=LONG_SOURCE),
        "one long word": attention_heatmap(_attn(2, 2), ["▁Jane", "</s>"], ["▁Jane", "</s>"],
                                           title="Donaudampfschifffahrtsgesellschaftskapitän"),
        "head grid": head_grid(_attn(4, len(probe_tgt), len(probe_src)), probe_src, probe_tgt,
                               title="step 12000: last layer, per head, " + PROBE),
        "side by side": side_by_side({v: (_attn(len(probe_tgt), len(probe_src)), probe_src,
                                          probe_tgt) for v in variants[1:]}, title=LONG_SOURCE),
        "bleu bars": bleu_bars({v: 20.0 + i for i, v in enumerate(variants)},
                               "test BLEU, beam 5, docs_de_en, 3,600 s on one thread, " * 2),
        "bleu curves": bleu_curves({v: [(0.0, 0.0), (1800.0, 10.0 + i), (3600.0, 20.0 + i)]
                                    for i, v in enumerate(variants)}, title=LONG_SOURCE),
        "length plot": length_plot({v: [{"bucket": b, "n": 10, "bleu": 20.0} for b in
                                        ("1-10", "11-20", "21-30", "31-40", "41-50", "51+")]
                                    for v in variants}, title=LONG_SOURCE),
    }


@pytest.mark.parametrize("name", list(_figures()))
def test_every_text_of_every_figure_lies_on_its_canvas(name: str) -> None:
    """TensorBoard showed the probe heatmap's title cut at both ends: a title wider than its
    canvas. Long titles wrap, so each text lies within the figure once drawn."""
    fig = _figures()[name]
    assert _texts_off_the_canvas(fig) == []


HANGUL_SRC = ["▁Jane", "▁went", "▁to", "▁the", "▁store", ".", "</s>"]
HANGUL_TGT = ["▁제", "인이", "▁가게에", "▁갔다", ".", "</s>"]


def test_hangul_labels_draw_with_a_cjk_font(tmp_path) -> None:
    """Offline, writing only under tmp_path: an installed CJK font, else the fonts-nanum .deb
    a Korean corpus's build left in the shared raw folder, copied here and unpacked."""
    if fonts.font_file_with("한") is None:
        shared = find_deb(data_root(None) / "raw", FONT_PACKAGE)
        if shared is None:
            pytest.skip("no CJK font installed and no fonts-nanum .deb in data/raw (`python -m "
                        "seq2seq.prepare data=debian_en_ko` fetches it with the corpus)")
        shutil.copy(shared, tmp_path)
    font = fonts.cjk_font(tmp_path)
    assert font is not None and font == fonts.font_file_with("제")
    assert FT2Font(str(font)).get_char_index(ord("가")) != 0  # a glyph, not the missing box
    fig = attention_heatmap(_attn(len(HANGUL_TGT), len(HANGUL_SRC)), HANGUL_SRC, HANGUL_TGT,
                            title="제인이→Jane 0.90, 가게에→store 0.92")
    assert _render_strictly(fig).startswith(PNG_MAGIC)  # no missing-glyph warning


def test_without_a_cjk_font_hangul_is_the_missing_glyph_and_one_line_says_so(
    tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setattr(fonts, "FONT", ["DejaVu Sans"])
    assert fonts.font_file_with("제") is None
    fig = attention_heatmap(_attn(2, 2), ["▁a", "▁b"], ["▁제", "▁가"])
    with pytest.raises(UserWarning, match="missing from font"):
        _render_strictly(fig)

    assert fonts.cjk_font(tmp_path) is None  # no font, no .deb: nothing is fetched
    out = capsys.readouterr().out.strip().splitlines()
    assert [line for line in out if line.startswith("no CJK font")] == [out[-1]]
    assert "fonts-nanum" in out[-1] and fonts.FONT == ["DejaVu Sans"]
