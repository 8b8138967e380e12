"""The documentation corpus (seq2seq/data/docs): each format's alignment on hand-made files, the
filter, the document split, the cache with its manifest, and the one-line error for a package
that cannot be fetched. Offline: packages are tiny .deb files built here with dpkg-deb."""

from __future__ import annotations

import gettext
import gzip
import hashlib
import itertools
import json
import re
import shutil
import struct
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from seq2seq.data.docs import load_docs
from seq2seq.data.docs.build import build_docs
from seq2seq.data.docs.filters import (
    drop_reason,
    filter_segments,
    name_family,
    remove_train_twins,
    split_of_document,
)
from seq2seq.data.docs.libreoffice_help import align_help, page_paragraphs
from seq2seq.data.docs.manpages import align_manpages, roff_blocks, roff_text
from seq2seq.data.docs.manuals import Manual, align_manual, page_blocks
from seq2seq.data.docs.mo_catalogs import CATALOG_DIR, align_catalogs, read_mo
from seq2seq.data.docs.packages import apt_get_download, obtain_packages
from seq2seq.data.docs.segments import PageCounts, Segment
from seq2seq.errors import UserError

needs_dpkg = pytest.mark.skipif(
    shutil.which("dpkg-deb") is None or shutil.which("dpkg") is None,
    reason="dpkg-deb and dpkg (Debian/Ubuntu) build and unpack the test packages",
)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# LibreOffice help ------------------------------------------------------------------------------

HELP_EN = """<html><head><title>Find</title><script>var x = "<p id='par_id0'>no</p>";</script>
</head><body>
<h1 id="hd_id1" dir="auto">Find Toolbar</h1>
<p id="par_id2" class="paragraph">Use the shortcut <span class="switchinline"><span hidden="true"
 id="MACtext_1" class="MAC"><span class="keycode">Command</span></span><span hidden="true"
 id="defaulttext_1"><span class="keycode">Ctrl</span></span></span> + F to open the
 <span class="menuitem">Find</span> toolbar.</p>
<span class="switch"><span hidden="true" id="CALCtext_2" class="CALC">
<p id="par_id3">Performs the search considering the formatted value in a cell.</p></span></span>
<p id="par_id4">Only the English page has this paragraph.</p>
<div class="embedded"><p id="par_id5">Embedded once.</p></div>
<div class="embedded"><p id="par_id5">Embedded twice.</p></div>
</body></html>"""

HELP_DE = """<html><body>
<h1 id="hd_id1" dir="auto">Symbolleiste Suchen</h1>
<p id="par_id2" class="paragraph">Verwenden Sie die Tastenkombination <span
 class="switchinline"><span hidden="true" id="MACtext_1" class="MAC">Befehl</span><span
 hidden="true" id="defaulttext_1">Strg</span></span> + F, um die Symbolleiste
 <span class="menuitem">Suchen</span> zu öffnen.</p>
<span class="switch"><span hidden="true" id="CALCtext_2" class="CALC">
<p id="par_id3">Sucht unter Berücksichtigung des formatierten Zellwerts.</p></span></span>
<p id="par_id5">Einmal eingebettet.</p>
<p id="par_id5">Zweimal eingebettet.</p>
</body></html>"""


def help_trees(base: Path, pages: dict[str, tuple[str, str]]) -> tuple[Path, Path]:
    """Unpacked libreoffice-help-en-us and -de roots holding `pages` (path -> (en, de))."""
    en_root, de_root = base / "help-en", base / "help-de"
    for relative, (en, de) in pages.items():
        write(en_root / "usr/share/libreoffice/help/en-US" / relative, en)
        write(de_root / "usr/share/libreoffice/help/de" / relative, de)
    return en_root, de_root


def test_help_pages_join_on_path_and_paragraph_id(tmp_path: Path) -> None:
    en_root, de_root = help_trees(tmp_path, {"text/shared/find.html": (HELP_EN, HELP_DE)})
    write(en_root / "usr/share/libreoffice/help/en-US/text/only_en.html", HELP_EN)
    segments = list(align_help(en_root, de_root, "libreoffice-help"))
    document = "libreoffice-help/text/shared/find.html"
    assert segments == [
        Segment("Symbolleiste Suchen", "Find Toolbar", document),
        # the default variant of the switch is kept, the Mac one (hidden) is not
        Segment("Verwenden Sie die Tastenkombination Strg + F, um die Symbolleiste Suchen zu "
                "öffnen.", "Use the shortcut Ctrl + F to open the Find toolbar.", document),
        # an id that repeats on a page joins by occurrence
        Segment("Einmal eingebettet.", "Embedded once.", document),
        Segment("Zweimal eingebettet.", "Embedded twice.", document),
    ]
    # neither the paragraph inside a hidden module variant nor the script's text counts
    assert {key for key, _ in page_paragraphs(HELP_EN)} == {"hd_id1", "par_id2", "par_id4",
                                                            "par_id5"}


# gettext .mo -----------------------------------------------------------------------------------


def write_mo(path: Path, entries: Sequence[tuple[str, str]], order: str = "<") -> Path:
    """A GNU .mo catalog: header, originals table, translations table, then the strings."""
    count = len(entries)
    originals_at = 28
    translations_at = originals_at + 8 * count
    offset = translations_at + 8 * count
    tables = {originals_at: b"", translations_at: b""}
    blob = b""
    for column, table in enumerate((originals_at, translations_at)):
        for entry in entries:
            data = entry[column].encode("utf-8")
            tables[table] += struct.pack(f"{order}2I", len(data), offset + len(blob))
            blob += data + b"\0"
    header = struct.pack(f"{order}7I", 0x950412DE, 0, count, originals_at, translations_at, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + tables[originals_at] + tables[translations_at] + blob)
    return path


MO_ENTRIES = [
    ("", "Content-Type: text/plain; charset=UTF-8\n"),  # the catalog header
    ("STR_PROMPT\x04Do you want to save your changes?", "Möchten Sie Ihre Änderungen speichern?"),
    ("optfltrpage|label1\x04Righ_t/Bottom margin", "Rechter/_Unterer Rand"),
    ("STR_MENU\x04~Ignore all", "Alle ~ignorieren"),
    ("STR_FILES\x04%1 file\0%1 files", "%1 Datei\0%1 Dateien"),
    ("No context here", ""),  # untranslated
]


@pytest.mark.parametrize("order", ["<", ">"])
def test_mo_reader_in_either_byte_order(tmp_path: Path, order: str) -> None:
    path = write_mo(tmp_path / "sw.mo", MO_ENTRIES, order)
    with path.open("rb") as file:  # the writer follows the format: Python's own reader agrees
        catalog = gettext.GNUTranslations(file)
    assert catalog.pgettext("STR_PROMPT", "Do you want to save your changes?") == (
        "Möchten Sie Ihre Änderungen speichern?")
    assert read_mo(path)[1:3] == [
        ("STR_PROMPT", "Do you want to save your changes?",
         "Möchten Sie Ihre Änderungen speichern?"),
        ("optfltrpage|label1", "Righ_t/Bottom margin", "Rechter/_Unterer Rand"),
    ]
    assert read_mo(path)[4] == ("STR_FILES", "%1 file", "%1 Datei")  # the singular form


def test_mo_catalogs_strip_context_and_marks(tmp_path: Path) -> None:
    write_mo(tmp_path / CATALOG_DIR.format(lang="de") / "sw.mo", MO_ENTRIES)
    assert list(align_catalogs(tmp_path, "libreoffice-l10n")) == [
        Segment("Möchten Sie Ihre Änderungen speichern?", "Do you want to save your changes?",
                "libreoffice-l10n/sw/STR_PROMPT"),
        Segment("Rechter/Unterer Rand", "Right/Bottom margin", "libreoffice-l10n/sw/optfltrpage"),
        Segment("Alle ignorieren", "Ignore all", "libreoffice-l10n/sw/STR_MENU"),
        Segment("%1 Datei", "%1 file", "libreoffice-l10n/sw/STR_FILES"),
    ]
    write(tmp_path / "bad.mo", "not a catalog")
    with pytest.raises(UserError, match="bad.mo: not a gettext .mo catalog"):
        read_mo(tmp_path / "bad.mo")


# manual pages ----------------------------------------------------------------------------------

MAN_EN = r""".\" Copyright and licence comments are dropped.
.TH OPEN 2 2023-02-05 "Linux man-pages 6.03"
.SH NAME
open \- open and possibly create a file
.SH SYNOPSIS
.nf
.B #include <fcntl.h>
.BI "int open(const char *" pathname ", int " flags );
.fi
.SH DESCRIPTION
The
.BR open ()
system call opens the file specified by
.IR pathname .
If the file does not exist, it may be created.

A second paragraph after an empty line\(emas roff breaks there.
.TP
.B O_CREAT
If
.I pathname
does not exist, create it as a regular file.
.SH "SEE ALSO"
.BR close (2),
.BR read (2)
"""

MAN_DE = r""".\" -*- coding: UTF-8 -*-
.\" This file was generated with po4a. Translate the source file.
.TH OPEN 2 "5. Februar 2023" "Linux man\-pages 6.03"
.SH BEZEICHNUNG
open \- eine Datei öffnen und möglicherweise erzeugen
.SH ÜBERSICHT
.nf
\fB#include <fcntl.h>\fP
\fBint open(const char *\fP\fIPfadname\fP\fB, int \fP\fISchalter\fP\fB);\fP
.fi
.SH BESCHREIBUNG
Der Systemaufruf \fBopen\fP() öffnet die durch \fIPfadname\fP angegebene Datei. Falls
die Datei nicht existiert, kann sie erstellt werden.

Ein zweiter Absatz nach einer Leerzeile\(emroff bricht dort um.
.TP
\fBO_CREAT\fP
Falls \fIPfadname\fP nicht existiert, wird sie als normale Datei erstellt.
.SH "SIEHE AUCH"
\fBclose\fP(2), \fBread\fP(2)
.SH ÜBERSETZUNG
Die deutsche Übersetzung dieser Handbuchseite wurde von
Jemand <jemand@example.org> erstellt.
.PP
Diese Übersetzung ist Freie Dokumentation.
"""


def man_tree(root: Path, lang_dir: str, pages: dict[str, str]) -> Path:
    for relative, text in pages.items():
        path = root / "usr/share/man" / lang_dir / f"{relative}.gz"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(text.encode("utf-8")))
    return root


def test_roff_blocks_drop_credits_and_markup() -> None:
    en_blocks = roff_blocks(MAN_EN, drop_credits=False)
    de_blocks = roff_blocks(MAN_DE, drop_credits=True)
    assert len(en_blocks) == len(de_blocks) == 11
    assert len(roff_blocks(MAN_DE, drop_credits=False)) == 14  # ÜBERSETZUNG: 3 more blocks
    assert [roff_text(b.lines) for b in en_blocks if b.heading] == [
        "NAME", "SYNOPSIS", "DESCRIPTION", "SEE ALSO"]
    assert [b.text for b in en_blocks].count(False) == 1  # the .nf region
    texts = [roff_text(b.lines) for b in en_blocks if b.text and not b.heading]
    assert texts == [
        "open - open and possibly create a file",
        "The open() system call opens the file specified by pathname. "
        "If the file does not exist, it may be created.",
        "A second paragraph after an empty line—as roff breaks there.",
        "O_CREAT",  # the .TP tag is a block of its own
        "If pathname does not exist, create it as a regular file.",
        "close(2), read(2)",
    ]
    assert roff_text((r"Der \fBopen\fP() Aufruf\-Wert \(Fo\(:a\(Fc \" comment",)) == (
        "Der open() Aufruf-Wert «ä»")
    assert roff_blocks(".so man2/open.2\n", drop_credits=False) == []
    assert roff_blocks(".Dd $Mdocdate$\n.Sh NAME\nssh\n", drop_credits=False) == []


def test_manpages_pair_whole_pages_or_matching_sections(tmp_path: Path) -> None:
    # Page 2: the German adds a block in DESCRIPTION; NAME and SEE ALSO still pair.
    extra = MAN_DE.replace(".TP\n", ".PP\nEin zusätzlicher Satz des Übersetzers hier.\n.TP\n")
    # Page 3: a whole section more in German: nothing pairs.
    other = MAN_DE.replace(".SH BESCHREIBUNG", ".SH EXTRA\nMehr.\n.SH BESCHREIBUNG")
    en = man_tree(tmp_path / "en", "", {"man2/open.2": MAN_EN, "man2/two.2": MAN_EN,
                                        "man2/three.2": MAN_EN, "man7/only_en.7": MAN_EN})
    de = man_tree(tmp_path / "de", "de", {"man2/open.2": MAN_DE, "man2/two.2": extra,
                                          "man2/three.2": other})
    counts: list[PageCounts] = []
    segments = list(align_manpages([en], [de], "manpages", counts))
    assert counts == [PageCounts(common=3, whole=1, by_section=1)]
    by_page = {page: [s for s in segments if s.document == f"manpages/man2/{page}"]
               for page in ("open.2", "two.2", "three.2")}
    assert len(by_page["open.2"]) == 10 and by_page["three.2"] == []  # all but the .nf block
    assert Segment(
        "Falls Pfadname nicht existiert, wird sie als normale Datei erstellt.",
        "If pathname does not exist, create it as a regular file.", "manpages/man2/open.2",
    ) in by_page["open.2"]
    assert [s.en for s in by_page["two.2"]] == [
        "NAME", "open - open and possibly create a file", "SYNOPSIS", "SEE ALSO",
        "close(2), read(2)"]


# po4a HTML manuals -----------------------------------------------------------------------------

MANUAL_EN = """<html><head><title>Chapter 1. Tutorials</title></head><body>
<div class="navheader"><table><tr><td><a href="index.html">Prev</a></td></tr></table></div>
<h2>1.1. Console basics</h2>
<p>The shell prompt is shown after you log in.</p>
<pre class="screen">$ ls -la</pre>
<ul><li><p>Press <code>Ctrl-D</code> to log out.</p></li></ul>
</body></html>"""

MANUAL_DE = """<html><head><title>Kapitel 1. Einführungen</title></head><body>
<div class="navheader"><table><tr><td><a href="index.html">Zurück</a></td></tr></table></div>
<h2>1.1. Grundlagen der Konsole</h2>
<p>Nach der Anmeldung wird die Eingabeaufforderung angezeigt.</p>
<pre class="screen">$ ls -la</pre>
<ul><li><p>Drücken Sie <code>Strg-D</code>, um sich abzumelden.</p></li></ul>
</body></html>"""


def test_manual_pages_pair_where_block_counts_agree(tmp_path: Path) -> None:
    unequal = MANUAL_DE.replace("</ul>", "<p>Ein Absatz, den das Original nicht hat.</p></ul>")
    for name, de in (("ch01", MANUAL_DE), ("ch02", unequal.replace("<h2>", "<h1>X</h1><h2>"))):
        write(tmp_path / "en/doc" / f"{name}.en.html", MANUAL_EN)
        write(tmp_path / "de/doc" / f"{name}.de.html", de)
    write(tmp_path / "en/doc/glossary.en.html", MANUAL_EN)
    write(tmp_path / "de/doc/glossary.de.html", MANUAL_DE)
    manual = Manual("ref-en", "ref-de", "doc", "doc", ".en.html", ".de.html", exclude=("glossary",))
    counts: list[PageCounts] = []
    roots = {"ref-en": tmp_path / "en", "ref-de": tmp_path / "de"}
    segments = list(align_manual(manual, roots, "debian-reference", counts))
    assert counts == [PageCounts(common=2, whole=1, by_section=0)]
    assert segments == [
        Segment("Kapitel 1. Einführungen", "Chapter 1. Tutorials", "debian-reference/ch01"),
        Segment("1.1. Grundlagen der Konsole", "1.1. Console basics", "debian-reference/ch01"),
        Segment("Nach der Anmeldung wird die Eingabeaufforderung angezeigt.",
                "The shell prompt is shown after you log in.", "debian-reference/ch01"),
        Segment("", "", "debian-reference/ch01"),  # the <li> around the <p>: structure only
        Segment("Drücken Sie Strg-D, um sich abzumelden.", "Press Ctrl-D to log out.",
                "debian-reference/ch01"),
    ]
    assert [block.tag for block in page_blocks(MANUAL_EN)] == ["title", "h2", "p", "pre", "li",
                                                               "p"]


# filter and split ------------------------------------------------------------------------------


def test_each_filter_rule() -> None:
    assert drop_reason("", "Something here now.") == "empty"
    assert drop_reason("Gleicher Text hier.", "Gleicher Text hier.") == "identical"
    assert drop_reason("Zwei Wörter", "Two words") == "short"
    assert drop_reason("Ein viel zu langer deutscher Satz ohne jeden Grund hier.", "A b c") == (
        "ratio")
    assert drop_reason("Kurz.", "A much longer English side than the German one.") == "ratio"
    assert drop_reason("Select the cells here.", "Select the cells here now.") == "untranslated"
    assert drop_reason("Wählen Sie die Zellen aus.", "Select the cells.") is None
    seen: set[tuple[str, str]] = set()
    duplicates: list[Segment] = []
    kept, dropped = filter_segments(
        [Segment("Wählen Sie die Zellen aus.", "Select the cells.", "a"),
         Segment("Wählen Sie die Zellen aus.", "Select the cells.", "b"),
         Segment("", "", "a"),  # an empty block on both sides is structure, not counted
         Segment("Zwei Wörter", "Two words", "a")], seen, duplicates)
    assert kept == [Segment("Wählen Sie die Zellen aus.", "Select the cells.", "a")]
    assert dropped == {"empty": 0, "duplicate": 1, "identical": 0, "short": 1, "ratio": 0,
                       "placeholder": 0, "untranslated": 0}
    assert seen == {("Wählen Sie die Zellen aus.", "Select the cells.")}
    assert duplicates == [Segment("Wählen Sie die Zellen aus.", "Select the cells.", "b")]


def document_in(split: str, prefix: str, suffix: str) -> str:
    """The first document name `<prefix><n><suffix>` that falls into `split`."""
    names = (f"{prefix}{n}{suffix}" for n in itertools.count())
    return next(name for name in names if split_of_document(name) == split)


def test_document_split_and_train_overlap() -> None:
    digest = int(hashlib.md5(b"manpages/man2/open.2").hexdigest(), 16) % 100
    expected = "test" if digest < 4 else "validation" if digest < 7 else "train"
    assert split_of_document("manpages/man2/open.2") == expected
    shares = [split_of_document(f"doc/{n}") for n in range(2000)]
    assert 0.02 < shares.count("test") / 2000 < 0.06
    assert 0.01 < shares.count("validation") / 2000 < 0.05
    splits = {
        "train": [Segment("Gemeinsam.", "Shared text.", "a"), Segment("Nur hier.", "Here.", "a")],
        "validation": [Segment("Anders.", "Shared text.", "b"), Segment("Neu.", "New.", "b")],
        "test": [Segment("Gemeinsam.", "Other text.", "c"), Segment("Eigen.", "Own.", "c")],
    }
    removed = remove_train_twins(splits)
    assert removed["validation"]["exact"] == {"b": 1} and removed["test"]["exact"] == {"c": 1}
    assert splits["validation"] == [Segment("Neu.", "New.", "b")]
    assert splits["test"] == [Segment("Eigen.", "Own.", "c")]


# build, cache, manifest, errors ----------------------------------------------------------------


class FakeApt:
    """Builds the named packages' .deb files from prepared trees, as `apt-get download` would
    fetch them; a name without a tree fails like apt-get does."""

    def __init__(self, trees: dict[str, Path]) -> None:
        self.trees = trees
        self.calls: list[list[str]] = []

    def __call__(self, names: Sequence[str], raw_dir: Path) -> None:
        self.calls.append(list(names))
        for name in names:
            if name not in self.trees:
                raise subprocess.CalledProcessError(
                    100, ["apt-get", "download", *names],
                    stderr=f"E: Unable to locate package {name}\n")
        for name in names:
            tree = self.trees[name]
            write(tree / "DEBIAN/control", f"Package: {name}\nVersion: 1:2.0-1+deb12u1\n"
                  "Architecture: all\nMaintainer: Test <test@example.org>\n"
                  "Description: test package\n")
            subprocess.run(["dpkg-deb", "-Znone", "--root-owner-group", "--build", str(tree),
                            str(raw_dir / f"{name}_1%3a2.0-1+deb12u1_all.deb")],
                           check=True, capture_output=True)


def fake_packages(base: Path) -> FakeApt:
    """Package trees for libreoffice-help (one page per split; all three share a German
    boilerplate paragraph whose English differs a little) and debian-faq (one page)."""
    pages = {}
    own = {  # each split's own paragraph, no twin of another's
        "train": ("Charts show the values of a table.",
                  "Diagramme zeigen die Werte einer Tabelle."),
        "validation": ("Macros run when a document opens.",
                       "Makros laufen beim Öffnen eines Dokuments."),
        "test": ("Footnotes sit at the end of each page.",
                 "Fußnoten stehen am Ende jeder Seite."),
    }
    for split in ("train", "validation", "test"):
        document = document_in(split, "libreoffice-help/text/page", ".html")
        pages[document.removeprefix("libreoffice-help/")] = (
            f'<p id="par_id1">{own[split][0]}</p>'
            f'<p id="par_id9">Please support us with a donation ({split}).</p>',
            f'<p id="par_id1">{own[split][1]} ({split})</p>'
            '<p id="par_id9">Bitte unterstützen Sie uns mit einer Spende.</p>',
        )
    en_root, de_root = help_trees(base, pages)
    write(base / "faq-en/usr/share/doc/debian/FAQ/basic-defs.en.html", MANUAL_EN)
    write(base / "faq-de/usr/share/doc/debian/FAQ/de/basic-defs.de.html", MANUAL_DE)
    return FakeApt({"libreoffice-help-en-us": en_root, "libreoffice-help-de": de_root,
                    "debian-faq": base / "faq-en", "debian-faq-de": base / "faq-de"})


@needs_dpkg
def test_build_caches_the_corpus_with_a_manifest(tmp_path: Path, capsys) -> None:
    fake = fake_packages(tmp_path / "trees")
    root = tmp_path / "data"
    sources = ["libreoffice-help", "debian-faq"]
    corpus = build_docs(root, sources, fetch=fake)
    out = capsys.readouterr().out
    assert "built" in out and "libreoffice-help: 4 pairs" in out
    assert fake.calls == [["libreoffice-help-en-us", "libreoffice-help-de", "debian-faq",
                           "debian-faq-de"]]
    # the boilerplate's German side occurs in train, so its validation and test copies left
    texts = {split: [s.translation for s in rows] for split, rows in corpus.splits.items()}
    boilerplate = "Bitte unterstützen Sie uns mit einer Spende."
    assert [split for split, rows in texts.items() if boilerplate in rows] == ["train"]
    assert "Fußnoten stehen am Ende jeder Seite. (test)" in texts["test"]
    assert "Makros laufen beim Öffnen eines Dokuments. (validation)" in texts["validation"]
    assert corpus.manifest["removed_from_held_out"] == {
        split: {"exact": {"libreoffice-help": 1}, "normalised": {}, "near": {}}
        for split in ("validation", "test")}

    manifest = json.loads((corpus.folder / "manifest.json").read_text(encoding="utf-8"))
    assert corpus.folder.parent == root / "docs"
    debs = {p.name.split("_")[0]: p for p in (root / "raw").glob("*.deb")}
    assert manifest["packages"] == [
        {"name": name, "version": "1:2.0-1+deb12u1",
         "sha256": hashlib.sha256(debs[name].read_bytes()).hexdigest(), "deb": debs[name].name}
        for name in fake.calls[0]
    ]
    assert manifest["missing_packages"] == []
    assert manifest["sources"]["libreoffice-help"]["pairs"] == 4
    assert manifest["sources"]["debian-faq"]["pairs"] == 4  # title, heading, 2 paragraphs
    assert manifest["sources"]["debian-faq"]["pages"] == {"common": 1, "whole": 1,
                                                          "by_section": 0}
    assert manifest["splits"] == {split: len(rows) for split, rows in corpus.splits.items()}
    assert sum(manifest["splits"].values()) == 8

    again = load_docs(root=root, src_lang="en", tgt_lang="de", sources=sources,
                      allow_missing=False, fetch=fake)
    assert "reusing" in capsys.readouterr().out
    assert len(fake.calls) == 1  # nothing fetched the second time
    assert again["test"]["src"] == [s.en for s in corpus.splits["test"]]
    assert again["test"]["tgt"] == [s.translation for s in corpus.splits["test"]]


@needs_dpkg
def test_a_missing_package_is_one_line_unless_allowed(tmp_path: Path, capsys) -> None:
    fake = fake_packages(tmp_path / "trees")
    del fake.trees["debian-faq-de"]
    root = tmp_path / "data"
    with pytest.raises(UserError) as err:
        build_docs(root, ["libreoffice-help", "debian-faq"], fetch=fake)
    message = str(err.value)
    assert "\n" not in message
    assert "debian-faq-de" in message and "E: Unable to locate package debian-faq-de" in message
    assert f"cd {root / 'raw'} && apt-get download debian-faq-de" in message
    assert "data.allow_missing=true" in message
    assert not (root / "docs").exists()

    corpus = build_docs(root, ["libreoffice-help", "debian-faq"], allow_missing=True,
                        fetch=fake)
    assert "left out the source(s) debian-faq" in capsys.readouterr().out
    assert corpus.manifest["missing_packages"] == ["debian-faq-de"]
    assert list(corpus.manifest["sources"]) == ["libreoffice-help"]


def test_real_apt_get_with_a_bogus_name_fails_in_one_line(tmp_path: Path) -> None:
    # apt-get refuses a name it does not know at once, without the network; where apt-get is
    # not installed the fetch fails the same way.
    name = "seq2seq-test-no-such-package"
    with pytest.raises(UserError) as err:
        obtain_packages([name], tmp_path, fetch=apt_get_download, allow_missing=False)
    assert "\n" not in str(err.value)
    assert f"apt-get download {name}" in str(err.value)


def test_bad_sources_and_direction(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="choose one or more of libreoffice-help"):
        build_docs(tmp_path, ["no-such-source"])
    with pytest.raises(UserError, match="choose one or more"):
        build_docs(tmp_path, [])
    with pytest.raises(UserError, match="must be en and one of them"):
        load_docs(root=tmp_path, src_lang="de", tgt_lang="fr", sources=["manpages"],
                  allow_missing=False)
    with pytest.raises(UserError, match="must be en and one of them"):
        load_docs(root=tmp_path, src_lang="en", tgt_lang="fr", sources=["manpages"],
                  allow_missing=False)
    korean_sources = r"manpages.*choose one or more of .*debian-faq.* \(Korean\)"
    with pytest.raises(UserError, match=korean_sources):
        build_docs(tmp_path, ["manpages"], lang="ko")  # a German source asked for Korean


def test_name_familys_docstring_examples_are_what_it_gives() -> None:
    """Each `document` -> `family` example of `name_family`'s docstring, run."""
    examples = re.findall(r"`([^`\s]+)` -> `([^`\s]+)`", name_family.__doc__ or "")
    assert len(examples) >= 3  # an l10n string, a man page, a document that stays
    assert {document: name_family(document) for document, _ in examples} == dict(examples)
