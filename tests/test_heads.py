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

from seq2seq.errors import UserError
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
    assert means[0, column("next")] == 0.0 and rows[0, column("next")] == n - 1
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


def causal_uniform(n: int) -> torch.Tensor:
    """(1, n, n) the decoder's masked self-attention, each row uniform over what it may see."""
    return (torch.tril(torch.ones(n, n)) / torch.arange(1, n + 1)[:, None])[None]


def test_decoder_statistics_skip_what_the_mask_forces() -> None:
    """Query 0 may see only the BOS: its row says nothing about the head and is skipped (it
    would add 1 to "same" and "boundary"); at query 1 the previous key is the BOS, the
    boundary, not a word; "next" is never allowed: not applicable (no rows)."""
    n = 4
    attn = causal_uniform(n)
    punctuation = torch.zeros(n, dtype=torch.bool)
    sums, rows = row_sums(attn, 0, punctuation, positional=True, causal=True)
    means = sums / rows
    assert rows[0, column("entropy")] == n - 1  # rows 1..3, not row 0
    assert means[0, column("boundary")] == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)
    assert means[0, column("same")] == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)
    assert rows[0, column("previous")] == n - 2  # queries 2, 3: their previous is a word
    assert means[0, column("previous")] == pytest.approx((1 / 3 + 1 / 4) / 2)
    assert rows[0, column("next")] == 0 and torch.isnan(means[0, column("next")])
    assert means[0, column("entropy")] == pytest.approx(
        (math.log(2) + math.log(3) + math.log(4)) / 3)
    # a head that parks everything on the BOS: its boundary share is 1 from real rows alone
    parked = torch.zeros(1, n, n)
    parked[0, :, 0] = 1.0
    sums, rows = row_sums(parked, 0, punctuation, positional=True, causal=True)
    assert (sums / rows)[0, column("boundary")] == 1.0 and rows[0, column("boundary")] == n - 1


@pytest.mark.slow
def test_statistics_of_a_mixed_length_batch_are_each_sentences_own(learnt: Path) -> None:
    """The heads report's statistics over a batch of two sentences of different lengths
    (padded together) equal the sums of each sentence measured alone."""
    from seq2seq.corpus import encode_split
    from seq2seq.heads import statistics
    from seq2seq.inference import load_for_inference

    loaded = load_for_inference(learnt / "checkpoints/best.pt", "cpu")
    tok = loaded.tokenizer
    pair = encode_split(tok, ["Jane ging in den Laden.", "Tom sah den Zoo."],
                        ["Jane went to the store.", "Tom saw the zoo."], 256, 256)
    assert len(pair.src_ids[0]) != len(pair.src_ids[1])
    together = statistics(loaded, pair, batch_size=2)
    alone = [statistics(loaded, pair.subset([i]), batch_size=1) for i in (0, 1)]
    for kind, found in together.items():
        # float64 sums of float32 attention: a padded batch runs other kernel shapes (on a Xeon
        # with AMX they differ by ~1e-7 of the value); a counted pad or forced row moves a
        # sum by a whole row's weight, 0.1 or more
        torch.testing.assert_close(found.sums, alone[0][kind].sums + alone[1][kind].sums,
                                   rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(found.rows, alone[0][kind].rows + alone[1][kind].rows)
    decoder = together["decoder"].means()
    assert torch.isnan(decoder[..., column("next")]).all()


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
    """Chosen on validation, reported on test with intervals; valid JSON (NaN refused); a head
    whose W^O columns are zero loses exactly 0 BLEU, there and here."""
    ckpt = learnt / "checkpoints/best.pt"
    payload = torch.load(ckpt, map_location="cpu", weights_only=True)
    state = payload["model"]  # what evaluation loads
    key = next(k for k in state if k.endswith("decoder_layers.0.cross_attn.w_o.weight"))
    head_size = state[key].shape[1] // 2
    state[key][:, head_size:] = 0.0  # head 1's output columns of W^O
    zeroed = tmp_path / "run/checkpoints/best.pt"
    zeroed.parent.mkdir(parents=True)
    torch.save(payload, zeroed)
    (tmp_path / "run/tokenizer").symlink_to(learnt / "tokenizer")
    cfg = OmegaConf.create({"ckpt": str(zeroed), "split": "test", "select_split": "validation",
                            "max_sentences": 12, "prune_budget": 0.5, "device": "cpu",
                            "out": str(tmp_path / "heads")})
    measured = report_heads(cfg)
    text = (tmp_path / "heads/heads.json").read_text()

    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    report = json.loads(text, parse_constant=refuse)
    assert len(measured["heads"]) == 3 * 2  # 3 attentions x 1 layer x 2 heads
    dead = measured["heads"]["cross/0/1"]
    assert dead["bleu_lost"] == 0.0 and dead["select_bleu_lost"] == 0.0
    assert dead["low"] == dead["high"] == 0.0
    for name, row in measured["heads"].items():
        assert row["low"] <= row["bleu_lost"] <= row["high"], name
    order = measured["pruning_order"]
    lost = [measured["heads"][name]["select_bleu_lost"] for name in order]
    assert lost == sorted(lost)  # ordered on the selection split
    decoder = report["statistics"]["decoder"]["means"]  # (1, 2, 7)
    assert all(head[column("next")] is None for head in decoder[0])  # not applicable
    assert all(head[column("previous")] is None for head in report["statistics"]["cross"]
               ["means"][0])
    assert (tmp_path / "heads/heads_importance.png").stat().st_size > 1000
    assert "| cross | 0 | 1 | +0.00 | +0.00 [+0.00, +0.00] |" in (
        tmp_path / "heads/heads.md").read_text()
    cfg.select_split = "test"
    with pytest.raises(UserError, match="chosen on one split and reported on another"):
        report_heads(cfg)


COMMITTED = sorted(Path(__file__).resolve().parents[1].glob("results/heads_*/heads.json"))


@pytest.mark.parametrize("path", COMMITTED, ids=[p.parent.name for p in COMMITTED])
def test_the_committed_heads_reports_are_json_and_their_tables_agree(path: Path) -> None:
    """results/heads_* as committed: NaN refused; every head measured, ordered on the selection
    split, the first pruned what that head alone lost; the decoder's "next" not applicable; and
    heads.md's importance column each head's figure and interval from heads.json."""

    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    report = json.loads(path.read_text(), parse_constant=refuse)
    importance = report["importance"]
    heads, order, pruned = importance["heads"], importance["pruning_order"], importance["pruned"]
    assert len(heads) == sum(importance["layers"].values()) * importance["num_heads"]
    assert sorted(order) == sorted(heads)
    selected = [heads[name]["select_bleu_lost"] for name in order]
    assert selected == sorted(selected)
    assert [step["heads"] for step in pruned] == list(range(1, len(pruned) + 1))
    assert pruned[0]["bleu_lost"] == pytest.approx(heads[order[0]]["bleu_lost"])
    decoder = report["statistics"]["decoder"]
    nxt = decoder["names"].index("next")
    assert all(head[nxt] is None for layer in decoder["means"] for head in layer)
    table = (path.parent / "heads.md").read_text()
    for name, row in heads.items():
        attention, layer, head = name.split("/")
        assert (f"| {attention} | {layer} | {head} | {row['select_bleu_lost']:+.2f} | "
                f"{row['bleu_lost']:+.2f} [{row['low']:+.2f}, {row['high']:+.2f}] |") in table, name
