"""The documentation sources of each language: which Debian packages each needs and how it
aligns them.

A source is built only when all its packages are at hand. The names are Debian 12 (bookworm)
package names; every package is `Architecture: all` except the program packages of
`program-manpages`, of which only the manual pages are read. German (`SOURCES`) has the most;
Korean (`KO_SOURCES`) has the LibreOffice help and catalogs, the GNOME help and system
administration guide, the installation guide and the Debian FAQ, and gimp-help (mostly
untranslated: the Hangul filter keeps its translated part; not in the default set).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from seq2seq.data.docs.libreoffice_help import align_help
from seq2seq.data.docs.manpages import align_manpages
from seq2seq.data.docs.manuals import Manual, align_manual
from seq2seq.data.docs.mo_catalogs import align_catalogs
from seq2seq.data.docs.segments import PageCounts, Segment

# (package name -> unpacked root, source name, list that receives page counts) -> segments
Aligner = Callable[[dict[str, Path], str, list[PageCounts]], Iterable[Segment]]

# Programs whose English manual pages manpages-de translates, or which ship their own German
# pages (apt, dpkg, man-db, passwd, procps, ...); each gives 100 pairs or more.
PROGRAM_PACKAGES = (
    "systemd", "coreutils", "util-linux", "util-linux-extra", "mount", "fdisk", "bsdutils",
    "bsdextrautils", "libsane-common", "procps", "psmisc", "less", "nano", "xz-utils", "gzip",
    "diffutils", "gettext", "texinfo", "grub-common", "mtools", "udev", "systemd-container",
    "systemd-resolved", "apt", "dpkg", "dpkg-dev", "man-db", "passwd", "adduser",
)


@dataclass(frozen=True)
class Source:
    """One source of aligned documentation.

    Attributes:
        packages: the Debian packages it reads, all of them needed.
        align: yields its segments from the unpacked packages.
    """

    packages: tuple[str, ...]
    align: Aligner


def _manual_source(manual: Manual) -> Source:
    return Source(
        packages=tuple(dict.fromkeys((manual.en_package, manual.translation_package))),
        align=lambda roots, name, counts: align_manual(manual, roots, name, counts),
    )


SOURCES: dict[str, Source] = {  # German
    "libreoffice-help": Source(
        packages=("libreoffice-help-en-us", "libreoffice-help-de"),
        align=lambda roots, name, counts: align_help(
            roots["libreoffice-help-en-us"], roots["libreoffice-help-de"], name
        ),
    ),
    "libreoffice-l10n": Source(
        packages=("libreoffice-l10n-de",),
        align=lambda roots, name, counts: align_catalogs(roots["libreoffice-l10n-de"], name),
    ),
    "manpages": Source(
        packages=("manpages", "manpages-dev", "manpages-de", "manpages-de-dev"),
        align=lambda roots, name, counts: align_manpages(
            [roots["manpages"], roots["manpages-dev"]],
            [roots["manpages-de"], roots["manpages-de-dev"]],
            name,
            counts,
        ),
    ),
    "program-manpages": Source(
        packages=("manpages-de", *PROGRAM_PACKAGES),
        align=lambda roots, name, counts: align_manpages(
            [roots[p] for p in PROGRAM_PACKAGES],
            [roots["manpages-de"]] + [roots[p] for p in PROGRAM_PACKAGES],
            name,
            counts,
        ),
    ),
    "debian-reference": _manual_source(
        Manual("debian-reference-en", "debian-reference-de", "usr/share/debian-reference",
               "usr/share/debian-reference", en_suffix=".en.html", translation_suffix=".de.html")
    ),
    "debian-handbook": _manual_source(
        Manual("debian-handbook", "debian-handbook", "usr/share/doc/debian-handbook/html/en-US",
               "usr/share/doc/debian-handbook/html/de-DE")
    ),
    "installation-guide": _manual_source(
        Manual("installation-guide-amd64", "installation-guide-amd64",
               "usr/share/doc/installation-guide-amd64/en",
               "usr/share/doc/installation-guide-amd64/de")
    ),
    "developers-reference": _manual_source(
        Manual("developers-reference", "developers-reference-de",
               "usr/share/developers-reference", "usr/share/developers-reference/de",
               exclude=("developers-reference", "search", "genindex"))
    ),
    "maint-guide": _manual_source(
        Manual("maint-guide", "maint-guide-de", "usr/share/doc/maint-guide/html",
               "usr/share/doc/maint-guide-de/html", en_suffix=".en.html",
               translation_suffix=".de.html")
    ),
    "debian-faq": _manual_source(
        Manual("debian-faq", "debian-faq-de", "usr/share/doc/debian/FAQ",
               "usr/share/doc/debian/FAQ/de", en_suffix=".en.html", translation_suffix=".de.html")
    ),
    "debian-edu-doc": _manual_source(
        Manual("debian-edu-doc-en", "debian-edu-doc-de", "usr/share/doc/debian-edu-doc-en",
               "usr/share/doc/debian-edu-doc-de", en_suffix="-bookworm-manual.html",
               translation_suffix="-bookworm-manual.html")
    ),
    "gnome-user-docs": _manual_source(
        Manual("gnome-user-docs", "gnome-user-docs", "usr/share/help/C/gnome-help",
               "usr/share/help/de/gnome-help", en_suffix=".page", translation_suffix=".page")
    ),
    "gimp-help": _manual_source(
        Manual("gimp-help-en", "gimp-help-de", "usr/share/gimp/2.0/help/en",
               "usr/share/gimp/2.0/help/de", exclude=("glossary", "index", "gimp-help-index"))
    ),
}


KO_SOURCES: dict[str, Source] = {
    "libreoffice-help": Source(
        packages=("libreoffice-help-en-us", "libreoffice-help-ko"),
        align=lambda roots, name, counts: align_help(
            roots["libreoffice-help-en-us"], roots["libreoffice-help-ko"], name, lang="ko"
        ),
    ),
    "libreoffice-l10n": Source(
        packages=("libreoffice-l10n-ko",),
        align=lambda roots, name, counts: align_catalogs(
            roots["libreoffice-l10n-ko"], name, lang="ko"
        ),
    ),
    "gnome-user-docs": _manual_source(
        Manual("gnome-user-docs", "gnome-user-docs", "usr/share/help/C/gnome-help",
               "usr/share/help/ko/gnome-help", en_suffix=".page", translation_suffix=".page")
    ),
    "system-admin-guide": _manual_source(
        Manual("gnome-user-docs", "gnome-user-docs", "usr/share/help/C/system-admin-guide",
               "usr/share/help/ko/system-admin-guide", en_suffix=".page",
               translation_suffix=".page")
    ),
    "installation-guide": _manual_source(
        Manual("installation-guide-amd64", "installation-guide-amd64",
               "usr/share/doc/installation-guide-amd64/en",
               "usr/share/doc/installation-guide-amd64/ko")
    ),
    "debian-faq": _manual_source(
        Manual("debian-faq", "debian-faq-ko", "usr/share/doc/debian/FAQ",
               "usr/share/doc/debian/FAQ/ko", en_suffix=".en.html", translation_suffix=".ko.html")
    ),
    "gimp-help": _manual_source(
        Manual("gimp-help-en", "gimp-help-ko", "usr/share/gimp/2.0/help/en",
               "usr/share/gimp/2.0/help/ko", exclude=("glossary", "index", "gimp-help-index"))
    ),
}

# the translated language -> its sources (the other side is always English)
LANGUAGES: dict[str, dict[str, Source]] = {"de": SOURCES, "ko": KO_SOURCES}
LANGUAGE_NAMES = {"de": "German", "ko": "Korean"}
