"""The English-Korean documentation corpus (data=docs_en_ko): each Korean source's format on
hand-made files (LibreOffice help HTML, a Mallard page, a .mo catalog), the Hangul filter, and
the build end to end from tiny .deb files. Offline."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import matplotlib
import pytest

from seq2seq.alignment import word_spans, words
from seq2seq.data.docs import load_docs
from seq2seq.data.docs.build import build_docs
from seq2seq.data.docs.filters import drop_reason, filter_segments, hangul_share
from seq2seq.data.docs.libreoffice_help import align_help
from seq2seq.data.docs.mo_catalogs import CATALOG_DIR, align_catalogs
from seq2seq.data.docs.packages import FONT_FILE, FONT_PACKAGE
from seq2seq.data.docs.segments import PageCounts, Segment
from seq2seq.data.docs.sources import KO_SOURCES
from seq2seq.evaluation.aer import piece_words
from tests.test_data_docs import FakeApt, needs_dpkg, write, write_mo

HELP_EN = """<html><body>
<h1 id="hd_id1">Copying Formulas</h1>
<p id="par_id2">Select the cell containing the formula.</p>
<p id="par_id3">Choose Edit - Paste, or press Ctrl+V to paste the formula.</p>
</body></html>"""

# par_id3 is not translated: the Korean help falls back to the English text
HELP_KO = """<html><body>
<h1 id="hd_id1">수식 복사하기</h1>
<p id="par_id2">수식을 포함하는 셀을 선택하십시오.</p>
<p id="par_id3">Choose Edit - Paste, or press Ctrl+V to paste the formula.</p>
</body></html>"""

MALLARD_EN = """<?xml version="1.0" encoding="utf-8"?>
<page xmlns="http://projectmallard.org/1.0/" type="guide" id="clock">
  <info>
    <credit type="author"><name>Shaun McCance</name></credit>
    <desc>Use clocks and time zones to keep track of your schedule.</desc>
  </info>
<title>Date and time</title>
<p>Open the Activities overview and start typing Settings.</p>
<screen>timedatectl set-ntp true</screen>
</page>"""

MALLARD_KO = """<?xml version="1.0" encoding="utf-8"?>
<page xmlns="http://projectmallard.org/1.0/" type="guide" id="clock" xml:lang="ko">
  <info>
    <credit type="author"><name>Shaun McCance</name></credit>
    <desc>시계와 시간대를 활용하여 일정 관리를 유지합니다.</desc>
    <mal:credit xmlns:mal="http://projectmallard.org/1.0/" type="translator copyright">
      <mal:name>조성호</mal:name>
    </mal:credit>
  </info>
<title>날짜 및 시각</title>
<p>현재 활동 개요를 열고 설정 입력을 시작하십시오.</p>
<screen>timedatectl set-ntp true</screen>
</page>"""

MO_KO = [
    ("", "Content-Type: text/plain; charset=UTF-8\n"),
    ("STR_PROMPT\x04Do you want to save your changes?", "변경 내용을 저장하시겠습니까?"),
    ("sidebarline|width\x04Select the _width of the line.", "선의 너비를 선택하십시오(_W)."),
]


def help_trees(base: Path) -> tuple[Path, Path]:
    en_root, ko_root = base / "help-en", base / "help-ko"
    write(en_root / "usr/share/libreoffice/help/en-US/text/scalc/guide/formula_copy.html",
          HELP_EN)
    write(ko_root / "usr/share/libreoffice/help/ko/text/scalc/guide/formula_copy.html", HELP_KO)
    return en_root, ko_root


def test_korean_help_pages_join_on_paragraph_id(tmp_path: Path) -> None:
    en_root, ko_root = help_trees(tmp_path)
    document = "libreoffice-help/text/scalc/guide/formula_copy.html"
    assert list(align_help(en_root, ko_root, "libreoffice-help", lang="ko")) == [
        Segment("수식 복사하기", "Copying Formulas", document),
        Segment("수식을 포함하는 셀을 선택하십시오.", "Select the cell containing the formula.",
                document),
        Segment("Choose Edit - Paste, or press Ctrl+V to paste the formula.",
                "Choose Edit - Paste, or press Ctrl+V to paste the formula.", document),
    ]
    assert list(align_help(en_root, ko_root, "libreoffice-help")) == []  # no `de` folder there


def test_mallard_pages_pair_and_keep_the_translator_credit_out(tmp_path: Path) -> None:
    manual = KO_SOURCES["gnome-user-docs"]
    write(tmp_path / "usr/share/help/C/gnome-help/clock.page", MALLARD_EN)
    write(tmp_path / "usr/share/help/ko/gnome-help/clock.page", MALLARD_KO)
    counts: list[PageCounts] = []
    segments = list(manual.align({"gnome-user-docs": tmp_path}, "gnome-user-docs", counts))
    assert counts == [PageCounts(common=1, whole=1, by_section=0)]
    assert segments == [
        Segment("시계와 시간대를 활용하여 일정 관리를 유지합니다.",
                "Use clocks and time zones to keep track of your schedule.",
                "gnome-user-docs/clock"),
        Segment("날짜 및 시각", "Date and time", "gnome-user-docs/clock"),
        Segment("현재 활동 개요를 열고 설정 입력을 시작하십시오.",
                "Open the Activities overview and start typing Settings.",
                "gnome-user-docs/clock"),
    ]  # the <screen> block counts for the pairing but is not used


def test_korean_catalogs_strip_marks(tmp_path: Path) -> None:
    write_mo(tmp_path / CATALOG_DIR.format(lang="ko") / "svx.mo", MO_KO)
    assert list(align_catalogs(tmp_path, "libreoffice-l10n", lang="ko")) == [
        Segment("변경 내용을 저장하시겠습니까?", "Do you want to save your changes?",
                "libreoffice-l10n/svx/STR_PROMPT"),
        Segment("선의 너비를 선택하십시오.", "Select the width of the line.",
                "libreoffice-l10n/svx/sidebarline"),
    ]  # the reader removes both sides' marks (seq2seq.data.docs.accelerators)
    assert list(align_catalogs(tmp_path, "libreoffice-l10n")) == []  # German: another folder


def test_hangul_share_counts_letters_only() -> None:
    assert hangul_share("제인이 가게에 갔다.") == 1.0
    assert hangul_share("Ctrl+C를 눌러 복사합니다.") == pytest.approx(8 / 13)  # 5 Latin letters
    assert hangul_share("그림 Layers dialog") == pytest.approx(2 / 14)
    assert hangul_share("123 + 456") == 0.0
    assert hangul_share("ㅎㅎ") == 1.0  # compatibility jamo


@pytest.mark.parametrize(("korean", "english", "reason"), [
    ("수식을 포함하는 셀을 선택하십시오.", "Select the cell containing the formula.", None),
    ("편집 - 복사를 선택하거나 Ctrl + C를 눌러 복사합니다.",
     "Choose Edit - Copy, or press Ctrl+C to copy it.", None),  # Latin key names, Hangul kept
    # gimp-help's fallback: a Korean word before the English text
    ("그림 Layers dialog with a new layer", "The Layers dialog with a new layer", "untranslated"),
    ("The Layers dialog", "The Layers dialog", "identical"),
    ("셀", "Select the cell containing the formula.", "ratio"),  # 0.03 of the English length
    ("수식을 포함하는 셀을 선택하십시오. " * 4, "Select the cell here.", "ratio"),
])
def test_the_korean_filter(korean: str, english: str, reason: str | None) -> None:
    assert drop_reason(korean.strip(), english, "ko") == reason


def test_the_word_level_of_korean_aer_is_the_eojeol() -> None:
    """The metric's words (`\\w+|[^\\w\\s]`) on Korean are the space-separated eojeol with
    punctuation apart: 제인이 is one word (noun and particle), as the seeds draw it."""
    assert words("제인이 가게에 갔다.") == ["제인이", "가게에", "갔다", "."]
    assert words("Ctrl+C를 눌러 복사합니다.") == ["Ctrl", "+", "C를", "눌러", "복사합니다", "."]
    # a piece inside an eojeol belongs to that eojeol: 가게 | 에 both to word 1
    text = "제인이 가게에 갔다."
    pieces = [(0, 3), (4, 6), (6, 7), (8, 10), (10, 11)]  # 제인이 | 가게 | 에 | 갔다 | .
    assert piece_words(pieces, word_spans(text)) == [[0], [1], [1], [2], [3]]


def test_the_german_bounds_would_drop_most_korean_pairs() -> None:
    # Korean's character ratio (median 0.5) is below German's lower bound (0.4) for many pairs
    pair = ("셀을 선택하십시오.", "Select the cell containing the formula.")
    assert drop_reason(*pair, "de") == "ratio"
    assert drop_reason(*pair, "ko") is None
    kept, dropped = filter_segments([Segment(*pair, "a")], set(), lang="ko")
    assert kept == [Segment(*pair, "a")] and sum(dropped.values()) == 0


def fake_korean_packages(base: Path) -> FakeApt:
    en_root, ko_root = help_trees(base)
    l10n = base / "l10n-ko"
    write_mo(l10n / CATALOG_DIR.format(lang="ko") / "svx.mo", MO_KO)
    gnome = base / "gnome"
    write(gnome / "usr/share/help/C/gnome-help/clock.page", MALLARD_EN)
    write(gnome / "usr/share/help/ko/gnome-help/clock.page", MALLARD_KO)
    return FakeApt({"libreoffice-help-en-us": en_root, "libreoffice-help-ko": ko_root,
                    "libreoffice-l10n-ko": l10n, "gnome-user-docs": gnome,
                    FONT_PACKAGE: fake_font_tree(base / "font")})


def fake_font_tree(root: Path) -> Path:
    """fonts-nanum's layout, with matplotlib's DejaVu Sans standing in for NanumGothic."""
    font = root / FONT_FILE
    font.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(matplotlib.get_data_path()) / "fonts/ttf/DejaVuSans.ttf", font)
    return root


@needs_dpkg
def test_build_of_the_korean_corpus(tmp_path: Path, capsys) -> None:
    fake = fake_korean_packages(tmp_path / "trees")
    root = tmp_path / "data"
    sources = ["libreoffice-help", "libreoffice-l10n", "gnome-user-docs"]
    corpus = build_docs(root, sources, lang="ko", fetch=fake)
    out = capsys.readouterr().out
    assert fake.calls == [["libreoffice-help-en-us", "libreoffice-help-ko", "libreoffice-l10n-ko",
                           "gnome-user-docs"], [FONT_PACKAGE]]  # the heatmaps' font beside them
    # the untranslated help paragraph is identical to its English; the heading has 2 words
    assert "libreoffice-help: 1 pairs" in out and "identical 1, short 1" in out
    assert "libreoffice-l10n: 2 pairs" in out and "gnome-user-docs: 3 pairs" in out
    assert "Korean" in out  # the long-pair count names the language
    assert corpus.folder.name.startswith("ko-v")
    manifest = json.loads((corpus.folder / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["language"] == "ko"
    assert sum(manifest["splits"].values()) == 6
    assert set(manifest["held_out_over_30_words"]["test"]) == {"ko", "en"}

    en_ko = load_docs(root=root, src_lang="en", tgt_lang="ko", sources=sources,
                      allow_missing=False, fetch=fake)
    pairs = {pair for split in en_ko.values()
             for pair in zip(split["src"], split["tgt"], strict=True)}
    formula = ("Select the cell containing the formula.", "수식을 포함하는 셀을 선택하십시오.")
    assert formula in pairs
    ko_en = load_docs(root=root, src_lang="ko", tgt_lang="en", sources=sources,
                      allow_missing=False, fetch=fake)
    assert ko_en["train"]["src"] == en_ko["train"]["tgt"]
    assert len(fake.calls) == 2  # the second and third loads reuse the cache and the font
