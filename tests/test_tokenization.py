"""sentencepiece training, exact round trips, fixed special ids, caching, save and load."""

from __future__ import annotations

from pathlib import Path

import datasets
import pytest

from seq2seq.errors import UserError
from seq2seq.tokenization import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, build_tokenizer

TRAIN = [
    ("Jane ging in den Laden.", "Jane went to the store."),
    ("Ich war bei meiner Tante.", "I was at my aunt’s."),
    ("Das Wetter ist heute schön.", "The weather is nice today."),
    ("Wir fahren morgen nach Berlin.", "We are going to Berlin tomorrow."),
    ("Er liest ein Buch über Straßenbahnen.", "He is reading a book about trams."),
] * 8

VARIED = [
    "Jane went to the store.",
    "Größe, Maß und Fuß: ÄÖÜ äöü ß.",
    "漢字とかな、한국어 문장, العربية, ελληνικά",
    "emoji 😀👍🏽 and ﬁ ligature, e\u0301 decomposed",
    "  two  spaces,\ttab and trailing space ",
    "",
]


def corpus(train: list[tuple[str, str]], valid: list[tuple[str, str]] | None = None):
    def split(pairs):
        return datasets.Dataset.from_dict(
            {"src": [p[0] for p in pairs], "tgt": [p[1] for p in pairs]}
        )

    valid = valid or [("Danke.", "Thanks.")]
    return datasets.DatasetDict(
        {"train": split(train), "validation": split(valid), "test": split(valid)}
    )


def build(cache: Path, data: datasets.DatasetDict, **overrides) -> Tokenizer:
    settings = {
        "type": "unigram",
        "vocab_size": 320,
        "joint": True,
        "character_coverage": 1.0,
        "input_sentence_size": 1000,
        "src_lang": "de",
        "tgt_lang": "en",
    } | overrides
    return build_tokenizer(data, cache, **settings)


@pytest.mark.parametrize("type_", ["unigram", "bpe"])
@pytest.mark.parametrize("joint", [True, False])
def test_round_trip_is_exact_and_special_ids_are_fixed(
    tmp_path: Path, type_: str, joint: bool
) -> None:
    tok = build(tmp_path, corpus(TRAIN), type=type_, joint=joint)
    assert (
        (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id)
        == (PAD_ID, UNK_ID, BOS_ID, EOS_ID)
        == (0, 1, 2, 3)
    )
    assert tok.src_pieces([0, 1, 2, 3]) == ["<pad>", "<unk>", "<s>", "</s>"]
    for text in VARIED:
        ids = tok.encode_tgt([text])[0]
        assert all(i > EOS_ID for i in ids)
        assert tok.decode_tgt(ids) == text
        assert tok.decode_tgt([BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID]) == text
    assert tok.tgt_pieces(tok.encode_tgt(["store"])[0])
    if joint:
        assert tok.src_vocab_size == tok.tgt_vocab_size
        assert tok.identity["src_model_sha256"] == tok.identity["tgt_model_sha256"]
    else:
        assert tok.identity["src_model_sha256"] != tok.identity["tgt_model_sha256"]
        assert "Laden" in "".join(tok.src_pieces(tok.encode_src(["Laden"])[0]))


def test_cache_reuse_and_train_split_only(tmp_path: Path, capsys) -> None:
    first = build(tmp_path, corpus(TRAIN))
    (model_dir,) = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    model_files = sorted(model_dir.glob("*.model"))
    mtimes = [p.stat().st_mtime_ns for p in model_files]
    assert "training sentencepiece" in capsys.readouterr().out

    # Another validation split does not change the tokenizer: only train is read.
    second = build(tmp_path, corpus(TRAIN, valid=[("Völlig anders!", "Quite different!")]))
    assert f"reusing tokenizer {model_dir}" in capsys.readouterr().out
    assert [p.stat().st_mtime_ns for p in model_files] == mtimes
    assert second.identity == first.identity
    assert len(list(tmp_path.iterdir())) == 1  # no temporary folder left behind

    # Another train split, or another setting, trains a new one.
    build(tmp_path, corpus(TRAIN[:-1]))
    build(tmp_path, corpus(TRAIN), vocab_size=300)
    assert capsys.readouterr().out.count("training sentencepiece") == 2
    assert len(list(tmp_path.iterdir())) == 3


def test_save_and_load(tmp_path: Path) -> None:
    tok = build(tmp_path / "cache", corpus(TRAIN), joint=False)
    tok.save(tmp_path / "run" / "tokenizer")
    loaded = Tokenizer.load(tmp_path / "run" / "tokenizer")
    assert loaded.identity == tok.identity
    text = ["Jane ging in den Laden."]
    assert loaded.encode_src(text) == tok.encode_src(text)


def test_load_errors_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"tokenizer\.json: no such file"):
        Tokenizer.load(tmp_path / "nothing")
    tok = build(tmp_path / "cache", corpus(TRAIN), joint=False)
    tok.save(tmp_path / "saved")
    model = tmp_path / "saved" / "spm.en.model"
    model.write_bytes(b"not a sentencepiece model")
    with pytest.raises(UserError, match="corrupt sentencepiece model"):
        Tokenizer.load(tmp_path / "saved")
    model.unlink()
    with pytest.raises(UserError, match=r"spm\.en\.model: the tgt sentencepiece model is missing"):
        Tokenizer.load(tmp_path / "saved")


def test_nbest_segmentations_decode_to_the_text_best_first(tmp_path: Path) -> None:
    tok = build(tmp_path, corpus(TRAIN))
    texts = [tgt for _, tgt in TRAIN[:5]]
    for text, best, (candidates, scores) in zip(
        texts, tok.encode_tgt(texts), tok.nbest_tgt(texts, 4), strict=True
    ):
        assert candidates[0] == best
        assert 1 < len(candidates) <= 4 and len(set(map(tuple, candidates))) == len(candidates)
        assert scores == sorted(scores, reverse=True)
        assert all(tok.decode_tgt(ids) == text for ids in candidates)


@pytest.mark.parametrize("type_", ["unigram", "bpe"])
def test_byte_fallback_pieces_span_their_own_character(tmp_path: Path, type_: str) -> None:
    tok = build(tmp_path, corpus(TRAIN), type=type_)
    text = "Jane 東 went to 😀 the store."
    ids = tok.encode_tgt([text])[0]
    spans = tok.tgt_spans([text])[0]
    assert len(spans) == len(ids)
    byte_spans = [span for span, piece in zip(spans, tok.tgt_pieces(ids), strict=True)
                  if piece.startswith("<0x")]
    kanji, emoji = text.index("東"), text.index("😀")
    assert byte_spans == [(kanji, kanji + 1)] * 3 + [(emoji, emoji + 1)] * 4  # UTF-8 bytes
    distinct = [span for i, span in enumerate(spans) if i == 0 or span != spans[i - 1]]
    assert "".join(text[start:end] for start, end in distinct) == text  # in order, no gaps
