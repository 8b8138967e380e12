"""Debian's translated package descriptions (seq2seq/data/docs/descriptions.py): the fetch from
a mirror (a local HTTP server on 127.0.0.1 serving a hand-made Release and indexes), its
sha256 check and its records, and the English-Korean pairs joined on Description-md5.
Offline but for the loopback server."""

from __future__ import annotations

import bz2
import hashlib
import lzma
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from seq2seq.data.docs.descriptions import (
    WordStats,
    align_descriptions,
    fetch_translations,
    join_lines,
    read_index,
)
from seq2seq.data.docs.segments import Segment
from seq2seq.errors import UserError

DATE = "Sat, 11 Jul 2026 10:16:37 UTC"

HELLO_EN = """example package based on GNU hello
 The GNU hello program produces a familiar, friendly greeting.  It
 allows non-programmers to use a classic computer science tool.
 .
 It features:
  * a greeting
  * a farewell
 .
 - English
 - Korean
 .
 Seeing that it is a GNU package, it is well documented."""

HELLO_KO = """GNU hello 기반의 예제 패키지
 GNU hello 프로그램은 친숙하고 다정한 인사말을 출력합니다. 프로그래머가
 아니어도 고전적인 컴퓨터 과학 도구를 쓸 수 있습니다.
 .
 기능:
  * 인사
  * 작별
 .
 - 영어
 - 한국어
 .
 GNU 패키지이므로 문서가 잘 갖춰져 있습니다."""

SL_EN = """steam locomotive runs across your terminal
 sl is a joke program: it shows a steam locomotive when you type sl instead of ls.
 .
 It is meant to teach you to type properly."""

# the translator merged the two paragraphs: only the short descriptions pair
SL_KO = """터미널을 가로지르는 증기 기관차
 sl은 ls 대신 sl을 입력하면 증기 기관차를 보여 주는 장난 프로그램으로,
 올바른 입력 습관을 길러 줍니다."""

COWSAY_KO = """말하는 소
 이 번역은 더 이상 색인에 없는 예전 영어 설명을 옮긴 것입니다."""


def md5(description: str) -> str:
    """The Description-md5 of an English description: the md5 of its text and a newline."""
    return hashlib.md5((description + "\n").encode()).hexdigest()


def stanza(package: str, digest: str, lang: str, description: str) -> str:
    return (f"Package: {package}\nDescription-md5: {digest}\n"
            f"Description-{lang}: {description}\n")


def write_indexes(i18n_dir: Path) -> tuple[Path, Path]:
    """Translation-en.xz and Translation-ko.bz2, compressed as bookworm publishes them."""
    i18n_dir.mkdir(parents=True, exist_ok=True)
    english = [stanza("hello", md5(HELLO_EN), "en", HELLO_EN),
               stanza("sl", md5(SL_EN), "en", SL_EN)]
    korean = [stanza("hello", md5(HELLO_EN), "ko", HELLO_KO),
              # another package with the same English text: joined on the md5, not the name
              stanza("hello-traditional", md5(HELLO_EN), "ko", HELLO_KO),
              stanza("sl", md5(SL_EN), "ko", SL_KO),
              stanza("cowsay", "0" * 32, "ko", COWSAY_KO)]
    en = i18n_dir / "Translation-en.xz"
    ko = i18n_dir / "Translation-ko.bz2"
    with lzma.open(en, "wt", encoding="utf-8") as file:
        file.write("\n".join(english))
    with bz2.open(ko, "wt", encoding="utf-8") as file:
        file.write("\n".join(korean))
    return en, ko


def write_release(path: Path, files: list[Path], *, wrong: str = "") -> None:
    """A Release file listing `files` under main/i18n/ (the one named `wrong` with a wrong
    sha256), an uncompressed Translation-en that is not served, and an MD5Sum list first."""
    md5_lines = [f" {hashlib.md5(f.read_bytes()).hexdigest()} {f.stat().st_size} "
                 f"main/i18n/{f.name}" for f in files]
    sha_lines = [f" {'f' * 64} 123 main/i18n/Translation-en"]
    for file in files:
        digest = "0" * 64 if file.name == wrong else hashlib.sha256(file.read_bytes()).hexdigest()
        sha_lines.append(f" {digest} {file.stat().st_size} main/i18n/{file.name}")
    path.write_text("\n".join(["Origin: Debian", "Suite: oldstable", "Codename: bookworm",
                               f"Date: {DATE}", "MD5Sum:", *md5_lines, "SHA256:", *sha_lines])
                    + "\n", encoding="utf-8")


@dataclass
class Mirror:
    """A Debian mirror on 127.0.0.1, in a thread, recording the paths it was asked for."""

    root: Path
    requests: list[str] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/debian"

    def start(self) -> None:
        mirror = self

        class Handler(SimpleHTTPRequestHandler):
            def __init__(self, *args: object, **kwargs: object) -> None:
                super().__init__(*args, directory=str(mirror.root), **kwargs)  # type: ignore[arg-type]

            def do_GET(self) -> None:
                mirror.requests.append(self.path)
                super().do_GET()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                         daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[Mirror]:
    """A running mirror of bookworm's Release and Korean and English indexes."""
    suite_dir = tmp_path / "mirror/debian/dists/bookworm"
    files = list(write_indexes(suite_dir / "main/i18n"))
    write_release(suite_dir / "Release", files)
    served = Mirror(tmp_path / "mirror")
    served.start()
    yield served
    served.stop()


def test_fetch_verifies_records_and_reads_no_network_the_second_time(
    tmp_path: Path, mirror: Mirror
) -> None:
    raw_dir = tmp_path / "raw"
    indexes = fetch_translations(raw_dir, base_url=mirror.url)
    assert mirror.requests == [f"/debian/dists/bookworm/{name}" for name in
                               ("Release", "main/i18n/Translation-en.xz",
                                "main/i18n/Translation-ko.bz2")]
    ko = raw_dir / "i18n/Translation-ko.bz2"
    assert [index.path for index in indexes] == [raw_dir / "i18n/Translation-en.xz", ko]
    assert indexes[1].record() == {"name": "Translation-ko", "version": DATE,
                                   "sha256": hashlib.sha256(ko.read_bytes()).hexdigest(),
                                   "file": "Translation-ko.bz2"}
    mirror.stop()
    assert fetch_translations(raw_dir, base_url=mirror.url) == indexes
    assert len(mirror.requests) == 3


def test_fetch_refuses_a_file_whose_sha256_release_does_not_list(
    tmp_path: Path, mirror: Mirror
) -> None:
    write_release(mirror.root / "debian/dists/bookworm/Release",
                  sorted((mirror.root / "debian/dists/bookworm/main/i18n").iterdir()),
                  wrong="Translation-ko.bz2")
    with pytest.raises(UserError) as err:
        fetch_translations(tmp_path / "raw", base_url=mirror.url)
    message = str(err.value)
    assert "\n" not in message
    assert f"rm {tmp_path / 'raw/i18n/Translation-ko.bz2'} " in message
    assert "sha256" in message


def test_fetch_names_the_url_it_cannot_download(tmp_path: Path, mirror: Mirror) -> None:
    with pytest.raises(UserError) as err:
        fetch_translations(tmp_path / "raw", base_url=mirror.url, suite="trixie")
    assert "\n" not in str(err.value)
    assert f"{mirror.url}/dists/trixie/Release" in str(err.value)
    assert not list((tmp_path / "raw/i18n").iterdir())  # no partial file left behind


def test_pairs_join_on_md5_and_pair_paragraphs_by_position(tmp_path: Path) -> None:
    write_indexes(tmp_path / "i18n")
    hello = [
        ("GNU hello 기반의 예제 패키지", "example package based on GNU hello"),
        ("GNU hello 프로그램은 친숙하고 다정한 인사말을 출력합니다. 프로그래머가 아니어도 "
         "고전적인 컴퓨터 과학 도구를 쓸 수 있습니다.",
         "The GNU hello program produces a familiar, friendly greeting. It allows "
         "non-programmers to use a classic computer science tool."),
        # the verbatim list and the bullet list are dropped; the last paragraph keeps its place
        ("GNU 패키지이므로 문서가 잘 갖춰져 있습니다.",
         "Seeing that it is a GNU package, it is well documented."),
    ]
    assert list(align_descriptions(tmp_path / "i18n", "ddtp")) == [
        *(Segment(ko, en, "ddtp/hello") for ko, en in hello),
        *(Segment(ko, en, "ddtp/hello-traditional") for ko, en in hello),
        # one paragraph against two: the long part is skipped; cowsay's md5 is not in English
        Segment("터미널을 가로지르는 증기 기관차", "steam locomotive runs across your terminal",
                "ddtp/sl"),
    ]


def test_join_lines_closes_up_a_word_cut_by_hard_wrapping() -> None:
    words = WordStats.of(["이 소프트웨어를 기간에 초점을 되었습니다 되었습니다 끝",
                          "그 소프트웨어를 기간에 초점을 끝"])
    fill = "가나다 " * 10  # 70 columns: with the last word the line is full
    assert join_lines([fill + "소프", "트웨어를 씁니다."], words) == fill + "소프트웨어를 씁니다."
    assert join_lines([fill + "기간에", "초점을 둡니다."], words) == fill + "기간에 초점을 둡니다."
    # neither piece nor the whole is known: the syllables tell (되 and 었 sit inside words)
    assert join_lines([fill + "채용되", "었습니다."], words) == fill + "채용되었습니다."
    # a line that is not full was not cut
    assert join_lines(["짧은 소프", "트웨어를"], words) == "짧은 소프 트웨어를"
    assert join_lines([" greeting.  It", "allows it"]) == "greeting.  It allows it"


def test_a_damaged_index_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "Translation-ko.bz2"
    path.write_bytes(b"not bzip2")
    with pytest.raises(UserError, match=r"Translation-ko\.bz2: cannot read .*`rm "):
        list(read_index(path, "ko"))
