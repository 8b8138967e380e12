"""The hf and files corpus sources, cleaning, and load_corpus's dispatch and report."""

from __future__ import annotations

from pathlib import Path

import datasets
import huggingface_hub.constants
import pytest

from seq2seq.config import FilesDataConfig
from seq2seq.data import data_root, load_corpus
from seq2seq.data.cleaning import clean_pairs
from seq2seq.data.files import load_files
from seq2seq.data.hf import load_hf
from seq2seq.errors import UserError

PAIRS = {
    "train": [("Guten Morgen.", "Good morning."), ("Wie geht es dir?", "How are you?")] * 3,
    "validation": [("Danke schön.", "Thank you.")],
    "test": [("Bis bald.", "See you soon."), ("Gute Nacht.", "Good night.")],
}


@pytest.fixture(autouse=True)
def _private_hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the datasets cache of these tests out of the user's ~/.cache."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")


def write_hub_parquet_export(root: Path, config: str) -> None:
    """A local copy of the hub's parquet export layout: <config>/<split>/0000.parquet."""
    for split, pairs in PAIRS.items():
        folder = root / config / split
        folder.mkdir(parents=True)
        records = [{"translation": {"de": de, "en": en}} for de, en in pairs]
        datasets.Dataset.from_list(records).to_parquet(str(folder / "0000.parquet"))


def test_hf_reads_the_parquet_export_layout(tmp_path: Path) -> None:
    write_hub_parquet_export(tmp_path / "hub", "iwslt2017-de-en")
    corpus = load_hf(
        path=str(tmp_path / "hub"),
        config="iwslt2017-de-en",
        revision="refs/convert/parquet",
        data_files=None,
        src_lang="en",
        tgt_lang="de",
    )
    assert set(corpus) == {"train", "validation", "test"}
    for split, pairs in PAIRS.items():
        assert corpus[split]["src"] == [en for _, en in pairs]
        assert corpus[split]["tgt"] == [de for de, _ in pairs]


def test_hf_missing_language_and_split(tmp_path: Path) -> None:
    write_hub_parquet_export(tmp_path / "hub", "iwslt2017-de-en")
    with pytest.raises(UserError, match="not ko and en"):
        load_hf(
            path=str(tmp_path / "hub"),
            config="iwslt2017-de-en",
            revision=None,
            data_files=None,
            src_lang="ko",
            tgt_lang="en",
        )
    with pytest.raises(UserError, match="has no validation split"):
        load_hf(
            path=str(tmp_path / "hub"),
            config=None,
            revision=None,
            data_files={"train": "iwslt2017-de-en/train/*.parquet"},
            src_lang="de",
            tgt_lang="en",
        )


def test_hf_offline_fetch_failure_is_a_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(UserError) as err:
        load_hf(
            path="seq2seq-tests/no-such-dataset",
            config="iwslt2017-de-en",
            revision="refs/convert/parquet",
            data_files=None,
            src_lang="de",
            tgt_lang="en",
        )
    message = str(err.value)
    assert message.startswith(
        "could not fetch dataset seq2seq-tests/no-such-dataset (iwslt2017-de-en) from the "
        "Hugging Face hub: "
    )
    assert "HF_DATASETS_OFFLINE=1" in message and "data=files" in message


def write_files(tmp_path: Path, pairs: dict[str, list[tuple[str, str]]]) -> dict[str, dict]:
    src_files, tgt_files = {}, {}
    for split, rows in pairs.items():
        src_files[split] = str(tmp_path / f"{split}.de")
        tgt_files[split] = str(tmp_path / f"{split}.en")
        Path(src_files[split]).write_text("".join(de + "\n" for de, _ in rows), encoding="utf-8")
        Path(tgt_files[split]).write_text("".join(en + "\n" for _, en in rows), encoding="utf-8")
    return {"src_files": src_files, "tgt_files": tgt_files}


def test_files_source_reads_parallel_lines(tmp_path: Path) -> None:
    corpus = load_files(**write_files(tmp_path, PAIRS))
    assert corpus["test"]["src"] == ["Bis bald.", "Gute Nacht."]
    assert corpus["test"]["tgt"] == ["See you soon.", "Good night."]
    assert len(corpus["train"]) == 6


def test_files_source_errors_name_the_file(tmp_path: Path) -> None:
    files = write_files(tmp_path, PAIRS)

    (tmp_path / "validation.en").unlink()
    with pytest.raises(UserError, match=r"validation\.en: no such file"):
        load_files(**files)
    write_files(tmp_path, PAIRS)

    (tmp_path / "train.en").write_text("Good morning.\n" * 5, encoding="utf-8")
    with pytest.raises(UserError, match=r"train\.de has 6 lines but .*train\.en has 5"):
        load_files(**files)
    write_files(tmp_path, PAIRS)

    lines = [f"Satz {i}.".encode() for i in range(6)]
    lines[4] = b"Kaputt \xc3\x28."
    (tmp_path / "train.de").write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(UserError, match=r"train\.de line 5: invalid UTF-8"):
        load_files(**files)
    write_files(tmp_path, PAIRS)

    (tmp_path / "test.de").write_text("", encoding="utf-8")
    (tmp_path / "test.en").write_text("", encoding="utf-8")
    with pytest.raises(UserError, match=r"test\.de and .*test\.en are empty"):
        load_files(**files)

    del files["tgt_files"]["test"]
    with pytest.raises(UserError, match="data.tgt_files has no test entry"):
        load_files(**files)


def test_cleaning_rules() -> None:
    src = ["", "ein zwei drei vier", "a b c d e f g h i j k l m", "kurz gut", "x " * 21]
    tgt = ["Hello.", "one two three four", "a b c d", "short good", "y"]
    keep, dropped = clean_pairs(src, tgt, max_words=20, max_ratio=3.0)
    assert keep == [1, 3]
    assert dropped == {"empty": 1, "too_long": 1, "ratio": 1}
    # A large ratio between short sides is allowed (both sides must exceed 3 words).
    assert clean_pairs(["a"], ["a b c"], max_words=10, max_ratio=1.5)[0] == [0]


def files_config(tmp_path: Path, **settings: object) -> FilesDataConfig:
    """A files corpus config with the cleaning of configs/data/files.yaml."""
    values: dict = dict(
        name="tiny", source="files", src_lang="de", tgt_lang="en", test_set="tiny-test",
        bleu_tokenize=None, root=str(tmp_path), max_words=100, max_ratio=3.0,
        max_train_pairs=None, probe=[],
    )
    values.update(settings)
    return FilesDataConfig(**values)


def test_load_corpus_cleans_train_only_and_reports(tmp_path: Path, capsys) -> None:
    pairs = {name: list(rows) for name, rows in PAIRS.items()}
    pairs["train"].append(("", "Empty source."))
    pairs["validation"].append(("", "Kept as published."))
    cfg = files_config(tmp_path, max_train_pairs=4, **write_files(tmp_path, pairs))
    corpus = load_corpus(cfg)
    assert len(corpus["train"]) == 4
    assert len(corpus["validation"]) == 2
    out = capsys.readouterr().out
    assert "train 4 / validation 2 / test 2 pairs" in out
    assert "empty 1" in out


def test_load_corpus_unknown_source(tmp_path: Path) -> None:
    cfg = files_config(tmp_path, source="web", **write_files(tmp_path, PAIRS))
    with pytest.raises(UserError, match="data.source='web' is unknown"):
        load_corpus(cfg)


def test_data_root() -> None:
    assert data_root(None) == Path(__file__).resolve().parents[1] / "data"
    assert data_root("/tmp/somewhere") == Path("/tmp/somewhere")


def test_segmentation_sampler_is_seeded_varied_and_exact(tmp_path: Path) -> None:
    """Subword regularization draws from the n best segmentations by P^alpha, from (seed,
    epoch) alone; every draw decodes to the text."""
    from seq2seq.corpus import SegmentationSampler, prepare_data
    from tests.tiny import tiny_config

    cfg = tiny_config(tmp_path)
    data = prepare_data(cfg.data, cfg.tokenizer, verbose=False)
    split, tok = data.splits["train"], data.tokenizer
    sampler = SegmentationSampler(tok, split, alpha=0.5, nbest=4, max_src_len=256,
                                  max_tgt_len=256)
    first = sampler.sample(seed=1, epoch=0)
    again = SegmentationSampler(tok, split, 0.5, 4, 256, 256).sample(seed=1, epoch=0)
    assert again.src_ids == first.src_ids and again.tgt_ids == first.tgt_ids
    assert sampler.sample(seed=1, epoch=1).tgt_ids != first.tgt_ids
    assert first.src_ids != split.src_ids and first.tgt_ids != split.tgt_ids
    assert [tok.decode_tgt(ids) for ids in first.tgt_ids] == split.tgt_text
    # a sharp distribution (large alpha) keeps the best segmentation almost always
    sharp = SegmentationSampler(tok, split, 50.0, 4, 256, 256).sample(seed=1, epoch=0)
    same = sum(a == b for a, b in zip(sharp.tgt_ids, split.tgt_ids, strict=True))
    assert same > 0.95 * len(split)
