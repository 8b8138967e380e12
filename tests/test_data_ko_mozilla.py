"""Firefox's and Thunderbird's interface strings (data=docs_en_ko): Fluent and .properties files
in a hand-made language pack and omni.ja, laid out as the unpacked Debian packages hold them.
Offline."""

from __future__ import annotations

import zipfile
from pathlib import Path

from seq2seq.data.docs.mozilla import (
    FIREFOX,
    PRODUCTS,
    THUNDERBIRD,
    align_mozilla,
    parse_fluent,
    parse_properties,
)
from seq2seq.data.docs.segments import Segment

DIALOG_EN = """# This Source Code Form is subject to the terms of the Mozilla Public License.

-brand-short-name = Firefox
about-update-whats-new = What’s new
about-restart = Restart { -brand-short-name } to apply the update.
about-downloads =
    { $count ->
        [one] One download is in progress.
       *[other] { $count } downloads are in progress.
    }
about-check =
    .label = Check for updates
    .accesskey = C
about-help-text =
    Visit the support site
    to ask a question.
about-english-only = Only in English.
about-settings = Settings
"""

DIALOG_KO = """-brand-short-name = 파이어폭스
about-update-whats-new = 새 기능
about-restart = 업데이트를 적용하려면 { -brand-short-name }를 다시 시작하세요.
about-downloads = { $count }개의 다운로드가 진행 중입니다.
about-check =
    .label = 업데이트 확인
    .accesskey = C
about-help-text =
    질문하려면
    지원 사이트를 방문하세요.
about-settings =
    { PLATFORM() ->
        [windows] 옵션
       *[other] 설정
    }
"""

GLOBAL_EN = """# LOCALIZATION NOTE (saveAs): %S is a file name
saveAs=Save %S as a new file?
saveAs.accesskey=S
downloads=#1 download;#1 downloads
removeAttachment=Remove Attachment;Remove Attachments
movedFolder=Moved folder #1 to Trash; you can restore it.
longLine=This line goes on \\
    over two lines.
"""

GLOBAL_KO = """saveAs=%S을(를) 새 파일로 저장하시겠습니까?
saveAs.accesskey=S
downloads=#1개의 다운로드
removeAttachment=첨부 파일 삭제
movedFolder=#1 폴더를 휴지통으로 옮겼습니다. 복원할 수 있습니다.
longLine=이 줄은 \\
    두 줄에 걸쳐 이어집니다.
"""


def write_zip(path: Path, files: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zipped:
        for name, text in files.items():
            zipped.writestr(name, text)


def firefox_packages(base: Path) -> tuple[Path, Path]:
    """The unpacked firefox-esr and firefox-esr-l10n-ko: toolkit strings in the program's
    omni.ja, browser strings in browser/omni.ja, both in one language pack."""
    program, langpack = base / "firefox-esr", base / "firefox-esr-l10n-ko"
    toolkit, browser = FIREFOX.omni_jas
    write_zip(program / toolkit, {
        "chrome/en-US/locale/en-US/global/dialog.properties": GLOBAL_EN,
        "res/language.properties": "ko.accept=true\n",
    })
    write_zip(program / browser, {"localization/en-US/browser/aboutDialog.ftl": DIALOG_EN})
    write_zip(langpack / FIREFOX.langpack_xpi, {
        "manifest.json": "{}",
        "chrome/ko/locale/ko/global/dialog.properties": GLOBAL_KO,
        "browser/localization/ko/browser/aboutDialog.ftl": DIALOG_KO,
    })
    return program, langpack


def test_firefox_strings_join_by_file_and_id(tmp_path: Path) -> None:
    program, langpack = firefox_packages(tmp_path)
    dialog, properties = "firefox/browser/aboutDialog.ftl", "firefox/global/dialog.properties"
    assert list(align_mozilla(FIREFOX, program, langpack, "firefox")) == [
        Segment("새 기능", "What’s new", dialog),
        Segment("업데이트를 적용하려면 { -brand-short-name }를 다시 시작하세요.",
                "Restart { -brand-short-name } to apply the update.", dialog),
        Segment("업데이트 확인", "Check for updates", dialog),  # the attribute, no accesskey
        Segment("질문하려면 지원 사이트를 방문하세요.",
                "Visit the support site to ask a question.", dialog),
        Segment("%S을(를) 새 파일로 저장하시겠습니까?", "Save %S as a new file?", properties),
        Segment("#1 폴더를 휴지통으로 옮겼습니다. 복원할 수 있습니다.",
                "Moved folder #1 to Trash; you can restore it.", properties),
        Segment("이 줄은 두 줄에 걸쳐 이어집니다.", "This line goes on over two lines.",
                properties),
    ]  # no term, selector (on either side), plural forms, access key, or string missing in Korean


def test_thunderbird_reads_its_own_paths(tmp_path: Path) -> None:
    program, langpack = tmp_path / "thunderbird", tmp_path / "thunderbird-l10n-ko"
    (omni_ja,) = THUNDERBIRD.omni_jas
    write_zip(program / omni_ja, {"localization/en-US/messenger/messenger.ftl":
                                  "folder-pane-header-label = Folders\n"})
    write_zip(langpack / THUNDERBIRD.langpack_xpi, {"localization/ko/messenger/messenger.ftl":
                                                    "folder-pane-header-label = 폴더\n"})
    assert list(align_mozilla(THUNDERBIRD, program, langpack, "thunderbird")) == [
        Segment("폴더", "Folders", "thunderbird/messenger/messenger.ftl"),
    ]
    assert PRODUCTS == {"firefox": FIREFOX, "thunderbird": THUNDERBIRD}
    assert (FIREFOX.program_package, FIREFOX.langpack_package) == (
        "firefox-esr", "firefox-esr-l10n-ko")
    assert (THUNDERBIRD.program_package, THUNDERBIRD.langpack_package) == (
        "thunderbird", "thunderbird-l10n-ko")


def test_fluent_values_attributes_and_multiline_text() -> None:
    entries = parse_fluent(DIALOG_EN)
    assert entries["-brand-short-name"] == "Firefox"  # the parser keeps terms; align skips them
    assert "about-check" not in entries  # attributes only
    assert entries["about-check.label"] == "Check for updates"
    assert entries["about-help-text"] == "Visit the support site\nto ask a question."
    assert entries["about-downloads"].startswith("{ $count ->")
    assert list(parse_fluent("# a = b\n\nkey =\n\n    spaced out\n  .style = width: 3em\n")) \
        == ["key", "key.style"]


def test_properties_escapes_and_comments() -> None:
    text = "! comment\\\n# another = one\nname : Tab\\tstop \\u00e9t\\u00e9\\nnext\nempty=\n"
    assert parse_properties(text) == {"name": "Tab\tstop été\nnext", "empty": ""}
