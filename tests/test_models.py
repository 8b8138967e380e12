"""Mechanism tests of the model variants: masks, attention sums, stepping == teacher forcing."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig
from torch import Tensor, nn

from seq2seq.config import register_configs
from seq2seq.errors import UserError
from seq2seq.models import build_model
from seq2seq.models.attention import (
    ATTENTION_FNS,
    AdditiveAttention,
    DotAttention,
    GeneralAttention,
    LexicalOutput,
    masked_softmax,
)
from seq2seq.models.bahdanau import Bahdanau
from seq2seq.models.base import Seq2SeqModel
from seq2seq.models.layers import ModelConfigError
from seq2seq.models.luong import Luong
from seq2seq.models.transformer import Transformer
from seq2seq.models.transformer_layers import MultiHeadAttention, RelativePositionBias
from seq2seq.models.vanilla import VanillaSeq2Seq
from seq2seq.tokenization import BOS_ID, EOS_ID, PAD_ID

VOCAB = 17
SRC_LENGTHS = [7, 4, 2]  # real tokens per row, EOS included; the batch is padded to 7
TGT_LEN = 5

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def bahdanau_model(**overrides: object) -> Bahdanau:
    settings: dict = dict(emb_dim=8, hidden_size=12, attn_dim=10, dropout=0.3)
    settings.update(overrides)
    return Bahdanau(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, **settings).eval()


def luong_model(**overrides: object) -> Luong:
    settings: dict = dict(emb_dim=8, hidden_size=12, dropout=0.3)
    settings.update(overrides)
    return Luong(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, **settings).eval()


RNN_VARIANTS = [
    pytest.param(bahdanau_model, dict(cell="gru"), id="bahdanau-gru"),
    pytest.param(bahdanau_model, dict(cell="lstm", num_layers=2), id="bahdanau-lstm-2layers"),
    pytest.param(luong_model, dict(score="dot", cell="gru"), id="luong-dot-gru"),
    pytest.param(luong_model, dict(score="dot", input_feeding=True, cell="lstm"),
                 id="luong-dot-feed-lstm"),
    pytest.param(luong_model, dict(score="general", input_feeding=True, cell="gru"),
                 id="luong-general-feed"),
    pytest.param(luong_model, dict(score="general", cell="lstm", num_layers=2),
                 id="luong-general-lstm-2layers"),
    pytest.param(luong_model, dict(score="dot", input_feeding=True, tie_embeddings=True),
                 id="luong-dot-feed-tied"),
    pytest.param(luong_model, dict(score="general", scaled_score=True), id="luong-general-scaled"),
    pytest.param(bahdanau_model, dict(lexical=True, share_embeddings=True, tie_embeddings=True),
                 id="bahdanau-lexical-shared-tied"),
    pytest.param(bahdanau_model, dict(cell="lstm", lexical=True, query_word=True),
                 id="bahdanau-query-word"),
    pytest.param(bahdanau_model, dict(conditional=True), id="bahdanau-conditional-gru"),
    pytest.param(bahdanau_model,
                 dict(cell="lstm", num_layers=2, conditional=True, query_word=True),
                 id="bahdanau-conditional-lstm-2layers"),
    pytest.param(bahdanau_model, dict(attention_fn="entmax15", lexical=True),
                 id="bahdanau-entmax15"),
    pytest.param(luong_model, dict(score="general", lexical=True), id="luong-lexical"),
    pytest.param(luong_model, dict(score="general", attention_fn="sparsemax"),
                 id="luong-sparsemax"),
    pytest.param(luong_model, dict(score="dot", input_feeding=True, cell="lstm", lexical=True),
                 id="luong-feed-lexical"),
]


def compose_model(name: str, **settings: object) -> DictConfig:
    """configs/model/<name>.yaml as the training config composes it, with `settings` set."""
    register_configs()
    overrides = [f"model={name}", *(f"model.{key}={value}" for key, value in settings.items())]
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("config", overrides=overrides).model


def make_batch(lengths: list[int] = SRC_LENGTHS) -> tuple[Tensor, Tensor, Tensor]:
    """Source ids (ending with EOS, padded), source mask and a BOS-first target input."""
    src = torch.full((len(lengths), max(lengths)), PAD_ID)
    for row, length in enumerate(lengths):
        src[row, : length - 1] = torch.randint(4, VOCAB, (length - 1,))
        src[row, length - 1] = EOS_ID
    tgt_in = torch.randint(4, VOCAB, (len(lengths), TGT_LEN))
    tgt_in[:, 0] = BOS_ID
    return src, src != PAD_ID, tgt_in


def vanilla_model(**overrides: object) -> VanillaSeq2Seq:
    settings: dict = dict(emb_dim=8, hidden_size=12, dropout=0.3)
    settings.update(overrides)
    return VanillaSeq2Seq(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, **settings).eval()


def transformer_model(**overrides: object) -> Transformer:
    settings: dict = dict(
        d_model=16, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, ff_dim=32
    )
    settings.update(overrides)
    model = Transformer(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, **settings).eval()
    for relative in (model.encoder_positions, model.decoder_positions):
        if relative is not None:  # a trained table: the zeros it starts from would hide a bug
            nn.init.normal_(relative.table.weight)
    return model


def step_through(model: nn.Module, src: Tensor, mask: Tensor, tgt_in: Tensor):
    """Decode tgt_in one token at a time; returns logits (B, T, V) and attention or None."""
    enc = model.encode(src, mask)
    state = model.init_state(enc)
    logits, attn = [], []
    for t in range(tgt_in.size(1)):
        step_logits, state, step_attn = model.decode_step(tgt_in[:, t], state, enc)
        logits.append(step_logits)
        attn.append(step_attn)
    if attn[0] is None:
        return torch.stack(logits, 1), None
    return torch.stack(logits, 1), torch.stack(attn, 1)


def assert_valid_attention(weights: Tensor, mask: Tensor) -> None:
    """weights (B, ..., S): exactly zero at padding, every row sums to 1."""
    pad = ~mask.view(mask.size(0), *([1] * (weights.dim() - 2)), mask.size(1)).expand_as(weights)
    assert torch.equal(weights[pad], torch.zeros_like(weights[pad]))
    sums = weights.sum(dim=-1)
    assert torch.allclose(sums, torch.ones_like(sums), atol=1e-5)


# ---------------------------------------------------------------- attention modules


def test_masked_softmax_gives_exact_zeros_even_for_huge_scores():
    scores = torch.tensor([[1e30, -1e30, 5.0, 1e30]])
    mask = torch.tensor([[False, True, True, False]])
    weights = masked_softmax(scores, mask)
    assert weights[0, 0].item() == 0.0 and weights[0, 3].item() == 0.0
    assert weights.sum().item() == pytest.approx(1.0)
    assert weights[0, 2] > 0.99


@pytest.mark.parametrize("name", ["sparsemax", "entmax15"])
def test_sparse_attention_masks_exactly_and_has_the_closed_form_gradient(name: str):
    normalize = ATTENTION_FNS[name]
    scores = torch.tensor([[3.0, 2.9, -5.0, 1e30], [0.0, 0.0, 0.0, 0.0], [9.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True, False], [True] * 4, [True] * 4])
    weights = normalize(scores, mask)
    assert_valid_attention(weights, mask)
    assert weights[0, 2].item() == 0.0 and weights[0, 3].item() == 0.0  # ruled out, padding
    assert torch.allclose(weights[1], torch.full((4,), 0.25))  # ties: uniform
    assert weights[2].tolist() == [1.0, 0.0, 0.0, 0.0]  # a clear winner takes all
    x = torch.randn(4, 7, dtype=torch.float64, requires_grad=True)
    full = torch.ones(4, 7, dtype=torch.bool)
    assert torch.autograd.gradcheck(lambda x: normalize(x, full), (x,))


def test_entmax15_solves_its_threshold_equation():
    """1.5-entmax is p_i = (x_i / 2 - tau)_+^2 with sum_i p_i = 1; tau found by bisection."""
    x = torch.randn(3, 9, dtype=torch.float64) * 2
    weights = ATTENTION_FNS["entmax15"](x, torch.ones_like(x, dtype=torch.bool)).double()
    top = (x / 2).amax(dim=-1, keepdim=True)
    low, high = top - 1, top
    for _ in range(100):
        mid = (low + high) / 2
        over = ((x / 2 - mid).clamp(min=0) ** 2).sum(-1, keepdim=True) > 1
        low, high = torch.where(over, mid, low), torch.where(over, high, mid)
    assert torch.allclose(weights, (x / 2 - low).clamp(min=0) ** 2, atol=1e-6)


@pytest.mark.parametrize(
    "attention",
    [
        AdditiveAttention(6, 6, 5),
        DotAttention(),
        GeneralAttention(6, 6),
        AdditiveAttention(6, 6, 5, attention_fn="entmax15"),
        DotAttention(attention_fn="sparsemax"),
    ],
    ids=["additive", "dot", "general", "additive-entmax15", "dot-sparsemax"],
)
def test_attention_one_step_and_all_steps_agree(attention: nn.Module):
    _, mask, _ = make_batch()
    states = torch.randn(mask.size(0), mask.size(1), 6)
    keys = attention.project_keys(states)
    queries = torch.randn(mask.size(0), 4, 6)  # (B, T, Q)
    context, weights = attention(queries, keys, states, mask)
    assert context.shape == (3, 4, 6) and weights.shape == (3, 4, mask.size(1))
    assert_valid_attention(weights, mask)
    for t in range(4):
        step_context, step_weights = attention(queries[:, t], keys, states, mask)
        assert torch.allclose(step_weights, weights[:, t], atol=1e-6)
        assert torch.allclose(step_context, context[:, t], atol=1e-6)


@pytest.mark.parametrize(
    "make", [lambda s: DotAttention(scale=s), lambda s: GeneralAttention(64, 32, scale=s)],
    ids=["dot", "general"],
)
def test_scaled_luong_scores_are_divided_and_the_weights_flatter(make):
    torch.manual_seed(0)
    plain, scaled = make(1.0), make(64**-0.5)
    scaled.load_state_dict(plain.state_dict())
    states = torch.randn(4, 9, 32 if isinstance(plain, GeneralAttention) else 64)  # (B, S, K)
    keys, query = plain.project_keys(states), torch.randn(4, 3, 64)
    assert torch.allclose(scaled.score(query, keys), plain.score(query, keys) / 8, atol=1e-6)
    mask = torch.ones(4, 9, dtype=torch.bool)
    peak = [a(query, keys, states, mask)[1].amax(-1).mean().item() for a in (plain, scaled)]
    assert peak[1] < peak[0]  # 64-wide random queries: near one-hot unscaled, spread scaled


def saved_tensors(fn, *inputs: Tensor) -> dict[tuple[int, ...], int]:
    """Shape -> bytes of the new storage autograd keeps for the backward pass while `fn()` runs:
    each storage once, the inputs' own not counted (a decoder keeps them for all steps anyway)."""
    seen = {tensor.untyped_storage().data_ptr() for tensor in inputs}
    alive = []  # a counted storage's address is not reused by a later one
    kept: dict[tuple[int, ...], int] = {}

    def pack(tensor: Tensor) -> Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            alive.append(storage)
            kept[tuple(tensor.shape)] = kept.get(tuple(tensor.shape), 0) + storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn()
    return kept


def test_additive_scores_recompute_tanh_in_backward_with_the_same_gradients():
    torch.manual_seed(0)
    attention = AdditiveAttention(6, 6, 32)
    keys = torch.randn(3, 50, 32, requires_grad=True)  # (B, S, A)
    query = torch.randn(3, 1, 32, requires_grad=True)  # one decoder step
    grads = []
    for scores_fn in (attention.score, attention.score_recomputed):
        scores = scores_fn(query, keys)
        grads.append(torch.autograd.grad((scores * scores).sum(),
                                         [query, keys, attention.v.weight]))
    for plain, recomputed in zip(*grads, strict=True):
        assert torch.equal(plain, recomputed)
    kept = [saved_tensors(lambda f=f: f(query, keys), query, keys, attention.v.weight)
            for f in (attention.score, attention.score_recomputed)]
    assert kept == [{(3, 1, 50, 32): 3 * 50 * 32 * 4}, {}]  # tanh(q + k) is not kept
    with torch.no_grad():
        assert torch.equal(attention.score_recomputed(query, keys), attention.score(query, keys))


@pytest.mark.parametrize("conditional", [False, True], ids=["bahdanau", "conditional"])
def test_bahdanau_recomputes_its_attention_on_long_batches_with_the_same_gradients(
    conditional: bool, monkeypatch: pytest.MonkeyPatch
):
    import seq2seq.models.bahdanau as bahdanau

    torch.manual_seed(0)
    model = bahdanau_model(conditional=conditional, attn_dim=64).train()
    src, mask, tgt_in = make_batch()
    runs = []
    for threshold in (2**40, 0):  # never, always
        monkeypatch.setattr(bahdanau, "RECOMPUTE_ATTENTION_BYTES", threshold)
        torch.manual_seed(1)  # the same dropout masks
        kept = saved_tensors(lambda: runs.append(model(src, mask, tgt_in)[0]))
        model.zero_grad()
        (runs[-1] ** 2).sum().backward()
        runs[-1] = ([p.grad.clone() for p in model.parameters()], kept)
    (plain, kept_plain), (recomputed, kept_recomputed) = runs
    assert all(torch.equal(a, b) for a, b in zip(plain, recomputed, strict=True))
    tanh = (3, 1, 7, 64)  # (B, 1, S, A) at each of the T steps
    assert kept_plain[tanh] == 3 * 7 * 64 * 4 * TGT_LEN and tanh not in kept_recomputed


# ---------------------------------------------------------------- recurrent models


@pytest.mark.parametrize(("make", "settings"), RNN_VARIANTS)
def test_rnn_attention_masks_padding_and_sums_to_one(make, settings: dict):
    model = make(**settings)
    src, mask, tgt_in = make_batch()
    logits, attn = model(src, mask, tgt_in)
    assert logits.shape == (3, TGT_LEN, VOCAB)
    assert attn is not None and attn.shape == (3, TGT_LEN, src.size(1))
    assert_valid_attention(attn, mask)


@pytest.mark.parametrize(("make", "settings"), RNN_VARIANTS)
def test_rnn_attention_stepping_equals_teacher_forcing(make, settings: dict):
    model = make(**settings)
    src, mask, tgt_in = make_batch()
    logits, attn = model(src, mask, tgt_in)
    step_logits, step_attn = step_through(model, src, mask, tgt_in)
    assert torch.allclose(step_logits, logits, atol=1e-4)
    assert torch.allclose(step_attn, attn, atol=1e-4)
    assert_valid_attention(step_attn, mask)


@pytest.mark.parametrize(
    "make",
    [
        lambda: vanilla_model(),
        lambda: vanilla_model(cell="lstm", bidirectional=False, num_layers=2),
        lambda: bahdanau_model(),
        lambda: luong_model(score="dot", cell="lstm"),
        lambda: transformer_model(),
    ],
    ids=["vanilla-bi-gru", "vanilla-lstm-2layers", "bahdanau", "luong-dot-lstm", "transformer"],
)
def test_extra_padding_changes_nothing(make):
    """Final states sit at the real last token and padding is invisible: same output."""
    model = make()
    src, mask, tgt_in = make_batch()
    logits, _ = model(src, mask, tgt_in)
    padded = torch.cat([src, torch.full((3, 4), PAD_ID)], dim=1)
    padded_logits, padded_attn = model(padded, padded != PAD_ID, tgt_in)
    assert torch.allclose(padded_logits, logits, atol=1e-5)
    if padded_attn is not None:
        assert torch.equal(padded_attn[..., src.size(1) :], torch.zeros(3, TGT_LEN, 4))


@pytest.mark.parametrize(
    "make",
    [vanilla_model, bahdanau_model, luong_model, transformer_model],
    ids=["vanilla", "bahdanau", "luong", "transformer"],
)
def test_project_false_returns_what_the_generator_projects(make):
    """Training projects the features itself (linear_token_losses): at output_positions,
    generator(features) are the logits, with dropout's same draws in training mode."""
    model = make()
    src, mask, tgt_in = make_batch()
    positions = torch.tensor([0, 2, 5, 7])
    for training in (False, True):
        model.train(training)
        torch.manual_seed(1)
        logits, _ = model(src, mask, tgt_in, output_positions=positions)
        torch.manual_seed(1)
        features, _ = model(src, mask, tgt_in, output_positions=positions, project=False)
        assert features.shape == (4, model.generator.in_features)
        torch.testing.assert_close(model.generator(features), logits)


def test_vanilla_has_no_attention_and_stepping_equals_teacher_forcing():
    model = vanilla_model(num_layers=2)
    src, mask, tgt_in = make_batch()
    logits, attn = model(src, mask, tgt_in)
    assert attn is None
    assert model(src, mask, tgt_in, need_attn=False)[1] is None
    step_logits, step_attn = step_through(model, src, mask, tgt_in)
    assert step_attn is None
    assert torch.allclose(step_logits, logits, atol=1e-4)


def test_vanilla_decoder_sees_the_source_only_through_its_final_state():
    """Two sources with the same context vector c give the same translation logits."""
    model = vanilla_model()
    src, mask, tgt_in = make_batch()
    enc = model.encode(src, mask)
    other = model.encode(torch.flip(src, dims=[0]), torch.flip(mask, dims=[0]))
    other.final = enc.final
    logits, _ = step_through(model, src, mask, tgt_in)
    state = model.init_state(other)
    step_logits, _, _ = model.decode_step(tgt_in[:, 0], state, other)
    assert torch.allclose(step_logits, logits[:, 0], atol=1e-6)


@pytest.mark.parametrize(
    "make",
    [
        lambda: vanilla_model(cell="lstm"),
        lambda: bahdanau_model(cell="lstm"),
        lambda: luong_model(score="general", input_feeding=True),
        lambda: transformer_model(),
    ],
    ids=["vanilla", "bahdanau", "luong-feed", "transformer"],
)
def test_state_reorder_follows_the_batch(make):
    """What beam search relies on: reorder(index) makes the state of the reordered batch."""
    model = make()
    src, mask, tgt_in = make_batch()
    index = torch.tensor([2, 0, 0, 1])
    enc = model.encode(src, mask)
    state = model.init_state(enc)
    _, state, _ = model.decode_step(tgt_in[:, 0], state, enc)
    state = state.reorder(index)
    enc = enc.reorder(index)
    logits, _, _ = model.decode_step(tgt_in[index, 1], state, enc)
    expected, _ = model(src[index], mask[index], tgt_in[index, :2])
    assert torch.allclose(logits, expected[:, 1], atol=1e-4)


def test_unknown_cell_score_or_attention_fn_is_a_user_error():
    with pytest.raises(UserError, match="model.cell='rnn'"):
        bahdanau_model(cell="rnn")
    with pytest.raises(UserError, match="model.score='additive' is not one of dot, general"):
        luong_model(score="additive")
    with pytest.raises(UserError, match="model.attention_fn='entmax'"):
        luong_model(attention_fn="entmax")


def test_each_attention_model_takes_only_its_own_options():
    """An option of the other model is an error, not a flag that silently does nothing:
    Bahdanau's context always feeds its RNN and it scores additively; Luong queries with s_t."""
    for option in ("input_feeding", "score"):
        with pytest.raises(TypeError, match=option):
            bahdanau_model(**{option: "dot" if option == "score" else True})
    for option in ("query_word", "conditional", "attn_dim"):
        with pytest.raises(TypeError, match=option):
            luong_model(**{option: 8 if option == "attn_dim" else True})


@pytest.mark.parametrize(
    "make",
    [lambda: vanilla_model(), lambda: bahdanau_model(), lambda: luong_model(score="dot")],
    ids=["vanilla", "bahdanau", "luong"],
)
def test_models_with_one_attention_per_step_have_no_cross_attention_heads(make):
    model = make()
    assert isinstance(model, Seq2SeqModel)
    src, mask, tgt_in = make_batch()
    assert model.cross_attention(src, mask, tgt_in) is None


# ---------------------------------------------------------------- transformer


@pytest.mark.parametrize("pre_norm", [True, False], ids=["pre-norm", "post-norm"])
def test_transformer_every_head_masks_padding_and_sums_to_one(pre_norm: bool):
    model = transformer_model(pre_norm=pre_norm)
    src, mask, tgt_in = make_batch()
    weights = model.cross_attention(src, mask, tgt_in)
    assert weights.shape == (2, 3, 4, TGT_LEN, src.size(1))  # (L, B, H, T, S)
    for layer in weights:
        assert_valid_attention(layer, mask)
    _, attn = model(src, mask, tgt_in)
    assert torch.allclose(attn, weights[-1].mean(dim=1), atol=1e-6)
    assert_valid_attention(attn, mask)


def test_transformer_future_tokens_do_not_change_earlier_logits():
    model = transformer_model()
    src, mask, tgt_in = make_batch()
    logits, _ = model(src, mask, tgt_in)
    changed = tgt_in.clone()
    changed[:, 3:] = torch.randint(4, VOCAB, (3, TGT_LEN - 3))
    changed_logits, _ = model(src, mask, changed)
    assert torch.allclose(changed_logits[:, :3], logits[:, :3], atol=1e-6)
    assert not torch.allclose(changed_logits[:, 3:], logits[:, 3:], atol=1e-3)


@pytest.mark.parametrize(
    ("pre_norm", "lexical", "positions"),
    [(True, False, "sinusoidal"), (False, False, "sinusoidal"), (True, True, "sinusoidal"),
     (True, False, "relative"), (False, False, "relative")],
    ids=["pre-norm", "post-norm", "lexical", "relative", "relative-post-norm"],
)
def test_transformer_cached_stepping_equals_full_forward(
    pre_norm: bool, lexical: bool, positions: str
):
    model = transformer_model(pre_norm=pre_norm, lexical=lexical, positions=positions)
    src, mask, tgt_in = make_batch()
    logits, attn = model(src, mask, tgt_in)
    step_logits, step_attn = step_through(model, src, mask, tgt_in)
    assert torch.allclose(step_logits, logits, atol=1e-4)
    assert torch.allclose(step_attn, attn, atol=1e-4)

    enc = model.encode(src, mask)
    state = model.init_state(enc)
    for t in range(TGT_LEN):
        _, state, _ = model.decode_step(tgt_in[:, t], state, enc)
    assert all(k.shape == (3, 4, TGT_LEN, 4) for k in state.self_keys)  # one cached entry a step


@pytest.mark.parametrize(("pre_norm", "positions"), [
    (True, "sinusoidal"), (False, "sinusoidal"), (True, "relative")
], ids=["pre-norm", "post-norm", "relative"])
def test_transformer_fused_and_explicit_attention_agree(pre_norm: bool, positions: str):
    model = transformer_model(pre_norm=pre_norm, positions=positions)
    src, mask, tgt_in = make_batch()
    fused, no_attn = model(src, mask, tgt_in, need_attn=False)
    explicit, attn = model(src, mask, tgt_in, need_attn=True)
    assert no_attn is None and attn is not None
    assert torch.allclose(fused, explicit, atol=1e-4)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "padding-mask"])
def test_multi_head_attention_fused_and_explicit_agree(causal: bool):
    attention = MultiHeadAttention(d_model=16, num_heads=4, attn_dropout=0.0)
    x = torch.randn(3, 6, 16)
    _, mask, _ = make_batch([6, 3, 1])
    key_mask = None if causal else mask[:, None, None, :]  # (B, 1, 1, S)
    keys, values = attention.project_kv(x)
    fused, none = attention.attend(x, keys, values, key_mask, False, causal=causal)
    explicit, weights = attention.attend(x, keys, values, key_mask, True, causal=causal)
    assert none is None and weights is not None and weights.shape == (3, 4, 6, 6)
    assert torch.allclose(fused, explicit, atol=1e-5)
    if causal:
        future = torch.ones(6, 6, dtype=torch.bool).triu(diagonal=1)
        assert torch.equal(weights[..., future], torch.zeros_like(weights[..., future]))
    else:
        assert_valid_attention(weights, mask)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "padding-mask"])
def test_relative_bias_takes_the_same_values_and_gradients_fused_and_explicit(causal: bool):
    """The fused kernel gets the bias and the masks as one float mask; the explicit path adds
    the bias to the scores: the same outputs, the same gradients for the table and the input."""
    attention = MultiHeadAttention(d_model=16, num_heads=4, attn_dropout=0.0)
    relative = RelativePositionBias(num_heads=4, bidirectional=not causal, num_buckets=8,
                                    max_distance=5)
    nn.init.normal_(relative.table.weight)
    _, mask, _ = make_batch([6, 3, 1])
    key_mask = None if causal else mask[:, None, None, :]  # (B, 1, 1, S)
    x = torch.randn(3, 6, 16)
    results = []
    for explicit in (False, True):
        relative.zero_grad()
        inputs = x.clone().requires_grad_()
        out, _ = attention.attend(inputs, *attention.project_kv(inputs), key_mask, explicit,
                                  causal=causal, bias=relative(6, 6))
        (out * torch.linspace(-1, 1, 16)).sum().backward()
        assert relative.table.weight.grad is not None
        results.append((out, inputs.grad, relative.table.weight.grad.clone()))
    for fused, explicit in zip(*results, strict=True):
        assert torch.allclose(fused, explicit, atol=1e-5)
    assert results[1][2].abs().sum() > 0


def test_relative_position_buckets_follow_t5s_rule():
    """Exact buckets for small offsets, logarithmic ones up to max_distance, the last beyond
    (32 buckets, 128: T5's); bidirectional, keys after the query have the upper half."""
    both = RelativePositionBias(num_heads=2, bidirectional=True)
    offsets = torch.tensor([0, -1, 1, -7, 7, -8, 8, -20, -127, -128, -1000, 1000])
    # 16 a side, 8 exact; -20: 8 + floor(log(20 / 8) / log(128 / 8) * 8) = 8 + 2
    assert both.bucket(offsets).tolist() == [0, 1, 17, 7, 23, 8, 24, 10, 15, 15, 15, 31]
    causal = RelativePositionBias(num_heads=2, bidirectional=False)
    offsets = torch.tensor([0, -1, -15, -16, -20, -127, -128, -1000, 3])
    # 32 for keys at or before the query, 16 exact; -20: 16 + floor(log(20/16) / log(8) * 16)
    assert causal.bucket(offsets).tolist() == [0, 1, 15, 16, 17, 31, 31, 31, 0]


def test_relative_bias_depends_on_the_offset_only():
    relative = RelativePositionBias(num_heads=3, bidirectional=True, num_buckets=8, max_distance=6)
    nn.init.normal_(relative.table.weight)
    full = relative(7, 7)  # (H, T, N)
    assert full.shape == (3, 7, 7)
    assert torch.equal(full[:, 1:, 1:], full[:, :-1, :-1])  # constant along each diagonal
    assert torch.equal(relative(2, 7, start=4), full[:, 4:6])  # a cached step's rows
    assert not torch.equal(full[:, 3, 2], full[:, 3, 4])  # before and after differ


def test_relative_positions_replace_the_sinusoids():
    """With relative positions the order of the source reaches the encoder only through the
    bias: with the tables at zero, permuting the source permutes its states."""
    torch.manual_seed(3)
    model = transformer_model(positions="relative")
    src, mask, _ = make_batch([7, 7, 7])
    order = torch.randperm(6).tolist() + [6]  # EOS stays last
    states = model.encode(src, mask).states
    permuted = model.encode(src[:, order], mask).states
    assert not torch.allclose(permuted, states[:, order], atol=1e-3)
    for relative in (model.encoder_positions, model.decoder_positions):
        assert relative is not None
        nn.init.zeros_(relative.table.weight)
    states = model.encode(src, mask).states
    assert torch.allclose(model.encode(src[:, order], mask).states, states[:, order], atol=1e-5)
    # sinusoidal positions give no such symmetry
    sinusoidal = transformer_model()
    states = sinusoidal.encode(src, mask).states
    assert not torch.allclose(sinusoidal.encode(src[:, order], mask).states, states[:, order],
                              atol=1e-3)
    with pytest.raises(ModelConfigError, match="model.positions"):
        transformer_model(positions="rotary")


def test_transformer_relative_positions_leave_the_other_weights_as_they_were():
    torch.manual_seed(5)
    plain = transformer_model().state_dict()
    torch.manual_seed(5)
    relative = transformer_model(positions="relative").state_dict()
    assert {k for k in relative if k not in plain} == {
        "encoder_positions.table.weight", "decoder_positions.table.weight"}
    assert all(torch.equal(plain[k], relative[k]) for k in plain)


def test_transformer_tied_embeddings_share_one_parameter():
    tied = transformer_model(tie_embeddings=True)
    assert tied.src_emb.weight is tied.tgt_emb.weight is tied.generator.weight
    untied = transformer_model(tie_embeddings=False)
    assert untied.src_emb.weight is not untied.tgt_emb.weight
    saved = VOCAB * 16 * 2  # one source embedding and one output projection
    total = sum(p.numel() for p in tied.parameters())
    assert sum(p.numel() for p in untied.parameters()) == total + saved

    with torch.no_grad():
        tied.generator.weight[5].add_(1.0)
    assert torch.equal(tied.src_emb.weight[5], tied.generator.weight[5])


@pytest.mark.parametrize("make", [bahdanau_model, luong_model], ids=["bahdanau", "luong"])
def test_rnn_shared_and_tied_embeddings_are_one_parameter_scaled_as_an_output_layer(make):
    model = make(emb_dim=64, share_embeddings=True, tie_embeddings=True)
    assert model.src_emb.weight is model.tgt_emb.weight is model.generator.weight
    weight = model.generator.weight
    assert torch.equal(weight[PAD_ID], torch.zeros(64))
    assert 0.08 < weight[1:].std().item() < 0.17  # N(0, 1/64), not N(0, 1)
    src, mask, tgt_in = make_batch()
    logits, _ = model(src, mask, tgt_in)
    assert logits.abs().max() < 3.0  # the first loss is near log V, not inflated by sqrt(E)
    shared = make(share_embeddings=True)
    assert sum(p.numel() for p in make().parameters()) == (
        sum(p.numel() for p in shared.parameters()) + VOCAB * 8
    )


@pytest.mark.parametrize("model_class", [Bahdanau, Luong])
def test_rnn_shared_embeddings_need_one_vocabulary(model_class):
    with pytest.raises(ValueError, match="joint vocabulary") as raised:
        model_class(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB + 1, share_embeddings=True)
    assert isinstance(raised.value, UserError)


def test_lexical_output_reads_the_attended_source_embedding():
    """Nguyen & Chiang (2018): out = W (tanh(U f) + f) with f = tanh(sum_i a_i x_i)."""
    torch.manual_seed(0)
    lexical = LexicalOutput(emb_dim=6, out_size=5)
    embedded = torch.randn(2, 4, 6)
    weights = torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
    out = lexical(weights, embedded)
    f = torch.tanh(torch.stack([embedded[0, 2], embedded[1].mean(0)]))
    expected = lexical.out(torch.tanh(lexical.hidden(f)) + f)
    assert torch.allclose(out, expected, atol=1e-6)
    all_steps = lexical(weights.unsqueeze(1).expand(2, 3, 4), embedded)  # (B, T, S) weights
    assert torch.allclose(all_steps, expected.unsqueeze(1).expand(2, 3, 5), atol=1e-6)


def test_lexical_model_depends_on_the_attended_source_word():
    """Changing the embedding of one source word changes the lexical model's logits even
    with the encoder states held fixed: the word reaches the output by the short path."""
    model = bahdanau_model(lexical=True)
    src, mask, _ = make_batch()
    enc = model.encode(src, mask)
    state = model.init_state(enc)
    prev = torch.full((3,), BOS_ID)
    logits, _, _ = model.decode_step(prev, state, enc)
    changed = enc.reorder(torch.arange(3))
    changed.embedded = enc.embedded + 1.0
    other, _, _ = model.decode_step(prev, state, changed)
    assert not torch.allclose(logits, other, atol=1e-3)
    plain = bahdanau_model()
    enc = plain.encode(src, mask)
    assert enc.embedded is None


def test_transformer_lexical_model_reads_the_last_layers_mean_attention():
    """The generator's input is the final norm plus LexicalOutput(the last layer's cross-attention
    averaged over heads, the unscaled source embeddings); without the option, the norm alone."""
    torch.manual_seed(0)
    model = transformer_model(lexical=True)
    src, mask, tgt_in = make_batch()
    out, attn = model(src, mask, tgt_in, need_attn=False, project=False)
    assert attn is None  # the weights it computes for itself are not handed out
    last = model.cross_attention(src, mask, tgt_in)[-1].mean(dim=1)  # (B, T, S)
    lexical = model.lexical(last, model.src_emb(src))
    model.lexical = None  # the same weights without the term: the norm's output alone
    assert torch.allclose(out - lexical, model(src, mask, tgt_in, project=False)[0], atol=1e-5)
    assert not torch.allclose(out, model(src, mask, tgt_in, project=False)[0], atol=1e-3)


def test_transformer_lexical_model_depends_on_the_source_embeddings_it_attends():
    """With the encoder states held fixed, changing the source embeddings changes the logits
    of a lexical Transformer (the short path) and of no other."""
    for lexical in (True, False):
        torch.manual_seed(0)
        model = transformer_model(lexical=lexical)
        src, mask, _ = make_batch()
        enc = model.encode(src, mask)
        assert (enc.embedded is not None) == lexical
        prev = torch.full((3,), BOS_ID)
        logits, _, _ = model.decode_step(prev, model.init_state(enc), enc)
        changed = enc.reorder(torch.arange(3))
        if lexical:
            changed.embedded = enc.embedded + 1.0
        other, _, _ = model.decode_step(prev, model.init_state(changed), changed)
        assert torch.allclose(logits, other, atol=1e-6) != lexical


def test_transformer_lexical_option_leaves_the_other_weights_as_they_were():
    """The lexical layer is created last: the same seed gives the other parameters the same
    initial weights, so runs with and without it start from one model."""
    torch.manual_seed(5)
    plain = transformer_model().state_dict()
    torch.manual_seed(5)
    lexical = transformer_model(lexical=True).state_dict()
    assert {k for k in lexical if k not in plain} == {"lexical.hidden.weight", "lexical.out.weight"}
    assert all(torch.equal(plain[k], lexical[k]) for k in plain)


def test_transformer_xavier_init_draws_glorot_bounds_and_zero_biases():
    """init=xavier: each layer's linear weights within sqrt(6 / (fan_in + fan_out)) and spread
    across it (a uniform's std is bound / sqrt(3)), biases zero; the embeddings are as before."""
    torch.manual_seed(1)
    model = Transformer(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=64, num_heads=4,
                        ff_dim=256, init="xavier")
    torch.manual_seed(1)
    default = Transformer(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=64, num_heads=4,
                          ff_dim=256)
    linears = [m for m in [*model.encoder_layers.modules(), *model.decoder_layers.modules()]
               if isinstance(m, nn.Linear)]
    assert len(linears) == 3 * 6 + 3 * 10  # 4 projections + 2 feed-forward; 8 + 2
    for linear in linears:
        fan_out, fan_in = linear.weight.shape
        bound = (6 / (fan_in + fan_out)) ** 0.5
        assert linear.weight.abs().max() <= bound
        assert abs(linear.weight.std().item() - bound / 3**0.5) < 0.1 * bound
        assert torch.equal(linear.bias, torch.zeros_like(linear.bias))
    assert torch.equal(model.tgt_emb.weight, default.tgt_emb.weight)
    with pytest.raises(ModelConfigError, match="model.init"):
        transformer_model(init="kaiming")


def test_conditional_decoder_queries_after_reading_the_previous_word():
    """Nematus' conditional GRU, written out with torch.gru_cell: s'_t = GRU_1(y_{t-1}, s_{t-1})
    is the attention query, and s_t = GRU_2(c_t, s'_t) is the next state."""
    model = bahdanau_model(conditional=True)
    src, mask, _ = make_batch()
    enc = model.encode(src, mask)
    state = model.init_state(enc)
    prev = torch.tensor([5, 6, 7])
    _, new_state, weights = model.decode_step(prev, state, enc)

    def cell(rnn: nn.GRU, x: Tensor, hidden: Tensor) -> Tensor:
        return torch.gru_cell(
            x, hidden, rnn.weight_ih_l0, rnn.weight_hh_l0, rnn.bias_ih_l0, rnn.bias_hh_l0
        )

    query = cell(model.decoder, model.tgt_emb(prev), state.hidden[0])
    context, expected = model.attention(query, enc.keys, enc.states, enc.mask)
    assert torch.allclose(weights, expected, atol=1e-6)
    assert torch.allclose(new_state.hidden[0], cell(model.context_rnn, context, query), atol=1e-6)
    # the plain Bahdanau step attends with s_{t-1}, before the word is read
    plain = bahdanau_model()
    enc = plain.encode(src, mask)
    state = plain.init_state(enc)
    _, _, weights = plain.decode_step(prev, state, enc)
    _, expected = plain.attention(state.hidden[0], enc.keys, enc.states, enc.mask)
    assert torch.allclose(weights, expected, atol=1e-6)


def test_transformer_tied_embeddings_need_one_vocabulary():
    with pytest.raises(ValueError, match="joint vocabulary") as raised:
        Transformer(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB + 1, d_model=16, num_heads=4)
    assert isinstance(raised.value, UserError)
    Transformer(
        src_vocab_size=VOCAB, tgt_vocab_size=VOCAB + 1, d_model=16, num_heads=4,
        tie_embeddings=False,
    )


# ---------------------------------------------------------------- building from configs


@pytest.mark.parametrize(
    ("name", "settings", "model_class"),
    [
        ("vanilla", dict(emb_dim=8, hidden_size=12), VanillaSeq2Seq),
        ("bahdanau", dict(emb_dim=8, hidden_size=12, attn_dim=8), Bahdanau),
        ("luong", dict(score="dot", emb_dim=8, hidden_size=12), Luong),
        ("transformer", dict(d_model=16, num_heads=2, ff_dim=32), Transformer),
    ],
)
def test_build_model_from_the_model_configs(name, settings, model_class, capsys):
    cfg = compose_model(name, **settings)
    model = build_model(cfg, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB)
    assert isinstance(model, model_class) and isinstance(model, Seq2SeqModel)
    assert model.pad_id == PAD_ID and model.tgt_vocab_size == VOCAB
    assert model.name == cfg.name == name
    assert capsys.readouterr().out == ""  # the training set-up prints the size

    src, mask, tgt_in = make_batch()
    logits, _ = model.eval()(src, mask, tgt_in)
    assert logits.shape == (3, TGT_LEN, VOCAB)


OUTPUT_POSITION_MODELS = {
    "vanilla": ("vanilla", dict(emb_dim=8, hidden_size=12)),
    "bahdanau": ("bahdanau", dict(emb_dim=8, hidden_size=12, attn_dim=10, lexical=False)),
    "bahdanau-lexical": ("bahdanau", dict(emb_dim=8, hidden_size=12, attn_dim=10)),
    "luong": ("luong", dict(emb_dim=8, hidden_size=12)),
    "transformer": ("transformer", dict(d_model=16, num_heads=2, ff_dim=32,
                                        num_encoder_layers=1, num_decoder_layers=1)),
    "transformer-lexical": ("transformer", dict(d_model=16, num_heads=2, ff_dim=32,
                                                num_encoder_layers=1, num_decoder_layers=2,
                                                lexical=True)),
}


@pytest.mark.parametrize("variant", list(OUTPUT_POSITION_MODELS))
def test_output_positions_give_the_logits_of_the_real_positions(variant: str) -> None:
    """The training loop asks for logits at real target tokens only; they must be the same."""
    name, settings = OUTPUT_POSITION_MODELS[variant]
    model = build_model(compose_model(name, **settings), 30, 30).eval()
    src = torch.randint(4, 30, (3, 6))
    src_mask = torch.ones(3, 6, dtype=torch.bool)
    src_mask[1, 4:] = False
    tgt_in = torch.randint(4, 30, (3, 5))
    real = torch.ones(3, 5, dtype=torch.bool)
    real[0, 2:] = False
    full, _ = model(src, src_mask, tgt_in, need_attn=False)
    positions = real.flatten().nonzero().squeeze(1)
    some, _ = model(src, src_mask, tgt_in, need_attn=False, output_positions=positions)
    assert some.shape == (int(real.sum()), 30)
    torch.testing.assert_close(some, full[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("layers", [1, 2])
def test_step_from_precomputed_input_gates_equals_the_torch_cell(cell: str, layers: int) -> None:
    """rnn_step(x_tail, gates=input_gates(x_head)) == torch's cell on [x_head; x_tail]."""
    from seq2seq.models.layers import RNNState, input_gates, make_rnn, rnn_step

    torch.manual_seed(0)
    rnn = make_rnn(cell, 7, 5, layers, dropout=0.0).double()
    head, tail = torch.randn(3, 4, dtype=torch.double), torch.randn(3, 3, dtype=torch.double)
    hidden = tuple(torch.randn(3, 5, dtype=torch.double) for _ in range(layers))
    cells = tuple(torch.randn(3, 5, dtype=torch.double) for _ in range(layers))
    state = RNNState(hidden=hidden, cell=cells if cell == "lstm" else None)
    reference = rnn_step(rnn, torch.cat([head, tail], dim=1), state)
    split = rnn_step(rnn, tail, state, gates=input_gates(rnn, head))
    for a, b in zip(reference.hidden, split.hidden, strict=True):
        torch.testing.assert_close(a, b)
    if cell == "lstm":
        for a, b in zip(reference.cell, split.cell, strict=True):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("bidirectional", [True, False], ids=["bidirectional", "forward"])
def test_encoder_over_padding_equals_the_packed_sequence(
    cell: str, layers: int, bidirectional: bool
) -> None:
    """The CPU encoder (each direction over the padded batch, the backward one over each row
    reversed within its length) gives the packed sequence's states, final states and gradients."""
    from seq2seq.models.layers import encode_packed_sequence, encode_source

    torch.manual_seed(0)
    kind = nn.LSTM if cell == "lstm" else nn.GRU
    rnn = kind(6, 5, layers, batch_first=True, bidirectional=bidirectional).double()
    lengths = torch.tensor([7, 4, 1, 6])
    mask = torch.arange(7)[None] < lengths[:, None]
    emb = torch.randn(4, 7, 6, dtype=torch.double, requires_grad=True)
    found, expected = encode_source(rnn, emb, mask), encode_packed_sequence(rnn, emb, mask)
    weights = [torch.randn_like(t) for t in expected]  # one loss over states and final states
    gradients = []
    for states, final in (found, expected):
        assert states.shape == (4, 7, 5 * (1 + bidirectional))
        assert final.shape == (4, layers, 5 * (1 + bidirectional))
        assert not states[~mask].any()  # zero at padding
        loss = (states * weights[0]).sum() + (final * weights[1]).sum()
        gradients.append(torch.autograd.grad(loss, [emb, *rnn.parameters()]))
    for a, b in zip(found, expected, strict=True):
        torch.testing.assert_close(a, b)
    for a, b in zip(*gradients, strict=True):
        torch.testing.assert_close(a, b)
