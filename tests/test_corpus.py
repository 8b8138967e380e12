"""seq2seq/corpus.py: training pairs too long for EOS are dropped whole, never cut; the
validation subset is spread over the split."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from seq2seq.corpus import EncodedSplit, SegmentationSampler, prepare_data
from seq2seq.errors import UserError
from seq2seq.runtime import setup_runtime
from seq2seq.tokenization import Tokenizer
from seq2seq.training.setup import build_parts
from tests.tiny import HAS_EFLOMAL, tiny_config


def src_text(tok: Tokenizer, ids: list[int]) -> str:
    return "".join(tok.src_pieces(ids)).replace("\u2581", " ").strip()


def test_training_pairs_too_long_for_eos_are_dropped_not_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tiny_config(tmp_path)
    full = prepare_data(cfg.data, cfg.tokenizer, verbose=False).splits
    # limits at the median lengths: a pair fits when both sides are shorter
    max_src = sorted(full["train"].src_lens)[len(full["train"]) // 2]
    max_tgt = sorted(full["train"].tgt_lens)[len(full["train"]) // 2]
    fits = [s < max_src and t < max_tgt
            for s, t in zip(full["train"].src_lens, full["train"].tgt_lens, strict=True)]
    assert 0 < sum(fits) < len(fits)
    tok_cfg = OmegaConf.merge(cfg.tokenizer, {"max_src_len": max_src, "max_tgt_len": max_tgt})
    capsys.readouterr()

    data = prepare_data(cfg.data, tok_cfg)
    train, tok = data.splits["train"], data.tokenizer
    assert len(train) == sum(fits) and train.dropped == len(fits) - sum(fits)
    assert train.src_text == [t for t, keep in zip(full["train"].src_text, fits, strict=True)
                              if keep]
    assert all(len(s) < max_src for s in train.src_ids)
    assert all(len(t) < max_tgt for t in train.tgt_ids)
    # every kept pair is whole: its ids are its texts' full segmentations
    assert train.src_ids == tok.encode_src(train.src_text)
    assert train.tgt_ids == tok.encode_tgt(train.tgt_text)
    out = capsys.readouterr().out
    assert (f"train: {train.dropped:,} pairs dropped: over tokenizer.max_src_len/max_tgt_len "
            f"({max_src}/{max_tgt}) pieces") in out
    # validation and test keep every pair (their references are text); sources are cut to fit
    for name in ("validation", "test"):
        split = data.splits[name]
        assert len(split) == len(full[name]) and split.dropped == 0
        assert split.truncated > 0 and all(len(s) < max_src for s in split.src_ids)


def test_sampled_segmentations_never_cut_a_training_pair(tmp_path: Path) -> None:
    """A drawn segmentation too long for EOS falls back to the pair's best one: every epoch
    keeps the same rows, each whole, and the draws stay a function of (seed, epoch)."""
    cfg = tiny_config(tmp_path)
    data = prepare_data(cfg.data, cfg.tokenizer, verbose=False)
    split, tok = data.splits["train"], data.tokenizer
    # the best segmentations all fit; many of the sampled (more, shorter pieces) do not
    max_src, max_tgt = max(split.src_lens) + 1, max(split.tgt_lens) + 1
    free = SegmentationSampler(tok, split, 0.1, 8, 10_000, 10_000).sample(seed=1, epoch=0)
    assert any(len(s) >= max_src for s in free.src_ids)
    assert any(len(t) >= max_tgt for t in free.tgt_ids)

    sampler = SegmentationSampler(tok, split, 0.1, 8, max_src, max_tgt)
    first = sampler.sample(seed=1, epoch=0)
    assert first.src_text == split.src_text and first.tgt_text == split.tgt_text
    assert all(len(s) < max_src for s in first.src_ids)
    assert all(len(t) < max_tgt for t in first.tgt_ids)
    assert [src_text(tok, ids) for ids in first.src_ids] == split.src_text
    assert [tok.decode_tgt(ids) for ids in first.tgt_ids] == split.tgt_text
    assert first.src_ids != split.src_ids  # still sampled where the draw fits
    again = SegmentationSampler(tok, split, 0.1, 8, max_src, max_tgt).sample(seed=1, epoch=0)
    assert again.src_ids == first.src_ids and again.tgt_ids == first.tgt_ids


def test_no_training_pair_fitting_is_a_user_error(tmp_path: Path) -> None:
    cfg = tiny_config(tmp_path, "tokenizer.max_src_len=2")
    with pytest.raises(UserError, match="no training pair fits tokenizer.max_src_len"):
        prepare_data(cfg.data, cfg.tokenizer, verbose=False)


def test_a_spread_subset_samples_the_whole_split_evenly() -> None:
    split = EncodedSplit([f"s{i}" for i in range(10)], [f"t{i}" for i in range(10)],
                         [[i] for i in range(10)], [[i, i] for i in range(10)])
    assert split.spread(None) == split.spread(10) == split.spread(99) == list(range(10))
    assert split.spread(4) == [0, 2, 5, 7]  # from the first quarter to the last
    sub = split.subset([0, 5, 7])
    assert (sub.src_text, sub.tgt_text, sub.src_ids, sub.tgt_ids) == (
        ["s0", "s5", "s7"], ["t0", "t5", "t7"], [[0], [5], [7]], [[0, 0], [5, 5], [7, 7]])


def test_validation_scores_the_same_spread_subset_with_its_own_links(tmp_path: Path) -> None:
    """eval_max_sentences: loss, BLEU and AER on N pairs spread over the split (a corpus that
    lists its sources one after another is sampled across all of them), each with its links
    (without the align extra: no links, and no AER)."""
    cfg = tiny_config(tmp_path, "trainer.eval_max_sentences=6")
    rt = setup_runtime("cpu", "fp32", 1, 0)
    data = prepare_data(cfg.data, cfg.tokenizer, verbose=False)
    parts = build_parts(cfg, rt, data, tmp_path / "run")
    try:
        valid, validator = data.splits["validation"], parts.validator
        keep = valid.spread(6)
        assert keep[-1] >= len(valid) * 3 // 4
        assert validator.valid.src_text == [valid.src_text[i] for i in keep]
        row = validator.validate(step=1, elapsed=0.0)
        assert len(validator.valid.src_ids) == 6 and row["valid_bleu"] is not None
        if HAS_EFLOMAL:
            assert validator.valid_links == [data.links["validation"][i] for i in keep]
            assert row["valid_aer"] is not None
        else:
            assert validator.valid_links is None and row.get("valid_aer") is None
    finally:
        parts.close()
