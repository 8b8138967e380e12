"""Corpus BLEU/chrF through sacrebleu, and BLEU by source length."""

import pytest
import sacrebleu

from seq2seq.errors import UserError
from seq2seq.evaluation.metrics import (
    bleu_by_length,
    bleu_gap_by_length,
    bleu_tokenize_for,
    score,
)

HYPS = [
    "Jane went to the store.",
    "The cat sat on a mat.",
    "I do not know it.",
    "Berlin is big and beautiful.",
]
REFS = [
    "Jane went to the shop.",
    "The cat sat on the mat.",
    "I don't know that.",
    "Berlin is large and beautiful.",
]


def test_score_agrees_with_sacrebleu_called_directly():
    scores = score(HYPS, REFS)
    assert scores.bleu == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert scores.chrf == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)
    assert 0 < scores.bleu < 100
    assert scores.n == 4


def test_identical_hypotheses_score_100():
    scores = score(REFS, REFS)
    assert scores.bleu == pytest.approx(100.0)
    assert scores.chrf == pytest.approx(100.0)


def test_signatures_name_tokenizer_and_version():
    scores = score(HYPS, REFS)
    assert "tok:13a" in scores.bleu_signature
    assert f"version:{sacrebleu.__version__}" in scores.bleu_signature
    assert "nc:6" in scores.chrf_signature
    assert set(scores.as_dict()) == {"bleu", "chrf", "bleu_signature", "chrf_signature", "n"}


def test_tokenizer_is_passed_through():
    scores = score(HYPS, REFS, tokenize="char")
    assert "tok:char" in scores.bleu_signature
    assert scores.bleu == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS], tokenize="char").score)
    assert scores.bleu != pytest.approx(score(HYPS, REFS).bleu)


@pytest.mark.parametrize(
    ("tgt_lang", "tokenize"),
    [("ja", "ja-mecab"), ("zh", "zh"), ("zh-TW", "zh"), ("ko", "ko-mecab"), ("KO", "ko-mecab"),
     ("en", "13a"), ("de", "13a"), ("tgt", "13a")],
)
def test_an_unset_tokenizer_is_the_target_languages(tgt_lang: str, tokenize: str) -> None:
    assert bleu_tokenize_for(tgt_lang) == tokenize  # ja-mecab and ko-mecab need no package here


def test_a_named_tokenizer_wins_over_the_target_language() -> None:
    assert bleu_tokenize_for("ko", "13a") == "13a"
    assert bleu_tokenize_for("en", "char") == "char"


def test_a_13a_target_scores_as_before() -> None:
    chosen = score(HYPS, REFS, tokenize=bleu_tokenize_for("en"))
    assert chosen == score(HYPS, REFS)
    assert "tok:13a" in chosen.bleu_signature


def test_a_chinese_target_is_scored_on_characters() -> None:
    hyps, refs = ["我喜欢吃寿司。"], ["我喜欢吃米饭。"]
    chinese = score(hyps, refs, tokenize=bleu_tokenize_for("zh"))
    assert "tok:zh" in chinese.bleu_signature
    assert chinese.bleu == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], tokenize="zh").score)
    assert chinese.bleu > 0
    assert score(hyps, refs).bleu == 0  # 13a sees one word, and it differs


@pytest.mark.parametrize(
    ("hyps", "refs", "message"),
    [(["a"], ["a", "b"], "1 hypotheses but 2 references"), ([], [], "no sentences")],
)
def test_bad_pairs_are_user_errors(hyps, refs, message):
    with pytest.raises(UserError, match=message):
        score(hyps, refs)


def test_unknown_tokenizer_is_a_user_error():
    with pytest.raises(UserError, match="unknown BLEU tokenizer 'nope'.*13a"):
        score(HYPS, REFS, tokenize="nope")


def test_length_buckets_partition_the_corpus():
    lengths = [1, 5, 6, 10, 16, 20, 21, 30, 31, 50, 0, 3]
    sources = [" ".join(["w"] * n) for n in lengths]
    hyps = [f"sentence number {i} here" for i in range(len(lengths))]
    refs = [f"sentence number {i} there" for i in range(len(lengths))]
    rows = bleu_by_length(sources, hyps, refs)
    counts = {row["bucket"]: row["n"] for row in rows}
    # 11-15 has no sentence and is omitted; the empty source counts in the first bucket
    assert counts == {"1-5": 4, "6-10": 2, "16-20": 2, "21-30": 2, "31+": 2}
    assert sum(counts.values()) == len(lengths)
    assert [row["bucket"] for row in rows] == ["1-5", "6-10", "16-20", "21-30", "31+"]


def test_length_buckets_omit_empty_and_score_each_bucket():
    sources = ["a b", "a b c", " ".join(["w"] * 40)]
    hyps = ["x y z w", "x y z w", "p q r s"]
    refs = ["x y z w", "x y z w", "p q r t"]
    rows = bleu_by_length(sources, hyps, refs, edges=(5, 10))
    assert [row["bucket"] for row in rows] == ["1-5", "11+"]
    assert rows[0] == {"bucket": "1-5", "n": 2, "bleu": pytest.approx(100.0),
                       "length_ratio": pytest.approx(1.0), "precisions": [100.0] * 4}
    assert rows[1]["bleu"] == pytest.approx(score(hyps[2:], refs[2:]).bleu)


def test_length_buckets_say_whether_output_is_short_or_wrong():
    """A bucket whose output drops words has a length ratio under 1 and full precision; one
    whose output has the right length with a wrong word has ratio 1 and lower precision."""
    sources = ["a b", "a b c", " ".join(["w"] * 40), " ".join(["w"] * 45)]
    refs = ["the cat sat on the mat", "a dog ran in the park",
            "one two three four five six seven eight", "red green blue white black pink"]
    hyps = ["the cat sat on", "a dog ran in", "one two three four five six seven nine",
            "red green blue white black pink"]
    short, wrong = bleu_by_length(sources, hyps, refs, edges=(5, 10))
    assert short["length_ratio"] == pytest.approx(8 / 12)
    assert short["precisions"] == [100.0] * 4
    assert wrong["length_ratio"] == pytest.approx(1.0)
    assert wrong["precisions"][0] == pytest.approx(100 * 13 / 14)
    assert wrong["precisions"][3] == pytest.approx(100 * 7 / 8)
    assert short["bleu"] < 100 and wrong["bleu"] < 100


def test_length_buckets_reject_bad_edges_and_mismatched_sources():
    with pytest.raises(ValueError, match="strictly increasing"):
        bleu_by_length(["a"], ["a"], ["a"], edges=(10, 5))
    with pytest.raises(UserError, match="2 sources but 1 references"):
        bleu_by_length(["a", "b"], ["a"], ["a"])


def test_the_gap_by_length_is_the_bucket_scores_difference_with_a_paired_interval():
    refs = [f"the cat number {i} sat on the mat today" for i in range(40)]
    sources = [" ".join(["w"] * (3 if i < 20 else 12)) for i in range(40)]
    # short bucket: the system is right and the baseline wrong everywhere; long bucket: both
    # right on half of the sentences, on different halves, so only the draw decides the gap
    system = refs[:20] + [r if i % 2 else "a dog ran" for i, r in enumerate(refs[20:])]
    baseline = ["a dog ran"] * 20 + [r if i % 2 == 0 else "a dog ran"
                                     for i, r in enumerate(refs[20:])]
    study = bleu_gap_by_length(sources, system, baseline, refs, edges=(5,), resamples=200)
    rows = study["buckets"]
    ours, theirs = (bleu_by_length(sources, h, refs, edges=(5,)) for h in (system, baseline))
    assert [r["bucket"] for r in rows] == ["1-5", "6+"] and [r["n"] for r in rows] == [20, 20]
    for row, a, b in zip(rows, ours, theirs, strict=True):
        assert row["gap"] == pytest.approx(a["bleu"] - b["bleu"])
        assert row["low"] <= row["gap"] <= row["high"]
    assert rows[0]["low"] > 50  # right against wrong on every sentence of the bucket
    assert rows[1]["low"] < 0 < rows[1]["high"]  # a coin toss: the interval spans zero
    assert study == bleu_gap_by_length(sources, system, baseline, refs, edges=(5,),
                                       resamples=200)
    step = study["steps"][0]  # the gap falls from one bucket to the next, beyond the draw
    assert step["change"] == pytest.approx(rows[1]["gap"] - rows[0]["gap"])
    assert step["low"] <= step["change"] <= step["high"] < 0
    same = bleu_gap_by_length(sources, system, system, refs, edges=(5,), resamples=50)
    assert all(r["gap"] == r["low"] == r["high"] == 0 for r in same["buckets"] + [
        {"gap": s["change"], "low": s["low"], "high": s["high"]} for s in same["steps"]])
    with pytest.raises(UserError, match="1 hypotheses but 40 references"):
        bleu_gap_by_length(sources, system, baseline[:1], refs)


@pytest.mark.parametrize("by_family", [False, True])
def test_every_bootstrap_draw_holds_every_bucket(by_family: bool) -> None:
    # 38 short sentences and 2 long ones: drawing 40 units from the whole test set misses both
    # long ones in about (38/40)**40 = 13% of the draws, a bucket scored as a gap of 0. Drawn
    # within each bucket, every draw holds the long bucket, where the system is right and the
    # baseline wrong on both sentences: the gap is the same in every draw.
    refs = [f"the cat number {i} sat on the mat today" for i in range(40)]
    sources = [" ".join(["w"] * (3 if i < 38 else 12)) for i in range(40)]
    system = list(refs)
    baseline = [r if i % 2 else "a dog ran" for i, r in enumerate(refs[:38])] + ["a dog ran"] * 2
    # families of 4 pairs; the two long pairs belong to families that also hold short ones
    families = [f"family{i // 4}" for i in range(38)] + ["family0", "family5"]
    study = bleu_gap_by_length(sources, system, baseline, refs, edges=(5,), resamples=400,
                               documents=families if by_family else None)
    long = study["buckets"][1]
    assert (long["bucket"], long["n"]) == ("6+", 2)
    assert long["gap"] > 50
    assert long["low"] == pytest.approx(long["gap"]) and long["high"] == pytest.approx(long["gap"])
    step = study["steps"][0]  # the short bucket's gap varies, the long one's does not
    assert step["low"] <= step["change"] <= step["high"]
    assert step["low"] > 0  # not pulled down by draws that score the long bucket as 0


KO_HYPS = ["제인이 가게에 갔다.", "수식을 포함하는 셀을 선택합니다."]
KO_REFS = ["제인은 가게에 갔다.", "수식을 포함하는 셀을 선택하십시오."]


def test_korean_bleu_with_ko_mecab() -> None:
    pytest.importorskip("mecab_ko", reason="the `ko` extra (make installs it)")
    scores = score(KO_HYPS, KO_REFS, tokenize=bleu_tokenize_for("ko"))
    assert "tok:ko-mecab" in scores.bleu_signature
    assert scores.bleu == pytest.approx(
        sacrebleu.corpus_bleu(KO_HYPS, [KO_REFS], tokenize="ko-mecab").score)
    # morphemes: 제인이 and 제인은 share the noun 제인, so ko-mecab scores above eojeol (13a)
    assert scores.bleu > score(KO_HYPS, KO_REFS, tokenize="13a").bleu


def test_korean_bleu_falls_back_to_13a_in_one_line(monkeypatch, capsys) -> None:
    from sacrebleu.tokenizers import tokenizer_ko_mecab

    from seq2seq.evaluation import metrics

    monkeypatch.setattr(tokenizer_ko_mecab, "MeCab", None)  # what sacrebleu sees without it
    monkeypatch.setattr(metrics, "_FELL_BACK", set())
    scores = score(KO_HYPS, KO_REFS, tokenize="ko-mecab")
    assert "tok:13a" in scores.bleu_signature
    assert scores.bleu == pytest.approx(sacrebleu.corpus_bleu(KO_HYPS, [KO_REFS]).score)
    score(KO_HYPS, KO_REFS, tokenize="ko-mecab")
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1  # once a process
    assert "ko-mecab" in lines[0] and "falls back to 13a" in lines[0] and ".[ko]" in lines[0]
