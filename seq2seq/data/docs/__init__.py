"""Documentation from Debian packages as a parallel corpus: German-English (data=docs_de_en)
and Korean-English (data=docs_en_ko).

Human translations of software documentation ship as Debian packages in structures that align
them exactly (../../../../shared/DATA.md, second part). Each source has a module:
- libreoffice_help: LibreOffice help pages, joined on (page, paragraph id);
- mo_catalogs: LibreOffice's interface catalogs (gettext `.mo`);
- manpages: manual pages and their po4a translations, paired block by block;
- manuals: po4a-translated HTML manuals (debian-reference, debian-handbook), paired block by
  block where a page's block counts agree.
`packages` fetches the packages (`apt-get download`, `dpkg -x`, no root needed), `filters`
holds the pair filter and the document split, and `build` caches the corpus with a manifest
of package versions and sha256 sums.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import datasets

from seq2seq.data.dataset_dict import make_dataset_dict
from seq2seq.data.docs.build import build_docs
from seq2seq.data.docs.filters import SPLITS
from seq2seq.data.docs.packages import Fetch, apt_get_download
from seq2seq.data.docs.sources import LANGUAGES
from seq2seq.errors import UserError


def load_docs(
    *,
    root: Path,
    src_lang: str,
    tgt_lang: str,
    sources: Sequence[str],
    allow_missing: bool,
    fetch: Fetch = apt_get_download,
    test_buckets: dict[str, int] | None = None,
) -> datasets.DatasetDict:
    """The documentation corpus in the direction src_lang -> tgt_lang (English and German or
    Korean, either way round), with each pair's family of documents (the unit of its split) in
    the column `document`.

    Args:
        root: the data root (downloads under `raw/`, the built corpus under `docs/`).
        src_lang: "en", or a language of `sources.LANGUAGES` ("de", "ko").
        tgt_lang: the other side.
        sources: the sources to build from (names in `sources.SOURCES`).
        allow_missing: build from the packages at hand when some cannot be fetched.
        fetch: downloads .deb files (tests pass a fake).
        test_buckets: domain -> its test share in md5 buckets, where not the default.
    """
    lang = tgt_lang if src_lang == "en" else src_lang
    if "en" not in (src_lang, tgt_lang) or lang not in LANGUAGES:
        raise UserError(
            f"the documentation corpus pairs English with {' or '.join(LANGUAGES)}: "
            f"data.src_lang={src_lang} and data.tgt_lang={tgt_lang} must be en and one of "
            "them (either way round)"
        )
    corpus = build_docs(root, sources, lang=lang, allow_missing=allow_missing, fetch=fetch,
                        test_buckets=test_buckets)
    splits: dict[str, tuple[list[str], list[str]]] = {}
    for name in SPLITS:
        translated = [segment.translation for segment in corpus.splits[name]]
        en = [segment.en for segment in corpus.splits[name]]
        splits[name] = (en, translated) if src_lang == "en" else (translated, en)
    families = {name: [segment.family for segment in corpus.splits[name]] for name in SPLITS}
    domains = {name: [segment.domain for segment in corpus.splits[name]] for name in SPLITS}
    return make_dataset_dict(splits, families, domains)
