"""Ensemble decoding (seq2seq.models.ensemble, `ckpt=[A,B]` in evaluate and translate) on tiny
models trained once: an ensemble of one is its member, two members average probabilities per
step, mixed variants decode together, and members of another tokenizer are refused."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from seq2seq.corpus import encode_split
from seq2seq.decoding import DecodeSettings
from seq2seq.errors import UserError
from seq2seq.evaluate import evaluate
from seq2seq.evaluation.decode_and_score import decode_ids
from seq2seq.inference import Loaded, load_models, search_settings
from seq2seq.models.base import Seq2SeqModel
from seq2seq.models.ensemble import Ensemble
from seq2seq.search import Hypothesis
from seq2seq.tokenization import BOS_ID, EOS_ID
from seq2seq.training.loop import train
from seq2seq.translate import translate
from tests.tiny import HAS_EFLOMAL, LEARNT_TRANSFORMER, pairs, tiny_config

ROOT = Path(__file__).resolve().parents[1]
TEST_PAIRS = pairs(20, 2)  # the tiny corpus's test split (tests.tiny.write_corpus)
LEARNT_RNN = ["trainer.max_steps=100", "trainer.eval_every=100", "trainer.lr=1e-2",
              "trainer.warmup_steps=10", "trainer.final_test=false"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Run folders sharing one tokenizer: two Bahdanau models of different seeds ("a", "b")
    and a Transformer ("transformer"); and a run of another tokenizer ("other")."""
    tmp = tmp_path_factory.mktemp("ensemble")
    data = tmp / "data"
    train(tiny_config(tmp / "a", *LEARNT_RNN, data_root=data))
    train(tiny_config(tmp / "b", *LEARNT_RNN, "trainer.seed=7", data_root=data))
    train(tiny_config(tmp / "transformer", *LEARNT_TRANSFORMER, "trainer.final_test=false",
                      model="transformer", data_root=data))
    train(tiny_config(tmp / "other", "trainer.max_steps=2", "trainer.final_test=false",
                      "tokenizer.vocab_size=300", data_root=tmp / "other_data"))
    return {name: tmp / name / "run/checkpoints/best.pt"
            for name in ("a", "b", "transformer", "other")}


def source_ids(loaded: Loaded) -> list[list[int]]:
    return encode_split(loaded.tokenizer, [s for s, _ in TEST_PAIRS], [t for _, t in TEST_PAIRS],
                        256, 256).src_ids


def decode(model: torch.nn.Module, src: list[list[int]], beam: int, nbest: int = 1
           ) -> list[list[Hypothesis]]:
    return decode_ids(model, src, DecodeSettings(beam_size=beam, nbest=nbest), torch.device("cpu"))


def tokens(found: list[list[Hypothesis]]) -> list[list[list[int]]]:
    return [[h.tokens for h in hyps] for hyps in found]


@pytest.mark.parametrize(("beam", "nbest"), [(5, 3), (1, 1)], ids=["beam5-nbest3", "greedy"])
@pytest.mark.parametrize("member", ["a", "transformer"])
def test_an_ensemble_of_one_decodes_as_its_member(
    runs: dict[str, Path], member: str, beam: int, nbest: int
) -> None:
    loaded = load_models(runs[member], "cpu")
    src = source_ids(loaded)
    alone, ensemble = (decode(m, src, beam, nbest) for m in (loaded.model,
                                                               Ensemble([loaded.model])))
    assert tokens(ensemble) == tokens(alone)
    for mine, theirs in zip(ensemble, alone, strict=True):
        for h, g in zip(mine, theirs, strict=True):
            # the log-probabilities are renormalised once more: equal up to float rounding
            assert h.score == pytest.approx(g.score, rel=1e-6, abs=1e-6)
            assert h.attention is not None and g.attention is not None
            torch.testing.assert_close(h.attention, g.attention, rtol=0, atol=1e-6)


def test_two_members_average_their_probabilities_per_step(runs: dict[str, Path]) -> None:
    loaded = load_models([runs["a"], runs["b"]], "cpu")
    ensemble = loaded.model
    assert isinstance(ensemble, Ensemble) and isinstance(ensemble, Seq2SeqModel)
    assert loaded.members == (runs["a"], runs["b"]) and loaded.step is None
    members = list(ensemble.members)
    src = source_ids(loaded)

    # one step from BOS, then a step after a reorder of the rows (as beam search does)
    width = max(len(ids) for ids in src[:4]) + 1
    src_ids = torch.full((4, width), ensemble.pad_id, dtype=torch.long)
    for row, ids in enumerate(src[:4]):
        src_ids[row, : len(ids) + 1] = torch.tensor([*ids, EOS_ID])
    src_mask = src_ids != ensemble.pad_id
    index = torch.tensor([2, 0, 0, 3])
    with torch.inference_mode():
        enc = ensemble.encode(src_ids, src_mask)
        state = ensemble.init_state(enc)
        encs = [m.encode(src_ids, src_mask) for m in members]
        states = [m.init_state(e) for m, e in zip(members, encs, strict=True)]
        prev = torch.full((4,), BOS_ID)
        for _ in range(2):
            log_probs, state, attn = ensemble.decode_step(prev, state, enc)
            steps = [m.decode_step(prev, s, e)
                     for m, s, e in zip(members, states, encs, strict=True)]
            probs = torch.stack([torch.softmax(logits, dim=-1) for logits, _, _ in steps])
            torch.testing.assert_close(log_probs, probs.mean(dim=0).log(), rtol=0, atol=1e-5)
            assert not torch.allclose(log_probs, torch.log_softmax(steps[0][0], dim=-1),
                                      atol=1e-3)
            torch.testing.assert_close(attn, torch.stack([a for _, _, a in steps]).mean(dim=0))
            prev = log_probs.argmax(dim=-1).index_select(0, index)
            state, enc = state.reorder(index), enc.reorder(index)
            states = [s.reorder(index) for _, s, _ in steps]
            encs = [e.reorder(index) for e in encs]

    together = tokens(decode(ensemble, src, beam=5))
    for member in members:
        assert together != tokens(decode(member, src, beam=5))


def test_a_member_of_another_tokenizer_is_refused_in_one_line(runs: dict[str, Path]) -> None:
    with pytest.raises(UserError, match="another tokenizer than") as err:
        load_models([runs["a"], runs["other"]], "cpu")
    message = str(err.value)
    assert str(runs["a"]) in message and str(runs["other"]) in message and "\n" not in message
    proc = subprocess.run([sys.executable, "-m", "seq2seq.translate",
                           f"ckpt=[{runs['a']},{runs['other']}]", "device=cpu"],
                          input=b"Jane ging in den Laden.\n", cwd=ROOT, capture_output=True,
                          timeout=120)
    stderr = proc.stderr.decode()
    assert proc.returncode == 2 and stderr.count("\n") == 1 and "Traceback" not in stderr
    assert str(runs["other"]) in stderr and str(runs["a"]) in stderr


@pytest.mark.slow  # 7 s on the 2-vCPU machine: the second tier keeps the fast one under 4 minutes
def test_evaluate_and_translate_take_a_list_of_checkpoints(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    listed = f"ckpt=[{runs['a']},{runs['b']}]"
    proc = subprocess.run([sys.executable, "-m", "seq2seq.evaluate", listed, "split=test",
                           "beam_size=5", "device=cpu"], cwd=ROOT, capture_output=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr.decode()
    hyp = runs["a"].parent.parent / "test.ensemble-best+best.beam5.hyp"  # the first's run
    metrics = json.loads(hyp.with_suffix(".metrics.json").read_text())
    assert metrics["ensemble"] == [str(runs["a"]), str(runs["b"])]
    assert metrics["step"] is None and metrics["beam_size"] == 5
    assert "ensemble of 2 checkpoints" in proc.stdout.decode()
    loaded = load_models([runs["a"], runs["b"]], "cpu")
    settings = search_settings(loaded.config, 5, None)  # the first member's, as evaluate's
    expected = [loaded.tokenizer.decode_tgt(hyps[0].tokens) for hyps in decode_ids(
        loaded.model, source_ids(loaded), settings, loaded.device)]
    assert hyp.read_text(encoding="utf-8").splitlines() == expected
    # the single checkpoint's evaluation keeps its own name beside it
    assert Path(evaluate(runs["a"], split="test", beam_size=5, device="cpu")["hypotheses"]) \
        == hyp.parent / "test.best.beam5.hyp"

    heatmaps = tmp_path / "attention"
    proc = subprocess.run([sys.executable, "-m", "seq2seq.translate", listed, "beam_size=5",
                           f"attention_dir={heatmaps}", "device=cpu"],
                          input="".join(s + "\n" for s, _ in TEST_PAIRS[:3]).encode(),
                          cwd=ROOT, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().splitlines() == expected[:3]
    assert sorted(p.name for p in heatmaps.iterdir()) == ["0001.png", "0002.png", "0003.png"]


def test_an_rnn_and_a_transformer_decode_as_one(runs: dict[str, Path]) -> None:
    """Mixed variants: the Transformer's cache and the RNN's state reorder side by side; the
    alignment is the members' mean attention, with no per-head figures; its Shift-Att reading
    is that mean's, as an RNN's (no layer to choose)."""
    result = evaluate([runs["a"], runs["transformer"]], split="validation", beam_size=3,
                      device="cpu")
    assert Path(result["hypotheses"]).name == "validation.ensemble-best+best.beam3.hyp"
    if HAS_EFLOMAL:
        assert result["alignment"]["aer"] is not None and "heads" not in result["alignment"]
        shift = result["alignment"]["shift_att"]
        assert shift["layer"] is None and shift["layers"] == [] and shift["aer"] is not None
    else:  # no reference links without the align extra
        assert result["alignment"] is None
    loaded = load_models([runs["a"], runs["transformer"]], "cpu")
    out = io.BytesIO()
    translate([runs["a"], runs["transformer"]], beam_size=3, nbest=2, device="cpu",
              stdin=io.BytesIO(b"Jane ging in den Laden.\n"), stdout=out)
    rows = [line.split(" ||| ") for line in out.getvalue().decode().splitlines()]
    src = loaded.tokenizer.encode_src(["Jane ging in den Laden."])
    found = decode_ids(loaded.model, src, search_settings(loaded.config, 3, None, nbest=2),
                       loaded.device)[0]
    assert [row[1] for row in rows] == [loaded.tokenizer.decode_tgt(h.tokens) for h in found]
    for hyp in found:
        assert hyp.attention is not None
        torch.testing.assert_close(hyp.attention.sum(dim=1), torch.ones(len(hyp.tokens) + 1))
