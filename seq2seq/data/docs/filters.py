"""The pair filter, the document split and the held-out cleanup (../../../../shared/DATA.md).

Filter, in this order, each pair counted under the first rule it fails:
- empty: a side is empty after normalising whitespace;
- identical: both sides are the same text;
- short: the English side has fewer than 3 words;
- ratio: the translated side's character length over the English side's is outside the
  language's bounds (German 0.4 to 2.5; Korean, which writes a syllable per character, 0.15
  to 1.2: its median is 0.5, against German's 1.1);
- untranslated: more than 60% of the translated side's words occur in the English side, or,
  for Korean, fewer than half of its letters are Hangul (the Korean LibreOffice help and
  gimp-help fall back to the English text, sometimes behind a Korean word: "그림 Layers
  dialog"; on Debian 12 the Korean sides' Hangul shares cluster at 0 and above 0.9);
- placeholder (Korean): a side holds a format placeholder or markup that a program fills in
  at run time (`PLACEHOLDER`: `%s`, `%1$d`, `%*d`, `%.*s`, `%'d`, `%1`, `%L1`, `%TITLE`,
  `%(name)s`, `$(ARG1)`, `{name}`, `{ $count }`, `<b>`, `[player]`, `$nick`, `~a`; and a
  source's own form, Mozilla's `#1`). The pair is dropped whole: cutting the placeholder out
  leaves a fragment ("You use the to clean yourself off"). LibreOffice's `%PRODUCTNAME` is a
  product name written the same on both sides, not a hole in the sentence, and stays, as does
  what only looks like a hole (`100%`, `Lydian #2 #5`, `$5`). HTML entities (`&amp;`) are
  characters, decoded by the catalog readers (`segments.unescape_entities`);
- duplicate: the same (translation, English) pair came earlier (in any source).
Accelerators (`선택하십시오(~W).`, `_New Game`) are removed by the interface catalogs' readers
(seq2seq.data.docs.accelerators), nowhere else.
Split: a pair goes where its family goes, by `md5(family) % 100` (documents, not lines,
because documentation repeats its boilerplate). A family is a set of documents that share
text, kept on one side of the split (`document_families`):
- by name: the strings of one interface catalog whose contexts share a stem (`STR_NUM1`,
  `STR_NUM2`; `SC_OPCODE_ROWS`, `SC_OPCODE_COLUMNS`), and the man pages of one name stem in any
  section (`sane-teco1.5`, `sane-teco2.5`; `printf.1`, `printf.3`);
- by content, within one man-page source or the package descriptions (CONTENT_SOURCES):
  documents holding a side equal after normalisation (seq2seq.data.leakage; a duplicate pair
  counts) are joined (`chmod.2`, `chown.2` share their ERRORS entries; `libfoo1` and
  `libfoo-dev` share libfoo's paragraph), unless the text is boilerplate (in more than
  BOILERPLATE_FAMILIES families: "This package contains the development files."). Joining
  across sources, or the help pages by content, chains most of the corpus
  into one family (the build measured 18,169 pairs in one); their near twins are removed below;
- an aggregator, a family that shares text with more than AGGREGATOR_LINKS others (an index
  page repeating the NAME lines of other pages), stays in train and joins nobody.
Then every validation or test pair with a twin in train (seq2seq.data.leakage: exact,
normalised or near, on either side) is removed, so neither direction sees a held-out source
sentence (or reference), or one very like it, in training.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from seq2seq.data.docs.segments import Segment
from seq2seq.data.leakage import RULES, PairTwins, normalise

SPLITS = ("train", "validation", "test")
DROP_REASONS = ("empty", "identical", "short", "ratio", "untranslated", "placeholder",
                "duplicate")
MIN_EN_WORDS = 3
MAX_SHARED_WORDS = 0.6
TEST_BUCKETS = 4  # md5 % 100 below this: test (about 4% of the documents)
VALIDATION_BUCKETS = 3  # the next buckets: validation
BOILERPLATE_FAMILIES = 5  # a text in more families than this joins none of them
AGGREGATOR_LINKS = 10  # a family sharing text with more families than this stays in train
MAN_SOURCES = ("manpages", "program-manpages")
# the sources whose documents join by shared text: a man page's source, and the package
# descriptions (libfoo1 and libfoo-dev repeat libfoo's paragraph)
CONTENT_SOURCES = (*MAN_SOURCES, "package-descriptions")
L10N_SOURCE = "libreoffice-l10n"
_WORD = re.compile(r"\w+")
_LETTER = re.compile(r"[^\W\d_]")
# Hangul syllables, jamo and compatibility jamo
_HANGUL = re.compile(r"[\uac00-\ud7a3\u1100-\u11ff\u3130-\u318f]")


@dataclass(frozen=True)
class LanguageRules:
    """The bounds of the filter that depend on the translated language.

    Attributes:
        min_char_ratio: the least translated-over-English character length ratio kept.
        max_char_ratio: the largest kept.
        min_hangul_share: the least share of the translated side's letters that are Hangul
            (None: no script check).
        drop_placeholders: drop the pairs with a placeholder on either side (PLACEHOLDER).
    """

    min_char_ratio: float
    max_char_ratio: float
    min_hangul_share: float | None = None
    drop_placeholders: bool = False


RULES_BY_LANGUAGE = {
    "de": LanguageRules(0.4, 2.5),
    "ko": LanguageRules(0.15, 1.2, min_hangul_share=0.5, drop_placeholders=True),
}
_TRAILING_DIGITS = re.compile(r"[\d_.-]+$")
PLACEHOLDER = re.compile(
    # printf: %s %1$d %S %*d %.*s %'d (a letter after a capital is a name: %TITLE, below)
    r"%(?:\d+\$)?[-+0#']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|z|j|t|L)?"
    r"(?:[sdiufeEgGxXocp@]|[SFC](?![A-Z]))"
    r"|%\(\w+\)[sdr]"  # Python's %(name)s
    r"|%L?\d"  # positional: %1 (Qt, LibreOffice), Qt's localised %L1
    r"|%(?!PRODUCTNAME\b)[A-Z][A-Z0-9_]{2,}%?"  # a named hole: %TITLE, %FILENAME, %NAME%
    r"|\$\([A-Za-z][\w]*\)"  # LibreOffice's $(ARG1), $(ERR)
    r"|\{[^{}]*\}"  # {name}, {0}, Fluent's { $count }
    r"|</?[A-Za-z][^<>]*>"  # markup: <b>, <color_red>, </a>
    r"|\[[A-Za-z_][\w.]*\]"  # Ren'Py's [player]
    r"|\$[A-Za-z_][\w.|]*"  # Wesnoth's $nick, $unit.name
    r"|~[as](?!\w)"  # Scheme's format: ~a (aisleriot)
)
# Mozilla's plural count, `#1 downloads`: a hole there only (Minuet's `Lydian #2 #5` is a chord)
MOZILLA_PLACEHOLDER = re.compile(r"(?<![\w#])#\d(?!\d)")


def has_placeholder(text: str, extra: re.Pattern[str] | None = None) -> bool:
    """Whether `text` holds a format placeholder or markup (PLACEHOLDER, or a source's own
    `extra` form)."""
    return PLACEHOLDER.search(text) is not None or (
        extra is not None and extra.search(text) is not None)


def shared_word_share(translation: str, en: str) -> float:
    """The share of the translated side's words (lowercased `\\w+` runs) found in the English
    side."""
    words = _WORD.findall(translation.lower())
    if not words:
        return 1.0
    en_words = set(_WORD.findall(en.lower()))
    return sum(word in en_words for word in words) / len(words)


def hangul_share(text: str) -> float:
    """The share of the letters of `text` (digits and punctuation aside) that are Hangul; 0.0
    when it has no letter."""
    letters = _LETTER.findall(text)
    if not letters:
        return 0.0
    return sum(bool(_HANGUL.match(letter)) for letter in letters) / len(letters)


def drop_reason(translation: str, en: str, lang: str = "de",
                placeholder: re.Pattern[str] | None = None) -> str | None:
    """The first rule (all but duplicate) that a normalised pair fails, or None to keep it.

    Args:
        translation: the translated side.
        en: the English side.
        lang: the translated language, a key of RULES_BY_LANGUAGE.
        placeholder: a placeholder form of this pair's source beside PLACEHOLDER.
    """
    rules = RULES_BY_LANGUAGE[lang]
    if not translation or not en:
        return "empty"
    if translation == en:
        return "identical"
    if len(en.split()) < MIN_EN_WORDS:
        return "short"
    if not rules.min_char_ratio <= len(translation) / len(en) <= rules.max_char_ratio:
        return "ratio"
    if shared_word_share(translation, en) > MAX_SHARED_WORDS or (
        rules.min_hangul_share is not None and hangul_share(translation) < rules.min_hangul_share
    ):
        return "untranslated"
    if rules.drop_placeholders and (has_placeholder(translation, placeholder)
                                    or has_placeholder(en, placeholder)):
        return "placeholder"
    return None


def filter_segments(
    segments: Iterable[Segment],
    seen: set[tuple[str, str]],
    duplicates: list[Segment] | None = None,
    lang: str = "de",
    placeholder: re.Pattern[str] | None = None,
) -> tuple[list[Segment], dict[str, int]]:
    """Keep the segments that pass the filter and were not seen before.

    Args:
        segments: normalised segments of one source.
        seen: the (translation, en) pairs kept so far from every source; the kept pairs are
            added.
        duplicates: if given, the segments dropped as duplicates are appended: their
            documents share text with the first copy's (`document_families`).
        lang: the translated language (RULES_BY_LANGUAGE).
        placeholder: the source's own placeholder form (`Source.placeholder`), if any.

    Returns:
        The kept segments in order, and the number dropped per reason (DROP_REASONS).
    """
    kept = []
    dropped = dict.fromkeys(DROP_REASONS, 0)
    for segment in segments:
        reason = drop_reason(segment.translation, segment.en, lang, placeholder)
        if reason is None and (segment.translation, segment.en) in seen:
            reason = "duplicate"
            if duplicates is not None:
                duplicates.append(segment)
        if reason is None:
            seen.add((segment.translation, segment.en))
            kept.append(segment)
        elif reason != "empty" or segment.translation or segment.en:
            dropped[reason] += 1  # blocks empty on both sides are structure, not pairs
    return kept, dropped


def name_family(document: str) -> str:
    """The family a document's name puts it in (the module docstring), else the document.

    `libreoffice-l10n/sc/STR_NUM3` -> `libreoffice-l10n/sc/STR_NUM` (a two-part id keeps both),
    `manpages/man5/sane-teco2.5` -> `manpages/sane-teco`, and a dialog's file name stays:
    `libreoffice-l10n/cui/optfltrpage` -> `libreoffice-l10n/cui/optfltrpage`.
    """
    source, _, rest = document.partition("/")
    if source == L10N_SOURCE:
        catalog, _, context = rest.partition("/")
        return f"{source}/{catalog}/{context_stem(context)}"
    if source in MAN_SOURCES:
        page = rest.rpartition("/")[2]
        return f"{source}/{_TRAILING_DIGITS.sub('', page.rsplit('.', 1)[0]) or page}"
    return document


def context_stem(context: str) -> str:
    """A catalog context without its trailing digits and, for an `A_B_C` id, its last part.

    A dialog's file name (`optfltrpage`) keeps its letters; `STR_POOLNUMRULE_NUM3` and
    `SC_OPCODE_COLUMNS` lose their last part (`STR_POOLNUMRULE`, `SC_OPCODE`).
    """
    stem = _TRAILING_DIGITS.sub("", context) or context
    parts = stem.split("_")
    return "_".join(parts[:-1]) if len(parts) > 2 else stem


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, item: str) -> str:
        root = item
        while self.parent.setdefault(root, root) != root:
            root = self.parent[root]
        while item != root:
            self.parent[item], item = root, self.parent[item]
        return root

    def union(self, a: str, b: str) -> None:
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[max(a, b)] = min(a, b)  # the smallest name names the family


def document_families(segments: Iterable[Segment]) -> tuple[dict[str, str], set[str]]:
    """The family of every document, and the aggregator families (see the module docstring).

    Args:
        segments: the segments of every source, those dropped as duplicates included (they
            show which documents share text).

    Returns:
        document -> its family's name (the smallest name family in it), and the names of the
        families that are aggregators (they go to train).
    """
    segments = list(segments)
    family = {s.document: name_family(s.document) for s in segments}
    texts: dict[tuple[str, str], set[str]] = defaultdict(set)
    for segment in segments:
        source = segment.document.partition("/")[0]
        if source not in CONTENT_SOURCES:
            continue
        for side, text in (("translation", segment.translation), ("en", segment.en)):
            key = normalise(text)
            if key:
                texts[(source, side, key)].add(family[segment.document])
    links = [tuple(f) for f in texts.values() if 1 < len(f) <= BOILERPLATE_FAMILIES]
    neighbours: dict[str, set[str]] = defaultdict(set)
    for linked in links:
        for name in linked:
            neighbours[name].update(linked)
    aggregators = {name for name, near in neighbours.items() if len(near) - 1 > AGGREGATOR_LINKS}
    groups = _UnionFind()
    for name in family.values():
        groups.find(name)
    for linked in links:
        kept = [name for name in linked if name not in aggregators]
        for name in kept[1:]:
            groups.union(kept[0], name)
    return {doc: groups.find(name) for doc, name in family.items()}, aggregators


def split_of_document(document: str, test_buckets: int = TEST_BUCKETS) -> str:
    """The split of every pair of `document` (a family's name), from `md5(document) % 100`:
    below `test_buckets` test, the next VALIDATION_BUCKETS validation, the rest train."""
    digest = hashlib.md5(document.encode("utf-8"), usedforsecurity=False).hexdigest()
    bucket = int(digest, 16) % 100
    if bucket < test_buckets:
        return "test"
    if bucket < test_buckets + VALIDATION_BUCKETS:
        return "validation"
    return "train"


def remove_train_twins(splits: dict[str, list[Segment]]) -> dict[str, dict[str, dict[str, int]]]:
    """Remove from validation and test (in place) every pair with a twin in train.

    Returns:
        held-out split -> rule (seq2seq.data.leakage.RULES) -> source -> pairs removed.
    """
    twins = PairTwins([(s.translation, s.en) for s in splits["train"]])
    removed: dict[str, dict[str, dict[str, int]]] = {}
    for name in ("validation", "test"):
        removed[name] = {rule: defaultdict(int) for rule in RULES}
        kept = []
        for segment in splits[name]:
            rule = twins.rule((segment.translation, segment.en))
            if rule is None:
                kept.append(segment)
            else:
                removed[name][rule][segment.document.partition("/")[0]] += 1
        removed[name] = {rule: dict(counts) for rule, counts in removed[name].items()}
        splits[name] = kept
    return removed
