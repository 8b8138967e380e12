"""Greedy and beam search, checked against hand-worked scripts and a tiny real model."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
from torch import Tensor, nn

from seq2seq.decoding import translate_batches
from seq2seq.errors import UserError
from seq2seq.models.base import EncoderOutput, Seq2SeqModel
from seq2seq.search import Hypothesis, beam_search, greedy_search, length_penalty_factor
from seq2seq.tokenization import BOS_ID, EOS_ID, PAD_ID

A, B = 4, 5  # the two word tokens of the scripted vocabulary {PAD, UNK, BOS, EOS, A, B}


def teacher_forced(
    model: Seq2SeqModel, src_ids: Tensor, src_mask: Tensor, tgt_in: Tensor
) -> tuple[Tensor, Tensor | None]:
    """Run decode_step over a given target prefix: (B, T) -> logits (B, T, V), attn (B, T, S)."""
    enc = model.encode(src_ids, src_mask)
    state = model.init_state(enc)
    logits, attns = [], []
    for t in range(tgt_in.size(1)):
        step_logits, state, attn = model.decode_step(tgt_in[:, t], state, enc)
        logits.append(step_logits)
        attns.append(attn)
    attn_out = None if attns[0] is None else torch.stack(attns, dim=1)
    return torch.stack(logits, dim=1), attn_out


@dataclass
class PrefixState:
    prefix: Tensor  # (B, t) ids fed so far, BOS first

    def reorder(self, index: Tensor) -> PrefixState:
        return PrefixState(self.prefix.index_select(0, index))


class ScriptedModel(nn.Module):
    """A decoder whose next-token probabilities are looked up from the prefix emitted so far.

    The attention of a step is one-hot on source position `prev_id % src_len`, so a test can
    tell which prefix produced each attention row of a hypothesis.
    """

    pad_id = PAD_ID
    tgt_vocab_size = 6

    def __init__(self, script: dict[tuple[int, ...], dict[int, float]], default: dict[int, float]):
        super().__init__()
        self.script = script
        self.default = default

    def encode(self, src_ids: Tensor, src_mask: Tensor) -> EncoderOutput:
        return EncoderOutput(states=torch.zeros(*src_ids.shape, 1), mask=src_mask)

    def init_state(self, enc: EncoderOutput) -> PrefixState:
        return PrefixState(torch.empty(enc.mask.size(0), 0, dtype=torch.long))

    def decode_step(
        self, prev_ids: Tensor, state: PrefixState, enc: EncoderOutput
    ) -> tuple[Tensor, PrefixState, Tensor]:
        prefix = torch.cat([state.prefix, prev_ids.unsqueeze(1)], dim=1)  # (B, t+1)
        probs = torch.zeros(prev_ids.size(0), self.tgt_vocab_size)
        for row, ids in enumerate(prefix[:, 1:].tolist()):  # the emitted tokens, BOS dropped
            for token, p in self.script.get(tuple(ids), self.default).items():
                probs[row, token] = p
        src_lens = enc.mask.sum(dim=1)  # (B,)
        attn = nn.functional.one_hot(prev_ids % src_lens, enc.mask.size(1)).float()  # (B, S)
        return probs.log(), PrefixState(prefix), attn

    def forward(self, src_ids, src_mask, tgt_in, need_attn=True):
        return teacher_forced(self, src_ids, src_mask, tgt_in)

    def cross_attention(self, src_ids, src_mask, tgt_in) -> None:
        return None

    def self_attention(self, src_ids, src_mask, tgt_in) -> None:
        return None


@dataclass
class HiddenState:
    hidden: Tensor  # (B, D)

    def reorder(self, index: Tensor) -> HiddenState:
        return HiddenState(self.hidden.index_select(0, index))


class TinyGRU(nn.Module):
    """A real, randomly initialised GRU encoder-decoder, with dot attention or with a fixed
    context (the encoder's final state) when `attention` is False."""

    pad_id = PAD_ID

    def __init__(self, attention: bool = True, src_vocab: int = 20, tgt_vocab: int = 12):
        super().__init__()
        dim = 16
        self.attention = attention
        self.tgt_vocab_size = tgt_vocab
        self.src_embed = nn.Embedding(src_vocab, dim)
        self.encoder = nn.GRU(dim, dim, batch_first=True)
        self.tgt_embed = nn.Embedding(tgt_vocab, dim)
        self.cell = nn.GRUCell(dim, dim)
        self.out = nn.Linear(2 * dim, tgt_vocab)
        with torch.no_grad():  # peaked distributions, so beams differ and some end early
            self.out.weight.mul_(6.0)
            self.out.bias[EOS_ID] += 1.5
        self.eval()

    def encode(self, src_ids: Tensor, src_mask: Tensor) -> EncoderOutput:
        states, _ = self.encoder(self.src_embed(src_ids))  # (B, S, D)
        last = src_mask.sum(dim=1) - 1  # (B,)
        final = states[torch.arange(src_ids.size(0)), last]  # (B, D)
        return EncoderOutput(states=states, mask=src_mask, final=final)

    def init_state(self, enc: EncoderOutput) -> HiddenState:
        return HiddenState(enc.final)

    def decode_step(
        self, prev_ids: Tensor, state: HiddenState, enc: EncoderOutput
    ) -> tuple[Tensor, HiddenState, Tensor | None]:
        hidden = self.cell(self.tgt_embed(prev_ids), state.hidden)  # (B, D)
        weights = None
        context = enc.final
        if self.attention:
            scores = torch.bmm(enc.states, hidden.unsqueeze(2)).squeeze(2)  # (B, S)
            weights = scores.masked_fill(~enc.mask, float("-inf")).softmax(dim=-1)
            context = torch.bmm(weights.unsqueeze(1), enc.states).squeeze(1)  # (B, D)
        logits = self.out(torch.cat([hidden, context], dim=-1))  # (B, V)
        return logits, HiddenState(hidden), weights

    def forward(self, src_ids, src_mask, tgt_in, need_attn=True):
        return teacher_forced(self, src_ids, src_mask, tgt_in)

    def cross_attention(self, src_ids, src_mask, tgt_in) -> None:
        return None

    def self_attention(self, src_ids, src_mask, tgt_in) -> None:
        return None


def pad(sentences: list[list[int]]) -> tuple[Tensor, Tensor]:
    """Right-pad id lists: (B, S) ids and (B, S) mask."""
    width = max(len(s) for s in sentences)
    ids = torch.full((len(sentences), width), PAD_ID, dtype=torch.long)
    for i, s in enumerate(sentences):
        ids[i, : len(s)] = torch.tensor(s)
    return ids, ids != PAD_ID


def random_sentences(count: int, low: int = 2, high: int = 12) -> list[list[int]]:
    lengths = torch.randint(low, high, (count,)).tolist()
    return [torch.randint(4, 20, (n,)).tolist() for n in lengths]


def summary(results: list[list[Hypothesis]]) -> list[list[tuple[list[int], float]]]:
    return [[(h.tokens, round(h.score, 5)) for h in hyps] for hyps in results]


# Script A. Beam search (K=2) finds a better translation than greedy.
#   step 0: a .6, b .4                      -> live a, b
#   step 1: (b,a) .4*.9 = .36, (a,EOS) .6*.4 = .24, (a,a) .6*.35 = .21,
#           (a,b) .6*.25 = .15, (b,EOS) .4*.1 = .04
#           top 2K = [ba .36, aE .24, aa .21, ab .15]; aE is among the first K: finished [a] .24;
#           live ba, aa
#   step 2: (b,a,EOS) .36*.9 = .324, (a,a,EOS) .21*.6 = .126, (a,a,b) .21*.4 = .084,
#           (b,a,a) .36*.1 = .036; the first K both end: [b,a] .324 and [a,a] .126 finish;
#           3 >= K finished: stop. Best two: [b,a] .324, [a] .24.
# Greedy takes a (.6) then EOS (.4): [a] with .24.
SCRIPT_A = {
    (): {A: 0.6, B: 0.4},
    (A,): {EOS_ID: 0.4, A: 0.35, B: 0.25},
    (B,): {EOS_ID: 0.1, A: 0.9},
    (B, A): {EOS_ID: 0.9, A: 0.1},
    (A, A): {EOS_ID: 0.6, B: 0.4},
}
ONLY_EOS = {EOS_ID: 1.0}


def test_scripted_beam_finds_what_greedy_misses():
    model = ScriptedModel(SCRIPT_A, ONLY_EOS)
    src_ids, src_mask = pad([[7, 8, 9]])
    greedy = greedy_search(model, src_ids, src_mask, length_penalty=0.0)
    assert summary(greedy) == [[([A], round(math.log(0.24), 5))]]

    beam = beam_search(model, src_ids, src_mask, beam_size=2, length_penalty=0.0, nbest=2)
    assert summary(beam) == [[([B, A], round(math.log(0.324), 5)), ([A], round(math.log(0.24), 5))]]
    best = beam_search(model, src_ids, src_mask, beam_size=2, length_penalty=0.0, nbest=1)
    assert summary(best) == [[([B, A], round(math.log(0.324), 5))]]


def test_scripted_nbest_order_and_length_normalised_scores():
    # Script A with K=3:
    #   step 0: live a .6, b .4 (and one dead beam at -inf)
    #   step 1: top 2K = [ba .36, aE .24, aa .21, ab .15, bE .04, -inf]; first K: ba, aE, aa
    #           -> finished [a] .24; live ba, aa, ab
    #   step 2: (b,a,EOS) .324, (a,b,EOS) .15 (unscripted prefixes only allow EOS),
    #           (a,a,EOS) .126, (a,a,b) .084, (b,a,a) .036; the first K all end: [b,a],
    #           [a,b] and [a,a] finish (4 >= K finished, stop).
    # alpha = 1: scores are log p / ((5 + len) / 6), len counting EOS:
    #   [b,a]: ln .324 / (8/6) = -0.8453; [a]: ln .24 / (7/6) = -1.2232;
    #   [a,b]: ln .15 / (8/6) = -1.4228; [a,a]: ln .126 / (8/6) = -1.5536 (not in the best 3).
    model = ScriptedModel(SCRIPT_A, ONLY_EOS)
    src_ids, src_mask = pad([[7, 8, 9]])
    beam = beam_search(model, src_ids, src_mask, beam_size=3, length_penalty=1.0, nbest=3)
    assert summary(beam) == [
        [
            ([B, A], round(math.log(0.324) / (8 / 6), 5)),
            ([A], round(math.log(0.24) / (7 / 6), 5)),
            ([A, B], round(math.log(0.15) / (8 / 6), 5)),
        ]
    ]
    assert [h.score for h in beam[0]] == sorted((h.score for h in beam[0]), reverse=True)


# Script B. The length penalty changes which finished hypothesis ranks first (K=2).
#   step 0: a .55, b .45                                          -> live a, b
#   step 1: (b,b) .405, (a,EOS) .33, (a,a) .22, (b,EOS) .045      -> finished [a] .33;
#           live bb, aa
#   step 2: (b,b,b) .3645, (a,a,a) .198, (b,b,EOS) .0405, (a,a,EOS) .022: no EOS among the
#           first K                                               -> live bbb, aaa
#   step 3: (b,b,b,EOS) .3645*.8 = .2916, (a,a,a,EOS) .1782, ...  -> finished [b,b,b] .2916; stop
# alpha = 0: [a] ln .33 = -1.1087  beats  [b,b,b] ln .2916 = -1.2324
# alpha = 1: [a] -1.1087 / (7/6) = -0.9503  loses to  [b,b,b] -1.2324 / (9/6) = -0.8216
SCRIPT_B = {
    (): {A: 0.55, B: 0.45},
    (A,): {EOS_ID: 0.6, A: 0.4},
    (B,): {B: 0.9, EOS_ID: 0.1},
    (B, B): {B: 0.9, EOS_ID: 0.1},
    (A, A): {A: 0.9, EOS_ID: 0.1},
    (B, B, B): {EOS_ID: 0.8, B: 0.2},
    (A, A, A): {EOS_ID: 0.9, A: 0.1},
}


def test_scripted_length_penalty_changes_the_ranking():
    model = ScriptedModel(SCRIPT_B, ONLY_EOS)
    src_ids, src_mask = pad([[7, 8, 9, 10]])
    raw = beam_search(model, src_ids, src_mask, beam_size=2, length_penalty=0.0, nbest=2)
    assert summary(raw) == [
        [([A], round(math.log(0.33), 5)), ([B, B, B], round(math.log(0.2916), 5))]
    ]
    normalised = beam_search(model, src_ids, src_mask, beam_size=2, length_penalty=1.0, nbest=2)
    assert summary(normalised) == [
        [
            ([B, B, B], round(math.log(0.2916) / (9 / 6), 5)),
            ([A], round(math.log(0.33) / (7 / 6), 5)),
        ]
    ]


def test_scripted_attention_rows_follow_each_hypothesis_and_drop_padding():
    # The same script for three padded sentences of 3, 5 and 2 real tokens. Each attention
    # row is one-hot at (previous token) % src_len, so the rows of [b, a] come from the prefix
    # BOS, b, a: positions 2 % n, 5 % n, 4 % n.
    model = ScriptedModel(SCRIPT_A, ONLY_EOS)
    sentences = [[7, 8, 9], [7, 8, 9, 10, 11], [7, 8]]
    src_ids, src_mask = pad(sentences)
    results = beam_search(model, src_ids, src_mask, beam_size=3, length_penalty=0.0, nbest=3)
    for sentence, hyps in zip(sentences, results, strict=True):
        n = len(sentence)
        assert [h.tokens for h in hyps] == [[B, A], [A], [A, B]]
        for hyp in hyps:
            assert hyp.attention is not None
            assert hyp.attention.shape == (len(hyp.tokens) + 1, n)
            prefix = [BOS_ID, *hyp.tokens]
            assert hyp.attention.argmax(dim=1).tolist() == [t % n for t in prefix]
            assert torch.equal(hyp.attention.sum(dim=1), torch.ones(len(prefix)))


def test_length_limit_is_per_sentence_and_forces_eos():
    # EOS has probability .01 at every step, so only the limit int(a * n + b) stops the search:
    # n = 4 -> int(.5 * 4 + 1) = 3 tokens, n = 2 -> 2 tokens, then the forced EOS.
    model = ScriptedModel({}, {A: 0.99, EOS_ID: 0.01})
    src_ids, src_mask = pad([[7, 8, 9, 10], [7, 8]])
    expected = [
        [([A, A, A], round(3 * math.log(0.99) + math.log(0.01), 5))],
        [([A, A], round(2 * math.log(0.99) + math.log(0.01), 5))],
    ]
    settings = {"max_len_a": 0.5, "max_len_b": 1, "length_penalty": 0.0}
    assert summary(greedy_search(model, src_ids, src_mask, **settings)) == expected
    assert summary(beam_search(model, src_ids, src_mask, beam_size=1, **settings)) == expected


@pytest.mark.parametrize("attention", [True, False], ids=["attention", "no-attention"])
def test_beam_size_one_equals_greedy_on_a_real_model(attention: bool):
    model = TinyGRU(attention=attention)
    src_ids, src_mask = pad(random_sentences(16))
    greedy = greedy_search(model, src_ids, src_mask)
    beam = beam_search(model, src_ids, src_mask, beam_size=1)
    lengths = {len(hyps[0].tokens) for hyps in greedy}
    assert len(lengths) > 2, "the model should produce hypotheses of several lengths"
    for g, b in zip(greedy, beam, strict=True):
        assert g[0].tokens == b[0].tokens
        # Beam search drops finished sentences from its batch, so float sums may round apart.
        assert g[0].score == pytest.approx(b[0].score, abs=1e-5)
        if attention:
            torch.testing.assert_close(g[0].attention, b[0].attention, atol=1e-5, rtol=1e-4)
        else:
            assert g[0].attention is None and b[0].attention is None


def test_outputs_respect_the_vocabulary_and_length_limit():
    model = TinyGRU()
    sentences = random_sentences(12)
    src_ids, src_mask = pad(sentences)
    for results in (
        greedy_search(model, src_ids, src_mask, max_len_a=0.5, max_len_b=2),
        beam_search(model, src_ids, src_mask, beam_size=4, max_len_a=0.5, max_len_b=2, nbest=4),
    ):
        for sentence, hyps in zip(sentences, results, strict=True):
            assert hyps
            for hyp in hyps:
                assert len(hyp.tokens) <= int(0.5 * len(sentence) + 2)
                assert not {PAD_ID, BOS_ID, EOS_ID} & set(hyp.tokens)


def test_beam_scores_and_attention_match_teacher_forcing():
    # Each hypothesis, fed back through the model, has exactly the reported log-probability
    # and attention: the bookkeeping through state and history reorders is right.
    model = TinyGRU()
    sentences = random_sentences(6)
    src_ids, src_mask = pad(sentences)
    alpha = 0.7
    results = beam_search(model, src_ids, src_mask, beam_size=4, length_penalty=alpha, nbest=4)
    with torch.inference_mode():
        for i, hyps in enumerate(results):
            assert len(hyps) == 4
            n = len(sentences[i])
            for hyp in hyps:
                tgt_in = torch.tensor([[BOS_ID, *hyp.tokens]])
                tgt_out = torch.tensor([[*hyp.tokens, EOS_ID]])
                logits, attn = teacher_forced(
                    model, src_ids[i : i + 1, :n], src_mask[i : i + 1, :n], tgt_in
                )
                logp = logits.log_softmax(-1).gather(2, tgt_out.unsqueeze(2)).sum().item()
                length = len(hyp.tokens) + 1
                assert hyp.score == pytest.approx(
                    logp / length_penalty_factor(length, alpha), abs=1e-4
                )
                torch.testing.assert_close(hyp.attention, attn[0], atol=1e-5, rtol=1e-4)


def test_a_sentence_decodes_the_same_alone_and_in_a_padded_batch():
    model = TinyGRU()
    sentences = random_sentences(10, low=2, high=15)
    src_ids, src_mask = pad(sentences)
    batched = beam_search(model, src_ids, src_mask, beam_size=3, nbest=3)
    for i in (0, 4, 9):
        alone_ids, alone_mask = pad([sentences[i]])
        alone = beam_search(model, alone_ids, alone_mask, beam_size=3, nbest=3)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in batched[i]]
        for a, b in zip(alone, batched[i], strict=True):
            assert a.score == pytest.approx(b.score, abs=1e-5)
            torch.testing.assert_close(a.attention, b.attention, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_translate_batches_returns_results_in_input_order(beam_size: int):
    model = TinyGRU()
    sentences = random_sentences(11)
    results = translate_batches(model, sentences, beam_size=beam_size, batch_size=4)
    assert len(results) == len(sentences)
    for sentence, hyps in zip(sentences, results, strict=True):
        src_ids, src_mask = pad([sentence])
        alone = beam_search(model, src_ids, src_mask, beam_size=beam_size)[0]
        assert hyps[0].tokens == alone[0].tokens
        assert hyps[0].score == pytest.approx(alone[0].score, abs=1e-5)
        assert hyps[0].attention.shape == (len(hyps[0].tokens) + 1, len(sentence))


def test_translate_batches_on_a_model_without_parameters():
    model = ScriptedModel(SCRIPT_A, ONLY_EOS)
    results = translate_batches(model, [[7], [7, 8, 9]], beam_size=2, length_penalty=0.0)
    assert [[h.tokens for h in hyps] for hyps in results] == [[[B, A]], [[B, A]]]


def test_bad_settings_are_reported():
    model = ScriptedModel(SCRIPT_A, ONLY_EOS)
    src_ids, src_mask = pad([[7, 8]])
    with pytest.raises(UserError, match="beam_size"):
        beam_search(model, src_ids, src_mask, beam_size=0)
    with pytest.raises(UserError, match="nbest"):
        beam_search(model, src_ids, src_mask, beam_size=2, nbest=3)
    with pytest.raises(UserError, match="batch_size"):
        translate_batches(model, [[7]], batch_size=0)
    with pytest.raises(ValueError, match="sentence 1 is empty"):
        translate_batches(model, [[7], []])


def test_test_models_satisfy_the_protocol():
    assert isinstance(TinyGRU(), Seq2SeqModel)
    assert isinstance(ScriptedModel({}, ONLY_EOS), Seq2SeqModel)


def real_variant(name: str) -> nn.Module:
    """A tiny, randomly initialised model of one of the project's variants, in eval mode."""
    from seq2seq.models.bahdanau import Bahdanau
    from seq2seq.models.luong import Luong
    from seq2seq.models.transformer import Transformer
    from seq2seq.models.vanilla import VanillaSeq2Seq

    vocab = {"src_vocab_size": 20, "tgt_vocab_size": 20}
    rnn = {"emb_dim": 16, "hidden_size": 16, "dropout": 0.0, **vocab}
    models = {
        "vanilla": lambda: VanillaSeq2Seq(**rnn),
        "bahdanau": lambda: Bahdanau(attn_dim=16, **rnn),
        "luong": lambda: Luong(score="dot", **rnn),
        "transformer": lambda: Transformer(
            d_model=16,
            num_heads=2,
            num_encoder_layers=2,
            num_decoder_layers=2,
            ff_dim=32,
            dropout=0.0,
            attn_dropout=0.0,
            **vocab,
        ),
    }
    return models[name]().eval()


@pytest.mark.parametrize("name", ["vanilla", "bahdanau", "luong", "transformer"])
def test_search_on_the_real_variants(name: str):
    model = real_variant(name)
    sentences = random_sentences(8)
    src_ids, src_mask = pad(sentences)
    greedy = greedy_search(model, src_ids, src_mask, max_len_b=5)
    beam_one = beam_search(model, src_ids, src_mask, beam_size=1, max_len_b=5)
    assert [h[0].tokens for h in greedy] == [h[0].tokens for h in beam_one]

    batched = beam_search(model, src_ids, src_mask, beam_size=3, nbest=3, max_len_b=5)
    with torch.inference_mode():
        for i in (0, 5):
            n = len(sentences[i])
            alone = beam_search(
                model, src_ids[i : i + 1, :n], src_mask[i : i + 1, :n], 3, nbest=3, max_len_b=5
            )[0]
            assert [h.tokens for h in alone] == [h.tokens for h in batched[i]]
            for hyp in batched[i]:
                tgt_in = torch.tensor([[BOS_ID, *hyp.tokens]])
                tgt_out = torch.tensor([[*hyp.tokens, EOS_ID]])
                logits, attn = model(src_ids[i : i + 1, :n], src_mask[i : i + 1, :n], tgt_in)
                logp = logits.log_softmax(-1).gather(2, tgt_out.unsqueeze(2)).sum().item()
                penalty = length_penalty_factor(len(hyp.tokens) + 1, 1.0)
                assert hyp.score == pytest.approx(logp / penalty, abs=1e-4)
                if name == "vanilla":
                    assert attn is None and hyp.attention is None
                else:
                    torch.testing.assert_close(hyp.attention, attn[0], atol=1e-5, rtol=1e-4)


def test_translate_batches_token_budget_changes_batches_not_results():
    model = TinyGRU()
    sentences = random_sentences(12, low=2, high=15)
    encode, widths = model.encode, []

    def counting_encode(src_ids: torch.Tensor, src_mask: torch.Tensor):
        widths.append(src_ids.shape)
        return encode(src_ids, src_mask)

    model.encode = counting_encode
    wide = translate_batches(model, sentences, beam_size=3, batch_size=12, batch_tokens=10**6)
    assert len(widths) == 1
    widths.clear()
    narrow = translate_batches(model, sentences, beam_size=3, batch_size=12, batch_tokens=60)
    assert len(widths) > 1 and all(b * s * 3 <= 60 or b == 1 for b, s in widths)
    for a, b in zip(wide, narrow, strict=True):
        assert a[0].tokens == b[0].tokens
        assert a[0].score == pytest.approx(b[0].score, abs=1e-5)
    with pytest.raises(UserError, match="batch_tokens"):
        translate_batches(model, sentences, batch_tokens=0)
