"""Firefox ESR's and Thunderbird's interface strings (firefox-esr-l10n-ko, thunderbird-l10n-ko):
Fluent `.ftl` and `.properties` files joined by file and message id.

The Korean strings are in the l10n package's language pack, an `.xpi` zip; the English ones in
the program package's `omni.ja` zips. Both keep their files under a locale root, which is
dropped to join them: `localization/<lang>/`, `chrome/<lang>/locale/` or
`chrome/<lang>/locale/<lang>/`, in the language pack optionally under `browser/`
(`browser/localization/ko/browser/aboutDialog.ftl` joins the browser `omni.ja`'s
`localization/en-US/browser/aboutDialog.ftl`).

A Fluent message (`id = value`) gives its value under `id` and each attribute
(`    .label = value`) under `id.label`; a value may go on over indented lines. Terms
(`-brand-name = ...`) are not strings of their own, and selectors (`{ $count -> [one] ...
*[other] ... }`) are variants, not one text: both are skipped. A `.properties` line gives
`key = value`; an English value with a `;` between two words is a list of plural forms
(`#1 download;#1 downloads`) and is skipped. Access keys, command keys, shortcut keys and
styles are not text and are skipped too. Placeables and placeholders (`{ $count }`,
`{ -brand-short-name }`, `%S`, `%1$S`, `#1`) and markup stay in place: the filters decide what
to do with them (`#1` is a hole only here: `filters.MOZILLA_PLACEHOLDER`). Entities are decoded.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from seq2seq.data.docs.segments import Segment, normalize_space, unescape_entities


@dataclass(frozen=True)
class Product:
    """One Mozilla program with its Korean language pack, as Debian 12 ships them.

    Attributes:
        program_package: the package holding the English strings (`omni_jas`).
        langpack_package: the package holding the Korean language pack (`langpack_xpi`).
        langpack_xpi: the language pack, relative to the l10n package's root.
        omni_jas: the program's string archives, relative to the program package's root.
    """

    program_package: str
    langpack_package: str
    langpack_xpi: str
    omni_jas: tuple[str, ...]


FIREFOX = Product(
    program_package="firefox-esr",
    langpack_package="firefox-esr-l10n-ko",
    langpack_xpi="usr/lib/firefox-esr/browser/extensions/langpack-ko@firefox-esr.mozilla.org.xpi",
    omni_jas=("usr/lib/firefox-esr/omni.ja", "usr/lib/firefox-esr/browser/omni.ja"),
)
THUNDERBIRD = Product(
    program_package="thunderbird",
    langpack_package="thunderbird-l10n-ko",
    langpack_xpi="usr/lib/thunderbird/extensions/langpack-ko@thunderbird.mozilla.org.xpi",
    omni_jas=("usr/share/thunderbird/omni.ja",),  # usr/lib/thunderbird/omni.ja links to it
)
PRODUCTS = {"firefox": FIREFOX, "thunderbird": THUNDERBIRD}

_FLUENT_ENTRY = re.compile(r"(-?[A-Za-z][\w-]*)\s*=\s*(.*)")
_FLUENT_ATTRIBUTE = re.compile(r"\s+\.([A-Za-z][\w-]*)\s*=\s*(.*)")
_SELECTOR = re.compile(r"\{[^{}]*->")
_PROPERTY = re.compile(r"([^=:\s]+)\s*[=:]\s*(.*)")
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)")
_ESCAPED = {"n": "\n", "t": "\t", "r": "\r"}
_PLURAL_FORMS = re.compile(r"\S;[^\s\"'”’)]")  # `a;b`: not `&amp;”`, ` ;-)`
_NOT_TEXT = re.compile(r"(?:accesskey|commandkey|buttonkey)\w*$|\.(?:key|style)$", re.IGNORECASE)


def locale_files(archive: Path, lang: str) -> dict[str, str]:
    """The `.ftl` and `.properties` files of one language in a zip (`omni.ja`, `.xpi`).

    Returns:
        Each file's text by its path relative to the locale root (`browser/aboutDialog.ftl`,
        `global/commonDialogs.properties`).
    """
    root = re.compile(
        rf"(?:browser/)?(?:localization/{re.escape(lang)}|chrome/{re.escape(lang)}/locale"
        rf"(?:/{re.escape(lang)})?)/(.+\.(?:ftl|properties))"
    )
    with zipfile.ZipFile(archive) as zipped:
        return {
            match.group(1): zipped.read(name).decode("utf-8")
            for name in zipped.namelist()
            if (match := root.fullmatch(name))
        }


def parse_fluent(text: str) -> dict[str, str]:
    """The raw values of a Fluent file's messages and terms.

    Returns:
        Each value by its id, each attribute's by `id.attribute`, in file order; a message
        with attributes only has no entry of its own. Continuation lines are joined with a
        newline.
    """
    entries: dict[str, str] = {}
    entity = key = None
    for line in text.splitlines():
        if not line.strip():
            if key is not None:
                entries[key] += "\n"
        elif line.startswith("#"):
            entity = key = None
        elif not line[0].isspace():
            entity = key = None
            if match := _FLUENT_ENTRY.fullmatch(line):
                entity = key = match.group(1)
                entries[key] = match.group(2)
        elif entity is not None and (match := _FLUENT_ATTRIBUTE.fullmatch(line)):
            key = f"{entity}.{match.group(1)}"
            entries[key] = match.group(2)
        elif key is not None:
            entries[key] += "\n" + line.strip()
    return {key: value.strip() for key, value in entries.items() if value.strip()}


def parse_properties(text: str) -> dict[str, str]:
    """The values of a `.properties` file, by key in file order, escapes resolved."""
    entries: dict[str, str] = {}
    logical = ""
    for line in text.splitlines():
        if not logical and line.lstrip().startswith(("#", "!")):
            continue
        logical += line.lstrip()
        if logical.endswith("\\") and not logical.endswith("\\\\"):
            logical = logical[:-1]  # the value goes on over the next line
            continue
        if match := _PROPERTY.match(logical.strip()):
            entries[match.group(1)] = _ESCAPE.sub(_unescape, match.group(2))
        logical = ""
    return entries


def _unescape(match: re.Match[str]) -> str:
    escaped = match.group(1)
    if escaped.startswith("u") and len(escaped) == 5:
        return chr(int(escaped[1:], 16))
    return _ESCAPED.get(escaped, escaped)


def _is_string(key: str, en: str, translation: str, fluent: bool) -> bool:
    """Whether an entry is one text: no key, style, term, selector or list of plural forms."""
    if _NOT_TEXT.search(key):
        return False
    if fluent:
        return not key.startswith("-") and not _SELECTOR.search(en + translation)
    return not _PLURAL_FORMS.search(en)


def align_mozilla(
    product: Product, program: Path, langpack: Path, source: str
) -> Iterator[Segment]:
    """Every interface string of a Mozilla program that its language pack translates.

    Args:
        product: the program and its language pack (`FIREFOX`, `THUNDERBIRD`).
        program: the unpacked program package (holding `usr/...`).
        langpack: the unpacked l10n package (holding `usr/...`).
        source: the source name that starts each segment's document name.

    Yields:
        One segment per message, attribute or property present and non-empty on both sides,
        files in sorted order, entries in the English file's order. A file's strings form
        one document, `<source>/<path relative to the locale root>`.
    """
    translated = locale_files(langpack / product.langpack_xpi, "ko")
    english: dict[str, str] = {}
    for omni_ja in product.omni_jas:
        english.update(locale_files(program / omni_ja, "en-US"))
    for path in sorted(english.keys() & translated.keys()):
        fluent = path.endswith(".ftl")
        parse = parse_fluent if fluent else parse_properties
        translations = parse(translated[path])
        for key, en in parse(english[path]).items():
            translation = translations.get(key, "")
            if en.strip() and translation.strip() and _is_string(key, en, translation, fluent):
                yield Segment(normalize_space(unescape_entities(translation)),
                              normalize_space(unescape_entities(en)), f"{source}/{path}")
