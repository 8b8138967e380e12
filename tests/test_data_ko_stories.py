"""English-Korean pairs from games and a history (data=docs_en_ko): Crawl's descriptions, Ren'Py
translation files, and debian-history's HTML chapters, each on hand-made files laid out as the
unpacked package. Offline."""

from __future__ import annotations

from pathlib import Path

from seq2seq.data.docs.crawl_descriptions import DESCRIPT_DIR, align_crawl
from seq2seq.data.docs.manuals import Manual, align_manual
from seq2seq.data.docs.renpy import GAMES_DIR, TRANSLATION_DIR, align_renpy
from seq2seq.data.docs.segments import PageCounts, Segment
from tests.test_data_docs import write

CRAWL_EN = """# Goals for the prose section: pitch the god to a player.
%%%%
Beogh

Beogh is an <lightblue>evil deity</lightblue>, worshipped by the
cave orcs native to the dungeon.

Only orcs may devote their service to Beogh.
%%%%
Breathe Frost ability

<Chilling Breath spell>
%%%%
tutorial1 downstairs

Press <input>$cmd[CMD_GO_DOWNSTAIRS]</input> to go down, or <<Shift>.
%%%%
Okawaru

Okawaru is a god of battle.

Okawaru's followers must prove themselves.
%%%%
tutorial1 diagonal

:nowrap
  <w>7 8 9</w>   <w>y k u</w>
%%%%
Vehumet

Vehumet is a god of the destructive powers of magic.
"""

CRAWL_KO = """%%%%
Beogh

베오그는 던전 토박이인 동굴 오크들이 숭배하는
<lightblue>악신</lightblue>이다.

오직 오크만이 베오그를 섬길 수 있다.
%%%%
Breathe Frost ability

대상에게 냉기를 내뿜는다.
%%%%
tutorial1 downstairs

<input>$cmd[CMD_GO_DOWNSTAIRS]</input> 키를 누르면 내려갑니다.
%%%%
Okawaru

전투의 신 오카와루는 신도들이 강함을 증명하기를 요구한다.
%%%%
tutorial1 diagonal

:nowrap
  <w>7 8 9</w>   <w>y k u</w>
%%%%
Zin

진은 법의 신이다.
"""

CRAWL_QUOTES_EN = """%%%%
ghost moth

“Always in focus
 You can't feel my stare.”
    -Judas Priest, “Electric Eye”.
"""

CRAWL_QUOTES_KO = """%%%%
ghost moth

“항상 집중하고 있어
 당신은 나의 응시를 느낄 수 없어.”
    -주다스 프리스트, “Electric Eye”.
"""

RENPY_SCRIPT = """\ufeff# game/script.rpy:19
translate korean start_915cb944:

    # "It's only when I hear the sounds of {i}shuffling{/i} feet that I realize it's over.{w}"
    "발걸음 소리가 {i}뒤섞여{/i} 들려올 때 비로소 나는 강의가 끝났음을 알았다.{w}"

# game/script.rpy:58
translate korean rightaway_cf214f74:

    # s "Hi there, [player]! How was class?"
    s "여어, [player]! 수업은 어땠어?"

# game/script.rpy:70
translate korean rightaway_5a1b2c3d:

    # "Eileen" "She said \\"yes\\" and\\nthen {b}left{/b}."
    "아일린" "그녀는 \\"응\\"이라고 말하고\\n{b}떠났다{/b}."

# game/script.rpy:80
translate korean clear_0a1b2c3d:

    # nvl clear
    nvl clear

translate korean python:

    gui.text_font = "NanumGothic.ttf"
"""

RENPY_STRINGS = """translate korean strings:

    # renpy/common/00action_file.rpy:26
    old "{#weekday}Monday"
    new "{#weekday}월요일"

    # screens.rpy:300
    old "While unpacking {}, unknown type {}."
    new "{} 압축 해제 중, {}는 알 수 없는 타입입니다."

    # screens.rpy:310
    old "Text tags such as {{b} need doubled braces."
    new "{{b} 같은 텍스트 태그는 중괄호를 두 번 써야 해."
"""

HISTORY_EN = """<html><body><div class="navheader"><p>Next</p></div>
<h1>Chapter 2. Leadership</h1>
<p>Debian has had several leaders since its beginnings in 1993.</p>
<ul><li><p>Ian Murdock founded Debian in August 1993.</p></li></ul>
</body></html>"""

HISTORY_KO = """<html><body><div class="navheader"><p>다음</p></div>
<h1>2장. 리더십</h1>
<p>데비안은 1993년 시작된 이후 여러 리더가 있었다.</p>
<ul><li><p>이안 머독은 1993년 8월 데비안을 세웠다.</p></li></ul>
</body></html>"""

# how the caller registers debian-history: Manual handles it as it is
DEBIAN_HISTORY = Manual("debian-history", "debian-history", "usr/share/doc/debian-history/docs",
                        "usr/share/doc/debian-history/docs", en_suffix=".en.html",
                        translation_suffix=".ko.html")


def test_crawl_entries_pair_by_key_and_paragraph(tmp_path: Path) -> None:
    descript = tmp_path / DESCRIPT_DIR
    write(descript / "gods.txt", CRAWL_EN)
    write(descript / "ko/gods.txt", CRAWL_KO)
    write(descript / "quotes.txt", CRAWL_QUOTES_EN)
    write(descript / "ko/quotes.txt", CRAWL_QUOTES_KO)
    write(descript / "ko/branches.txt", "%%%%\nDungeon\n\n던전이다.\n")  # no English file
    assert list(align_crawl(tmp_path, "crawl")) == [
        Segment("베오그는 던전 토박이인 동굴 오크들이 숭배하는 악신이다.",
                "Beogh is an evil deity, worshipped by the cave orcs native to the dungeon.",
                "crawl/gods/Beogh"),
        Segment("오직 오크만이 베오그를 섬길 수 있다.",
                "Only orcs may devote their service to Beogh.", "crawl/gods/Beogh"),
        Segment("$cmd[CMD_GO_DOWNSTAIRS] 키를 누르면 내려갑니다.",
                "Press $cmd[CMD_GO_DOWNSTAIRS] to go down, or <Shift>.",
                "crawl/gods/tutorial1 downstairs"),
        Segment("“항상 집중하고 있어 당신은 나의 응시를 느낄 수 없어.”",
                "“Always in focus You can't feel my stare.”", "crawl/quotes/ghost moth"),
        Segment("-주다스 프리스트, “Electric Eye”.", "-Judas Priest, “Electric Eye”.",
                "crawl/quotes/ghost moth"),
    ]  # left out: a link, paragraph counts that differ, :nowrap, keys on one side only


def test_renpy_dialogue_and_strings_pair_without_text_tags(tmp_path: Path) -> None:
    translations = tmp_path / GAMES_DIR / "the_question" / TRANSLATION_DIR
    write(translations / "script.rpy", RENPY_SCRIPT)
    write(translations / "common.rpy", RENPY_STRINGS)
    script = "renpy-thequestion/the_question/script"
    common = "renpy-thequestion/the_question/common"
    assert list(align_renpy(tmp_path, "renpy-thequestion", "the_question")) == [
        Segment("월요일", "Monday", common),
        Segment("{} 압축 해제 중, {}는 알 수 없는 타입입니다.",
                "While unpacking {}, unknown type {}.", common),
        Segment("{b} 같은 텍스트 태그는 중괄호를 두 번 써야 해.",
                "Text tags such as {b} need doubled braces.", common),
        Segment("발걸음 소리가 뒤섞여 들려올 때 비로소 나는 강의가 끝났음을 알았다.",
                "It's only when I hear the sounds of shuffling feet that I realize it's over.",
                script),
        Segment("여어, [player]! 수업은 어땠어?", "Hi there, [player]! How was class?", script),
        Segment('그녀는 "응"이라고 말하고 떠났다.', 'She said "yes" and then left.', script),
    ]
    assert list(align_renpy(tmp_path, "renpy-demo", "demo")) == []  # another game's folder


def test_debian_history_chapters_pair_as_a_manual(tmp_path: Path) -> None:
    docs = tmp_path / "usr/share/doc/debian-history/docs"
    write(docs / "leaders.en.html", HISTORY_EN)
    write(docs / "leaders.ko.html", HISTORY_KO)
    write(docs / "leaders.de.html", HISTORY_EN)  # another language: not read
    counts: list[PageCounts] = []
    segments = list(align_manual(DEBIAN_HISTORY, {"debian-history": tmp_path},
                                 "debian-history", counts))
    assert counts == [PageCounts(common=1, whole=1, by_section=0)]
    document = "debian-history/leaders"
    assert segments == [
        Segment("2장. 리더십", "Chapter 2. Leadership", document),
        Segment("데비안은 1993년 시작된 이후 여러 리더가 있었다.",
                "Debian has had several leaders since its beginnings in 1993.", document),
        Segment("", "", document),  # the <li> around the <p>: its text is the <p>'s
        Segment("이안 머독은 1993년 8월 데비안을 세웠다.",
                "Ian Murdock founded Debian in August 1993.", document),
    ]
