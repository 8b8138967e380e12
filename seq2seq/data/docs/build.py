"""Build the documentation corpus once, keep it under `<data root>/docs/`, and reuse it.

The cache folder is `docs/v<extraction version>-<key>/` (German) or `docs/ko-v<...>-<key>/`
(Korean), where the key hashes the chosen sources and each package's name, version and .deb
sha256: a security update that replaces a package, or another choice of sources, gives a new
folder. It holds `corpus.json` (the split pairs, the translation first, with their document
and family) and `manifest.json` (the packages, what
each source contributed, the families, the split rule, the held-out twins removed and counts).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seq2seq.data.docs.descriptions import I18N_DIR, IndexFile, fetch_translations
from seq2seq.data.docs.filters import (
    SPLITS,
    TEST_BUCKETS,
    VALIDATION_BUCKETS,
    document_families,
    filter_segments,
    remove_train_twins,
    split_of_document,
)
from seq2seq.data.docs.packages import (
    Fetch,
    Package,
    apt_get_download,
    obtain_font,
    obtain_packages,
    unpack,
)
from seq2seq.data.docs.segments import PageCounts, Segment, normalize_space
from seq2seq.data.docs.sources import LANGUAGE_NAMES, LANGUAGES, Source
from seq2seq.data.leakage import NEAR_SIMILARITY
from seq2seq.errors import UserError

# 2: families kept on one side of the split, near twins removed; 3 (Korean): accelerators
# stripped, pairs with placeholders dropped, the test share set per domain; 4 (Korean):
# accelerators only where they are one (interface catalogs, the mark required), the
# placeholder forms of LibreOffice, Qt, printf and Mozilla, entities decoded
# German 3 too: LibreOffice's literal `(~)`, `(_)` no longer read as marks
EXTRACTION_VERSIONS = {"de": 3, "ko": 4}
LONG_WORDS = 30  # held-out pairs with more words than this on a side are counted apart


@dataclass
class DocsCorpus:
    """The built corpus, the translation first, before a direction is chosen.

    Attributes:
        splits: train/validation/test -> segments (translation, en, document) in build order.
        manifest: what `manifest.json` holds.
        folder: the cache folder.
    """

    splits: dict[str, list[Segment]]
    manifest: dict[str, Any]
    folder: Path


def build_docs(
    root: Path,
    sources: Sequence[str],
    *,
    lang: str = "de",
    allow_missing: bool = False,
    fetch: Fetch = apt_get_download,
    test_buckets: dict[str, int] | None = None,
    fetch_indexes: Callable[[Path], list[IndexFile]] = fetch_translations,
) -> DocsCorpus:
    """Fetch, align, filter and split the chosen sources, or reuse the cached result.

    Args:
        root: the data root; packages go to `<root>/raw`, the corpus to `<root>/docs`.
        sources: names from the language's sources (sources.LANGUAGES), in the order their
            pairs are taken (a pair that two sources share counts for the first).
        lang: the translated language, `de` or `ko` (the other side is English).
        allow_missing: build from the sources whose packages are all at hand when some
            package cannot be fetched (they are listed in the manifest); else fail.
        fetch: downloads .deb files into a folder (tests pass a fake).
        test_buckets: domain -> the md5 buckets (of 100) that go to test, for the domains
            whose test share differs from TEST_BUCKETS (`filters.split_of_document`).
        fetch_indexes: finds or downloads apt's description indexes into `<raw>/i18n/`, for
            the sources that read them (tests pass a local mirror).

    Raises:
        UserError: an unknown source name, a package that cannot be fetched (unless
            `allow_missing`), or nothing left to build from.
    """
    if lang not in LANGUAGES:
        raise UserError(f"the documentation corpus pairs English with "
                        f"{' or '.join(LANGUAGES)}, not {lang!r}")
    known = LANGUAGES[lang]
    unknown = [name for name in sources if name not in known]
    if unknown or not sources:
        raise UserError(f"data.docs_sources={list(sources)}: choose one or more of "
                        f"{', '.join(known)} ({LANGUAGE_NAMES[lang]})")
    names = list(dict.fromkeys(p for name in sources for p in known[name].packages))
    raw_dir = root / "raw"
    test_buckets = check_test_buckets(test_buckets or {}, [known[name] for name in sources])
    packages, missing = obtain_packages(names, raw_dir, fetch=fetch, allow_missing=allow_missing)
    indexes: list[IndexFile] = []
    if any(known[name].indexes for name in sources):
        try:
            indexes = fetch_indexes(raw_dir)
        except UserError as err:
            if not allow_missing:
                raise
            missing.append(f"the description indexes ({err})")
    usable = [name for name in sources if set(known[name].packages) <= packages.keys()
              and (indexes or not known[name].indexes)]
    if missing:
        left_out = [name for name in sources if name not in usable]
        print(f"building without the missing package(s) {', '.join(missing)} "
              f"(data.allow_missing=true): left out the source(s) {', '.join(left_out)}")
    if not usable:
        raise UserError(f"no source of data.docs_sources={list(sources)} has all its packages; "
                        "fetch them (see above) and run again")
    used: list[Package | IndexFile] = [
        packages[p] for p in dict.fromkeys(p for n in usable for p in known[n].packages)]
    version = EXTRACTION_VERSIONS[lang]
    used += [index for index in indexes if any(known[name].indexes for name in usable)]
    key = hashlib.sha256(json.dumps(
        [version, usable, [[p.name, p.version, p.sha256] for p in used]]
        + ([test_buckets] if test_buckets else [])
    ).encode("utf-8")).hexdigest()
    prefix = "" if lang == "de" else f"{lang}-"  # the German caches keep their names
    folder = root / "docs" / f"{prefix}v{version}-{key[:16]}"
    if (folder / "manifest.json").is_file() and (folder / "corpus.json").is_file():
        stored = json.loads((folder / "corpus.json").read_text(encoding="utf-8"))
        corpus = DocsCorpus(
            splits={name: [Segment(*row) for row in rows] for name, rows in stored.items()},
            manifest=json.loads((folder / "manifest.json").read_text(encoding="utf-8")),
            folder=folder,
        )
        print(f"documentation corpus: reusing {folder}")
    else:
        if lang == "ko":  # with the packages, once: the heatmaps' Hangul labels
            obtain_font(raw_dir, fetch=fetch)
        started = time.monotonic()
        corpus = _build(usable, used, missing, raw_dir, folder, lang, test_buckets)
        print(f"documentation corpus: built {folder} in {time.monotonic() - started:.0f} s")
    _print_counts(corpus.manifest, lang)
    return corpus


def check_test_buckets(test_buckets: dict[str, int], sources: Sequence[Source]
                       ) -> dict[str, int]:
    """`data.test_buckets` checked against the chosen sources' domains, sorted by domain.

    Raises:
        UserError: a key that is not a domain of the sources, or a share outside 0 to
            100 - VALIDATION_BUCKETS (validation keeps its buckets).
    """
    domains = sorted({source.domain for source in sources})
    most = 100 - VALIDATION_BUCKETS
    for domain, buckets in test_buckets.items():
        if domain not in domains:
            raise UserError(f"data.test_buckets: {domain!r} is not a domain of the chosen "
                            f"sources ({', '.join(domains)})")
        if not isinstance(buckets, int) or isinstance(buckets, bool) or not 0 <= buckets <= most:
            raise UserError(f"data.test_buckets.{domain}={buckets!r}: a whole number of md5 "
                            f"buckets from 0 to {most} (the next {VALIDATION_BUCKETS} are "
                            "validation's)")
    return dict(sorted(test_buckets.items()))


def _build(
    sources: list[str],
    packages: list[Package | IndexFile],
    missing: list[str],
    raw_dir: Path,
    folder: Path,
    lang: str,
    test_buckets: dict[str, int],
) -> DocsCorpus:
    by_name = {package.name: package for package in packages if isinstance(package, Package)}
    sources_of_lang = LANGUAGES[lang]
    seen: set[tuple[str, str]] = set()
    duplicates: list[Segment] = []
    kept_by_source: dict[str, list[Segment]] = {}
    reports: dict[str, dict[str, Any]] = {}
    for name in sources:
        source = sources_of_lang[name]
        roots = {p: unpack(by_name[p], raw_dir) for p in source.packages}
        if source.indexes:
            roots["i18n"] = raw_dir / I18N_DIR
        page_counts: list[PageCounts] = []
        segments = (
            Segment(normalize_space(s.translation), normalize_space(s.en), s.document)
            for s in source.align(roots, name, page_counts)
        )
        kept_by_source[name], dropped = filter_segments(segments, seen, duplicates, lang,
                                                        source.placeholder)
        reports[name] = {"packages": list(source.packages), "domain": source.domain,
                         "dropped": dropped}
        if page_counts:
            reports[name]["pages"] = page_counts[0]._asdict()
    kept = [segment for segments in kept_by_source.values() for segment in segments]
    families, aggregators = document_families(kept + duplicates)
    splits: dict[str, list[Segment]] = {name: [] for name in SPLITS}
    for segment in kept:
        family = families[segment.document]
        domain = sources_of_lang[segment.document.partition("/")[0]].domain
        split = "train" if family in aggregators else split_of_document(
            family, test_buckets.get(domain, TEST_BUCKETS))
        splits[split].append(segment._replace(family=family, domain=domain))
    removed = remove_train_twins(splits)
    for name, report in reports.items():
        report["splits"] = {
            split: sum(s.document.startswith(f"{name}/") for s in splits[split])
            for split in SPLITS
        }
        report["pairs"] = sum(report["splits"].values())
    domains = sorted({report["domain"] for report in reports.values()})
    manifest = {
        "extraction_version": EXTRACTION_VERSIONS[lang],
        "language": lang,
        "packages": [package.record() for package in packages],
        "missing_packages": missing,
        "sources": reports,
        "split_rule": (
            f"md5(family) % 100: 0 to T-1 test, T to T+{VALIDATION_BUCKETS - 1} validation, "
            f"rest train, T = {TEST_BUCKETS}"
            + "".join(f", {domain} {n}" for domain, n in test_buckets.items())
            + "; "
            "aggregator families in train; then validation/test pairs with an exact, normalised "
            f"or near (similarity >= {NEAR_SIMILARITY}) twin of a side in train are removed"
        ),
        "families": {
            "documents": len(families),
            "families": len(set(families.values())),
            "largest": max(Counter(families.values()).values(), default=0),
            "aggregators": sorted(aggregators),
        },
        "removed_from_held_out": removed,
        "splits": {name: len(splits[name]) for name in SPLITS},
        "domains": {
            domain: {split: sum(sources_of_lang[s.document.partition("/")[0]].domain == domain
                                for s in splits[split]) for split in SPLITS}
            for domain in domains
        },
        f"held_out_over_{LONG_WORDS}_words": {
            split: {side: sum(len(text.split()) > LONG_WORDS
                              for s in splits[split]
                              for text in [s.translation if side == lang else s.en])
                    for side in (lang, "en")}
            for split in ("validation", "test")
        },
    }
    folder.mkdir(parents=True, exist_ok=True)
    _write_json(folder / "corpus.json", {name: [list(s) for s in rows]
                                         for name, rows in splits.items()})
    _write_json(folder / "manifest.json", manifest)
    return DocsCorpus(splits, manifest, folder)


def _write_json(path: Path, content: object) -> None:
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(content, ensure_ascii=False, indent=1), encoding="utf-8")
    os.replace(tmp, path)


def _print_counts(manifest: dict[str, Any], lang: str) -> None:
    versions = ", ".join(f"{p['name']} {p['version']}" for p in manifest["packages"])
    print(f"  packages: {versions}")
    for name, report in manifest["sources"].items():
        per_split = " / ".join(f"{split} {report['splits'][split]:,}" for split in SPLITS)
        dropped = ", ".join(f"{reason} {n:,}" for reason, n in report["dropped"].items())
        domain = f", {report['domain']}" if "domain" in report else ""
        print(f"  {name}: {report['pairs']:,} pairs{domain} ({per_split}); dropped {dropped}")
    totals = manifest["splits"]
    long_test = manifest[f"held_out_over_{LONG_WORDS}_words"]["test"]
    print(f"  all: {sum(totals.values()):,} pairs: "
          + ", ".join(f"{split} {totals[split]:,}" for split in SPLITS)
          + f"; test pairs over {LONG_WORDS} words: {long_test[lang]:,} {LANGUAGE_NAMES[lang]}, "
          f"{long_test['en']:,} English")
    for domain, counts in manifest.get("domains", {}).items():
        print(f"  {domain}: {sum(counts.values()):,} pairs: "
              + ", ".join(f"{split} {counts[split]:,}" for split in SPLITS))
    families = manifest["families"]
    print(f"  families: {families['documents']:,} documents in {families['families']:,} "
          f"families (largest {families['largest']:,} documents), "
          f"{len(families['aggregators'])} aggregator(s) kept in train")
    for split, rules in manifest["removed_from_held_out"].items():
        per_rule = "; ".join(
            f"{rule} {sum(by_source.values()):,}"
            + (f" ({', '.join(f'{s} {n:,}' for s, n in sorted(by_source.items()))})"
               if by_source else "")
            for rule, by_source in rules.items())
        print(f"  {split}: removed for a twin in train: {per_rule}")
