"""evaluate and translate on a tiny model trained once: exact BLEU, stdin to stdout, bad input."""

from __future__ import annotations

import io
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from seq2seq.alignment import Links, words
from seq2seq.checkpoint import load_checkpoint, save_checkpoint
from seq2seq.config import register_configs
from seq2seq.corpus import encode_split
from seq2seq.decoding import DecodeSettings
from seq2seq.errors import UserError
from seq2seq.evaluate import evaluate
from seq2seq.evaluation import decode_and_score as decode_and_score_module
from seq2seq.evaluation.aer import ALIGNMENT_BATCH_CELLS, score_alignment
from seq2seq.evaluation.decode_and_score import decode_and_score
from seq2seq.inference import load_for_inference
from seq2seq.models import build_model
from seq2seq.tokenization import Tokenizer
from seq2seq.training.loop import train
from seq2seq.translate import translate
from tests.tiny import CONFIG_DIR, HAS_EFLOMAL, LEARNT_TRANSFORMER, needs_eflomal, tiny_config

ROOT = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SOURCES = ["Jane ging in den Laden.", "Anna sah den Park.", "Tom ging in den Park."]
REFERENCES = ["Jane went to the store.", "Anna saw the park.", "Tom went to the park."]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder of a tiny Bahdanau model that has learnt the tiny corpus."""
    tmp = tmp_path_factory.mktemp("evaluate_translate")
    cfg = tiny_config(tmp, "trainer.max_steps=300", "trainer.eval_every=100", "trainer.lr=1e-2",
                      "trainer.warmup_steps=10")
    train(cfg)
    return tmp / "run"


def same_figures(a: object, b: object) -> bool:
    """Equal reports, floats to 1e-6 (another thread count may round the sums differently)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_figures(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_figures(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-6)
    return a == b


def cli(app: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", f"seq2seq.{app}", *args], input=stdin,
                          cwd=ROOT, capture_output=True, timeout=120)


def test_evaluate_reproduces_the_test_bleu_of_training(run: Path) -> None:
    trained = json.loads((run / "metrics.json").read_text())["test"]
    proc = cli("evaluate", f"ckpt={run / 'checkpoints/best.pt'}", "split=test",
               f"beam_size={trained['beam_size']}", "device=cpu")
    stdout = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr.decode()
    out = run / f"test.best.beam{trained['beam_size']}.hyp"  # the default: next to the run
    metrics = json.loads(out.with_suffix(".metrics.json").read_text())
    assert metrics["bleu"] == trained["bleu"]
    assert metrics["chrf"] == trained["chrf"]
    assert out.read_text(encoding="utf-8") == (run / "test.hyp").read_text(encoding="utf-8")
    assert metrics["test_set"] == "files-test" and metrics["beam_size"] == trained["beam_size"]
    assert sum(row["n"] for row in metrics["bleu_by_length"]) == 20
    # the corpus's buckets (data.length_buckets: 10, 20, 30, 50), as make compare has them
    assert metrics["bleu_by_length"][0]["bucket"] == "1-10"
    assert all(row["length_ratio"] > 0 for row in metrics["bleu_by_length"])
    assert "output/reference length and 4-gram precision by source words: 1-10: " in stdout
    assert f"BLEU {trained['bleu']:.2f}  {trained['bleu_signature']}" in stdout
    assert f"chrF {trained['chrf']:.2f}  {trained['chrf_signature']}" in stdout
    assert "files-test" in stdout
    # an unguided run's AER is alignment against eflomal (a guided one's: agreement, test_guided)
    assert ("attention vs word alignments, AER against eflomal: AER" in stdout) == HAS_EFLOMAL
    assert (metrics["alignment"] is None) == (not HAS_EFLOMAL)
    assert same_figures(metrics["alignment"], trained["alignment"])  # same links and attention



def test_evaluating_two_checkpoints_of_a_run_keeps_both_results(run: Path) -> None:
    """The default file names carry the checkpoint's: a second checkpoint's evaluation
    (another step, an average) writes beside the first's instead of over it."""
    best, earlier = run / "checkpoints/best.pt", min(
        run.glob("checkpoints/step-*.pt"), key=lambda p: int(p.stem.removeprefix("step-")))
    results = [evaluate(ckpt, split="validation", beam_size=1, device="cpu")
               for ckpt in (best, earlier)]
    paths = [Path(r["hypotheses"]) for r in results]
    assert [p.name for p in paths] == ["validation.best.beam1.hyp",
                                       f"validation.{earlier.stem}.beam1.hyp"]
    assert results[0]["step"] != results[1]["step"]
    for path, ckpt, result in zip(paths, (best, earlier), results, strict=True):
        assert path.parent == run and path.is_file()
        kept = json.loads(path.with_suffix(".metrics.json").read_text())
        assert kept["checkpoint"] == str(ckpt) and kept["step"] == result["step"]


def test_translate_keeps_empty_lines_and_writes_heatmaps(run: Path, tmp_path: Path) -> None:
    heatmaps = tmp_path / "attention"
    proc = cli("translate", f"ckpt={run / 'checkpoints/best.pt'}", f"attention_dir={heatmaps}",
               "device=cpu", stdin=b"Jane ging in den Laden.\n\nAnna sah den Park.\n")
    assert proc.returncode == 0, proc.stderr.decode()
    lines = proc.stdout.decode("utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == 4, lines  # three lines, each ended by "\n"
    first, middle, last = lines[:3]
    assert middle == ""
    assert first.startswith("Jane") and last  # the tiny model copies the name
    pngs = sorted(p.name for p in heatmaps.iterdir())
    assert pngs == ["0001.png", "0003.png"]  # named by input line; the empty line has none
    for name in pngs:
        assert (heatmaps / name).read_bytes()[:8] == PNG_MAGIC
    assert proc.stderr.decode() == ""


def test_translate_truncates_a_very_long_line(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = " ".join(["Jane ging in den Laden."] * 400)  # 2,000 words
    out = io.BytesIO()
    translate(run / "checkpoints/best.pt", device="cpu", stdin=io.BytesIO((line + "\n").encode()),
              stdout=out)
    assert len(out.getvalue().decode().splitlines()) == 1
    stderr = capsys.readouterr().err
    assert "warning: <stdin> line 1:" in stderr and "2000 words" in stderr
    assert "truncated" in stderr and "max_src_len=256" in stderr


def test_nbest_lines(run: Path) -> None:
    out = io.BytesIO()
    count = translate(run / "checkpoints/best.pt", beam_size=3, nbest=2, device="cpu",
                      stdin=io.BytesIO(b"Jane ging in den Laden.\n\n"), stdout=out)
    assert count == 2
    rows = [line.split(" ||| ") for line in out.getvalue().decode().splitlines()]
    assert [row[0] for row in rows] == ["0", "0", "1"]
    assert rows[0][1] != rows[1][1]  # two different hypotheses
    assert float(rows[0][2]) >= float(rows[1][2])  # best first
    assert rows[2][1] == ""  # the empty line keeps its place


BAD_INPUTS = {
    # name: (app, argument builder, stdin, what the one line must name)
    "missing checkpoint": ("translate", lambda run, tmp: [f"ckpt={tmp / 'nope.pt'}"], b"x\n",
                           lambda run, tmp: str(tmp / "nope.pt")),
    "corrupt checkpoint": ("evaluate", lambda run, tmp: [f"ckpt={tmp / 'random.pt'}"], b"",
                           lambda run, tmp: str(tmp / "random.pt")),
    "tokenizer gone": ("translate",
                       lambda run, tmp: [f"ckpt={tmp / 'orphan/checkpoints/best.pt'}"], b"x\n",
                       lambda run, tmp: str(tmp / "orphan/tokenizer")),
    "invalid UTF-8": ("translate", lambda run, tmp: [f"ckpt={run / 'checkpoints/best.pt'}"],
                      b"Jane ging in den Laden.\nAnna \xff\xfe sah\n", lambda run, tmp: "UTF-8"),
    "unknown split": ("evaluate",
                      lambda run, tmp: [f"ckpt={run / 'checkpoints/best.pt'}", "split=dev"], b"",
                      lambda run, tmp: "split='dev'"),
}


@pytest.fixture(scope="module")
def bad_runs(run: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple]:
    """Every bad input of BAD_INPUTS run at once (the processes mostly wait on imports)."""
    tmp = tmp_path_factory.mktemp("bad_inputs")
    (tmp / "random.pt").write_bytes(bytes(random.Random(0).randrange(256) for _ in range(4096)))
    orphan = tmp / "orphan" / "checkpoints" / "best.pt"  # its run folder lost the tokenizer
    orphan.parent.mkdir(parents=True)
    shutil.copy(run / "checkpoints/best.pt", orphan)
    procs = {
        case: subprocess.Popen(
            [sys.executable, "-m", f"seq2seq.{app}", *args(run, tmp), "device=cpu"],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        for case, (app, args, _, _) in BAD_INPUTS.items()
    }
    results = {}
    for case, proc in procs.items():
        stdout, stderr = proc.communicate(BAD_INPUTS[case][2], timeout=120)
        results[case] = (proc.returncode, stdout.decode(), stderr.decode(), tmp)
    return results


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_clear_line(case: str, run: Path, bad_runs: dict[str, tuple]) -> None:
    returncode, stdout, stderr, tmp = bad_runs[case]
    assert returncode == 2, stderr
    assert "Traceback" not in stderr
    assert stderr.startswith("error: ") and stderr.count("\n") == 1, stderr
    assert BAD_INPUTS[case][3](run, tmp) in stderr
    if case == "invalid UTF-8":
        assert "line 2" in stderr
        assert stdout.count("\n") == 1  # the good line before it was translated


def edited_checkpoint(run: Path, tmp_path: Path, edit) -> Path:
    payload = load_checkpoint(run / "checkpoints/best.pt")
    edit(payload)
    path = tmp_path / "checkpoints" / "edited.pt"
    save_checkpoint(path, payload)
    shutil.copytree(run / "tokenizer", tmp_path / "tokenizer")
    return path


def test_a_tokenizer_of_another_run_is_refused(run: Path, tmp_path: Path) -> None:
    def other_tokenizer(payload: dict) -> None:
        payload["tokenizer"]["src_model_sha256"] = "0" * 64

    path = edited_checkpoint(run, tmp_path, other_tokenizer)
    with pytest.raises(UserError, match="not the tokenizer .*differs in src_model_sha256") as err:
        load_for_inference(path, "cpu")
    assert str(tmp_path / "tokenizer") in str(err.value) and "\n" not in str(err.value)


def test_weights_that_do_not_fit_the_config_are_refused(run: Path, tmp_path: Path) -> None:
    def wider(payload: dict) -> None:
        payload["config"]["model"]["hidden_size"] = 48

    path = edited_checkpoint(run, tmp_path, wider)
    with pytest.raises(UserError, match="weights do not fit") as err:
        load_for_inference(path, "cpu")
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_loaded_model_is_the_trained_one(run: Path) -> None:
    loaded = load_for_inference(run / "checkpoints/best.pt", "cpu")
    assert not loaded.model.training
    assert loaded.tokenizer.identity == Tokenizer.load(run / "tokenizer").identity
    saved = load_checkpoint(run / "checkpoints/best.pt")["model"]
    for name, value in loaded.model.state_dict().items():
        assert torch.equal(value, saved[name]), name


def test_vanilla_warns_once_and_writes_no_heatmap(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model without attention translates and says once that it has no heatmaps."""
    cfg = tiny_config(tmp_path, model="vanilla", data_root=run.parent / "data")
    tokenizer = Tokenizer.load(run / "tokenizer")
    model = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)
    payload = load_checkpoint(run / "checkpoints/best.pt")
    payload["model"] = model.state_dict()
    payload["config"]["model"] = OmegaConf.to_container(cfg.model, enum_to_str=True)
    path = tmp_path / "checkpoints" / "vanilla.pt"
    save_checkpoint(path, payload)
    capsys.readouterr()
    out = io.BytesIO()
    translate(path, tokenizer_dir=run / "tokenizer", device="cpu", beam_size=1,
              attention_dir=tmp_path / "attention", stdout=out,
              stdin=io.BytesIO(b"Jane ging in den Laden.\nAnna sah den Park.\n"))
    assert len(out.getvalue().decode().splitlines()) == 2
    assert capsys.readouterr().err.count("has no attention") == 1
    assert not (tmp_path / "attention").exists()


@pytest.mark.parametrize("app", ["evaluate", "translate"])
def test_a_misspelled_option_fails_at_compose_time(app: str) -> None:
    register_configs()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        assert compose(app, overrides=["ckpt=x.pt", "beam_size=3"]).beam_size == 3
        with pytest.raises(ConfigCompositionException, match="beem_size"):
            compose(app, overrides=["ckpt=x.pt", "beem_size=3"])


@pytest.fixture(scope="module")
def transformer_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder of a tiny Transformer trained with dropout, final test included."""
    tmp = tmp_path_factory.mktemp("transformer_run")
    train(tiny_config(tmp, *LEARNT_TRANSFORMER, model="transformer"))
    return tmp / "run"


def test_evaluation_runs_the_model_in_eval_mode(transformer_run: Path) -> None:
    """A model left in training mode (as the loop leaves it) gives the same per-head alignment
    figures on every call: decoding and the teacher-forced heads both run without dropout, and
    the caller's mode comes back."""
    loaded = load_for_inference(transformer_run / "checkpoints/best.pt", "cpu")
    split = encode_split(loaded.tokenizer, SOURCES, REFERENCES, 256, 256)
    # the tiny sentences translate word for word: word i <-> word i
    links = [Links(frozenset((i, i) for i in range(len(words(s)))),
                   frozenset((i, i) for i in range(len(words(s))))) for s in SOURCES]
    settings = DecodeSettings(beam_size=2)
    loaded.model.train()
    first, second = (
        decode_and_score(loaded.model, loaded.tokenizer, split, settings, loaded.device,
                         links=links).summary()
        for _ in range(2)
    )
    assert loaded.model.training
    assert first["alignment"]["sure_words"] == sum(len(words(s)) for s in SOURCES)
    assert first["alignment"]["heads"] == second["alignment"]["heads"]
    assert first == second


def test_alignment_batches_within_a_cell_budget_score_the_same(transformer_run: Path) -> None:
    """A cell budget that teacher-forces one pair at a time gives the figures of one batch."""
    loaded = load_for_inference(transformer_run / "checkpoints/best.pt", "cpu")
    split = encode_split(loaded.tokenizer, SOURCES, REFERENCES, 256, 256)
    links = [Links(frozenset((i, i) for i in range(len(words(s)))),
                   frozenset((i, i) for i in range(len(words(s))))) for s in SOURCES]
    loaded.model.eval()
    found = [score_alignment(loaded.model, loaded.tokenizer, SOURCES, REFERENCES, split.src_ids,
                             split.tgt_ids, links, loaded.device, batch_cells=cells).report()
             for cells in (ALIGNMENT_BATCH_CELLS, 1)]
    assert found[0]["sure_words"] == sum(len(words(s)) for s in SOURCES)
    whole, one_by_one = (dict(flat(report)) for report in found)
    assert whole.keys() == one_by_one.keys()
    assert whole == pytest.approx(one_by_one)  # padding changes the masses' last digits only


@pytest.mark.parametrize("fixture", ["run", "transformer_run"])
def test_alignment_scoring_never_runs_the_output_layer(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    """The attention is all the alignment scores: the (B, T, V) logits, the largest tensor of
    a run's final phase, are never computed."""
    loaded = load_for_inference(request.getfixturevalue(fixture) / "checkpoints/best.pt", "cpu")
    split = encode_split(loaded.tokenizer, SOURCES, REFERENCES, 256, 256)
    links = [Links(frozenset((i, i) for i in range(len(words(s)))),
                   frozenset((i, i) for i in range(len(words(s))))) for s in SOURCES]
    calls = []
    hook = loaded.model.generator.register_forward_hook(lambda *_: calls.append(1))
    loaded.model.eval()
    try:
        found = score_alignment(loaded.model, loaded.tokenizer, SOURCES, REFERENCES,
                                split.src_ids, split.tgt_ids, links, loaded.device)
    finally:
        hook.remove()
    assert found is not None and found.report()["sure_words"] > 0
    assert calls == []


def test_the_decode_hands_its_heap_back_before_the_alignment_scoring(
    transformer_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The beam search's freed blocks go back to the OS (glibc's malloc_trim) between the
    decode and the teacher-forced scoring, so the final phase's peak is the larger of the
    two, not their sum: the real functions run, in this order."""
    loaded = load_for_inference(transformer_run / "checkpoints/best.pt", "cpu")
    split = encode_split(loaded.tokenizer, SOURCES, REFERENCES, 256, 256)
    links = [Links(frozenset((i, i) for i in range(len(words(s)))),
                   frozenset((i, i) for i in range(len(words(s))))) for s in SOURCES]
    order: list[str] = []
    for name in ("decode_ids", "release_freed_memory", "score_alignment"):
        real = getattr(decode_and_score_module, name)
        monkeypatch.setattr(decode_and_score_module, name,
                            lambda *a, _real=real, _name=name, **k: order.append(_name)
                            or _real(*a, **k))
    result = decode_and_score(loaded.model, loaded.tokenizer, split, DecodeSettings(beam_size=2),
                              loaded.device, links=links)
    assert order == ["decode_ids", "release_freed_memory", "score_alignment"]
    assert result.alignment is not None and len(result.hypotheses) == len(SOURCES)


def flat(tree: object, path: str = ""):
    """(path, number) for every number in nested dicts and lists."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from flat(value, f"{path}/{key}")
    elif isinstance(tree, list):
        for index, value in enumerate(tree):
            yield from flat(value, f"{path}/{index}")
    elif isinstance(tree, (int, float)):
        yield path, tree


@needs_eflomal
def test_evaluate_reproduces_the_per_head_alignment_of_training(transformer_run: Path) -> None:
    trained = json.loads((transformer_run / "metrics.json").read_text())["test"]
    proc = cli("evaluate", f"ckpt={transformer_run / 'checkpoints/best.pt'}", "split=test",
               f"beam_size={trained['beam_size']}", "device=cpu")
    assert proc.returncode == 0, proc.stderr.decode()
    out = transformer_run / f"test.best.beam{trained['beam_size']}.hyp"
    metrics = json.loads(out.with_suffix(".metrics.json").read_text())
    assert metrics["bleu"] == trained["bleu"]
    ours, theirs = metrics["alignment"], trained["alignment"]
    assert ours["best_head"]["chosen_on"] == theirs["best_head"]["chosen_on"] == "validation"
    assert ours["best_head"]["sure_words"] == theirs["best_head"]["sure_words"] > 0
    assert ours["shift_att"]["chosen_on"] == theirs["shift_att"]["chosen_on"] == "validation"
    printed = proc.stdout.decode()
    assert f"Shift-Att (layer chosen on validation): layer {ours['shift_att']['layer']} " in printed
    assert same_figures(ours, theirs)
