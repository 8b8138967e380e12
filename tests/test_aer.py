"""The attention-alignment metric on hand-made matrices and links, and the eflomal reference
links on a real (tiny) corpus."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from seq2seq.alignment import Links, reference_links, symmetrize, word_spans, words
from seq2seq.evaluation.aer import (
    Counts,
    SplitAlignment,
    WordPair,
    diagonal,
    hard_alignment,
    piece_words,
    sentence_counts,
    shift_att,
    word_attention,
)
from tests.tiny import pairs


def links(sure: set[tuple[int, int]], possible: set[tuple[int, int]] = frozenset()) -> Links:
    return Links(frozenset(sure), frozenset(sure) | frozenset(possible))


def test_words_split_punctuation_from_words() -> None:
    assert words("Jane ging in den Laden.") == ["Jane", "ging", "in", "den", "Laden", "."]
    assert words("aunt’s 3.5 km!") == ["aunt", "’", "s", "3", ".", "5", "km", "!"]
    assert word_spans("Hi, you") == [(0, 2), (2, 3), (4, 7)]


def test_aer_formula() -> None:
    """S = {(0,0), (1,2)}, P = S + {(2,1)}; the model links target 0 -> source 0 and target 1
    -> source 2: A = {(0,0), (2,1)}, so AER = 1 - (|A∩S| + |A∩P|) / (|A| + |S|) = 1 - 3/4."""
    pair_links = links({(0, 0), (1, 2)}, {(2, 1)})
    counts = sentence_counts(torch.tensor([0, 2, -1]), pair_links, ["a", "b", "c"],
                             ["x", "y", "z"])
    assert (counts.links, counts.sure, counts.links_sure, counts.links_possible) == (2, 2, 1, 2)
    assert counts.summary()["aer"] == pytest.approx(0.25)
    assert counts.summary()["sure_accuracy"] == pytest.approx(1 / 2)  # target 2 missed source 1
    # a second sentence: A = S = {(1,0)}; the counts add up over the split
    total = Counts()
    total += counts
    total += sentence_counts(torch.tensor([1]), links({(1, 0)}), ["a", "b"], ["u"])
    assert total.summary()["aer"] == pytest.approx(1 - (2 + 3) / (3 + 3))
    assert total.summary()["sure_accuracy"] == pytest.approx(2 / 3)


def test_pieces_map_to_words_by_character_offsets() -> None:
    """'Jane ging in den Laden.' as pieces Ja|ne|_ging|_in|_den|_La|den.| where the last piece
    'den.' spans a word and the punctuation after it."""
    text = "Jane ging in den Laden."
    pieces = [(0, 2), (2, 4), (4, 9), (9, 12), (12, 16), (16, 19), (19, 23)]
    assert [text[a:b] for a, b in pieces][-1] == "den."
    assert piece_words(pieces, word_spans(text)) == [[0], [0], [1], [2], [3], [4], [4, 5]]
    assert piece_words([(0, 0), (4, 5)], word_spans(text)) == [[0], []]  # zero width; a space


def test_word_attention_means_target_pieces_and_sums_source_pieces() -> None:
    # source words: w0 = pieces 0+1, w1 = piece 2, piece 3 shared by w1 and w2; then EOS
    src_map = [[0], [0], [1], [1, 2]]
    # target words: v0 = pieces 0+1, v1 = piece 2; the EOS row is dropped
    tgt_map = [[0], [0], [1]]
    attn = torch.tensor([
        [0.5, 0.2, 0.1, 0.2, 0.0],
        [0.3, 0.3, 0.2, 0.0, 0.2],
        [0.0, 0.0, 0.2, 0.4, 0.4],
        [0.2, 0.2, 0.2, 0.2, 0.2],
    ])  # (T=3+EOS, S=4+EOS)
    w = word_attention(attn, src_map, tgt_map, n_src=3, n_tgt=2)
    expected_v0 = torch.tensor([(0.7 + 0.6) / 2, (0.1 + 0.2 / 2 + 0.2 + 0.0) / 2,
                                (0.2 / 2 + 0.0) / 2, (0.0 + 0.2) / 2])
    torch.testing.assert_close(w[0], expected_v0)
    torch.testing.assert_close(w[1], torch.tensor([0.0, 0.4, 0.2, 0.4]))
    torch.testing.assert_close(w.sum(-1), torch.ones(2))  # mass is kept
    # leading (layer, head) dimensions pass through
    assert word_attention(attn.expand(2, 3, 4, 5), src_map, tgt_map, 3, 2).shape == (2, 3, 2, 4)


def test_eos_winning_the_argmax_links_nothing() -> None:
    w = torch.tensor([[0.10, 0.05, 0.85],  # EOS wins although "Jane" has the most word mass
                      [0.60, 0.30, 0.10]])
    assert hard_alignment(w).tolist() == [-1, 0]
    counts = sentence_counts(hard_alignment(w), links({(0, 0)}), ["Jane", "x"], ["Jane", "y"], w)
    assert counts.copy_words == 1 and counts.copy_hits == 0
    assert counts.copy_mass == pytest.approx(0.10)


def test_uniform_attention_aligns_nothing() -> None:
    uniform = torch.full((4, 5), 1 / 5)  # 4 target words, 4 source words + EOS
    assert hard_alignment(uniform).tolist() == [-1, -1, -1, -1]
    # pieces one per word, uniform over pieces and EOS: still a tie everywhere
    pair = WordPair.of("Jane ging in den", "Jane went to the", [(0, 4), (4, 9), (9, 12),
                       (12, 16)], [(0, 4), (4, 9), (9, 12), (12, 16)],
                       links({(0, 0), (1, 1), (2, 2), (3, 3)}))
    counts = pair.counts(pair.word_attention(torch.full((5, 5), 1 / 5)))
    assert counts.links == 0 and counts.summary()["aer"] == 1.0
    assert counts.sure_hits == 0 and counts.copy_hits == 0


def test_the_two_baselines() -> None:
    assert diagonal(4, 4).tolist() == [0, 1, 2, 3]
    assert diagonal(3, 6).tolist() == [0, 2, 4]  # round(t * 6 / 3)
    assert diagonal(4, 2).tolist() == [0, 1, 1, 1]  # round(0.5) = 1, round(1.5) = 2 -> 1
    assert diagonal(4, 4, shift=1).tolist() == [1, 2, 3, -1]  # past the last word: no link
    counts = sentence_counts(diagonal(4, 4), links({(0, 0), (1, 1), (3, 2), (2, 3)}),
                             list("abcd"), list("wxyz"))
    assert counts.summary()["aer"] == pytest.approx(1 - 4 / 8)
    assert counts.summary(with_mass=False).keys() >= {"aer", "sure_accuracy", "copy_accuracy"}


def peaked_rows(columns: list[int], size: int, weight: float = 0.7) -> torch.Tensor:
    """(len(columns), size) attention: row t puts `weight` on columns[t], the rest evenly."""
    rows = torch.full((len(columns), size), (1 - weight) / (size - 1))
    rows[torch.arange(len(columns)), columns] = weight
    return rows


# "a b c" -> "x y z", one piece a word, word i <-> word i; rows and columns end with EOS (3)
ABC = WordPair.of("a b c", "x y z", [(0, 1), (1, 3), (3, 5)], [(0, 1), (1, 3), (3, 5)],
                  links({(0, 0), (1, 1), (2, 2)}))
PREDICTING = peaked_rows([0, 1, 2, 3], 4)  # the step predicting word t looks at source t
READING = peaked_rows([3, 0, 1, 2], 4)  # the step reading word t (step t + 1) looks at it
UNIFORM = torch.full((4, 4), 0.25)


def transformer_split(*layers: torch.Tensor) -> SplitAlignment:
    """ABC counted with one (T, S) pattern a layer, each layer's heads that pattern and uniform
    attention; the model's attention is the last layer's mean over heads."""
    heads = torch.stack([torch.stack([pattern, UNIFORM]) for pattern in layers])  # (L,2,T,S)
    split = SplitAlignment(Counts(), Counts(), Counts())
    split.add(ABC, heads[-1].mean(dim=0), heads)
    return split


def test_shift_att_reads_the_row_of_the_step_that_reads_the_word() -> None:
    shifted = shift_att(READING)
    assert torch.equal(shifted[:3], READING[1:]) and torch.equal(shifted[3], torch.zeros(4))
    assert hard_alignment(ABC.word_attention(READING)).tolist() == [-1, 0, 1]  # one late
    assert hard_alignment(ABC.word_attention(shifted)).tolist() == [0, 1, 2]
    # a word of two pieces x|y: its row is the mean of the two rows after its pieces' own
    two = WordPair.of("a b", "xy", [(0, 1), (1, 3)], [(0, 1), (1, 2)], links({(0, 0)}))
    attn = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.7, 0.1], [0.1, 0.1, 0.8]])  # (T=2+EOS, S)
    torch.testing.assert_close(two.word_attention(shift_att(attn)), (attn[1:2] + attn[2:]) / 2)
    torch.testing.assert_close(two.word_attention(attn), (attn[:1] + attn[1:2]) / 2)
    # leading (layer, head) dimensions pass through
    assert shift_att(READING.expand(2, 3, 4, 4)).shape == (2, 3, 4, 4)


def test_aer_per_layer_for_both_readings() -> None:
    """Layer 0 looks at the source word while predicting the target word, layer 1 while
    reading it: today's reading scores layer 0 perfect and Shift-Att layer 1.
    Layer 0 shifted links x -> b, y -> c and z to EOS: A = {(1,0), (2,1)}, no sure link, so
    AER = 1 - 0 / (2 + 3) = 1; layer 1 read today links x to EOS, y -> a, z -> b: AER 1 too."""
    report = transformer_split(PREDICTING, READING).report()
    assert [row["aer"] for row in report["layers"]] == [0.0, 1.0]
    assert [row["aer"] for row in report["shift_att"]["layers"]] == [1.0, 0.0]
    assert [row["sure_accuracy"] for row in report["shift_att"]["layers"]] == [0.0, 1.0]
    shift = report["shift_att"]
    assert (shift["layer"], shift["aer"], shift["chosen_on"]) == (1, 0.0, "this split")
    assert report["aer"] == 1.0  # the model's figure stays the last layer read today
    assert report["best_head"]["layer"] == 0 and report["best_head"]["aer"] == 0.0


def test_an_rnns_attention_is_also_read_with_shift_att() -> None:
    """Bahdanau's query is the previous state: an attention one word late is perfect read
    with Shift-Att, and both readings are reported (no layer to choose)."""
    split = SplitAlignment(Counts(), Counts(), Counts())
    split.add(ABC, READING)  # no heads: an RNN
    report = split.report()
    assert report["aer"] == 1.0 and "layers" not in report
    assert report["shift_att"] == {"layer": None, "chosen_on": "no choice", "layers": [],
                                   **split.shift_model.summary()}
    assert report["shift_att"]["aer"] == 0.0 and split.best_shift_layer() is None
    predicting = SplitAlignment(Counts(), Counts(), Counts())
    predicting.add(ABC, PREDICTING)  # on time: perfect as read, late with Shift-Att
    assert predicting.report()["aer"] == 0.0 and predicting.report()["shift_att"]["aer"] > 0


def test_the_shift_att_layer_is_chosen_on_validation_and_reported_on_test() -> None:
    validation = transformer_split(PREDICTING, READING)  # Shift-Att prefers layer 1
    test = transformer_split(READING, PREDICTING)  # ... and here layer 0
    assert validation.best_shift_layer() == 1 and test.best_shift_layer() == 0
    report = test.report(validation.choose())
    shift = report["shift_att"]
    assert (shift["layer"], shift["chosen_on"]) == (1, "validation")
    assert shift["aer"] == 1.0 == shift["layers"][1]["aer"]  # test's figure of that layer
    assert report["best_head"]["layer"] == 0 and report["best_head"]["chosen_on"] == "validation"
    assert test.report()["shift_att"]["layer"] == 0  # chosen on test itself it would differ


def test_copy_words_are_reference_words_equal_to_exactly_one_source_word() -> None:
    src, tgt = ["Jane", "sah", "Jane", "in", "Bonn"], ["Jane", "saw", "in", "Bonn"]
    counts = sentence_counts(torch.tensor([0, 1, 3, 4]), links(set()), src, tgt)
    assert counts.copy_words == 2  # "in" and "Bonn"; "Jane" occurs twice in the source
    assert counts.copy_hits == 2


def test_symmetrized_links_are_intersection_and_union() -> None:
    (pair,) = symmetrize(["0-0 1-2 2-1"], ["0-0 2-1 2-2"])
    assert pair.sure == {(0, 0), (2, 1)}
    assert pair.possible == {(0, 0), (1, 2), (2, 1), (2, 2)}


def test_eflomal_aligns_a_real_corpus_and_the_links_are_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("eflomal", reason="needs the align extra")
    rows = pairs(300, seed=0)
    splits = {"train": ([s for s, _ in rows[:280]], [t for _, t in rows[:280]]),
              "test": ([s for s, _ in rows[280:]], [t for _, t in rows[280:]])}
    found = reference_links(splits, tmp_path, verbose=False)
    assert found is not None and len(found["test"]) == 20 and len(found["train"]) == 280
    # names and places are learnt: "Jane ging in den Laden ." -> "Jane went to the store ."
    sentence = splits["test"][0][0].split()[0]
    names = [i for i, src in enumerate(splits["test"][0]) if src.split()[0] == sentence]
    linked_names = sum((0, 0) in found["test"][i].sure for i in names)
    assert linked_names >= 0.8 * len(names)
    assert all(pair.sure <= pair.possible for pair in found["test"])
    monkeypatch.setitem(sys.modules, "eflomal", None)  # reused from the cache, not re-run
    assert reference_links(splits, tmp_path, verbose=False) == found


def test_without_the_aligner_the_metric_is_unavailable_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "eflomal", None)  # as if it could not be built
    assert reference_links({"test": (["Ja ."], ["Yes ."])}, tmp_path) is None
    out = capsys.readouterr().out.strip().splitlines()
    assert out == ["attention alignment (AER): unavailable: the eflomal package is not "
                   "installed (pip install eflomal)"]



ALIGN_AT_ONCE = """
import hashlib, json, sys
from pathlib import Path
from seq2seq.alignment import reference_links
splits = json.loads(sys.argv[2])
found = reference_links(splits, Path(sys.argv[1]), verbose=False)
print(hashlib.sha256(repr(sorted((n, [sorted(l.possible) for l in found[n]]) for n in found))
                     .encode()).hexdigest())
"""


def test_trainings_that_align_the_same_corpus_at_once_go_on_with_the_same_links(
        tmp_path: Path) -> None:
    """make compare with jobs=2 starts two trainings that align one corpus together; eflomal
    samples differently in each, and both must score on the links that are cached."""
    pytest.importorskip("eflomal", reason="needs the align extra")
    import json
    import subprocess

    rows = pairs(300, seed=1)
    splits = {"train": ([s for s, _ in rows[:280]], [t for _, t in rows[:280]]),
              "test": ([s for s, _ in rows[280:]], [t for _, t in rows[280:]])}
    runs = [subprocess.Popen([sys.executable, "-c", ALIGN_AT_ONCE, str(tmp_path),
                              json.dumps(splits)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outputs = [run.communicate() for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0], [err for _, err in outputs]
    assert len({out for out, _ in outputs}) == 1  # one set of links for all three
    (folder,) = tmp_path.iterdir()  # the staged folders of the losers are gone
    assert sorted(p.name for p in folder.iterdir()) == [
        "test.possible", "test.sure", "train.possible", "train.sure"]


def test_a_folder_left_half_written_by_an_older_version_is_replaced(tmp_path: Path) -> None:
    pytest.importorskip("eflomal", reason="needs the align extra")
    rows = pairs(300, seed=2)
    splits = {"train": ([s for s, _ in rows[:280]], [t for _, t in rows[:280]]),
              "test": ([s for s, _ in rows[280:]], [t for _, t in rows[280:]])}
    found = reference_links(splits, tmp_path, verbose=False)
    (folder,) = tmp_path.iterdir()
    (folder / "train.possible").unlink()  # as a crash between two files left it
    again = reference_links(splits, tmp_path, verbose=False)
    assert again is not None and len(again["train"]) == 280 and len(again["test"]) == 20
    assert sorted(p.name for p in folder.iterdir()) == [
        "test.possible", "test.sure", "train.possible", "train.sure"]
    assert found is not None and [p.name for p in tmp_path.iterdir()] == [folder.name]
