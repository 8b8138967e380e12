"""Self-attention and multi-head, seen and measured: the pictures of the encoder's and the
decoder's self-attention, head masking, the heads' statistics and the heads report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from seq2seq.evaluation.head_stats import STATISTICS, HeadStatistics, is_punctuation, row_sums
from seq2seq.heads import masked, report_heads
from seq2seq.models.transformer import Transformer
from seq2seq.models.transformer_layers import MultiHeadAttention
from seq2seq.training.loop import train
from tests.tiny import LEARNT_TRANSFORMER, tiny_config

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))]


def column(name: str) -> int:
    return STATISTICS.index(name)


@pytest.mark.parametrize("fused", [True, False])
def test_masking_a_head_zeroes_its_part_and_leaves_the_others_bit_for_bit(fused: bool) -> None:
    """With W^O the identity, the output's columns are the heads' outputs side by side: a
    masked head's are zero, the others' exactly as without the mask (both kernels)."""
    torch.manual_seed(0)
    attention = MultiHeadAttention(d_model=8, num_heads=4, attn_dropout=0.0).eval()
    with torch.no_grad():
        attention.w_o.weight.copy_(torch.eye(8))
        attention.w_o.bias.zero_()
    x = torch.randn(2, 5, 8)
    keys, values = attention.project_kv(x)
    plain, _ = attention.attend(x, keys, values, None, need_weights=not fused)
    attention.head_gate = torch.tensor([1.0, 0.0, 1.0, 1.0])
    gated, _ = attention.attend(x, keys, values, None, need_weights=not fused)
    head = slice(2, 4)  # head 1's K = 2 columns
    assert torch.equal(gated[..., head], torch.zeros_like(gated[..., head]))
    for other in (slice(0, 2), slice(4, 6), slice(6, 8)):
        assert torch.equal(gated[..., other], plain[..., other])


def tiny_transformer() -> Transformer:
    torch.manual_seed(0)
    return Transformer(src_vocab_size=30, tgt_vocab_size=30, d_model=16, num_heads=4,
                       ff_dim=32, num_encoder_layers=2, num_decoder_layers=2,
                       dropout=0.0).eval()


@pytest.mark.parametrize("device", DEVICES)
def test_self_attention_for_the_pictures_is_causal_and_the_fused_kernels(device: str) -> None:
    model = tiny_transformer().to(device)
    src = torch.randint(4, 30, (3, 7), device=device)
    src_mask = torch.ones_like(src, dtype=torch.bool)
    src_mask[0, 5:] = False
    tgt_in = torch.randint(4, 30, (3, 6), device=device)
    with torch.no_grad():
        encoder, decoder = model.self_attention(src, src_mask, tgt_in)
        enc, _ = model._encode(src, src_mask)
        fused, _ = model._decode(tgt_in, enc, need_weights=False)
        explicit_enc, _ = model._encode(src, src_mask, need_weights=True)
        explicit, _ = model._decode(tgt_in, explicit_enc, need_weights=False, self_weights=[])
    assert encoder.shape == (2, 3, 4, 7, 7) and decoder.shape == (2, 3, 4, 6, 6)
    upper = torch.ones(6, 6, dtype=torch.bool, device=device).triu(1)
    assert torch.equal(decoder[..., upper], torch.zeros_like(decoder[..., upper]))  # exactly 0
    assert torch.equal(encoder[:, 0, :, :, 5:], torch.zeros_like(encoder[:, 0, :, :, 5:]))
    torch.testing.assert_close(decoder.sum(-1), torch.ones_like(decoder.sum(-1)))
    # the explicit path the pictures take computes what the fused kernel computes in training
    torch.testing.assert_close(explicit_enc.states, enc.states, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(explicit, fused, rtol=1e-5, atol=1e-6)


def test_statistics_on_hand_made_attention() -> None:
    n = 5
    previous = torch.zeros(1, n, n)
    previous[0, 0, 0] = 1.0  # the first row has no previous key: it looks at itself
    for q in range(1, n):
        previous[0, q, q - 1] = 1.0
    uniform = torch.full((1, n, n), 1 / n)
    punctuation = torch.tensor([False, False, False, True, False])
    sums, rows = row_sums(torch.cat([previous, uniform]), n - 1, punctuation, positional=True)
    means = sums / rows
    assert means[0, column("previous")] == 1.0  # over the rows that have a previous key
    assert means[0, column("same")] == pytest.approx(1 / n)
    assert means[0, column("next")] == 0.0
    assert means[0, column("entropy")] == 0.0 and means[0, column("confidence")] == 1.0
    assert means[1, column("entropy")] == pytest.approx(math.log(n))  # the maximum
    assert means[1, column("confidence")] == pytest.approx(1 / n)
    assert means[1, column("boundary")] == pytest.approx(1 / n)
    assert means[1, column("punctuation")] == pytest.approx(1 / n)
    assert means[0, column("punctuation")] == pytest.approx(1 / n)  # row 4 looks at key 3
    # cross-attention: no positional shares (queries and keys are different sentences)
    sums, rows = row_sums(uniform, n - 1, punctuation, positional=False)
    assert rows[0, column("previous")] == 0 and sums[0, column("entropy")] > 0
    found = HeadStatistics()
    found.add(torch.stack([uniform, previous]), n - 1, punctuation, True)  # 2 layers
    assert found.means().shape == (2, 1, len(STATISTICS)) and found.sentences == 1


def test_punctuation_pieces() -> None:
    assert is_punctuation(".") and is_punctuation("▁,") and is_punctuation("?!")
    assert not is_punctuation("▁") and not is_punctuation("▁Jane") and not is_punctuation("a.")


def test_masked_restores_the_model() -> None:
    model = tiny_transformer()
    with masked(model, [("cross", 1, 2), ("encoder", 0, 0), ("cross", 1, 3)]):
        gate = model.decoder_layers[1].cross_attn.head_gate
        assert gate is not None and gate.tolist() == [1.0, 1.0, 0.0, 0.0]
        assert model.encoder_layers[0].self_attn.head_gate.tolist() == [0.0, 1.0, 1.0, 1.0]
        assert model.decoder_layers[0].cross_attn.head_gate is None
    assert all(m.head_gate is None for m in model.modules() if isinstance(m, MultiHeadAttention))


@pytest.fixture(scope="module")
def learnt(tmp_path_factory) -> Path:
    """A tiny Transformer trained 150 updates, validated twice with its probe."""
    tmp_path = tmp_path_factory.mktemp("heads")
    cfg = tiny_config(tmp_path, *LEARNT_TRANSFORMER, model="transformer")
    train(cfg)
    return Path(cfg.run_dir)


@pytest.mark.slow
def test_the_tensorboard_holds_self_attention_pictures_beside_cross_attention(learnt: Path
                                                                               ) -> None:
    images = EventAccumulator(str(learnt / "tensorboard"),
                              size_guidance={"images": 0}).Reload().Tags()["images"]
    assert "attention_heads/probe_0" in images  # the cross-attention grid, as before
    assert "self_attention/probe_0/encoder_layer0" in images
    assert "self_attention/probe_0/decoder_layer0" in images


@pytest.mark.slow
def test_a_recurrent_model_says_once_it_has_no_self_attention(tmp_path: Path) -> None:
    cfg = tiny_config(tmp_path, "trainer.max_steps=20", "trainer.eval_every=10",
                      model="bahdanau")
    train(cfg)
    events = EventAccumulator(str(Path(cfg.run_dir) / "tensorboard")).Reload()
    assert not [t for t in events.Tags()["images"] if t.startswith("self_attention")]
    assert len(events.Tensors("self_attention/text_summary")) == 1


@pytest.mark.slow
def test_the_heads_report(learnt: Path, tmp_path: Path) -> None:
    cfg = OmegaConf.create({"ckpt": str(learnt / "checkpoints/best.pt"), "split": "validation",
                            "max_sentences": 12, "prune_budget": 0.5, "device": "cpu",
                            "out": str(tmp_path / "heads")})
    measured = report_heads(cfg)
    report = json.loads((tmp_path / "heads/heads.json").read_text())
    assert len(measured["heads"]) == 3 * 2  # 3 attentions x 1 layer x 2 heads
    for name, row in measured["heads"].items():
        assert row["bleu_lost"] == pytest.approx(measured["bleu"] - row["bleu"]), name
    means = torch.tensor(report["statistics"]["decoder"]["means"])  # (1, 2, 7)
    assert means[..., column("next")].eq(0).all()  # causal: nothing on the next position
    assert torch.isnan(torch.tensor(report["statistics"]["cross"]["means"])[
        ..., column("previous")]).all()
    assert (tmp_path / "heads/heads_importance.png").stat().st_size > 1000
    assert "| cross | 0 | 1 |" in (tmp_path / "heads/heads.md").read_text()
    assert measured["prunable"] <= 6
