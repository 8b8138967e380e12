"""Guided alignment (seq2seq/training/guided.py): the reference over pieces, the loss, its
gradient into the attention, and that off (the default) trains exactly as before."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig

from seq2seq.alignment import Links
from seq2seq.corpus import prepare_data
from seq2seq.data.batching import collate
from seq2seq.decoding import DecodeSettings
from seq2seq.errors import UserError
from seq2seq.evaluation.aer import WordPair, probe_alignment, score_alignment
from seq2seq.evaluation.decode_and_score import decode_ids
from seq2seq.evaluation.word_links import choose_reading
from seq2seq.export import alignment_reading
from seq2seq.models import build_model, guided_alignment
from seq2seq.runtime import setup_runtime
from seq2seq.training.guided import (
    alignment_loss,
    dense_groups,
    dense_reference,
    reference_cells,
)
from seq2seq.training.loop import train
from seq2seq.training.setup import TrainingParts, build_parts
from tests.tiny import needs_eflomal, tiny_config, tiny_overrides

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def spans_of(text: str, pieces: list[str]) -> list[tuple[int, int]]:
    """The character spans of `pieces`, found left to right in `text`."""
    spans, at = [], 0
    for piece in pieces:
        start = text.index(piece, at)
        spans.append((start, start + len(piece)))
        at = start + len(piece)
    return spans


def test_word_links_become_piece_distributions() -> None:
    src, tgt = "Jane ging in den Laden.", "Jane went to the store."
    # source pieces: Jane | ging | in | den | La | den | .   (Laden in two pieces)
    src_spans = spans_of(src, ["Jane", "ging", "in", "den", "La", "den", "."])
    # target pieces: Jane | went | to | the | st | ore | .
    tgt_spans = spans_of(tgt, ["Jane", "went", "to", "the", "st", "ore", "."])
    # source words Jane ging in den Laden . -> 0..5; target Jane went to the store . -> 0..5
    links = Links(sure=frozenset({(0, 0), (4, 4)}),
                  possible=frozenset({(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (1, 2)}))
    cells = reference_cells(src, tgt, src_spans, tgt_spans, links)
    dense = dense_reference([cells], 8, 8)[0]  # rows and columns: 7 pieces + EOS
    assert dense[0, 0] == 1.0  # Jane -> Jane
    assert torch.allclose(dense[2, [1, 2]], torch.tensor([0.5, 0.5]))  # "to": two links
    for row in (4, 5):  # both pieces of "store": "Laden"'s two pieces, half each
        assert torch.allclose(dense[row, [4, 5]], torch.tensor([0.5, 0.5]))
    assert dense[6].sum() == 0  # "." is unaligned: not supervised (null=skip)
    assert dense[7].sum() == 0  # the target EOS is never supervised
    supervised = dense.sum(dim=1)
    assert torch.allclose(supervised[supervised > 0], torch.ones(6))

    to_eos = dense_reference([reference_cells(src, tgt, src_spans, tgt_spans, links,
                                              null="eos")], 8, 8)[0]
    assert to_eos[6, 7] == 1.0 and to_eos[6, :7].sum() == 0  # "." -> the source EOS column
    sure = dense_reference([reference_cells(src, tgt, src_spans, tgt_spans, links,
                                            which="sure")], 8, 8)[0]
    assert sure[1].sum() == 0 and sure[0, 0] == 1.0  # "went" has no sure link


def test_the_loss_is_zero_at_the_reference_and_grows_away_from_it() -> None:
    torch.manual_seed(0)
    reference = torch.softmax(torch.randn(2, 5, 6) * 3, dim=-1)
    reference[0, 4] = 0  # an unsupervised row: whatever the attention does there is free
    uniform = torch.full_like(reference, 1 / 6)
    at_reference = torch.where(reference.sum(-1, keepdim=True) > 0, reference, uniform)
    assert alignment_loss(at_reference.log(), reference).item() == pytest.approx(0.0, abs=1e-6)
    losses = [alignment_loss(((1 - a) * at_reference + a * uniform).log(), reference).item()
              for a in (0.0, 0.25, 0.5, 0.75, 1.0)]
    assert all(b > a for a, b in zip(losses, losses[1:], strict=False)), losses
    # only the supervised rows count: changing the free row changes nothing
    moved = at_reference.clone()
    moved[0, 4] = torch.softmax(torch.randn(6), dim=-1)
    assert alignment_loss(moved.log(), reference).item() == pytest.approx(0.0, abs=1e-6)


def test_grow_diag_final_keeps_the_union_links_next_to_the_intersection() -> None:
    """(4, 0), Laden-Jane, is in the union only and touches no growing link where a word is
    still unaligned: grow-diag-final leaves it out, so Jane's row is Jane alone, where the
    union splits it between Jane and Laden's pieces."""
    src, tgt = "Jane ging in den Laden.", "Jane went to the store."
    src_spans = spans_of(src, ["Jane", "ging", "in", "den", "La", "den", "."])
    tgt_spans = spans_of(tgt, ["Jane", "went", "to", "the", "st", "ore", "."])
    links = Links(sure=frozenset({(0, 0), (4, 4)}),
                  possible=frozenset({(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (4, 0)}))
    union = dense_reference([reference_cells(src, tgt, src_spans, tgt_spans, links)], 8, 8)[0]
    gdf = dense_reference([reference_cells(src, tgt, src_spans, tgt_spans, links,
                                           which="grow-diag-final")], 8, 8)[0]
    torch.testing.assert_close(union[0, [0, 4, 5]], torch.tensor([0.5, 0.25, 0.25]))
    assert gdf[0, 0] == 1.0 and gdf[0, 1:].sum() == 0
    for row in (1, 2, 3):  # grown from (0, 0) and (4, 4) along the diagonal
        assert gdf[row, row] == 1.0
    torch.testing.assert_close(gdf[4, [4, 5]], torch.tensor([0.5, 0.5]))


def test_the_word_level_kl_leaves_the_spread_over_a_words_pieces_free() -> None:
    """Per word: the attention on Laden's two pieces may be 0.9 / 0.1 (the piece level pulls
    it to 0.5 / 0.5); only the word's sum is pulled to the reference. Groups of a batch: the
    two pieces of Laden one group, the EOS one, each padding column one of its own."""
    src, tgt = "Jane ging in den Laden.", "Jane went to the store."
    src_spans = spans_of(src, ["Jane", "ging", "in", "den", "La", "den", "."])
    tgt_spans = spans_of(tgt, ["Jane", "went", "to", "the", "st", "ore", "."])
    links = Links(sure=frozenset(), possible=frozenset({(0, 0), (4, 4)}))
    cells = reference_cells(src, tgt, src_spans, tgt_spans, links)
    assert cells.groups.tolist() == [0, 1, 2, 3, 4, 4, 5, 6]
    groups = dense_groups([cells], 10)  # two padding columns
    assert groups.tolist() == [[0, 1, 2, 3, 4, 4, 5, 6, 18, 19]]
    reference = dense_reference([cells], 8, 10)
    attn = torch.full((1, 8, 10), 1e-9)
    attn[0, 0, 0] = 1.0
    attn[0, 4, 4], attn[0, 4, 5] = 0.9, 0.1  # "st" on Laden, unevenly
    attn[0, 5, 4], attn[0, 5, 5] = 0.2, 0.8
    attn[:, :, 8:] = 0.0  # padding: the masked softmax gives it nothing
    attn = attn / attn.sum(-1, keepdim=True)
    log_attn = attn.log()
    assert alignment_loss(log_attn, reference, groups).item() == pytest.approx(0.0, abs=1e-6)
    assert alignment_loss(log_attn, reference).item() > 0.1
    # half of Laden's mass moved to "ging": the word level sees it
    moved = attn.clone()
    moved[0, 4, 1], moved[0, 4, 4] = 0.45, 0.45
    assert alignment_loss(moved.log(), reference, groups).item() > 0.3


def test_the_word_level_kl_pulls_a_confidently_wrong_word_back() -> None:
    """A word of two pieces at e^-50 and e^-48 carries the reference: each piece's logit gets
    a_p - a_p / A_word (its share of the word's attention, -0.12 and -0.88, within 1e-3),
    whose sum over the word is A_word - 1, the KL's true gradient for the word."""
    scores = torch.tensor([[[0.0, -50.0, -48.0, 0.0, -torch.inf]]], requires_grad=True)
    reference = torch.tensor([[[0.0, 0.5, 0.5, 0.0, 0.0]]])
    groups = torch.tensor([[0, 1, 1, 2, 9]])  # column 4: padding
    alignment_loss(torch.log_softmax(scores, dim=-1), reference, groups).backward()
    attn = torch.softmax(scores.detach(), dim=-1)
    share = torch.softmax(torch.tensor([-50.0, -48.0]), dim=0)
    expected = attn.clone()
    expected[0, 0, 1:3] -= share
    assert scores.grad is not None and torch.isfinite(scores.grad).all()
    torch.testing.assert_close(scores.grad, expected, atol=1e-3, rtol=0)


def guided_parts(tmp_path: Path, model: str, device: str, *overrides: str) -> TrainingParts:
    """The real training parts on the tiny corpus, fp32, without dropout, links for training."""
    cfg = tiny_config(tmp_path, f"trainer.device={device}", "model.dropout=0.0",
                      "trainer.lr=1e-2", "trainer.warmup_steps=0", "trainer.schedule=constant",
                      *overrides, model=model)
    t = cfg.trainer
    rt = setup_runtime(t.device, t.precision, t.threads, t.seed)
    data = prepare_data(cfg.data, cfg.tokenizer, verbose=False, train_links=True)
    return build_parts(cfg, rt, data, Path(cfg.run_dir))


def attention_parameters(parts: TrainingParts, model: str) -> list[torch.nn.Parameter]:
    """The parameters that shape the supervised attention's scores."""
    if model == "transformer":
        return list(parts.model.decoder_layers[-1].cross_attn.parameters())
    if model == "luong":  # dot or general: the encoder's states are its keys
        return list(parts.model.encoder.parameters())
    return list(parts.model.attention.parameters())


@needs_eflomal
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("model", ["bahdanau", "luong", "transformer"])
def test_gradients_reach_the_attention_and_pull_it_to_the_links(
    tmp_path: Path, model: str, device: str
) -> None:
    parts = guided_parts(tmp_path, model, device, "trainer.alignment_weight=1.0")
    guidance, batches = parts.update.guidance, parts.batches
    assert guidance is not None
    batch = batches.to_device(batches.collate(batches.train_split, list(range(16))))
    reading = {"log_attn": True} | ({} if guidance.layer is None
                                    else {"attn_layer": guidance.layer})

    def kl() -> torch.Tensor:
        _, attn = parts.model(batch.src, batch.src_mask, batch.tgt_in, need_attn=True,
                              **reading)
        return alignment_loss(attn, guidance.reference(batch.indices.cpu(), attn.size(1),
                                                       attn.size(2)))

    parts.model.train()
    parts.model.zero_grad()
    before = kl()
    assert before.item() > 0.1  # an untrained attention is far from the links
    before.backward()
    grads = [p.grad for p in attention_parameters(parts, model) if p.grad is not None]
    assert grads and sum(g.abs().sum().item() for g in grads) > 0
    for number in range(1, 31):
        parts.update([batch], number)
        assert parts.update.alignment_kl.item() > 0
    parts.model.train()
    with torch.no_grad():
        after = kl()
    assert after.item() < 0.5 * before.item(), (before.item(), after.item())


@needs_eflomal
def test_off_by_default_trains_exactly_as_without_the_option(tmp_path: Path) -> None:
    """The default run has no guidance and the same loss curve, bit for bit, as a run that
    sets weight 0; a weighted run differs. (Against the code before the option existed: the
    same curve on this run, checked by hand at its commit; see docs/attention.md.)"""
    common = ["trainer.max_steps=12", "trainer.eval_every=1000", "trainer.final_test=false",
              "trainer.log_every=1", "model=transformer"]
    curves = {}
    for name, extra in (("default", []), ("zero", ["trainer.alignment_weight=0.0"]),
                        ("guided", ["trainer.alignment_weight=0.5"])):
        metrics = train(tiny_config(tmp_path / name, *common, *extra, model="transformer",
                                    data_root=tmp_path / "data"))
        curves[name] = metrics["losses"]
        assert (name == "guided") == (metrics["alignment_kl"] is not None)
    assert len(curves["default"]) == 12
    assert curves["zero"] == curves["default"]  # bit for bit: float equality
    assert curves["guided"] != curves["default"]


def test_guidance_is_refused_where_it_cannot_apply(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="model=vanilla has none"):
        guided_parts(tmp_path / "v", "vanilla", "cpu", "trainer.alignment_weight=1.0")
    with pytest.raises(UserError, match="subword_alpha=null"):
        guided_parts(tmp_path / "s", "bahdanau", "cpu", "trainer.alignment_weight=1.0",
                     "trainer.subword_alpha=0.3")
    with pytest.raises(UserError, match="alignment_links=both"):
        guided_parts(tmp_path / "l", "bahdanau", "cpu", "trainer.alignment_weight=1.0",
                     "trainer.alignment_links=both")
    with pytest.raises(UserError, match="alignment_level=words must be one of piece, word"):
        guided_parts(tmp_path / "w", "bahdanau", "cpu", "trainer.alignment_weight=1.0",
                     "trainer.alignment_level=words")


def test_align_reads_the_attention_guided_alignment_trained(tmp_path: Path) -> None:
    def config(model: str, *overrides: str) -> DictConfig:
        return tiny_config(tmp_path, *overrides, model=model)

    assert guided_alignment(config("transformer")) is None  # off: the usual choice
    guided = config("transformer", "trainer.alignment_weight=0.1")
    assert guided_alignment(guided) == (-1, None)  # the last layer's mean over heads
    assert guided_alignment(config("transformer", "trainer.alignment_weight=0.1",
                                   "trainer.alignment_layer=0",
                                   "trainer.alignment_head=1")) == (0, 1)
    # an RNN's one attention is what it returns, guided or not
    assert guided_alignment(config("bahdanau", "trainer.alignment_weight=0.1")) is None


@pytest.mark.parametrize(("model", "overrides", "message"), [
    ("transformer", ["model.num_decoder_layers=2", "trainer.alignment_layer=2"],
     r"trainer.alignment_layer=2 is outside \[-2, 2\) \(model.num_decoder_layers=2"),
    ("transformer", ["trainer.alignment_layer=-2"], r"alignment_layer=-2 is outside \[-1, 1\)"),
    ("transformer", ["model.num_heads=4", "trainer.alignment_head=9"],
     r"trainer.alignment_head=9 is outside \[0, 4\) \(model.num_heads=4\), or null"),
    ("bahdanau", ["trainer.alignment_layer=0"], "model=bahdanau has one attention, so -1 / null"),
    ("luong", ["trainer.alignment_head=1"], "model=luong has one attention, so -1 / null"),
    ("bahdanau", ["model.attention_fn=sparsemax"], "guidance needs attention_fn=softmax"),
    ("luong", ["model.attention_fn=entmax15"], "guidance needs attention_fn=softmax"),
])
def test_a_reading_the_model_has_not_or_cannot_train_is_refused(
    tmp_path: Path, model: str, overrides: list[str], message: str
) -> None:
    """Before, layer 2 of 2 wrapped to layer 0, head 9 of 4 failed inside forward, an RNN
    ignored both, and sparse attention trained without gradient outside its support."""
    with pytest.raises(UserError, match=message):
        guided_parts(tmp_path, model, "cpu", "trainer.alignment_weight=1.0", *overrides)


@pytest.mark.slow
def test_a_refused_reading_is_one_line_from_the_command(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "seq2seq.train", *tiny_overrides(tmp_path, "transformer"),
         f"run_dir={tmp_path / 'run'}", "trainer.alignment_weight=1.0",
         "trainer.alignment_layer=1"],
        capture_output=True, text=True, check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "alignment_layer=1" in line]
    assert len(errors) == 1 and "outside [-1, 1)" in errors[0]


def test_the_kl_pulls_an_attention_confidently_wrong_back() -> None:
    """A reference cell where the attention is 5e-21 (a confident, wrong softmax): the KL of
    the log-softmax gives each logit its true gradient, attention - reference (-1 there, within
    1e-3), where log(attention + 1e-9) gave it about -5e-12 and a clamp none."""
    scores = torch.tensor([[[0.0, -46.0, 0.0]]], requires_grad=True)  # cell 1: e^-46 / 2
    reference = torch.tensor([[[0.0, 1.0, 0.0]]])
    alignment_loss(torch.log_softmax(scores, dim=-1), reference).backward()
    attn = torch.softmax(scores.detach(), dim=-1)
    assert attn[0, 0, 1] < 1e-20
    assert scores.grad is not None
    torch.testing.assert_close(scores.grad, attn - reference, atol=1e-3, rtol=0)
    assert torch.isfinite(alignment_loss(torch.log_softmax(scores.detach(), -1), reference))


@pytest.mark.parametrize("model", ["bahdanau", "luong", "transformer"])
def test_the_models_log_attention_is_the_log_of_their_attention(tmp_path: Path,
                                                                 model: str) -> None:
    """log_attn=True gives the log of what the model attends with (and the same logits): the
    Transformer's head mean as logsumexp - log H, one head as its own log-softmax."""
    cfg = tiny_config(tmp_path, "model.dropout=0.0", model=model)
    data = prepare_data(cfg.data, cfg.tokenizer, verbose=False)
    net = build_model(cfg.model, src_vocab_size=data.tokenizer.src_vocab_size,
                      tgt_vocab_size=data.tokenizer.tgt_vocab_size).eval()
    split = data.splits["train"]
    batch = collate(split.src_ids[:4], split.tgt_ids[:4], [0, 1, 2, 3])
    readings = [{}] if model != "transformer" else [{"attn_layer": -1},
                                                     {"attn_layer": 0, "attn_head": 1}]
    for reading in readings:
        logits, attn = net(batch.src, batch.src_mask, batch.tgt_in, **reading)
        log_logits, log_attn = net(batch.src, batch.src_mask, batch.tgt_in, log_attn=True,
                                   **reading)
        torch.testing.assert_close(log_logits, logits)
        real = attn > 0
        torch.testing.assert_close(log_attn.exp()[real], attn[real], atol=1e-6, rtol=1e-5)
        assert (log_attn.exp()[~real] == 0).all()


@needs_eflomal
@pytest.mark.parametrize("level", ["piece", "word"])
def test_the_update_loss_is_nll_plus_weight_times_kl(tmp_path: Path, level: str) -> None:
    """On a hand-built batch: the update's logged KL is the formula's, and one update's
    gradient is that of (sum nll + W * sum KL) / target tokens; per word, with the batch's
    groups collated beside its reference."""
    weight = 0.5
    parts = guided_parts(tmp_path, "bahdanau", "cpu", f"trainer.alignment_weight={weight}",
                         "trainer.label_smoothing=0.0", "trainer.clip_norm=0.0",
                         f"trainer.alignment_level={level}")
    guidance, batches = parts.update.guidance, parts.batches
    assert guidance is not None
    batch = batches.to_device(batches.collate(batches.train_split, [0, 1, 2]))
    model = parts.model
    model.train()
    torch.manual_seed(0)
    logits, attn = model(batch.src, batch.src_mask, batch.tgt_in, need_attn=True, log_attn=True)
    nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(),
                                            ignore_index=0, reduction="sum")
    groups = guidance.groups(batch.indices, attn.size(2))
    assert (groups is None) == (level == "piece")
    assert (batch.groups is None) == (level == "piece")
    if groups is not None:
        assert torch.equal(batch.groups, groups)
    kl = alignment_loss(attn, guidance.reference(batch.indices, attn.size(1), attn.size(2)),
                        groups)
    if groups is not None:  # the word level is another loss on the same attention
        assert kl.item() < alignment_loss(attn, guidance.reference(
            batch.indices, attn.size(1), attn.size(2))).item()
    tokens = (batch.tgt_out != 0).sum()
    params = list(model.parameters())
    expected = torch.autograd.grad((nll + weight * kl) / tokens, params, allow_unused=True)
    model.zero_grad()
    stepped: list[torch.Tensor | None] = []
    real_step = parts.optimizer.step

    def step_that_records_the_gradient(*args, **kwargs):  # then the real step
        stepped.extend(None if p.grad is None else p.grad.clone() for p in params)
        return real_step(*args, **kwargs)

    parts.optimizer.step = step_that_records_the_gradient
    nll_sum, _, counted, _ = parts.update([batch], 1)
    assert counted.item() == tokens.item()
    assert nll_sum.item() == pytest.approx(nll.item(), rel=1e-5)
    assert parts.update.alignment_kl.item() == pytest.approx(kl.item(), rel=1e-5)
    assert len(stepped) == len(params)
    for got, want in zip(stepped, expected, strict=True):
        if want is None:
            assert got is None or not got.any()
        else:
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-7)


def test_the_off_path_calls_the_model_as_before_guidance(tmp_path: Path) -> None:
    """Guidance off: the update asks for no attention and names no layer or head, exactly the
    call the update made before the option existed (so the fused kernel is kept)."""
    parts = guided_parts(tmp_path, "transformer", "cpu")
    assert parts.update.guidance is None
    calls: list[dict] = []
    real = parts.update.step_model

    def recording(*args, **kwargs):
        calls.append({k: v for k, v in kwargs.items() if k != "output_positions"})
        return real(*args, **kwargs)

    parts.update.step_model = recording
    batches = parts.batches
    parts.update([batches.to_device(batches.collate(batches.train_split, [0, 1]))], 1)
    assert calls == [{"need_attn": False, "project": False}]


def test_the_export_carries_the_supervised_reading_or_refuses() -> None:
    assert alignment_reading(None, 4) == (-1, 4)  # unguided: the last layer's mean
    assert alignment_reading((-1, None), 4) == (-1, 4)
    assert alignment_reading((0, None), 4) == (0, 4)
    assert alignment_reading((1, 0), 4) == (1, 1)  # CTranslate2: the mean of the first 1
    with pytest.raises(UserError, match="only head 0 or the mean"):
        alignment_reading((0, 1), 4)


@needs_eflomal
def test_every_figure_of_a_guided_run_reads_its_supervised_layer_and_head(
    tmp_path: Path,
) -> None:
    """Guided on decoder layer 0 head 1 of 2 layers: validation's AER is that head's, as is
    the teacher-forced probe's; before, they read the last layer's mean."""
    parts = guided_parts(tmp_path, "transformer", "cpu", "trainer.alignment_weight=1.0",
                         "model.num_decoder_layers=2", "trainer.alignment_layer=0",
                         "trainer.alignment_head=1")
    validator = parts.validator
    assert parts.model.alignment == (0, 1)  # the model is read where it was guided
    row = validator.validate(1, 0.0)
    valid = validator.valid
    found = score_alignment(parts.model, validator.data.tokenizer, valid.src_text,
                            valid.tgt_text, valid.src_ids, valid.tgt_ids, validator.valid_links,
                            torch.device("cpu"))
    assert found is not None and found.heads is not None
    report = found.report()
    assert row["valid_aer"] == pytest.approx(report["heads"][0][1]["aer"])
    assert report["aer"] == pytest.approx(report["heads"][0][1]["aer"])  # no parameter
    assert report["heads"][1][0]["aer"] != report["aer"]  # another head reads otherwise
    tok, probe, reference = validator.data.tokenizer, validator.probe[0], validator.probe_reference
    guided = probe_alignment(parts.model, tok, probe, reference, torch.device("cpu"))
    batch = collate(tok.encode_src([probe]), tok.encode_tgt([reference]), [0])
    parts.model.eval()
    with torch.no_grad():
        heads = parts.model.cross_attention(batch.src, batch.src_mask, batch.tgt_in)
    assert guided is not None
    pair = WordPair.of(probe, reference, tok.src_spans([probe])[0], tok.tgt_spans([reference])[0],
                       Links(frozenset(), frozenset()))
    torch.testing.assert_close(guided[0], pair.word_attention(heads[0, 0, 1]))
    assert not torch.allclose(guided[0], pair.word_attention(heads[1, 0].mean(dim=0)))
    # each decoding step (translate's heatmaps, compare's probe picture) reads it too
    ids = tok.encode_src([probe])[0]
    hyp = decode_ids(parts.model, [ids], DecodeSettings(beam_size=1), torch.device("cpu"))[0][0]
    forced = collate([ids], [hyp.tokens], [0])
    with torch.no_grad():
        heads = parts.model.cross_attention(forced.src, forced.src_mask, forced.tgt_in)
    torch.testing.assert_close(hyp.attention, heads[0, 0, 1], atol=1e-5, rtol=1e-4)
    # and align's reading, and the export's (CTranslate2 carries head 0 or the mean only)
    reading = choose_reading(parts.model, "transformer", [], torch.device("cpu"))
    assert (reading.layer, reading.head) == (0, 1) and "guided alignment trained" in \
        reading.description
    with pytest.raises(UserError, match="guided on decoder layer 0 head 1"):
        alignment_reading(parts.model.alignment, 2)


@needs_eflomal
def test_the_reference_is_collated_with_the_batch_not_built_in_the_step(tmp_path: Path) -> None:
    parts = guided_parts(tmp_path, "bahdanau", "cpu", "trainer.alignment_weight=1.0")
    batches, guidance = parts.batches, parts.update.guidance
    assert guidance is not None
    batch = batches.collate(batches.train_split, [3, 1, 2])
    assert batch.reference is not None
    assert torch.equal(batch.reference, guidance.reference(batch.indices, batch.tgt_in.size(1),
                                                           batch.src.size(1)))

    def built_in_the_step(*args):
        raise AssertionError("the step built the reference on the host")

    guidance.reference = built_in_the_step  # the update must take the collated one
    parts.update([batches.to_device(batch)], 1)
    assert parts.update.alignment_kl.item() > 0
    streamed = next(iter(batches.stream(0, 0)))  # as the loader collates it
    assert streamed.reference is not None
    assert streamed.reference.shape == (streamed.src.size(0), streamed.tgt_in.size(1),
                                        streamed.src.size(1))
