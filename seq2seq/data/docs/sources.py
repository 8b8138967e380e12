"""The sources of each language: which Debian packages each needs, how it aligns them, and
its domain.

A source is built only when all its packages are at hand. The names are Debian 12 (bookworm)
package names; every package is `Architecture: all` except the program packages of
`program-manpages` and the desktop programs, of which only the manual pages or catalogs are
read. German (`SOURCES`) has documentation; Korean (`KO_SOURCES`) has the LibreOffice help
and catalogs, the GNOME help and system administration guide, the installation guide and the
Debian FAQ, gimp-help (mostly untranslated: the Hangul filter keeps its translated part; not
in data=docs_en_ko's set), and, for data=debian_en_ko, everything else Debian 12 ships in
English and Korean (../../../../shared/DATA.md): game fiction and dialogue, Firefox and
Thunderbird, desktop programs' catalogs, the translated package descriptions, Debian's
history.

Every source has a domain (DOMAINS), reported per domain by evaluate and compare, and the
unit its split share is set by (`data.test_buckets`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from seq2seq.data.docs.crawl_descriptions import align_crawl
from seq2seq.data.docs.descriptions import align_descriptions
from seq2seq.data.docs.filters import MOZILLA_PLACEHOLDER
from seq2seq.data.docs.gettext_catalogs import Catalogs, align_gettext
from seq2seq.data.docs.libreoffice_help import align_help
from seq2seq.data.docs.manpages import align_manpages
from seq2seq.data.docs.manuals import Manual, align_manual
from seq2seq.data.docs.mo_catalogs import align_catalogs
from seq2seq.data.docs.mozilla import PRODUCTS, align_mozilla
from seq2seq.data.docs.renpy import align_renpy
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


DOCUMENTATION = "documentation"
INTERFACE = "interface"
DESCRIPTIONS = "descriptions"
FICTION = "fiction"
DOMAINS = (DOCUMENTATION, INTERFACE, DESCRIPTIONS, FICTION)


@dataclass(frozen=True)
class Source:
    """One source of aligned text.

    Attributes:
        packages: the Debian packages it reads, all of them needed.
        align: yields its segments from the unpacked packages.
        domain: one of DOMAINS.
        indexes: whether it reads apt's translated package descriptions (fetched by
            `descriptions.fetch_translations`, handed to `align` as `roots["i18n"]`).
        placeholder: a placeholder form of this source's own beside `filters.PLACEHOLDER`.
    """

    packages: tuple[str, ...]
    align: Aligner
    domain: str = DOCUMENTATION
    indexes: bool = False
    placeholder: re.Pattern[str] | None = None


def _manual_source(manual: Manual, domain: str = DOCUMENTATION) -> Source:
    return Source(
        packages=tuple(dict.fromkeys((manual.en_package, manual.translation_package))),
        align=lambda roots, name, counts: align_manual(manual, roots, name, counts),
        domain=domain,
    )


def _gettext_source(catalogs: tuple[Catalogs, ...], domain: str) -> Source:
    return Source(
        packages=tuple(dict.fromkeys(c.package for c in catalogs)),
        align=lambda roots, name, counts: align_gettext(roots, name, catalogs,
                                                        interface=domain == INTERFACE),
        domain=domain,
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
        domain=INTERFACE,
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
        domain=INTERFACE,
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

WESNOTH_CATALOGS = "usr/share/games/wesnoth/1.16/locale/ko/LC_MESSAGES/*.mo"
WESNOTH_STORIES = ("wesnoth-anl", "wesnoth-multiplayer", "wesnoth-tutorial", "wesnoth-units")
WESNOTH_CAMPAIGNS = ("trow", "low", "dm", "sotbe", "dw", "httt", "ei", "ttb", "tsg", "l", "did")
WIDELANDS_CATALOGS = "usr/share/games/widelands/data/locale/ko/LC_MESSAGES/*.mo"
WIDELANDS_STORIES = ("scenario_*", "map_*", "mp_scenario_*", "texts", "training_wheels")
LOCALE_KO = "usr/share/**/ko/LC_MESSAGES/*.mo"
RENPY_GAMES = {"renpy-thequestion": "the_question", "renpy-demo": "demo"}
RENPY_INTERFACE = ("common", "screens", "options")  # the engine's menus, in every game


def _renpy_source(packages: tuple[str, ...], interface: bool, domain: str) -> Source:
    """The say lines of the named Ren'Py games, or (`interface`) their menu strings."""
    def align(roots: dict[str, Path], name: str, counts: list[PageCounts]) -> Iterable[Segment]:
        for package in packages:
            for segment in align_renpy(roots[package], name, RENPY_GAMES[package]):
                if (segment.document.rpartition("/")[2] in RENPY_INTERFACE) == interface:
                    yield segment
    return Source(packages=packages, align=align, domain=domain)


# games whose catalogs mix menus, help and some story, read whole as interface
GAMES = ("warzone2100-data", "naev-data", "ufoai-misc", "freeciv-data", "minetest-data")
# the GNOME and KDE games and education programs with a Korean catalog (of 3 words or more)
DESKTOP_PROGRAMS = (
    "aisleriot", "gbrainy", "kwordquiz", "pychess", "kgoldrunner", "kgeography-data",
    "ktouch-data", "palapeli-data", "kubrick", "gnome-tetravex", "ksudoku", "gnome-chess",
    "knights", "iagno", "gnome-games-app", "killbots", "kpat", "gnome-robots", "gnome-nibbles",
    "kanagram", "gnome-taquin", "tali", "khangman", "four-in-a-row", "quadrapassel",
    "kreversi", "kmahjongg", "minuet-data", "gnome-mines", "gnome-sudoku", "kigo",
    "granatier", "klettres-data", "ksquares", "gnome-2048", "lskat-data", "gnome-mahjongg",
    "hitori", "swell-foop", "knetwalk", "five-or-more", "gnome-klotski", "blinken",
)

KO_SOURCES.update({
    # game fiction and dialogue: item and monster text, messages, campaign and scenario stories
    "cataclysm-dda": _gettext_source((Catalogs("cataclysm-dda-data", LOCALE_KO),), FICTION),
    "wesnoth": _gettext_source(
        (Catalogs("wesnoth-1.16-data", WESNOTH_CATALOGS, include=WESNOTH_STORIES),
         *(Catalogs(f"wesnoth-1.16-{c}", WESNOTH_CATALOGS) for c in WESNOTH_CAMPAIGNS)),
        FICTION,
    ),
    "widelands": _gettext_source(
        (Catalogs("widelands-data", WIDELANDS_CATALOGS, include=WIDELANDS_STORIES),), FICTION
    ),
    # Debian's package descriptions, translated by the DDTP: technical prose
    "package-descriptions": Source(
        packages=(), domain=DESCRIPTIONS, indexes=True,
        align=lambda roots, name, counts: align_descriptions(roots["i18n"], name),
    ),
    "crawl": Source(packages=("crawl-common",), domain=FICTION,
                    align=lambda roots, name, counts: align_crawl(roots["crawl-common"], name)),
    "renpy-thequestion": _renpy_source(("renpy-thequestion",), False, FICTION),
    # Ren'Py's tutorial: Eileen explains the engine to the player
    "renpy-demo": _renpy_source(("renpy-demo",), False, DOCUMENTATION),
    "debian-history": _manual_source(
        Manual("debian-history", "debian-history", "usr/share/doc/debian-history/docs",
               "usr/share/doc/debian-history/docs", en_suffix=".en.html",
               translation_suffix=".ko.html")
    ),
    # the games' menus and help, and desktop programs
    "game-interface": _gettext_source(
        (Catalogs("wesnoth-1.16-data", WESNOTH_CATALOGS, exclude=WESNOTH_STORIES),
         Catalogs("widelands-data", WIDELANDS_CATALOGS, exclude=WIDELANDS_STORIES),
         *(Catalogs(p, LOCALE_KO) for p in GAMES)),
        INTERFACE,
    ),
    **{name: Source(packages=(p.program_package, p.langpack_package), domain=INTERFACE,
                    placeholder=MOZILLA_PLACEHOLDER,
                    align=lambda roots, name, counts, p=p: align_mozilla(
                        p, roots[p.program_package], roots[p.langpack_package], name))
       for name, p in PRODUCTS.items()},
    "desktop-catalogs": _gettext_source(
        tuple(Catalogs(p, LOCALE_KO) for p in DESKTOP_PROGRAMS), INTERFACE
    ),
    "renpy-interface": _renpy_source(tuple(RENPY_GAMES), True, INTERFACE),
})

# the translated language -> its sources (the other side is always English)
LANGUAGES: dict[str, dict[str, Source]] = {"de": SOURCES, "ko": KO_SOURCES}
LANGUAGE_NAMES = {"de": "German", "ko": "Korean"}
