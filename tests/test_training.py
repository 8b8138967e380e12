"""End-to-end training on a tiny real corpus: run folder, resume, signals, safe checkpoints."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

from seq2seq import checkpoint as ckpt_module
from seq2seq.checkpoint import Progress, load_checkpoint, save_checkpoint
from seq2seq.compare import study_variant
from seq2seq.corpus import prepare_data
from seq2seq.errors import UserError
from seq2seq.evaluation.hypotheses import read_hypotheses
from seq2seq.evaluation.metrics import bleu_signature, signature_tokenizer
from seq2seq.inference import load_for_inference
from seq2seq.runtime import Runtime, setup_runtime
from seq2seq.train import main as train_entry_point
from seq2seq.training import update as update_module
from seq2seq.training.loop import check_scorer, train
from seq2seq.training.setup import build_parts
from seq2seq.training.train_log import TrainLog
from seq2seq.training.validation import reference_probe
from tests.tiny import HAS_EFLOMAL, tiny_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("model", ["bahdanau", "transformer"])
def test_train_writes_the_run_folder(tmp_path: Path, model: str) -> None:
    cfg = tiny_config(tmp_path, "trainer.max_steps=150", "trainer.eval_every=75",
                      "trainer.lr=1e-2", "trainer.warmup_steps=10", model=model)
    metrics = train(cfg)
    run = tmp_path / "run"
    for name in ("checkpoints/last.pt", "checkpoints/best.pt", "metrics.json", "test.hyp",
                 "config.yaml"):
        assert (run / name).is_file(), name
    assert any((run / "tokenizer").iterdir())
    assert metrics["steps"] == 150
    assert 50 < metrics["peak_memory_mib_training"] <= metrics["peak_memory_mib"] < 8192  # MiB
    saved = json.loads((run / "metrics.json").read_text())
    assert saved["test"]["bleu_signature"].find("13a") >= 0
    assert len(read_hypotheses(run / "test.hyp")) == 20
    assert [row["step"] for row in saved["history"]] == [75, 150]
    assert saved["test"]["bleu"] > 10  # the tiny corpus is learnt: names are copied
    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"images": 0}).Reload()
    scalars = set(events.Tags()["scalars"])
    assert {"train/loss", "train/ppl", "train/lr", "train/grad_norm", "train/tokens_per_s",
            "valid/loss", "valid/bleu", "valid/chrf"} <= scalars
    assert len(events.Images("attention/probe_0")) == 2  # one heatmap per evaluation
    # the probe teacher-forced on its reference, with the seeds' two weights, every evaluation
    assert len(events.Images("attention/probe_0_reference")) == 2
    for pair in ("probe/Jane->Jane", "probe/store->Laden"):
        weights = [event.value for event in events.Scalars(pair)]
        assert [event.step for event in events.Scalars(pair)] == [75, 150]
        assert all(0 <= w <= 1 for w in weights)
    assert events.Scalars("probe/Jane->Jane")[-1].value > 0.5  # the tiny model copies names
    if model == "transformer":
        assert len(events.Images("attention_heads/probe_0")) == 2
    alignment = saved["test"]["alignment"]
    if HAS_EFLOMAL:
        check_the_alignment_figures(model, saved, scalars, events)
    else:  # no reference links without the align extra: the AER is reported unavailable
        assert alignment is None
        assert not any(("aer" in tag or "accuracy" in tag) for tag in scalars), scalars
    loaded = load_for_inference(run / "checkpoints" / "best.pt", "cpu")
    for layer, reading in ((None, "cross-attention, step predicting the word"),
                           (0, "Shift-Att, layer 0")):
        found = reference_probe(loaded.model, loaded.tokenizer, "Jane ging in den Laden.",
                                "Jane went to the store.", [["Jane", "Jane"]], loaded.device,
                                150, layer)
        if found is None:  # an RNN has no Shift-Att reading
            assert model != "transformer" and layer is not None
            continue
        fig, probe_weights = found
        title = " ".join(fig._suptitle.get_text().split())  # wrapped to fit the canvas
        assert title.startswith(f"step 150, teacher-forced, {reading}: Jane→Jane 0.")
        assert 0 <= probe_weights["Jane", "Jane"] <= 1
    # compare's row carries the test's Shift-Att AER (empty for the RNNs)
    row = study_variant(model, run, saved)["row"]
    assert row["aer_shift_att"] == ((alignment or {}).get("shift_att") or {}).get("aer")


def check_the_alignment_figures(model: str, saved: dict, scalars: set[str], events) -> None:
    """The test AER with its baselines, and per layer and head (the Transformer)."""
    alignment = saved["test"]["alignment"]
    assert 0 <= alignment["aer"] <= 1 and alignment["sure_words"] > 0
    assert {"diagonal", "diagonal_shifted"} == set(alignment["baselines"])
    assert {"valid/aer", "valid/aer_diagonal", "valid/aer_diagonal_shifted",
            "valid/sure_accuracy", "valid/copy_accuracy"} <= scalars
    if model == "transformer":
        assert {"valid/aer_best_head", "valid/aer_layer0"} <= scalars
        assert alignment["best_head"]["chosen_on"] == "validation"
        assert len(alignment["heads"]) == len(alignment["layers"]) == 1  # one tiny layer
        shift = alignment["shift_att"]  # the layer's Shift-Att, chosen on validation
        assert (shift["layer"], shift["chosen_on"], len(shift["layers"])) == (0, "validation", 1)
        assert 0 <= shift["aer"] <= 1 and shift["sure_words"] == alignment["sure_words"]
        assert {"valid/aer_shift_att", "valid/aer_shift_att_layer0",
                "probe_shift_att/Jane->Jane"} <= scalars
        assert all(0 <= row["valid_aer_shift_att"] <= 1 for row in saved["history"])
        assert len(events.Images("attention/probe_0_reference_shift_att")) == 2
    else:  # the RNNs' one attention, also read with Shift-Att (Bahdanau's query is s_{t-1})
        shift = alignment["shift_att"]
        assert (shift["layer"], shift["layers"]) == (None, []) and 0 <= shift["aer"] <= 1
        assert "valid/aer_shift_att" in scalars and "valid/aer_shift_att_layer0" not in scalars
        assert all(0 <= row["valid_aer_shift_att"] <= 1 for row in saved["history"])
        assert saved["history"][-1]["valid_shift_att_layer"] is None


def weights(path: Path) -> dict[str, torch.Tensor]:
    """The evaluated weights, and the trained ones too when they differ (an EMA run)."""
    ckpt = load_checkpoint(path)
    trained = {f"train_model.{k}": v for k, v in (ckpt.get("train_model") or {}).items()}
    return {**ckpt["model"], **trained}


@pytest.mark.slow  # 16 s on the 2-vCPU machine: the second tier keeps the fast one under 4 minutes
def test_resume_after_sigterm_is_exact(tmp_path: Path) -> None:
    """N steps straight == (SIGTERM at some step k) + resume to N: same weights (trained and
    averaged), same losses; the resumed run samples the same subword segmentations."""
    steps = 150
    common = [f"trainer.max_steps={steps}", "trainer.eval_every=1000", "trainer.log_every=1",
              "trainer.final_test=false", "model.dropout=0.3", "trainer.ema_decay=0.9",
              "trainer.subword_alpha=0.5"]
    straight = tiny_config(tmp_path / "a", *common, data_root=tmp_path / "data")
    train(straight)

    killed_dir = tmp_path / "b"
    killed = tiny_config(killed_dir, *common, "trainer.save_every=5", data_root=tmp_path / "data")
    script = (
        "import sys; from omegaconf import OmegaConf; from seq2seq.training.loop import train; "
        "train(OmegaConf.load(sys.argv[1]))"
    )
    cfg_file = tmp_path / "killed.yaml"
    cfg_file.write_text(OmegaConf.to_yaml(killed, resolve=True))
    proc = subprocess.Popen([sys.executable, "-c", script, str(cfg_file)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    last = killed_dir / "run" / "checkpoints" / "last.pt"
    deadline = time.monotonic() + 120
    while not last.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert "SIGTERM: saved" in out, out
    stopped_at = load_checkpoint(last)["progress"]["step"]
    assert 0 < stopped_at < steps
    # one shape of metrics however a run ends
    interrupted = json.loads((killed_dir / "run/metrics.json").read_text())
    finished = json.loads((tmp_path / "a/run/metrics.json").read_text())
    assert interrupted["stopped_by"] == "SIGTERM" and finished["stopped_by"] == "max_steps"
    assert interrupted.keys() == finished.keys()

    resumed = tiny_config(killed_dir, *common, "trainer.resume=true", data_root=tmp_path / "data")
    train(resumed)
    a, b = weights(tmp_path / "a" / "run/checkpoints/last.pt"), weights(last)
    assert a.keys() == b.keys()
    assert any(k.startswith("train_model.") for k in a)
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-6, msg=name)
    losses_a = load_checkpoint(tmp_path / "a" / "run/checkpoints/last.pt")["progress"]["losses"]
    losses_b = load_checkpoint(last)["progress"]["losses"]
    assert [s for s, _ in losses_a] == [s for s, _ in losses_b] == list(range(1, steps + 1))
    assert [v for _, v in losses_a] == pytest.approx([v for _, v in losses_b], abs=1e-6)


def test_checkpoint_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"model": {"w": torch.zeros(3)}})

    def crash(*args: object) -> None:
        raise OSError("disk pulled out between write and rename")

    monkeypatch.setattr(ckpt_module.os, "replace", crash)
    with pytest.raises(OSError):
        save_checkpoint(path, {"model": {"w": torch.ones(3)}})
    assert torch.equal(load_checkpoint(path)["model"]["w"], torch.zeros(3))
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # no temporary file left


class RunsCode:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_checkpoint_that_runs_code_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    with open(path, "wb") as f:
        torch.save({"model": RunsCode(marker), "format_version": 1}, f)
    with pytest.raises(UserError, match="refused to load"):
        load_checkpoint(path)
    assert not marker.exists()
    pickle.loads(pickle.dumps(0))  # pickle itself still works: only the checkpoint was refused


def test_corrupt_and_missing_checkpoints_are_clear(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not found"):
        load_checkpoint(tmp_path / "nope.pt")
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint at all")
    with pytest.raises(UserError, match="not a readable checkpoint"):
        load_checkpoint(bad)


def poison_losses(monkeypatch: pytest.MonkeyPatch, bad_calls: set[int] | None) -> None:
    """Make the training loss NaN on the given training-step calls (None: from call 5 on)."""
    real = update_module.linear_token_losses
    calls = {"n": 0}

    def losses(*args, **kwargs):
        loss, nll = real(*args, **kwargs)
        if not torch.is_grad_enabled():  # validation: untouched
            return loss, nll
        calls["n"] += 1
        bad = calls["n"] >= 5 if bad_calls is None else calls["n"] in bad_calls
        return (loss * float("nan"), nll) if bad else (loss, nll)

    monkeypatch.setattr(update_module, "linear_token_losses", losses)


def test_a_nan_loss_skips_the_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    poison_losses(monkeypatch, {3, 4})
    cfg = tiny_config(tmp_path, "trainer.max_bad_steps=3", "trainer.final_test=false")
    with pytest.warns(UserWarning, match="2 of the last 5 updates were skipped"):
        metrics = train(cfg)
    assert metrics["steps"] == 20
    assert metrics["skipped_updates"] == 2
    for value in load_checkpoint(tmp_path / "run/checkpoints/last.pt")["model"].values():
        assert torch.isfinite(value).all()


def test_repeated_nan_losses_stop_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    poison_losses(monkeypatch, None)
    cfg = tiny_config(tmp_path, "trainer.max_bad_steps=3")
    stops = pytest.raises(UserError, match="updates in a row had a NaN/inf loss")
    with stops, pytest.warns(UserWarning):
        train(cfg)


@pytest.mark.parametrize("budget", ["trainer.max_steps=8", "trainer.max_time=1.5"])
def test_the_linear_schedule_falls_to_zero_where_the_budget_ends(
    tmp_path: Path, budget: str
) -> None:
    """Each update's rate is base * (1 - the share of the step or time budget spent before
    it): steps, exactly; time, falling at every update and last near zero."""
    cfg = tiny_config(tmp_path, "trainer.schedule=linear", "trainer.warmup_steps=0",
                      "trainer.lr=1e-3", "trainer.max_steps=null", budget,
                      "trainer.log_every=1", "trainer.eval_every=100000",
                      "trainer.final_test=false")
    metrics = train(cfg)
    events = EventAccumulator(str(tmp_path / "run/tensorboard")).Reload()
    rates = [event.value for event in events.Scalars("train/lr")]
    assert len(rates) == metrics["steps"] > 2
    if budget.startswith("trainer.max_steps"):
        assert rates == pytest.approx([1e-3 * (1 - step / 8) for step in range(8)])
    else:
        assert rates[0] == pytest.approx(1e-3)
        assert all(a > b for a, b in zip(rates, rates[1:], strict=False))
        assert 0 < rates[-1] < 1e-3 * 0.5  # the last update starts past half the time


def test_the_time_limit_is_a_safety_net_that_says_it_cut_the_run_short(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A step budget the time limit ends first: the metrics name max_time and the console says
    at which update of how many the run was cut."""
    cfg = tiny_config(tmp_path, "trainer.max_steps=100000", "trainer.max_time=1.0",
                      "trainer.eval_every=100000", "trainer.final_test=false")
    metrics = train(cfg)
    assert metrics["stopped_by"] == "max_time" and 0 < metrics["steps"] < 100000
    line = f"ended the run at update {metrics['steps']} of trainer.max_steps=100000"
    assert line in capsys.readouterr().out


def test_the_wsd_schedule_holds_the_rate_then_decays_over_the_last_steps(
    tmp_path: Path,
) -> None:
    cfg = tiny_config(tmp_path, "trainer.schedule=wsd", "trainer.cooldown=0.5",
                      "trainer.warmup_steps=2", "trainer.lr=1e-3", "trainer.max_steps=8",
                      "trainer.log_every=1", "trainer.eval_every=100000",
                      "trainer.final_test=false")
    train(cfg)
    events = EventAccumulator(str(tmp_path / "run/tensorboard")).Reload()
    rates = [event.value for event in events.Scalars("train/lr")]
    assert rates == pytest.approx([5e-4, 1e-3, 1e-3, 1e-3, 1e-3, 7.5e-4, 5e-4, 2.5e-4])


@pytest.mark.parametrize("schedule", ["linear", "wsd"])
def test_the_budgeted_schedules_need_a_step_or_time_budget(tmp_path: Path,
                                                           schedule: str) -> None:
    cfg = tiny_config(tmp_path, f"trainer.schedule={schedule}", "trainer.max_steps=null",
                      "trainer.max_epochs=2")
    with pytest.raises(UserError, match="set trainer.max_steps or trainer.max_time"):
        train(cfg)


def test_the_wsd_cooldown_is_a_share_of_the_budget(tmp_path: Path) -> None:
    cfg = tiny_config(tmp_path, "trainer.schedule=wsd", "trainer.cooldown=20")
    with pytest.raises(UserError, match="a share of the budget, from 0 to 1"):
        train(cfg)


def test_loader_workers_give_the_same_training(tmp_path: Path) -> None:
    common = ["trainer.max_steps=6", "trainer.eval_every=1000", "trainer.final_test=false",
              "trainer.log_every=1"]
    for name, workers in (("inline", 0), ("workers", 2)):
        train(tiny_config(tmp_path / name, *common, f"trainer.num_workers={workers}",
                          data_root=tmp_path / "data"))
    a = weights(tmp_path / "inline/run/checkpoints/last.pt")
    b = weights(tmp_path / "workers/run/checkpoints/last.pt")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)


@pytest.mark.slow
def test_compiled_training_handles_the_varying_batch_shapes(tmp_path: Path) -> None:
    """torch.compile(dynamic=True) over length-bucketed batches (about 30 s on 2 CPU cores)."""
    metrics = train(tiny_config(tmp_path, "trainer.compile=true", "trainer.max_steps=30",
                                "trainer.eval_every=15", "trainer.final_test=false"))
    assert metrics["steps"] == 30
    assert metrics["history"][-1]["valid_loss"] < metrics["history"][0]["valid_loss"]


def test_subword_sampling_segments_each_epoch_anew(tmp_path: Path) -> None:
    cfg = tiny_config(tmp_path, "trainer.subword_alpha=0.3")
    t = cfg.trainer
    data = prepare_data(cfg.data, cfg.tokenizer, verbose=False)
    rt = setup_runtime(t.device, t.precision, t.threads, t.seed)
    parts = build_parts(cfg, rt, data, tmp_path / "run")
    train_batches = parts.batches
    first = train_batches.epoch_split(0)
    assert first.src_ids != train_batches.train_split.src_ids  # sampled, not the best pieces
    assert train_batches.epoch_split(1).tgt_ids != first.tgt_ids
    assert train_batches.epoch_split(0).tgt_ids == first.tgt_ids  # the same (seed, epoch) again
    assert first.src_text == train_batches.train_split.src_text
    batches = train_batches.epoch_batches(0)
    assert sorted(i for b in batches for i in b) == list(range(len(first)))
    parts.close()


@pytest.mark.parametrize("accum_steps", [1, 2])
def test_max_epochs_trains_exactly_that_many_epochs(tmp_path: Path, accum_steps: int) -> None:
    """One epoch is its batches in updates of `accum_steps`, not one update more."""
    cfg = tiny_config(tmp_path, "trainer.max_steps=null", "trainer.max_epochs=1",
                      f"trainer.accum_steps={accum_steps}", "trainer.eval_every=1000",
                      "trainer.save_every=1000", "trainer.final_test=false")
    metrics = train(cfg)
    t = cfg.trainer
    parts = build_parts(cfg, setup_runtime(t.device, t.precision, t.threads, t.seed),
                        prepare_data(cfg.data, cfg.tokenizer, verbose=False), tmp_path / "check")
    batches = len(parts.batches.epoch_batches(0))
    parts.close()
    assert batches > 2
    assert metrics["steps"] == math.ceil(batches / accum_steps)
    assert metrics["stopped_by"] == "max_epochs"
    assert load_checkpoint(tmp_path / "run/checkpoints/last.pt")["progress"]["epoch"] == 1


def test_the_logged_speed_leaves_out_a_validation_inside_the_interval(tmp_path: Path) -> None:
    """Tokens / (interval time - validation time), on a clock the test sets."""
    now = 0.0
    writer = SummaryWriter(str(tmp_path / "tensorboard"))
    log = TrainLog(Runtime(torch.device("cpu"), "fp32"), writer, every=3, max_bad_steps=3,
                   console=False, clock=lambda: now)
    log.start(0)
    progress = Progress()
    for step in range(1, 7):
        now += 2.0  # each update: 2 s and 100 tokens
        log.add(torch.tensor(50.0), torch.tensor(100.0), torch.tensor(0.0))
        progress.step = step
        if step == 2:
            with log.paused():  # a validation of 5 s inside the first interval
                now += 5.0
        if log.due(step):
            log.write(progress, torch.tensor(1.0), 1e-3, now)
    writer.close()
    speeds = EventAccumulator(str(tmp_path / "tensorboard")).Reload().Scalars(
        "train/tokens_per_s")
    assert [(e.step, e.value) for e in speeds] == [(3, 300 / (11 - 5)), (6, 300 / 6)]


def test_training_scores_bleu_with_the_target_languages_tokenizer(tmp_path: Path) -> None:
    """`bleu_tokenize: null` is sacrebleu's choice for the target: zh for a Chinese one."""
    cfg = tiny_config(tmp_path, "data.tgt_lang=zh")
    assert cfg.data.bleu_tokenize is None
    t = cfg.trainer
    parts = build_parts(cfg, setup_runtime(t.device, t.precision, t.threads, t.seed),
                        prepare_data(cfg.data, cfg.tokenizer, verbose=False), tmp_path / "run")
    assert parts.validator.bleu_tokenize == "zh"
    parts.close()


def test_resume_reads_the_checkpoint_on_the_cpu_whatever_the_device(tmp_path: Path) -> None:
    """The random generators take CPU byte tensors only, so a checkpoint must not be mapped to
    the training device before its RNG state is restored (on a GPU that crashed every resume).
    `meta` stands in for a device whose tensors the CPU generators cannot take."""
    cfg = tiny_config(tmp_path, "trainer.max_steps=5", "trainer.eval_every=1000",
                      "trainer.final_test=false")
    train(cfg)
    last = tmp_path / "run/checkpoints/last.pt"
    t = cfg.trainer
    parts = build_parts(cfg, setup_runtime(t.device, t.precision, t.threads, t.seed),
                        prepare_data(cfg.data, cfg.tokenizer, verbose=False), tmp_path / "run")
    checkpointer = parts.checkpointer
    checkpointer.rt = dataclasses.replace(checkpointer.rt, device=torch.device("meta"))
    progress = checkpointer.restore(last)
    saved = load_checkpoint(last)
    assert progress.step == 5
    assert torch.equal(torch.get_rng_state(), saved["rng"][0]["torch"])
    for name, value in parts.model.state_dict().items():
        assert torch.equal(value, saved["train_model"][name]), name


def test_resume_into_a_new_run_folder_scores_the_checkpoint_it_names(tmp_path: Path) -> None:
    """Resuming a finished run into a new folder with no update left: nothing improves, so the
    old run's best.pt is carried over and is what the final test scores and names."""
    common = ["trainer.max_steps=20", "trainer.eval_every=10"]
    first = train(tiny_config(tmp_path / "a", *common, data_root=tmp_path / "data"))
    old = tmp_path / "a/run/checkpoints"
    second = train(tiny_config(tmp_path / "b", *common, f"trainer.resume={old / 'last.pt'}",
                               data_root=tmp_path / "data"))
    scored = Path(second["test"]["checkpoint"])
    assert scored == tmp_path / "b/run/checkpoints/best.pt" and scored.is_file()
    carried, original = weights(scored), weights(old / "best.pt")
    assert carried.keys() == original.keys()
    assert all(torch.equal(carried[name], original[name]) for name in carried)
    assert second["test"]["bleu"] == first["test"]["bleu"]
    assert second["best_valid_bleu"] == first["best_valid_bleu"]


def test_the_entry_point_returns_the_best_validation_bleu(tmp_path: Path) -> None:
    """What a Hydra sweeper optimises: `seq2seq.train.main` returns best_valid_bleu."""
    cfg = tiny_config(tmp_path, "trainer.max_steps=20", "trainer.eval_every=10",
                      "trainer.final_test=false")
    value = train_entry_point(cfg)
    metrics = json.loads((tmp_path / "run/metrics.json").read_text())
    assert value is not None
    assert value == metrics["best_valid_bleu"] == max(r["valid_bleu"] for r in metrics["history"])


def test_off_a_terminal_the_log_is_one_plain_line_per_interval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make train > log 2>&1`: no progress-bar frames, one line per trainer.log_every."""
    train(tiny_config(tmp_path, "trainer.progress=true", "trainer.max_steps=20",
                      "trainer.max_time=3600", "trainer.log_every=5", "trainer.eval_every=1000",
                      "trainer.final_test=false"))
    captured = capsys.readouterr()
    assert "\r" not in captured.out + captured.err
    lines = [line for line in captured.out.splitlines() if "tok_s" in line]
    assert [line.split(":")[0] for line in lines] == [f"step {n}/20" for n in (5, 10, 15, 20)]
    assert not any(" left " in line for line in lines)  # time is a safety net beside steps


@pytest.mark.slow
def test_a_resumed_run_refuses_to_compare_bleu_of_another_signature(tmp_path: Path) -> None:
    """The best checkpoint records its BLEU's signature; a resumed run that scores another way
    (a Korean run where mecab-ko went missing scores 13a) stops instead of comparing them."""
    common = ["trainer.max_steps=10", "trainer.eval_every=10", "trainer.final_test=false"]
    first = train(tiny_config(tmp_path / "a", *common, data_root=tmp_path / "data"))
    last = tmp_path / "a/run/checkpoints/last.pt"
    saved = load_checkpoint(last)
    signature = saved["progress"]["best_signature"]
    assert signature.startswith("nrefs:1|") and "tok:13a" in signature
    assert first["history"][-1]["bleu_signature"] == signature
    resumed = tiny_config(tmp_path / "a", "trainer.max_steps=20", "trainer.eval_every=10",
                          "trainer.final_test=false", "trainer.resume=true",
                          "trainer.log_every=1", data_root=tmp_path / "data")
    # a sacrebleu upgrade alone changes the version, not the tokenizer: it resumes
    saved["progress"]["best_signature"] = signature.replace("version:", "version:9.")
    save_checkpoint(last, saved)
    assert train(resumed)["stopped_by"] == "max_steps"
    saved["progress"]["best_signature"] = signature.replace("tok:13a", "tok:ko-mecab-0.996")
    saved["progress"]["step"] = 10
    save_checkpoint(last, saved)
    before = last.stat().st_mtime_ns
    with pytest.raises(UserError, match="the tokenizers differ, so the two do not compare"):
        train(resumed)
    assert last.stat().st_mtime_ns == before  # stopped before its first update: nothing saved
    assert load_checkpoint(last)["progress"]["step"] == 10


def test_the_scorer_is_compared_on_its_tokenizer_only() -> None:
    assert signature_tokenizer("nrefs:1|case:mixed|eff:no|tok:ko-mecab-0.996/ko-0.9.2-KO|"
                               "smooth:exp|version:2.6.0") == "ko-mecab"
    assert signature_tokenizer("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0") \
        == "13a"
    progress = Progress(best_signature=bleu_signature("13a").replace("version:", "version:0."))
    check_scorer(progress, "13a")  # versions aside: compares
    progress.best_signature = progress.best_signature.replace("tok:13a", "tok:intl")
    with pytest.raises(UserError, match="tok:13a.*tok:intl"):
        check_scorer(progress, "13a")
    check_scorer(Progress(), "intl")  # a new run has nothing to compare
