"""The label fonts: DejaVu Sans, which covers Latin text and the sentencepiece marker "▁", then
the CJK fonts that Korean and other CJK labels fall back to, glyph by glyph (Noto Sans CJK,
Nanum Gothic). A run on a Chinese, Japanese or Korean corpus calls `cjk_font`, which takes an
installed CJK font, else Debian's fonts-nanum where the Korean corpus's build fetched it beside
its packages (`packages.obtain_font`), or says in one line that Hangul will draw as boxes. It
never fetches: a run from an export, or offline, draws with what is on disk.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from matplotlib import font_manager
from matplotlib.ft2font import FT2Font

from seq2seq.data.docs.packages import (
    FONT_FILE,
    FONT_PACKAGE,
    Package,
    deb_version,
    find_deb,
    unpack,
)
from seq2seq.errors import UserError

CJK_FALLBACKS = ("Noto Sans CJK KR", "Noto Sans KR", "NanumGothic", "Noto Sans CJK JP")
CJK_LANGUAGES = ("ko", "ja", "zh")
_INSTALLED = {font.name for font in font_manager.fontManager.ttflist}
# the label fonts in order; cjk_font appends to this list in place
FONT = ["DejaVu Sans", *(name for name in CJK_FALLBACKS if name in _INSTALLED)]


def font_file_with(character: str) -> Path | None:
    """The file of the first label font (FONT) that has a glyph for `character`, or None when
    every one would draw it as the missing-glyph box."""
    for name in FONT:
        path = Path(font_manager.findfont(font_manager.FontProperties(family=name),
                                          fallback_to_default=False))
        if FT2Font(str(path)).get_char_index(ord(character)) != 0:
            return path
    return None


def cjk_font(raw_dir: Path) -> Path | None:
    """Make the heatmaps draw Hangul: an installed CJK font, else fonts-nanum's file where a
    Korean corpus's build left its .deb in `raw_dir` (unpacked there, registered). Nothing is
    fetched.

    Returns:
        The font file that draws Hangul, or None (after one line saying the labels will draw
        as boxes) when neither is on disk.
    """
    found = font_file_with("한")
    if found is not None:
        return found
    deb = find_deb(raw_dir, FONT_PACKAGE)
    try:
        if deb is None:
            raise UserError(f"no {FONT_PACKAGE} .deb in {raw_dir}")
        package = Package(FONT_PACKAGE, deb_version(deb), "", deb)
        path = unpack(package, raw_dir) / FONT_FILE
        font_manager.fontManager.addfont(str(path))
    except (UserError, OSError, RuntimeError) as err:
        print(f"no CJK font: Korean heatmap labels draw as boxes (apt-get install "
              f"{FONT_PACKAGE} or fonts-noto-cjk, or build a Korean corpus, which fetches it); "
              f"{str(err).splitlines()[0]}")
        return None
    name = font_manager.FontProperties(fname=str(path)).get_name()
    if name not in FONT:
        FONT.append(name)
    return path


def fonts_for(languages: Iterable[str], raw_dir: Path) -> Path | None:
    """`cjk_font` where one of a corpus's languages is written in CJK script, else None."""
    return cjk_font(raw_dir) if set(languages) & set(CJK_LANGUAGES) else None
