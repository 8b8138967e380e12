"""Word alignments out of tiny trained models: `translate alignments=true` and
`python -m seq2seq.align` (links that index the words printed, the reading said and chosen on
validation, symmetrisation with a reverse model, scores against a gold file, bad input)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException

from seq2seq.align import align, register_align_config
from seq2seq.alignment import Links, parse_links, words
from seq2seq.corpus import encode_split
from seq2seq.errors import UserError
from seq2seq.evaluation.aer import score_alignment
from seq2seq.evaluation.decode_and_score import decode_ids
from seq2seq.evaluation.pharaoh import format_links, read_gold, score_links
from seq2seq.evaluation.word_links import (
    HypothesisLinks,
    Reading,
    choose_reading,
    recorded_layer,
)
from seq2seq.inference import load_for_inference, search_settings
from seq2seq.models import build_model
from seq2seq.training.loop import train
from seq2seq.translate import translate
from tests.tiny import CONFIG_DIR, HAS_EFLOMAL, LEARNT_TRANSFORMER, pairs, tiny_config

ROOT = Path(__file__).resolve().parents[1]
TEST_PAIRS = pairs(20, 2)  # the tiny corpus's test split (tests.tiny.write_corpus)
DE_EN = ["data.src_lang=de", "data.tgt_lang=en", "trainer.final_test=false"]
LEARNT_RNN = ["trainer.max_steps=150", "trainer.eval_every=75", "trainer.lr=1e-2",
              "trainer.warmup_steps=10"]
TCPU = torch.device("cpu")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Checkpoints sharing the tiny corpus: a Bahdanau model and a two-layer Transformer
    de→en, a Transformer en→de ("reverse"); and the test split's files ("src", "tgt") with a
    gold file ("gold": the tiny sentences translate word for word, word i <-> word i)."""
    tmp = tmp_path_factory.mktemp("align")
    data = tmp / "data"
    train(tiny_config(tmp / "bahdanau", *LEARNT_RNN, *DE_EN, data_root=data))
    train(tiny_config(tmp / "transformer", *LEARNT_TRANSFORMER, "model.num_decoder_layers=2",
                      *DE_EN, model="transformer", data_root=data))
    corpus = data / "corpus"
    swapped = [f"data.{side}_files.{split}={corpus / f'{split}.{lang}'}"
               for side, lang in (("src", "en"), ("tgt", "de"))
               for split in ("train", "validation", "test")]
    train(tiny_config(tmp / "reverse", *LEARNT_TRANSFORMER, *swapped, "data.src_lang=en",
                      "data.tgt_lang=de", "trainer.final_test=false", "data.probe=[]",
                      "data.probe_reference=null", "data.probe_words=[]", model="transformer",
                      data_root=data))
    gold = tmp / "test.gold"
    gold.write_text("".join(" ".join(f"{i}-{i}" for i in range(len(s.split()))) + "\n"
                            for s, _ in TEST_PAIRS))
    found = {name: tmp / name / "run/checkpoints/best.pt"
             for name in ("bahdanau", "transformer", "reverse")}
    return {**found, "src": corpus / "test.de", "tgt": corpus / "test.en", "gold": gold}


def run_translate(ckpt: Path, text: str, capsys: pytest.CaptureFixture[str],
                  **options: object) -> tuple[list[str], str]:
    """translate alignments=true: its output lines and what it wrote to stderr."""
    capsys.readouterr()
    out = io.BytesIO()
    translate(ckpt, device="cpu", alignments=True, stdin=io.BytesIO(text.encode()), stdout=out,
              **options)  # type: ignore[arg-type]
    return out.getvalue().decode().split("\n")[:-1], capsys.readouterr().err


@pytest.mark.parametrize("model", ["bahdanau", "transformer"])
def test_translate_prints_each_hypothesis_with_links_that_index_the_printed_words(
    runs: dict[str, Path], model: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sources = [s for s, _ in TEST_PAIRS[:8]]
    lines, stderr = run_translate(runs[model], "\n".join(sources[:4] + [""] + sources[4:]) + "\n",
                                  capsys)
    assert len(lines) == 9 and lines[4] == " ||| "  # the empty line keeps its place
    names = 0
    for source, line in zip(sources, lines[:4] + lines[5:], strict=True):
        hypothesis, links = line.split(" ||| ")
        found = parse_links(links)
        assert found, line
        assert all(i < len(source.split()) and j < len(hypothesis.split()) for i, j in found)
        targets = [j for _, j in found]
        assert len(targets) == len(set(targets))  # a target word links one source word at most
        if hypothesis.split()[0] == source.split()[0]:  # the name, copied
            names += (0, 0) in found
    assert names >= 4, lines  # the copied name links to itself
    if model == "bahdanau":
        assert stderr == "alignments: the bahdanau attention of the step predicting each " \
                         "target word\n"
    else:
        assert stderr.startswith("alignments: transformer cross-attention of the step "
                                 "predicting each target word, decoder layer ")
        # the layer is chosen on validation's reference links, which eflomal writes
        chosen = "(chosen on validation at step 150)" if HAS_EFLOMAL else \
            "(the last: the checkpoint records no layer chosen on validation)"
        assert f"of 0-1 {chosen}, mean over heads" in stderr


def test_nbest_lines_end_with_the_links_of_each_hypothesis(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    lines, _ = run_translate(runs["transformer"], "Jane ging in den Laden.\n\n", capsys,
                             beam_size=3, nbest=2)
    rows = [line.split(" ||| ") for line in lines]
    assert [row[0] for row in rows] == ["0", "0", "1"]
    assert rows[2] == ["1", "", "0.0000", ""]
    for _, hypothesis, score, links in rows[:2]:
        float(score)
        assert all(j < len(hypothesis.split()) for _, j in parse_links(links))


def test_a_transformer_layer_read_again_is_the_attention_that_decoded(
    runs: dict[str, Path]
) -> None:
    """The last layer fed the hypothesis back (what a chosen layer takes) gives the links of
    the attention the beam search recorded while decoding it."""
    loaded = load_for_inference(runs["transformer"], TCPU)
    sources = [s for s, _ in TEST_PAIRS]
    ids = loaded.tokenizer.encode_src(sources)
    hyps = decode_ids(loaded.model, ids, search_settings(loaded.config, 3, None, 2), TCPU)
    recorded = HypothesisLinks(loaded.model, loaded.tokenizer, Reading(False, None, ""), TCPU)
    read_again = HypothesisLinks(loaded.model, loaded.tokenizer, Reading(False, 1, ""), TCPU)
    first = [recorded(s, i, h) for s, i, h in zip(sources, ids, hyps, strict=True)]
    assert first == [read_again(s, i, h) for s, i, h in zip(sources, ids, hyps, strict=True)]
    assert sum(bool(line) for lines in first for line in lines) == 40


def test_the_layer_is_the_one_validation_chose() -> None:
    history = [{"step": 10, "valid_aer_layer0": 0.2, "valid_aer_layer1": 0.5,
                "valid_shift_att_layer": 1},
               {"step": 20, "valid_aer_layer0": 0.6, "valid_aer_layer1": 0.4,
                "valid_shift_att_layer": 0},
               {"step": 30, "valid_bleu": 1.0}]  # an evaluation without reference links
    assert recorded_layer(history, 2, shift=False) == (1, 20)  # the latest that chose one
    assert recorded_layer(history, 2, shift=True) == (0, 20)
    assert recorded_layer(history[:1], 2, shift=False) == (0, 10)
    assert recorded_layer(history, 3, shift=False) == (-1, -1)  # no AER for layer 2
    assert recorded_layer([], 2, shift=True) == (-1, -1)


def test_a_reading_the_model_cannot_give_is_refused_and_the_others_are_named(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    rnn = load_for_inference(runs["bahdanau"], TCPU)
    shifted = choose_reading(rnn.model, "bahdanau", [], TCPU, "shift_att")  # Bahdanau's reading
    assert (shifted.shift, shifted.layer) == (True, None) and "Shift-Att" in shifted.description
    with pytest.raises(UserError, match="layer=1: the bahdanau model has no decoder layers"):
        choose_reading(rnn.model, "bahdanau", [], TCPU, "attention", 1)
    with pytest.raises(UserError, match="reading='heads' is not one of attention, shift_att"):
        choose_reading(rnn.model, "bahdanau", [], TCPU, "heads")
    transformer = load_for_inference(runs["transformer"], TCPU)
    with pytest.raises(UserError, match="layer=2: use validation or a decoder layer, 0 to 1"):
        choose_reading(transformer.model, "transformer", [], TCPU, "attention", 2)
    last = choose_reading(transformer.model, "transformer", [], TCPU, "shift_att")
    assert (last.shift, last.layer) == (True, 1)
    assert "(the last: the checkpoint records no layer chosen on validation)" in last.description
    transformer.model.read_alignment(-1, 1)  # as a checkpoint guided there is built
    guided = choose_reading(transformer.model, "transformer", [], TCPU)
    transformer.model.alignment = None
    assert (guided.shift, guided.layer, guided.head) == (False, 1, 1)
    assert "head 1: the one guided alignment trained" in guided.description
    vanilla = build_model(tiny_config(tmp_path, model="vanilla").model, 400, 400)
    with pytest.raises(UserError, match="the vanilla model has no attention"):
        choose_reading(vanilla, "vanilla", [], TCPU)
    with pytest.raises(UserError, match="alignments=true needs engine=torch"):
        translate(tmp_path / "export", engine="ctranslate2", alignments=True)


def test_align_writes_a_line_a_pair_and_scores_it_against_gold(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "links"
    scores = align(runs["transformer"], runs["src"], runs["tgt"], out=out, gold=runs["gold"],
                   device="cpu")
    lines = out.read_text().splitlines()
    assert len(lines) == len(TEST_PAIRS)
    written = [parse_links(line) for line in lines]
    for (source, target), found in zip(TEST_PAIRS, written, strict=True):
        assert found and all(i < len(source.split()) and j < len(target.split())
                             for i, j in found)
    gold = read_gold(runs["gold"], None, [len(s.split()) for s, _ in TEST_PAIRS],
                     [len(t.split()) for _, t in TEST_PAIRS])
    assert scores["model de→en"] == score_links(written, gold)
    assert scores["model de→en"].aer < 0.5  # the tiny sentences translate word for word
    stderr = capsys.readouterr().err
    assert "decoder layer" in stderr
    assert ("chosen on validation at step 150" in stderr) == HAS_EFLOMAL
    assert "alignment" in stderr and "precision  recall     AER" in stderr
    assert ("eflomal grow-diag-final" in scores) or "eflomal baseline: skipped:" in stderr
    shifted = tmp_path / "shift_att"
    align(runs["transformer"], runs["src"], runs["tgt"], out=shifted, reading="shift_att",
          layer=0, device="cpu")
    assert len(shifted.read_text().splitlines()) == len(TEST_PAIRS)


@pytest.mark.parametrize(("model", "layer"), [("bahdanau", "validation"), ("transformer", 1)])
def test_align_reads_the_attention_as_the_aer_metric_does(
    runs: dict[str, Path], tmp_path: Path, model: str, layer: int | str
) -> None:
    """On text whose whitespace words are the metric's words (punctuation spaced off), align's
    AER is the one training reports: the same attention (a Transformer's last layer, mean over
    heads), pieces to words and argmax."""
    sources = [" ".join(words(s)) for s, _ in TEST_PAIRS]
    targets = [" ".join(words(t)) for _, t in TEST_PAIRS]
    diagonal = [frozenset((i, i) for i in range(len(s.split()))) for s in sources]
    for name, lines in (("src", sources), ("tgt", targets),
                        ("gold", [format_links(links) for links in diagonal])):
        (tmp_path / name).write_text("".join(line + "\n" for line in lines))
    scores = align(runs[model], tmp_path / "src", tmp_path / "tgt", out=tmp_path / "out",
                   gold=tmp_path / "gold", layer=layer, device="cpu")
    loaded = load_for_inference(runs[model], TCPU)
    split = encode_split(loaded.tokenizer, sources, targets, 256, 256)
    metric = score_alignment(loaded.model, loaded.tokenizer, sources, targets, split.src_ids,
                             split.tgt_ids, [Links(d, d) for d in diagonal], TCPU)
    assert metric is not None and metric.model.links == scores["model de→en"].links
    assert metric.model.summary()["aer"] == pytest.approx(scores["model de→en"].aer)


def test_align_symmetrises_with_a_reverse_model(runs: dict[str, Path], tmp_path: Path) -> None:
    """The reverse model's links are its own alignment of the swapped text, flipped; each
    symmetrisation written combines them with the forward model's, pair by pair."""
    def written(name: str, *args: Path, **options: object) -> list[frozenset]:
        align(*args, out=tmp_path / name, device="cpu", **options)  # type: ignore[arg-type]
        return [parse_links(line) for line in (tmp_path / name).read_text().splitlines()]

    forward = written("forward", runs["transformer"], runs["src"], runs["tgt"])
    reverse = [frozenset((j, i) for i, j in links)
               for links in written("reverse", runs["reverse"], runs["tgt"], runs["src"])]
    assert forward != reverse
    for rule, combine in (("intersection", frozenset.__and__), ("union", frozenset.__or__)):
        both = written(rule, runs["transformer"], runs["src"], runs["tgt"],
                       reverse_ckpt=runs["reverse"], symmetrize=rule)
        assert both == [combine(f, r) for f, r in zip(forward, reverse, strict=True)], rule
    scores = align(runs["transformer"], runs["src"], runs["tgt"], out=tmp_path / "gdf",
                   reverse_ckpt=runs["reverse"], gold=runs["gold"], device="cpu")
    assert list(scores)[:5] == ["model de→en", "reverse model en→de", "intersection", "union",
                                "grow-diag-final"]
    assert scores["intersection"].precision >= scores["union"].precision
    assert scores["union"].recall >= scores["intersection"].recall


def test_a_pair_past_the_length_limit_is_cut_with_a_warning(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pieces past tokenizer.max_src_len (256) are cut as evaluation cuts them; the words past
    the cut get no link, and the warning names the line."""
    long_src, long_tgt = " ".join(["Jane ging in den Laden."] * 80), "Jane went to the store."
    (tmp_path / "src").write_text(f"Anna sah den Park.\n{long_src}\n")
    (tmp_path / "tgt").write_text(f"Anna saw the park.\n{long_tgt}\n")
    align(runs["bahdanau"], tmp_path / "src", tmp_path / "tgt", out=tmp_path / "out",
          device="cpu")
    stderr = capsys.readouterr().err
    assert f"warning: {tmp_path / 'src'} line 2: " in stderr
    assert "the words past piece 255 get no link" in stderr
    short, long = [parse_links(line) for line in (tmp_path / "out").read_text().splitlines()]
    assert short and long
    spans = load_for_inference(runs["bahdanau"], TCPU).tokenizer.src_spans([long_src])[0]
    kept = len(long_src[:spans[254][1]].split())  # the words the first 255 pieces reach
    assert len(spans) > 255 and kept < 400  # 80 copies of 5 words
    assert max(i for i, _ in long) < kept


@pytest.mark.parametrize(("case", "message"), [
    ("line counts", "src has 3 lines, {tmp}/tgt has 2"),
    ("empty line", "{tmp}/tgt line 2: empty"),
    ("bad UTF-8", "{tmp}/src line 3: not valid UTF-8 (byte 0xff at column 5)"),
    ("gold past the sentence", "{tmp}/gold line 3: link 0-4 is past the sentence pair"),
])
def test_bad_input_is_one_line_naming_the_file_and_line(
    runs: dict[str, Path], tmp_path: Path, case: str, message: str
) -> None:
    src = [b"Jane ging in den Laden.", b"Anna sah den Park.", b"Tom mag den Zoo."]
    tgt = [b"Jane went to the store.", b"Anna saw the park.", b"Tom likes the zoo."]
    gold = [b"0-0", b"0-0 1-1", b"0-0 3-3"]
    if case == "line counts":
        tgt = tgt[:2]
    elif case == "empty line":
        tgt[1] = b"  "
    elif case == "bad UTF-8":
        src[2] = b"Tom \xff den Zoo."
    else:
        gold[2] = b"0-4"
    for name, lines in (("src", src), ("tgt", tgt), ("gold", gold)):
        (tmp_path / name).write_bytes(b"".join(line + b"\n" for line in lines))
    with pytest.raises(UserError) as err:
        align(runs["bahdanau"], tmp_path / "src", tmp_path / "tgt", out=tmp_path / "out",
              gold=tmp_path / "gold", device="cpu")
    assert message.format(tmp=tmp_path) in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()  # refused before any work


def test_the_command_line(runs: dict[str, Path], tmp_path: Path) -> None:
    """The entry point: links on stdout, the table on stderr; bad input: exit 2, one line."""
    (tmp_path / "short").write_text("Jane went to the store.\n")
    procs = [subprocess.Popen(
        [sys.executable, "-m", "seq2seq.align", f"ckpt={runs['transformer']}",
         f"src={runs['src']}", f"tgt={tgt}", f"gold={runs['gold']}",
         f"reverse_ckpt={runs['reverse']}", "device=cpu"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for tgt in (runs["tgt"], tmp_path / "short")]
    (good_out, good_err), (bad_out, bad_err) = (proc.communicate(timeout=120) for proc in procs)
    assert procs[0].returncode == 0, good_err
    assert len(good_out.splitlines()) == len(TEST_PAIRS)
    assert "\ngrow-diag-final " in good_err and "\nreverse model en→de " in good_err
    assert procs[1].returncode == 2 and bad_out == ""
    assert bad_err == f"error: {runs['src']} has 20 lines, {tmp_path / 'short'} has 1: a " \
                      "parallel text has one target line for each source line\n"


def test_the_align_config_is_typed() -> None:
    register_align_config()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("align", overrides=["ckpt=x.pt", "src=a", "tgt=b", "layer=1"])
        assert (cfg.layer, cfg.symmetrize, str(cfg.reading)) == (1, "grow-diag-final",
                                                                 "attention")
        with pytest.raises(ConfigCompositionException, match="revers_ckpt"):
            compose("align", overrides=["ckpt=x.pt", "revers_ckpt=y.pt"])
        with pytest.raises(ConfigCompositionException) as err:
            compose("align", overrides=["ckpt=x.pt", "reading=heads"])
        assert "expected one of [attention, shift_att]" in str(err.value.__cause__)
    with pytest.raises(UserError, match="symmetrize='grow-diag' is not one of intersection, "
                                        "union, grow-diag-final"):
        align("x.pt", "a", "b", symmetrize="grow-diag")
