"""The corpus leaves references as translators wrote them: accelerators go only from interface
catalogs and only where they are one (seq2seq.data.docs.accelerators), entities are decoded,
`data.test_buckets` is checked. Through the real extractors, on catalogs the tests write."""

from __future__ import annotations

import pytest

from seq2seq.data.docs.accelerators import strip_bracketed, strip_interface_pair, strip_marks
from seq2seq.data.docs.build import build_docs, check_test_buckets
from seq2seq.data.docs.gettext_catalogs import Catalogs, align_gettext
from seq2seq.data.docs.mo_catalogs import CATALOG_DIR, align_catalogs
from seq2seq.data.docs.packages import FONT_PACKAGE
from seq2seq.data.docs.sources import KO_SOURCES, LOCALE_KO
from seq2seq.errors import UserError
from tests.test_data_docs import FakeApt, needs_dpkg, write_mo

HEADER = ("", "Content-Type: text/plain; charset=UTF-8\n")
# text that looks like an accelerator or a mark and is not one, on both sides
TEXT = [
    ("See sources.list(5) for the format of the file.",
     "파일 형식은 sources.list(5) 매뉴얼을 보십시오."),
    ("Enter f(x) (depends on the chosen function).",
     "f(x) (선택한 함수에 따라 다름)를 입력하십시오."),
    ("The R&D team of AT&T wrote the first version.", "AT&T의 R&D 팀이 첫 판을 썼습니다."),
    ("Type the file_name of the saved game here.",
     "저장한 게임의 file_name을 여기에 입력하십시오."),
    ("Go back to step (1) and start over again.", "단계(1)을 다시 시작하십시오 처음부터 다시."),
    ("Use a tilde (~) before the letter you want.", "원하는 글자 앞에 물결표(~)를 쓰십시오."),
]


@pytest.mark.parametrize(("raw", "clean"), [
    ("선의 너비를 선택하십시오(~W).", "선의 너비를 선택하십시오."), ("파일(&F)", "파일"),
    ("새 게임(_N)...", "새 게임..."), ("열기 (_O)", "열기"), ("다음 (~N)>", "다음>"),
    ("영(0)으로 나눔.", "영(0)으로 나눔."), ("f(x) 입력", "f(x) 입력"), ("단계(1)을", "단계(1)을"),
    ("sources.list(5) 매뉴얼", "sources.list(5) 매뉴얼"), ("옵션 (A)를", "옵션 (A)를"),
])
def test_a_bracketed_accelerator_needs_its_mark(raw: str, clean: str) -> None:
    assert strip_bracketed(raw) == clean


@pytest.mark.parametrize(("raw", "clean"), [
    ("Pa~ges:", "Pages:"), ("~Save", "Save"), ("Hex _#:", "Hex #:"), ("PDF_/A version:",
                                                                      "PDF/A version:"),
    ("an underscore (_).", "an underscore (_)."), ("a tilde (~) before", "a tilde (~) before"),
    ("a__b", "a_b"), ("R&D", "R&D"),  # & is not a LibreOffice mark
])
def test_libreoffice_marks(raw: str, clean: str) -> None:
    assert strip_marks(raw, "~_") == clean


@pytest.mark.parametrize(("en", "ko", "clean"), [
    ("S_tatistics", "통계(_T)", ("Statistics", "통계")),  # the bracket names the letter
    ("_Deal", "패 돌리기", ("Deal", "패 돌리기")),  # the mark opens the string
    ("&File", "파일(&F)", ("File", "파일")),
    ("Q&&A", "질문 && 답", ("Q&A", "질문 & 답")),  # a doubled & is an ampersand
    ("&1 Option", "보기 &1", ("1 Option", "보기 1")),  # the inline mark of the same key
    ("The R&D team of AT&T", "AT&T의 R&D 팀", ("The R&D team of AT&T", "AT&T의 R&D 팀")),
    ("Save the file_name", "file_name 저장(_S)", ("Save the file_name", "file_name 저장")),
    ("Save _rating values", "등급 값 저장: (_R)", ("Save rating values", "등급 값 저장:")),
])
def test_interface_marks_need_evidence(en: str, ko: str, clean: tuple[str, str]) -> None:
    assert strip_interface_pair(en, ko) == clean


def test_libreoffice_catalogs_keep_brackets_that_are_text(tmp_path) -> None:
    path = tmp_path / CATALOG_DIR.format(lang="ko") / "sc.mo"
    write_mo(path, [HEADER, ("RID_SAVE\x04~Save the document", "문서 저장(~S)"),
                    ("dialog|label\x04Select the _width of it.", "너비를 선택하십시오(_W)."),
                    *((f"TEXT_{i}\x04{en}", ko) for i, (en, ko) in enumerate(TEXT))])
    pairs = {(s.en, s.translation) for s in align_catalogs(tmp_path, "libreoffice-l10n", "ko")}
    assert pairs == {("Save the document", "문서 저장"),
                     ("Select the width of it.", "너비를 선택하십시오."), *TEXT}


def test_story_catalogs_are_never_touched_and_menus_only_where_marked(tmp_path) -> None:
    write_mo(tmp_path / "pkg" / "usr/share/locale/ko/LC_MESSAGES/game.mo", [
        HEADER, *TEXT, ("S_tatistics of the game", "게임 통계(_T)"),
        ("Tom &amp; Jerry ran away fast.", "톰 &amp; 제리는 빨리 달아났다."),
    ])
    roots, catalogs = {"pkg": tmp_path / "pkg"}, [Catalogs("pkg", LOCALE_KO)]
    stories = {(s.en, s.translation) for s in align_gettext(roots, "g", catalogs)}
    menus = {(s.en, s.translation) for s in align_gettext(roots, "g", catalogs, interface=True)}
    entity = ("Tom & Jerry ran away fast.", "톰 & 제리는 빨리 달아났다.")
    assert stories == {*TEXT, ("S_tatistics of the game", "게임 통계(_T)"), entity}
    assert menus == {*TEXT, ("Statistics of the game", "게임 통계"), entity}
    # which sources are read as menus
    assert KO_SOURCES["desktop-catalogs"].domain == KO_SOURCES["game-interface"].domain \
        == "interface" != KO_SOURCES["cataclysm-dda"].domain


@needs_dpkg
def test_the_build_leaves_every_text_as_written(tmp_path, capsys) -> None:
    """LibreOffice's catalogs and a story catalog through build_docs: no bracket, ampersand or
    underscore that is text is altered on either side; a cached build fetches nothing, not even
    the font (it comes with a fresh build)."""
    l10n, game = tmp_path / "l10n-ko", tmp_path / "cdda"
    write_mo(l10n / CATALOG_DIR.format(lang="ko") / "sc.mo",
             [HEADER, *((f"TEXT_{i}\x04{en}", ko) for i, (en, ko) in enumerate(TEXT[:3]))])
    write_mo(game / "usr/share/locale/ko/LC_MESSAGES/cataclysm-dda.mo", [HEADER, *TEXT[2:]])
    fake = FakeApt({"libreoffice-l10n-ko": l10n, "cataclysm-dda-data": game})
    root = tmp_path / "data"
    corpus = build_docs(root, ["libreoffice-l10n", "cataclysm-dda"], lang="ko", fetch=fake)
    pairs = {(s.en, s.translation) for split in corpus.splits.values() for s in split}
    assert pairs == set(TEXT)
    assert [FONT_PACKAGE] in fake.calls  # tried once, with the packages (the fake has none)
    calls = len(fake.calls)
    capsys.readouterr()
    build_docs(root, ["libreoffice-l10n", "cataclysm-dda"], lang="ko", fetch=fake)
    assert len(fake.calls) == calls and FONT_PACKAGE not in capsys.readouterr().out


@pytest.mark.parametrize(("buckets", "message"), [
    ({"fictoin": 6}, "'fictoin' is not a domain of the chosen sources (fiction, interface)"),
    ({"fiction": 98}, "data.test_buckets.fiction=98: a whole number of md5 buckets from 0 to 97"),
    ({"fiction": -1}, "data.test_buckets.fiction=-1"),
    ({"fiction": 2.5}, "data.test_buckets.fiction=2.5"),
])
def test_test_buckets_are_checked(buckets: dict, message: str) -> None:
    sources = [KO_SOURCES["cataclysm-dda"], KO_SOURCES["libreoffice-l10n"]]
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        check_test_buckets(buckets, sources)
    assert "\n" not in str(err.value)
    assert check_test_buckets({"interface": 0, "fiction": 97}, sources) == {
        "fiction": 97, "interface": 0}
