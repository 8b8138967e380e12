"""English-Korean from everything Debian ships (data=debian_en_ko): the gettext catalogs of
games and desktop programs, the placeholder and accelerator filters, the domains (their test
share, their counts, BLEU per domain). Offline; the build from tiny .deb files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from matplotlib import font_manager

from seq2seq import fonts
from seq2seq.data.docs.build import build_docs
from seq2seq.data.docs.filters import MOZILLA_PLACEHOLDER, drop_reason, has_placeholder
from seq2seq.data.docs.gettext_catalogs import BLOCK, Catalogs, align_gettext
from seq2seq.data.docs.packages import FONT_PACKAGE
from seq2seq.data.docs.segments import Segment
from seq2seq.data.docs.sources import KO_SOURCES, LOCALE_KO
from seq2seq.evaluation.compare_report import domain_rows
from seq2seq.evaluation.metrics import domain_scores, score, scores_by_domain
from tests.test_data_docs import FakeApt, needs_dpkg, write_mo
from tests.test_data_docs_ko import MO_KO, fake_font_tree

HEADER = ("", "Content-Type: text/plain; charset=UTF-8\n")
KOREAN_MO = "usr/share/locale/ko/LC_MESSAGES/{}.mo"


def test_catalogs_cut_into_blocks_of_neighbouring_messages(tmp_path: Path) -> None:
    """Within a context, messages in msgid order, BLOCK to a document: the variants of one
    line (same start) are neighbours and share a block."""
    entries = [HEADER] + [(f"You hear a sound number {i:03d}.", f"소리 {i:03d}번이 들립니다.")
                          for i in reversed(range(BLOCK + 1))]
    entries.append(("item name\x04A small _knife", "작은 칼(_K)"))
    write_mo(tmp_path / "pkg" / KOREAN_MO.format("game"), entries)
    segments = list(align_gettext({"pkg": tmp_path / "pkg"}, "game",
                                  [Catalogs("pkg", LOCALE_KO)]))
    assert segments[0] == Segment("소리 000번이 들립니다.", "You hear a sound number 000.",
                                  "game/game/-/000")
    assert segments[BLOCK - 1].document == "game/game/-/000"
    assert segments[BLOCK] == Segment(f"소리 {BLOCK:03d}번이 들립니다.",
                                      f"You hear a sound number {BLOCK:03d}.", "game/game/-/001")
    # a story catalog keeps every mark: only interface catalogs have accelerators
    assert segments[-1] == Segment("작은 칼(_K)", "A small _knife", "game/game/item name/000")
    menus = list(align_gettext({"pkg": tmp_path / "pkg"}, "game",
                               [Catalogs("pkg", LOCALE_KO)], interface=True))
    assert menus[-1] == Segment("작은 칼", "A small knife", "game/game/item name/000")


def test_catalogs_read_the_chosen_files_and_drop_wesnoth_context_prefixes(tmp_path: Path) -> None:
    for name in ("wesnoth-units", "wesnoth-lib"):
        write_mo(tmp_path / "pkg" / KOREAN_MO.format(name),
                 [HEADER, ("race^Elves live in the forest.", "엘프는 숲에 산다.")])
    roots = {"pkg": tmp_path / "pkg"}
    stories = list(align_gettext(roots, "w", [Catalogs("pkg", LOCALE_KO,
                                                       include=("wesnoth-units",))]))
    menus = list(align_gettext(roots, "w", [Catalogs("pkg", LOCALE_KO,
                                                     exclude=("wesnoth-units",))]))
    assert stories == [Segment("엘프는 숲에 산다.", "Elves live in the forest.",
                               "w/wesnoth-units/-/000")]
    assert [s.document for s in menus] == ["w/wesnoth-lib/-/000"]


@pytest.mark.parametrize("text", [
    "You use the %s to clean yourself off.", "Wait, that %1$s needs to die!",
    "%d items in the bag", "Delete %1 files now?", "%(name)s joined the game",
    "Show sidebar ({ $shortcut })", "Hello {0}, welcome back",
    "Press <b>Enter</b> now", "[player] went home.", "The nickname $nick is too long.",
    "Add to the sequence in row ~a.", "%S downloaded the file",
    "$(ERR) creating a new document", "Cannot open $(ARG1) for reading.", "Width %*d of it",
    "The name %.*s is too long", "You have %'d coins left", "Page %L1 of the book",
    "Saved %TITLE to the disk", "Saved %FILENAME to the disk", "Replace %NAME% in the text",
])
def test_placeholders_drop_the_pair(text: str) -> None:
    assert has_placeholder(text)
    assert drop_reason("이 문장은 충분히 깁니다 정말로.", text, "ko") == "placeholder"


@pytest.mark.parametrize("text", [
    "I am 100% sure about it.", "Open %PRODUCTNAME Calc now.", "Use a, b and c (A) here.",
    "It costs $5 today.", "Play the Lydian #2 #5 chord.", "See sources.list(5) for more.",
    "The R&D team of AT&T wrote it.", "Enter f(x) in the cell.",
])
def test_text_that_only_looks_like_a_placeholder_stays(text: str) -> None:
    assert not has_placeholder(text)
    assert drop_reason("이 문장은 충분히 깁니다 정말로.", text, "ko") is None


def test_mozilla_counts_are_placeholders_there_only() -> None:
    text = "#1 downloads are waiting now."
    assert not has_placeholder(text)  # a chord or a number elsewhere
    assert has_placeholder(text, MOZILLA_PLACEHOLDER)
    assert drop_reason("이 문장은 충분히 깁니다 정말로.", text, "ko",
                       MOZILLA_PLACEHOLDER) == "placeholder"
    assert KO_SOURCES["firefox"].placeholder is MOZILLA_PLACEHOLDER
    assert KO_SOURCES["desktop-catalogs"].placeholder is None  # Minuet's chords


def test_german_has_no_placeholder_rule() -> None:
    assert drop_reason("Löschen Sie %1 Dateien jetzt?", "Delete %1 files now?", "de") is None


def test_every_korean_source_has_a_domain_and_documents_name_it() -> None:
    assert {s.domain for s in KO_SOURCES.values()} == {
        "documentation", "interface", "descriptions", "fiction"}


@needs_dpkg
def test_build_with_domains(tmp_path: Path, capsys) -> None:
    """A fiction and an interface source: the accelerator is gone from the corpus, the
    placeholder pair counted and dropped, every fiction family in test at 97 buckets, the
    domains counted in the manifest and printed."""
    l10n, game = tmp_path / "l10n-ko", tmp_path / "cdda"
    write_mo(l10n / "usr/lib/libreoffice/program/resource/ko/LC_MESSAGES/svx.mo", MO_KO)
    write_mo(game / KOREAN_MO.format("cataclysm-dda"), [
        HEADER, ("A thick, nutty brown paste.", "두껍고, 견과류맛이 나는 갈색 물질."),
        ("You use the %s to clean yourself off.", "당신은 %s(으)로 몸을 닦습니다."),
    ])
    fake = FakeApt({"libreoffice-l10n-ko": l10n, "cataclysm-dda-data": game})
    corpus = build_docs(tmp_path / "data", ["libreoffice-l10n", "cataclysm-dda"], lang="ko",
                        fetch=fake, test_buckets={"fiction": 97})
    out = capsys.readouterr().out
    pairs = [s for split in corpus.splits.values() for s in split]
    assert ("선의 너비를 선택하십시오.", "Select the width of the line.") in {
        (s.translation, s.en) for s in pairs}
    assert [(s.en, s.family) for s in corpus.splits["test"] if s.domain == "fiction"
            ] == [("A thick, nutty brown paste.", "cataclysm-dda/cataclysm-dda/-/000")]
    # every pair stores its source's domain, in the cache too
    assert all(s.domain == KO_SOURCES[s.document.partition("/")[0]].domain for s in pairs)
    again = build_docs(tmp_path / "data", ["libreoffice-l10n", "cataclysm-dda"], lang="ko",
                       fetch=fake, test_buckets={"fiction": 97})
    assert again.splits == corpus.splits
    manifest = json.loads((corpus.folder / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["sources"]["cataclysm-dda"]["dropped"]["placeholder"] == 1
    assert manifest["domains"]["fiction"] == {"train": 0, "validation": 0, "test": 1}
    assert sum(manifest["domains"]["interface"].values()) == 2
    assert "cataclysm-dda: 1 pairs, fiction" in out and "fiction: 1 pairs: train 0" in out
    assert "fiction 97" in manifest["split_rule"]
    # the test share is part of the corpus's identity: another share, another folder
    other = build_docs(tmp_path / "data", ["libreoffice-l10n", "cataclysm-dda"], lang="ko",
                       fetch=fake)
    assert other.folder != corpus.folder


@needs_dpkg
def test_the_font_comes_with_the_korean_packages_and_heatmaps_find_it_offline(
    tmp_path: Path, monkeypatch
) -> None:
    """The build fetches fonts-nanum beside the corpus packages (once); `cjk_font` then finds
    it in the raw folder without fetching anything, and writes only there."""
    l10n = tmp_path / "l10n-ko"
    write_mo(l10n / "usr/lib/libreoffice/program/resource/ko/LC_MESSAGES/svx.mo", MO_KO)
    fake = FakeApt({"libreoffice-l10n-ko": l10n,
                    FONT_PACKAGE: fake_font_tree(tmp_path / "font")})
    root = tmp_path / "data"
    build_docs(root, ["libreoffice-l10n"], lang="ko", fetch=fake)
    build_docs(root, ["libreoffice-l10n"], lang="ko", fetch=fake)
    assert fake.calls == [["libreoffice-l10n-ko"], [FONT_PACKAGE]]
    monkeypatch.setattr(fonts, "FONT", ["DejaVu Sans"])  # as if no CJK font
    monkeypatch.setattr(fonts, "font_file_with", lambda character: None)
    font = fonts.cjk_font(root / "raw")
    assert font is not None and font.is_file() and root / "raw" in font.parents
    assert len(fake.calls) == 2  # nothing fetched
    assert str(font) in {entry.fname for entry in font_manager.fontManager.ttflist}


def test_scores_by_domain_are_each_domains_corpus_scores() -> None:
    hyps = ["the cat sat on the mat", "a dog runs", "hello there world", "good morning to you"]
    refs = ["the cat sat on the mat", "a dog ran home", "hello world", "good morning to you all"]
    domains = ["fiction", "interface", "fiction", "interface"]
    rows = scores_by_domain(domains, hyps, refs)
    assert [row["domain"] for row in rows] == ["fiction", "interface"]
    assert sum(row["n"] for row in rows) == 4
    fiction = score([hyps[0], hyps[2]], [refs[0], refs[2]])
    assert rows[0]["bleu"] == fiction.bleu and rows[0]["chrf"] == fiction.chrf
    assert rows[0]["bleu"] != rows[1]["bleu"]
    lines = domain_rows({"bahdanau": rows, "vanilla": rows[:1]})
    assert "| variant | fiction | interface |" in lines
    assert lines[-2].startswith("| vanilla | ") and lines[-2].endswith("| – |")
    assert lines[-1] == "| sentences | 2 | 2 |"


def test_scores_by_domain_only_where_the_pairs_store_several() -> None:
    hyps, refs = ["a b c", "d e f"], ["a b c", "d e g"]
    assert domain_scores(None, hyps, refs, "13a") == []  # a corpus without domains
    assert domain_scores(["fiction", "fiction"], hyps, refs, "13a") == []  # one domain
    assert domain_scores(["", "interface"], hyps, refs, "13a") == []  # not stored for all
    rows = domain_scores(["fiction", "interface"], hyps, refs, "13a")
    assert [(row["domain"], row["n"]) for row in rows] == [("fiction", 1), ("interface", 1)]
