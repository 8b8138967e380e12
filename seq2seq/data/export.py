"""A built corpus as a folder that travels: its pairs with their document ids, its tokenizers and
its reference word alignments, xz-compressed, loadable where the raw sources are not.

`python -m seq2seq.prepare data=NAME export=DIR` writes it; `data.export_dir=DIR` reads it in
place of the source, in every entry point (train, evaluate, prepare, compare). The folder holds
- manifest.json: the format, the corpus (name, source, direction and the settings that decide
  its pairs), the cleaning it was built with, its fingerprint, and each file's size and sha256;
- corpus.json.xz: the source's pairs before cleaning, per split its columns src, tgt and, where
  the corpus names them, document;
- tokenizers/<cache folder>/*.xz: every tokenizer cached for the corpus's training split;
- alignments/<cache folder>/*.xz: the eflomal links of every split.
Reading checks every file against its sha256 and the corpus against the config, then installs
the tokenizers and the links into the data root's caches under their own keys, where the usual
code finds them: no tokenizer is trained and eflomal does not run.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import datasets
from omegaconf import DictConfig, ListConfig, OmegaConf

from seq2seq.alignment import alignment_key
from seq2seq.config import DataConfig
from seq2seq.data.dataset_dict import make_dataset_dict
from seq2seq.errors import UserError
from seq2seq.tokenization import corpus_fingerprint as train_fingerprint

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
CORPUS_FILE = "corpus.json.xz"
SPLITS = ("train", "validation", "test")
LINK_FILES = tuple(f"{split}.{kind}" for split in SPLITS for kind in ("sure", "possible"))
# the settings of each source that decide its pairs: an export serves a config that agrees
SHAPING = {"ding": ("phrase_pairs",), "docs": ("docs_sources", "test_buckets"),
           "hf": ("hf_path", "hf_config", "hf_revision", "hf_data_files"), "files": ()}
CLEANING = ("max_words", "max_ratio", "max_train_pairs")
STORED = re.compile(r"corpus\.json\.xz|(tokenizers|alignments)/[\w-][\w.-]*/[\w-][\w.-]*\.xz")


def corpus_fingerprint(corpus: datasets.DatasetDict) -> str:
    """A sha256 over every split's pairs and document ids, in order: it names a corpus whatever
    it was loaded from (its sources or an export)."""
    digest = hashlib.sha256()
    for name in sorted(corpus):
        columns = sorted(corpus[name].column_names)
        digest.update(f"|{name}|{len(corpus[name])}|{','.join(columns)}|".encode())
        for column in columns:
            for text in corpus[name][column]:
                digest.update(text.encode("utf-8") + b"\0")
    return digest.hexdigest()


def corpus_identity(cfg: DataConfig) -> dict[str, Any]:
    """What an export must agree on with the config that reads it: name, source, direction, and
    the source's settings that decide the pairs (SHAPING)."""
    source = str(cfg.source)
    shaping = {key: _plain(getattr(cfg, key)) for key in SHAPING.get(source, ())}
    return {"name": cfg.name, "source": source, "src_lang": cfg.src_lang,
            "tgt_lang": cfg.tgt_lang, **shaping}


def write_export(
    cfg: DataConfig, pairs: datasets.DatasetDict, corpus: datasets.DatasetDict, root: Path,
    out: Path,
) -> dict[str, Any]:
    """Write the export of a corpus that `prepare_data` has built (tokenizer and links cached).

    Args:
        cfg: the corpus's config.
        pairs: the source's splits before cleaning (what the export stores).
        corpus: the same after cleaning (what the models see: it picks the cached tokenizers
            and links, and gives the fingerprint).
        root: the data root holding the caches.
        out: the export folder; an earlier export there is replaced, any other content refused.

    Returns:
        The manifest written.

    Raises:
        UserError: the links or a tokenizer are not cached, or `out` holds something else.
    """
    texts = {split: (corpus[split]["src"], corpus[split]["tgt"]) for split in SPLITS}
    links = root / "alignments" / cfg.name / alignment_key(texts)
    if not all((links / name).is_file() for name in LINK_FILES):
        raise UserError(f"corpus {cfg.name}: no word alignments in {links} (eflomal unavailable?); "
                        "an export carries them for the AER: `pip install eflomal` and run "
                        "`python -m seq2seq.prepare` again")
    train = train_fingerprint(corpus["train"]["src"], corpus["train"]["tgt"])
    tokenizers = [folder for folder in sorted((root / "tokenizers" / cfg.name).glob("[!.]*"))
                  if _json(folder / "settings.json").get("corpus") == train]
    if not tokenizers:
        raise UserError(f"corpus {cfg.name}: no tokenizer of its training split in "
                        f"{root / 'tokenizers' / cfg.name}; run `python -m seq2seq.prepare` first")
    out = Path(out).expanduser()
    if out.exists() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise UserError(f"{out}: exists and is not a corpus export; choose a new or empty folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        columns = {split: {name: list(pairs[split][name]) for name in pairs[split].column_names}
                   for split in SPLITS}
        files = {CORPUS_FILE: _write_xz(staged / CORPUS_FILE,
                                        json.dumps(columns, ensure_ascii=False).encode())}
        for folder in [*tokenizers, links]:
            kind = folder.parent.parent.name  # tokenizers or alignments
            for path in sorted(folder.iterdir()):
                stored = f"{kind}/{folder.name}/{path.name}.xz"
                files[stored] = _write_xz(staged / stored, path.read_bytes())
        manifest = {
            "format_version": FORMAT_VERSION,
            "corpus": corpus_identity(cfg),
            "cleaning": {key: getattr(cfg, key) for key in CLEANING},
            "fingerprint": corpus_fingerprint(corpus),
            "pairs": {split: len(pairs[split]) for split in SPLITS},
            "tokenizers": [folder.name for folder in tokenizers],
            "alignments": links.name,
            "files": files,
        }
        (staged / MANIFEST).write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
        if out.exists():
            shutil.rmtree(out)
        staged.rename(out)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return manifest


def read_export(cfg: DataConfig, folder: Path, root: Path) -> datasets.DatasetDict:
    """The pairs of the export in `folder` (before cleaning), its tokenizers and links installed
    into the caches under `root`.

    Raises:
        UserError: in one line, a folder that is no export, is incomplete or corrupt, holds
            another corpus, direction or source setting than `cfg`, or whose tokenizer or links
            clash with other ones already cached under the same key.
    """
    manifest = _manifest(folder)
    held, asked = manifest["corpus"], corpus_identity(cfg)
    differ = [f"data.{key}={asked[key]} (the export's {held.get(key)})"
              for key in asked if held.get(key) != asked[key]]
    if differ:
        raise UserError(
            f"{folder}: an export of {held.get('name')} ({held.get('src_lang')}->"
            f"{held.get('tgt_lang')}), not of the corpus the config asks for: {', '.join(differ)}; "
            f"export that one with `python -m seq2seq.prepare data={cfg.name} export=DIR`")
    contents = {stored: _read_verified(folder, stored, entry)
                for stored, entry in manifest["files"].items()}
    try:
        columns = json.loads(contents[CORPUS_FILE])
        documents, domains = ({split: columns[split][name] for split in SPLITS}
                              if name in columns["train"] else None
                              for name in ("document", "domain"))
        pairs = make_dataset_dict(
            {split: (columns[split]["src"], columns[split]["tgt"]) for split in SPLITS}, documents,
            domains)
    except (ValueError, KeyError, TypeError) as err:
        raise UserError(f"{folder}: corrupt corpus export: {CORPUS_FILE} holds no splits of "
                        f"pairs ({type(err).__name__}: {err})") from None
    for kind in ("tokenizers", "alignments"):
        installs: dict[str, dict[str, bytes]] = {}
        for stored, data in contents.items():
            if stored.startswith(f"{kind}/"):
                _, name, file = stored.split("/")
                installs.setdefault(name, {})[file.removesuffix(".xz")] = data
        for name, files in installs.items():
            _install(root / kind / cfg.name / name, files, folder)
    changed = [f"data.{key}={getattr(cfg, key)} (the export's {manifest['cleaning'][key]})"
               for key in CLEANING if manifest["cleaning"].get(key) != getattr(cfg, key)]
    print(f"corpus {cfg.name}: read from the export {folder} (fingerprint "
          f"{manifest['fingerprint'][:16]}), not from its sources; "
          f"{len(manifest['tokenizers'])} tokenizer(s) and the word alignments in {root}"
          + (f"; other cleaning, {', '.join(changed)}: a tokenizer and links are made anew"
             if changed else ""))
    return pairs


def _manifest(folder: Path) -> dict[str, Any]:
    """The manifest, checked for its format and for every part an export must hold."""
    path = folder / MANIFEST
    if not folder.is_dir():
        raise UserError(f"{folder}: no such folder (data.export_dir: a folder written by "
                        "`python -m seq2seq.prepare data=NAME export=DIR`)")
    if not path.is_file():
        raise UserError(f"{folder}: not a corpus export (no {MANIFEST}); write one with "
                        "`python -m seq2seq.prepare data=NAME export=DIR`")
    manifest = _json(path)
    if manifest.get("format_version") != FORMAT_VERSION:
        raise UserError(f"{path}: not a corpus export of format {FORMAT_VERSION} "
                        f"(format_version {manifest.get('format_version')!r}); export it again")
    lacking = [key for key in ("corpus", "cleaning", "fingerprint", "tokenizers", "alignments",
                               "files") if key not in manifest]
    if lacking:
        raise UserError(f"{path}: corrupt manifest (no {', '.join(lacking)}); export it again")
    files, links = manifest["files"], manifest["alignments"]
    needed = {CORPUS_FILE, *(f"alignments/{links}/{name}.xz" for name in LINK_FILES),
              *(f"tokenizers/{name}/tokenizer.json.xz" for name in manifest["tokenizers"])}
    absent = sorted(needed - files.keys()) + sorted(s for s in files if not STORED.fullmatch(s))
    if absent or not manifest["tokenizers"]:
        raise UserError(f"{folder}: incomplete corpus export ({', '.join(absent) or 'no tokenizer'}"
                        " not in its manifest); export it again")
    return manifest


def _read_verified(folder: Path, stored: str, entry: dict[str, Any]) -> bytes:
    """A stored file's content, decompressed, after checking its size and sha256."""
    path = folder / stored
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{folder}: incomplete corpus export: {stored} is missing; export it "
                        "again (`python -m seq2seq.prepare data=NAME export=DIR`)") from None
    except OSError as err:
        raise UserError(f"{path}: cannot read ({err.strerror})") from None
    try:
        intact = len(data) == entry["bytes"] and _sha256(data) == entry["sha256"]
        if intact:
            return lzma.decompress(data)
    except (KeyError, TypeError, lzma.LZMAError):
        pass
    raise UserError(f"{folder}: corrupt corpus export: {stored} does not match the size and "
                    f"sha256 in {MANIFEST}; export it again")


def _install(target: Path, files: dict[str, bytes], export: Path) -> None:
    """Put `files` into the cache folder `target`, staged and renamed into place whole; a
    folder already there must hold the same bytes."""
    if not target.is_dir():
        target.parent.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            for name, data in files.items():
                (staged / name).write_bytes(data)
            try:
                staged.rename(target)
                return
            except OSError:  # another process installed it first: checked below
                if not target.is_dir():
                    raise
        finally:
            shutil.rmtree(staged, ignore_errors=True)
    differ = [name for name, data in sorted(files.items())
              if not (target / name).is_file() or (target / name).read_bytes() != data]
    if differ:
        raise UserError(f"{target} is not what the export {export} holds under that key "
                        f"({differ[0]} differs); delete that folder to use the export's, or drop "
                        "data.export_dir to use the cache")


def _write_xz(path: Path, data: bytes) -> dict[str, Any]:
    path.parent.mkdir(parents=True, exist_ok=True)
    stored = lzma.compress(data, preset=9)
    path.write_bytes(stored)
    return {"bytes": len(stored), "sha256": _sha256(stored)}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _json(path: Path) -> dict[str, Any]:
    """A JSON object from `path`; {} when the file is missing, UserError when it is no JSON."""
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise UserError(f"{path}: not readable JSON ({err})") from None
    if not isinstance(content, dict):
        raise UserError(f"{path}: not a JSON object")
    return content


def _plain(value: Any) -> Any:
    """A config value as plain lists and dicts (comparable with a manifest's JSON)."""
    return OmegaConf.to_container(value) if isinstance(value, DictConfig | ListConfig) else value
