"""sentencepiece tokenizers: trained on the train split only, cached, saved with every run.

Every vocabulary has the fixed special ids below (pad 0, unk 1, bos 2, eos 3); the batcher,
the models and the search use them.
The models normalize nothing and keep every space (`identity` rule, no whitespace folding),
and unseen characters fall back to their UTF-8 bytes, so `decode(encode(x)) == x` for any
text: a hypothesis is detokenized exactly.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import datasets
import sentencepiece as spm

from seq2seq.errors import UserError

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
TOKENIZER_VERSION = 1  # bump when the trainer options below change
METADATA_FILE = "tokenizer.json"
SPM_SEED = 1234


class Tokenizer:
    """Source and target sentencepiece models (the same one when the vocabulary is joint).

    Args:
        src_model: the serialized source model (a .model file's bytes).
        tgt_model: the serialized target model (the same bytes when joint).
        type: the sentencepiece model type, unigram or bpe.
        joint: one vocabulary for both languages.
        src_lang: the source language code.
        tgt_lang: the target language code.
    """

    pad_id = PAD_ID
    unk_id = UNK_ID
    bos_id = BOS_ID
    eos_id = EOS_ID

    def __init__(
        self,
        src_model: bytes,
        tgt_model: bytes,
        *,
        type: str,
        joint: bool,
        src_lang: str,
        tgt_lang: str,
    ) -> None:
        self._src_bytes = src_model
        self._tgt_bytes = tgt_model
        self._src = spm.SentencePieceProcessor(model_proto=src_model)
        self._tgt = spm.SentencePieceProcessor(model_proto=tgt_model)
        for processor in (self._src, self._tgt):
            ids = (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
            if ids != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
                raise ValueError(f"sentencepiece special ids {ids} differ from pad/unk/bos/eos 0-3")
        self.type = type
        self.joint = joint
        self.src_lang = src_lang
        self.tgt_lang = tgt_lang
        self.src_vocab_size: int = self._src.get_piece_size()
        self.tgt_vocab_size: int = self._tgt.get_piece_size()
        self._special = {PAD_ID, BOS_ID, EOS_ID}

    @property
    def identity(self) -> dict[str, object]:
        """What a checkpoint records to check that it is used with the same tokenizer."""
        return {
            "type": self.type,
            "joint": self.joint,
            "src_lang": self.src_lang,
            "tgt_lang": self.tgt_lang,
            "src_vocab_size": self.src_vocab_size,
            "tgt_vocab_size": self.tgt_vocab_size,
            "src_model_sha256": hashlib.sha256(self._src_bytes).hexdigest(),
            "tgt_model_sha256": hashlib.sha256(self._tgt_bytes).hexdigest(),
        }

    def encode_src(self, texts: list[str]) -> list[list[int]]:
        """Source piece ids per text, without BOS or EOS."""
        return self._src.encode(list(texts), out_type=int)

    def encode_tgt(self, texts: list[str]) -> list[list[int]]:
        """Target piece ids per text, without BOS or EOS."""
        return self._tgt.encode(list(texts), out_type=int)

    def nbest_src(self, texts: list[str], n: int) -> list[tuple[list[list[int]], list[float]]]:
        """Per text its n best source segmentations (piece ids) and their log-probabilities."""
        return _nbest(self._src, texts, n)

    def nbest_tgt(self, texts: list[str], n: int) -> list[tuple[list[list[int]], list[float]]]:
        """Per text its n best target segmentations (piece ids) and their log-probabilities."""
        return _nbest(self._tgt, texts, n)

    def decode_tgt(self, ids: Sequence[int]) -> str:
        """The exact text of target piece ids; pad, bos and eos ids are dropped."""
        return self._tgt.decode([int(i) for i in ids if int(i) not in self._special])

    def src_pieces(self, ids: Sequence[int]) -> list[str]:
        """The source pieces of ids, e.g. for heatmap labels."""
        return [self._src.id_to_piece(int(i)) for i in ids]

    def tgt_pieces(self, ids: Sequence[int]) -> list[str]:
        """The target pieces of ids."""
        return [self._tgt.id_to_piece(int(i)) for i in ids]

    def src_spans(self, texts: list[str]) -> list[list[tuple[int, int]]]:
        """Per text, the (start, end) character offsets of its source pieces (`encode_src`)."""
        return _char_spans(self._src, texts)

    def tgt_spans(self, texts: list[str]) -> list[list[tuple[int, int]]]:
        """Per text, the (start, end) character offsets of its target pieces (`encode_tgt`)."""
        return _char_spans(self._tgt, texts)

    def tgt_decoded_spans(self, ids: Sequence[int]) -> tuple[str, list[tuple[int, int]]]:
        """The text of target piece ids, as `decode_tgt` gives it, and each piece's (start, end)
        character offsets in it (a pad, bos or eos id: a zero-width span)."""
        proto = self._tgt.decode([int(i) for i in ids], out_type="proto")
        return proto.text, _proto_spans(self._tgt, proto.text, proto.pieces)

    def _files(self) -> dict[str, str]:
        if self.joint:
            return {"src": "spm.joint.model", "tgt": "spm.joint.model"}
        return {"src": f"spm.{self.src_lang}.model", "tgt": f"spm.{self.tgt_lang}.model"}

    def save(self, directory: Path) -> None:
        """Write the model file(s) and `tokenizer.json` into `directory`."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        files = self._files()
        (directory / files["src"]).write_bytes(self._src_bytes)
        (directory / files["tgt"]).write_bytes(self._tgt_bytes)
        metadata = {
            "type": self.type,
            "joint": self.joint,
            "src_lang": self.src_lang,
            "tgt_lang": self.tgt_lang,
            "files": files,
        }
        (directory / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path) -> Tokenizer:
        """Read a tokenizer written by `save`.

        Raises:
            UserError: a file is missing or is not a valid tokenizer file (naming the path).
        """
        directory = Path(directory)
        metadata_path = directory / METADATA_FILE
        try:
            metadata = json.loads(metadata_path.read_text())
            files = metadata["files"]
            type_, joint = metadata["type"], metadata["joint"]
            src_lang, tgt_lang = metadata["src_lang"], metadata["tgt_lang"]
        except FileNotFoundError:
            raise UserError(f"{metadata_path}: no such file (not a saved tokenizer)") from None
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise UserError(f"{metadata_path}: not a valid tokenizer description ({err})") from None
        models: dict[str, bytes] = {}
        for side in ("src", "tgt"):
            path = directory / str(files.get(side, ""))
            try:
                models[side] = path.read_bytes()
            except OSError:
                raise UserError(f"{path}: the {side} sentencepiece model is missing") from None
        try:
            return cls(
                models["src"],
                models["tgt"],
                type=type_,
                joint=joint,
                src_lang=src_lang,
                tgt_lang=tgt_lang,
            )
        except (RuntimeError, ValueError) as err:
            raise UserError(
                f"{directory}: corrupt sentencepiece model ({str(err).splitlines()[0]})"
            ) from None


def _nbest(
    processor: spm.SentencePieceProcessor, texts: list[str], n: int
) -> list[tuple[list[list[int]], list[float]]]:
    results = []
    for proto in processor.nbest_encode_as_proto(list(texts), nbest_size=n):
        best = [([piece.id for piece in seg.pieces], seg.score) for seg in proto.nbests]
        results.append(([ids for ids, _ in best], [score for _, score in best]))
    return results


def corpus_fingerprint(src: Iterable[str], tgt: Iterable[str]) -> str:
    """A sha256 over the text of a split, both sides, so a changed corpus trains a new model."""
    digest = hashlib.sha256()
    for side in (src, tgt):
        count = 0
        for text in side:
            digest.update(text.encode("utf-8"))
            digest.update(b"\0")
            count += 1
        digest.update(f"|{count}|".encode())
    return digest.hexdigest()


def available_cores() -> int:
    """CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def build_tokenizer(
    corpus: datasets.DatasetDict,
    cache_dir: Path,
    *,
    type: str,
    vocab_size: int,
    joint: bool,
    character_coverage: float,
    input_sentence_size: int,
    src_lang: str,
    tgt_lang: str,
) -> Tokenizer:
    """Train sentencepiece on the train split, or reuse the cached model of the same settings.

    The cache folder `cache_dir/<key>` is named by a hash of the train split's text and every
    setting, and is filled atomically (trained in a temporary folder, then renamed), so
    concurrent processes and interrupted runs never see half a tokenizer.

    Args:
        corpus: a DatasetDict with a train split of src/tgt strings; only train is read.
        cache_dir: where tokenizers are cached.
        type: unigram or bpe.
        vocab_size: the target vocabulary size (a soft limit: tiny corpora give fewer pieces).
        joint: train one model on both sides; else one model per language.
        character_coverage: the share of characters the vocabulary covers (the rest fall back
            to bytes).
        input_sentence_size: the most sentences sentencepiece samples for training.
        src_lang: the source language code.
        tgt_lang: the target language code.
    """
    if type not in ("unigram", "bpe"):
        raise UserError(f"tokenizer.type={type!r} is unknown; use unigram or bpe")
    train = corpus["train"]
    settings = {
        "version": TOKENIZER_VERSION,
        "corpus": corpus_fingerprint(train["src"], train["tgt"]),
        "type": type,
        "vocab_size": vocab_size,
        "joint": joint,
        "character_coverage": character_coverage,
        "input_sentence_size": input_sentence_size,
        "src_lang": src_lang,
        "tgt_lang": tgt_lang,
    }
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    name = f"{src_lang}-{tgt_lang}-{type}{vocab_size}-{'joint' if joint else 'separate'}-{key}"
    target = Path(cache_dir) / name
    if (target / METADATA_FILE).is_file():
        print(f"reusing tokenizer {target}")
        return Tokenizer.load(target)

    print(f"training sentencepiece ({type}, vocab {vocab_size}, joint={joint}) into {target}")
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=target.parent))
    try:
        options = {
            "type": type,
            "vocab_size": vocab_size,
            "character_coverage": character_coverage,
            "input_sentence_size": input_sentence_size,
        }
        if joint:
            model = _train(work, "joint", [train["src"], train["tgt"]], **options)
            src_model = tgt_model = model
        else:
            src_model = _train(work, src_lang, [train["src"]], **options)
            tgt_model = _train(work, tgt_lang, [train["tgt"]], **options)
        tokenizer = Tokenizer(
            src_model, tgt_model, type=type, joint=joint, src_lang=src_lang, tgt_lang=tgt_lang
        )
        staged = work / "tokenizer"
        tokenizer.save(staged)
        (staged / "settings.json").write_text(json.dumps(settings, indent=2) + "\n")
        try:
            staged.rename(target)
        except OSError:
            if not (target / METADATA_FILE).is_file():  # not a concurrent build that won
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Tokenizer.load(target)


def _train(
    work: Path,
    name: str,
    sides: list[Iterable[str]],
    *,
    type: str,
    vocab_size: int,
    character_coverage: float,
    input_sentence_size: int,
) -> bytes:
    """Train one sentencepiece model on the non-empty lines of `sides`; return its bytes."""
    text_path = work / f"{name}.txt"
    with text_path.open("w", encoding="utf-8") as file:
        for side in sides:
            for text in side:
                line = " ".join(text.splitlines())
                if line.strip():
                    file.write(line + "\n")
    spm.set_random_generator_seed(SPM_SEED)
    try:
        spm.SentencePieceTrainer.train(
            input=str(text_path),
            model_prefix=str(work / name),
            model_type=type,
            vocab_size=vocab_size,
            character_coverage=character_coverage,
            input_sentence_size=input_sentence_size,
            shuffle_input_sentence=True,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            hard_vocab_limit=False,
            byte_fallback=True,
            normalization_rule_name="identity",
            remove_extra_whitespaces=False,
            num_threads=available_cores(),
            minloglevel=2,
        )
    except RuntimeError as err:
        raise UserError(
            f"sentencepiece could not train a {type} model of {vocab_size} pieces on the "
            f"{name} training text: {str(err).strip().splitlines()[-1]}"
        ) from None
    return (work / f"{name}.model").read_bytes()


def _char_spans(
    processor: spm.SentencePieceProcessor, texts: list[str]
) -> list[list[tuple[int, int]]]:
    """Per text, its pieces as (start, end) character offsets. The proto counts UTF-8 bytes;
    each byte-fallback piece of a character spans that whole character, the character its
    start byte lies in."""
    return [_proto_spans(processor, text, proto.pieces)
            for text, proto in zip(texts, processor.encode(list(texts), out_type="proto"),
                                   strict=True)]


def _proto_spans(
    processor: spm.SentencePieceProcessor, text: str, pieces: Iterable[Any]
) -> list[tuple[int, int]]:
    """The (start, end) character offsets in `text` of sentencepiece proto pieces, whose
    offsets count UTF-8 bytes."""
    starts = [0]  # byte offset of each character, and of the end
    for char in text:
        starts.append(starts[-1] + len(char.encode("utf-8")))
    spans = []
    for piece in pieces:
        start = bisect.bisect_right(starts, piece.begin) - 1
        if processor.is_byte(piece.id):
            spans.append((start, start + 1))
        else:
            spans.append((start, bisect.bisect_left(starts, piece.end)))
    return spans
