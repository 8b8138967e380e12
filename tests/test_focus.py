"""The attention focus metric on hand-made attention matrices."""

import pytest
import torch

from seq2seq.evaluation.focus import (
    FocusResult,
    aggregate_to_words,
    copied_word_weights,
    copy_alignments,
    focus_metric,
    focus_of_sentence,
    transformer_focus,
    word_spans,
)

# Four copy words, each a single piece: every target word matches exactly one source word.
NAMES = ["▁Jane", "▁Paris", "▁AIDS", "▁1999"]


def test_word_spans_group_pieces_and_drop_specials():
    pieces = ["▁Jane", "▁ging", "▁in", "▁den", "▁La", "den", ".", "</s>"]
    assert word_spans(pieces) == [[0], [1], [2], [3], [4, 5, 6]]
    # a first piece without "▁" starts a word; a bare "▁" starts one too
    assert word_spans(["de", "n", "▁", ",", "▁x"]) == [[0, 1], [2, 3], [4]]
    assert word_spans(["<s>", "lin", "</s>"]) == [[1]]


def test_aggregation_sums_source_pieces_and_averages_target_pieces():
    # source: "▁in" "▁Ber" "lin" (2 words); target: "▁to" "▁Ber" "lin" (2 words)
    attn = torch.tensor(
        [
            [0.6, 0.3, 0.1],
            [0.2, 0.5, 0.3],
            [0.0, 0.1, 0.9],
        ]
    )
    words = aggregate_to_words(attn, [[0], [1, 2]], [[0], [1, 2]])
    expected = torch.tensor(
        [
            [0.6, 0.4],  # "to": 0.3 + 0.1 on "Berlin"
            [0.1, 0.9],  # "Berlin": mean of [0.2, 0.8] and [0.0, 1.0]
        ]
    )
    torch.testing.assert_close(words, expected)


def test_aggregation_keeps_leading_dims_and_does_not_renormalise():
    attn = torch.full((2, 3, 3, 4), 0.25)  # (L, H, T, S); column 3 is EOS, in no span
    words = aggregate_to_words(attn, [[0], [1, 2]], [[0, 1], [2]])
    assert words.shape == (2, 3, 2, 2)
    torch.testing.assert_close(words[1, 2], torch.tensor([[0.25, 0.5], [0.25, 0.5]]))


def test_aggregation_rejects_spans_outside_the_matrix():
    with pytest.raises(ValueError, match="source spans"):
        aggregate_to_words(torch.eye(2), [[0], [2]], [[0], [1]])


def test_copy_alignments_need_exactly_one_match():
    src = ["Jane", "ging", "mit", "Jane", "nach", "Berlin", "und", "Paris", "."]
    tgt = ["Jane", "went", "to", "Berlin", "and", "Paris", "."]
    # "Jane" is twice in the source (skipped), "." is punctuation only (skipped)
    assert copy_alignments(src, tgt) == [(3, 5), (5, 7)]
    assert copy_alignments(["Tom"], ["Anna"]) == []


def test_copy_alignments_strip_surrounding_punctuation_case_sensitively():
    src = ["„Berlin“", "ist", "AIDS-frei,", "sagt", "O'Neill."]
    tgt = ["(Berlin)", "is", "AIDS-frei", "says", "O'Neill", "berlin", "IST", "--"]
    assert copy_alignments(src, tgt) == [(0, 0), (2, 2), (4, 4)]


def test_identity_attention_is_fully_focused():
    attn = torch.eye(len(NAMES) + 1)  # with the EOS row and column
    n, focused, weight = focus_of_sentence(attn, NAMES, NAMES)
    assert (n, focused, weight) == (4, 4, pytest.approx(4.0))
    result = focus_metric([(attn, NAMES, NAMES)])
    assert result == FocusResult(accuracy=1.0, mean_weight=pytest.approx(1.0), n_words=4)


def test_uniform_attention_scores_chance_and_ties_are_not_focused():
    attn = torch.full((4, 4), 0.25)
    result = focus_metric([(attn, NAMES, NAMES)])
    assert result.mean_weight == pytest.approx(1 / 4)
    assert result.accuracy == 0.0  # a four-way tie focuses nothing, not even the first word


def test_near_uniform_attention_is_focused_only_where_the_bump_is():
    eps = 0.01
    attn = torch.full((4, 4), 0.25)
    attn[0] = torch.tensor([0.25 + 3 * eps, 0.25 - eps, 0.25 - eps, 0.25 - eps])  # Jane -> Jane
    attn[1] = torch.tensor([0.25 + 3 * eps, 0.25 - eps, 0.25 - eps, 0.25 - eps])  # Paris -> Jane
    result = focus_metric([(attn, NAMES, NAMES)])
    assert result.accuracy == pytest.approx(1 / 4)
    assert result.mean_weight == pytest.approx((0.28 + 0.24 + 0.25 + 0.25) / 4)


def test_weight_on_eos_counts_against_the_match():
    src = ["▁Jane", "▁ging", "</s>"]
    tgt = ["▁Jane", "▁went", "</s>"]
    attn = torch.tensor(
        [
            [0.45, 0.10, 0.45],
            [0.20, 0.30, 0.50],
            [0.00, 0.00, 1.00],
        ]
    )
    assert focus_of_sentence(attn, src, tgt) == (1, 1, pytest.approx(0.45))


def test_target_pieces_are_averaged_before_the_argmax():
    src = ["▁nach", "▁Ber", "lin"]
    tgt = ["▁to", "▁Ber", "lin"]
    attn = torch.tensor(
        [
            [1.0, 0.0, 0.0],
            [0.1, 0.5, 0.4],  # "Ber" looks at "Berlin" (0.9)
            [0.7, 0.2, 0.1],  # "lin" looks at "nach" (0.7)
        ]
    )
    # Berlin row: mean([0.1, 0.9], [0.7, 0.3]) = [0.4, 0.6] -> focused with weight 0.6
    assert focus_of_sentence(attn, src, tgt) == (1, 1, pytest.approx(0.6))
    attn[2] = torch.tensor([0.9, 0.05, 0.05])  # now [0.5, 0.5]: a tie, not focused
    assert focus_of_sentence(attn, src, tgt) == (1, 0, pytest.approx(0.5))


def test_copied_word_weights_name_each_copied_word_of_the_probe():
    src = ["▁Jane", "▁ging", "▁in", "▁den", "▁La", "den", ".", "</s>"]
    tgt = ["▁Ja", "ne", "▁went", "▁in", "to", "▁the", "▁store", ".", "</s>"]
    attn = torch.full((len(tgt), len(src)), 0.02)
    attn[0, 0], attn[1, 0] = 0.9, 0.7  # "Jane": mean of its two pieces, 0.8 on "Jane"
    attn[3, 2] = 0.6  # "into" is not "in": no copy
    copied = copied_word_weights(attn, src, tgt)
    assert [word for word, _ in copied] == ["Jane"]
    assert copied[0][1] == pytest.approx(0.8)


def test_attention_must_match_the_pieces():
    with pytest.raises(ValueError, match="does not match 4 target and 4 source pieces"):
        focus_of_sentence(torch.eye(6), NAMES, NAMES)


def test_focus_metric_pools_sentences_and_is_none_without_copy_words():
    diagonal = (torch.eye(4), NAMES, NAMES)
    uniform = (torch.full((4, 4), 0.25), NAMES, NAMES)
    result = focus_metric([diagonal, uniform])
    assert result.accuracy == pytest.approx(0.5)
    assert result.mean_weight == pytest.approx((4 + 1) / 8)
    assert result.n_words == 8
    no_copy = (torch.eye(2), ["▁ich", "▁gehe"], ["▁I", "▁go"])
    assert focus_metric([no_copy]) == FocusResult(accuracy=None, mean_weight=None, n_words=0)
    assert focus_metric([]).as_dict() == {"accuracy": None, "mean_weight": None, "n_words": 0}


def test_transformer_focus_finds_the_aligned_head():
    num_layers, num_heads, n = 2, 3, len(NAMES)
    attn = torch.full((num_layers, num_heads, n + 1, n + 1), 1 / (n + 1))  # (L, H, T, S) + EOS
    attn[1, 2] = torch.eye(n + 1)
    result = transformer_focus([(attn, NAMES, NAMES), (attn, NAMES, NAMES)])
    assert result["best_head"] == {
        "layer": 1,
        "head": 2,
        "accuracy": 1.0,
        "mean_weight": pytest.approx(1.0),
        "n_words": 8,
    }
    # last layer averaged over heads: (1 + 2 * 1/5) / 3 on the match, 2/15 elsewhere
    assert result["last_layer_mean"] == {
        "accuracy": 1.0,
        "mean_weight": pytest.approx((1 + 2 / (n + 1)) / 3),
        "n_words": 8,
    }


def test_transformer_focus_without_copy_words_reports_none():
    no_copy = (torch.full((1, 2, 2, 2), 0.5), ["▁ich", "▁gehe"], ["▁I", "▁go"])
    result = transformer_focus([no_copy])
    assert result["best_head"]["accuracy"] is None
    assert result["best_head"]["layer"] is None
    assert result["last_layer_mean"]["n_words"] == 0
