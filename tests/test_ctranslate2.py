"""The CTranslate2 export of the Transformer and `translate engine=ctranslate2`, with the real
CTranslate2 against the project's own decoder.

The fast tier uses the tiny corpus; the slow tier trains a small Transformer on the real Ding
corpus and checks the agreement on its validation sentences, the int8 export's BLEU and the
benchmark script end to end.
"""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ctranslate2", reason="needs the serve extra")

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from seq2seq.checkpoint import load_checkpoint, save_checkpoint
from seq2seq.config import register_configs
from seq2seq.corpus import encode_split
from seq2seq.ctranslate2_engine import decode_ids as ctranslate2_decode_ids
from seq2seq.ctranslate2_engine import load_exported
from seq2seq.data import load_corpus
from seq2seq.errors import UserError
from seq2seq.evaluation.decode_and_score import decode_ids
from seq2seq.evaluation.metrics import score
from seq2seq.export import export_ctranslate2
from seq2seq.inference import Loaded, load_for_inference, search_settings
from seq2seq.models import build_model
from seq2seq.search import max_output_length
from seq2seq.training.loop import train
from seq2seq.translate import translate
from tests.tiny import CONFIG_DIR, LEARNT_TRANSFORMER, QUICK_TRAINER, pairs, tiny_config

ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder of a tiny pre-norm Transformer that has learnt some of the tiny corpus."""
    tmp = tmp_path_factory.mktemp("ctranslate2_run")
    train(tiny_config(tmp, *LEARNT_TRANSFORMER, model="transformer"))
    return tmp / "run"


@pytest.fixture(scope="module")
def exported(run: Path) -> Path:
    return export_ctranslate2(load_for_inference(run / "checkpoints/best.pt", "cpu"),
                              run.parent / "ct2-float32")


def agreement(loaded: Loaded, export: Path, src_ids: list[list[int]], beam_size: int) -> float:
    """The share of sentences whose best hypothesis has the same token ids on both engines,
    with the checkpoint's decoding settings (length penalty 2, limit 1.5 * src_len + 10)."""
    settings = search_settings(loaded.config, beam_size, None)
    ours = decode_ids(loaded.model, src_ids, settings, CPU)
    theirs = ctranslate2_decode_ids(load_exported(export, threads=1), src_ids, settings)
    return sum(a[0].tokens == b[0].tokens for a, b in zip(ours, theirs, strict=True)) / len(ours)


def test_the_export_folder(run: Path, exported: Path) -> None:
    loaded = load_for_inference(run / "checkpoints/best.pt", "cpu")
    files = {p.name for p in exported.iterdir()}
    assert {"model.bin", "config.json", "shared_vocabulary.json", "spm.joint.model",
            "tokenizer.json", "seq2seq.json"} <= files
    config = json.loads((exported / "config.json").read_text())
    assert config["add_source_eos"] is True
    assert (config["bos_token"], config["eos_token"], config["unk_token"]) == ("<s>", "</s>",
                                                                             "<unk>")
    assert config["decoder_start_token"] == "<s>" and config["layer_norm_epsilon"] == 1e-5
    vocabulary = json.loads((exported / "shared_vocabulary.json").read_text())
    tok = loaded.tokenizer
    assert vocabulary == tok.tgt_pieces(range(tok.tgt_vocab_size))
    assert vocabulary[:4] == ["<pad>", "<unk>", "<s>", "</s>"]
    metadata = json.loads((exported / "seq2seq.json").read_text())
    assert metadata["tokenizer"] == tok.identity and metadata["quantization"] == "float32"
    with pytest.raises(UserError, match="already exists"):
        export_ctranslate2(loaded, exported)


@pytest.mark.parametrize("beam_size", [1, 5])
def test_float32_export_decodes_as_the_project_decoder(
    run: Path, exported: Path, beam_size: int
) -> None:
    """Token ids on 200 tiny-corpus sentences, many of which the tiny model loops to the length
    limit: greedy all equal, beam 5 at least 99% (what may still part is in
    seq2seq/ctranslate2_engine.py)."""
    loaded = load_for_inference(run / "checkpoints/best.pt", "cpu")
    src_ids = loaded.tokenizer.encode_src([de for de, _ in pairs(200, seed=7)])
    share = agreement(loaded, exported, src_ids, beam_size)
    assert share == 1.0 if beam_size == 1 else share >= 0.99


@pytest.mark.parametrize("max_len_b", [1, 2, 3, 6])
def test_beams_at_a_short_length_limit_end_as_the_project_ends_them(
    run: Path, exported: Path, max_len_b: int
) -> None:
    """A limit of a few tokens whatever the source (max_len_a=0), so nearly every sentence
    reaches it and the project ends all its beams with EOS there: beam-5 token ids on 200
    tiny-corpus sentences equal for at least 99% (when CTranslate2's last step decided which
    beams ended, 76-96% were)."""
    loaded = load_for_inference(run / "checkpoints/best.pt", "cpu")
    src_ids = loaded.tokenizer.encode_src([de for de, _ in pairs(200, seed=7)])
    settings = dataclasses.replace(search_settings(loaded.config, 5, None), max_len_a=0.0,
                                   max_len_b=max_len_b)
    ours = decode_ids(loaded.model, src_ids, settings, CPU)
    theirs = ctranslate2_decode_ids(load_exported(exported, threads=1), src_ids, settings)
    assert sum(len(h[0].tokens) == max_len_b for h in ours) >= 100
    same = sum(a[0].tokens == b[0].tokens for a, b in zip(ours, theirs, strict=True))
    assert same >= 0.99 * len(ours)


def test_post_norm_export_decodes_as_the_project_decoder(run: Path, tmp_path: Path) -> None:
    """A post-norm Transformer (random weights, fixed seed): greedy token ids are equal."""
    loaded = load_for_inference(run / "checkpoints/best.pt", "cpu")
    cfg = OmegaConf.merge(loaded.config.model, {"pre_norm": False})
    torch.manual_seed(3)
    model = build_model(cfg, loaded.tokenizer.src_vocab_size, loaded.tokenizer.tgt_vocab_size)
    post = Loaded(model.eval(), loaded.tokenizer, OmegaConf.merge(loaded.config, {"model": cfg}),
                  loaded.checkpoint, CPU)
    export = export_ctranslate2(post, tmp_path / "post-norm")
    src_ids = loaded.tokenizer.encode_src([de for de, _ in pairs(50, seed=8)])
    assert agreement(post, export, src_ids, beam_size=1) == 1.0


@pytest.mark.parametrize(("option", "message"), [
    ({"lexical": True}, "no lexical model"),
    ({"positions": "relative"}, "sinusoidal positions only"),
], ids=["lexical", "relative-positions"])
def test_a_transformer_ctranslate2_cannot_represent_is_refused(
    run: Path, tmp_path: Path, option: dict, message: str
) -> None:
    """CTranslate2 has no lexical model, and the export writes sinusoidal positions: the export
    says so instead of dropping a term."""
    loaded = load_for_inference(run / "checkpoints/best.pt", "cpu")
    cfg = OmegaConf.merge(loaded.config.model, option)
    model = build_model(cfg, loaded.tokenizer.src_vocab_size, loaded.tokenizer.tgt_vocab_size)
    refused = Loaded(model.eval(), loaded.tokenizer,
                     OmegaConf.merge(loaded.config, {"model": cfg}), loaded.checkpoint, CPU)
    with pytest.raises(UserError, match=message):
        export_ctranslate2(refused, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()


def token_log_probs(export: Path, src_ids: list[list[int]],
                    tgt_ids: list[list[int]]) -> torch.Tensor:
    """The log-probability of every target token (EOS included) given its prefix, under an
    export, for all sentences in a row."""
    exported = load_exported(export, threads=1)
    tok = exported.tokenizer
    scored = exported.translator.score_batch(
        [tok.src_pieces(ids) for ids in src_ids], [tok.tgt_pieces(ids) for ids in tgt_ids],
        max_input_length=0)
    return torch.tensor([lp for result in scored for lp in result.log_probs])


def test_int8_export_is_smaller_and_translates(run: Path, exported: Path, tmp_path: Path) -> None:
    """What int8 promises: the weight matrices (embedding included) stored a byte a number
    with a float32 scale per row, and log-probabilities close to float32's, on 20 tiny-corpus
    sentences (~470 tokens).

    Not equal greedy tokens: this tiny model's top two are often nearly tied, and how far int8
    moves them depends on the CPU's int8 GEMM. With VNNI (AVX512-VNNI, AVX-VNNI, AMX) a token's
    log-probability moves by 0.004-0.006 on average; without it (AVX2 or AVX-512 alone, as on
    an AMD EPYC before Zen 4; here `CT2_USE_MKL=0 ONEDNN_MAX_CPU_ISA=AVX2` or
    `MKL_ENABLE_INSTRUCTIONS=AVX2`) pairs of u8 * s8 products are summed in saturating int16
    and it moves by 0.07-0.16 (1.4 at most), which left 20-60% of the greedy translations
    equal. A broken int8 export (scales shuffled or doubled, a layer zeroed, square weights
    transposed) moved it by 1.0-2.7, and its greedy translations were 2.0-5.5 nats a token
    less likely under float32; int8's own were at most 0.07 less likely. Measured on 6
    trainings (seeds, torch ISA) under each of these settings; the bounds lie in between.
    """
    loaded = load_for_inference(run / "checkpoints/best.pt", "cpu")
    int8 = export_ctranslate2(loaded, tmp_path / "int8", quantization="int8")
    weights = {m.weight for m in loaded.model.modules()
               if isinstance(m, torch.nn.Linear | torch.nn.Embedding)}  # tied ones once
    numel, rows = sum(w.numel() for w in weights), sum(w.shape[0] for w in weights)
    saved = (exported / "model.bin").stat().st_size - (int8 / "model.bin").stat().st_size
    # 3 of each weight's 4 bytes, less a float32 scale per row and the scales' names and shapes
    assert 0 <= 3 * numel - 4 * rows - saved <= 1024

    src_ids = loaded.tokenizer.encode_src([de for de, _ in pairs(20, seed=9)])
    settings = search_settings(loaded.config, 1, None)
    greedy = [h[0].tokens for h in decode_ids(loaded.model, src_ids, settings, CPU)]
    float32_lp = token_log_probs(exported, src_ids, greedy)
    assert (token_log_probs(int8, src_ids, greedy) - float32_lp).abs().mean() <= 0.4
    found = ctranslate2_decode_ids(load_exported(int8, threads=1), src_ids, settings)
    int8_greedy = [h[0].tokens for h in found]
    assert token_log_probs(exported, src_ids, int8_greedy).mean() >= float32_lp.mean() - 0.3


@pytest.fixture(scope="module")
def cli_runs(run: Path, exported: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The entry points on bad input, run at once (the processes mostly wait on imports):
    export of a Bahdanau checkpoint, translate of bytes that are not UTF-8."""
    tmp = tmp_path_factory.mktemp("ctranslate2_cli")
    cfg = tiny_config(tmp, model="bahdanau", data_root=run.parent / "data")
    loaded = load_for_inference(run / "checkpoints/best.pt", "cpu")
    model = build_model(cfg.model, loaded.tokenizer.src_vocab_size,
                        loaded.tokenizer.tgt_vocab_size)
    payload = load_checkpoint(run / "checkpoints/best.pt")
    payload["model"] = model.state_dict()
    payload["config"]["model"] = OmegaConf.to_container(cfg.model, enum_to_str=True)
    rnn = tmp / "checkpoints" / "bahdanau.pt"
    save_checkpoint(rnn, payload)
    commands = {
        "export": (["seq2seq.export", f"ckpt={rnn}", f"out={tmp / 'out'}",
                    f"tokenizer_dir={run / 'tokenizer'}"], b""),
        "translate": (["seq2seq.translate", f"ckpt={exported}", "engine=ctranslate2",
                       "device=cpu"], b"Jane ging in den Laden.\nAnna \xff\xfe sah\n"),
    }
    procs = {name: subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
             for name, (args, _) in commands.items()}
    results = {}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(commands[name][1], timeout=120)
        results[name] = (proc.returncode, stdout.decode(), stderr.decode())
    return {"rnn": rnn, "out": tmp / "out", **results}


def test_a_recurrent_checkpoint_is_refused_in_one_line(cli_runs: dict) -> None:
    returncode, _, stderr = cli_runs["export"]
    assert returncode == 2, stderr
    assert stderr.startswith("error: ") and stderr.count("\n") == 1, stderr
    assert "bahdanau model has no CTranslate2 equivalent" in stderr
    assert str(cli_runs["rnn"]) in stderr and not cli_runs["out"].exists()


def test_translate_handles_input_as_the_torch_engine(
    run: Path, exported: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Empty lines stay empty, an over-long line is truncated with the same warning, and the
    translations are the torch engine's."""
    long_line = " ".join(["Jane ging in den Laden."] * 400)  # 2,000 words
    text = f"Jane ging in den Laden.\n\n{long_line}\nAnna sah den Park.\n".encode()
    outputs, warnings = [], []
    for engine, ckpt in (("torch", run / "checkpoints/best.pt"), ("ctranslate2", exported)):
        out = io.BytesIO()
        count = translate(ckpt, device="cpu", beam_size=1, engine=engine,
                          stdin=io.BytesIO(text), stdout=out)
        assert count == 4
        outputs.append(out.getvalue().decode())
        warnings.append(capsys.readouterr().err)
    assert outputs[0] == outputs[1]
    lines = outputs[1].split("\n")
    assert len(lines) == 5 and lines[1] == "" and lines[-1] == "" and lines[0].startswith("Jane")
    assert warnings[0] == warnings[1]
    assert "warning: <stdin> line 3:" in warnings[1] and "truncated" in warnings[1]


def test_translate_stops_at_bad_utf8_in_one_line(cli_runs: dict) -> None:
    returncode, stdout, stderr = cli_runs["translate"]
    assert returncode == 2, stderr
    assert stderr.startswith("error: ") and stderr.count("\n") == 1, stderr
    assert "line 2" in stderr and "UTF-8" in stderr
    assert stdout.count("\n") == 1  # the good line before it was translated


def test_settings_the_engine_cannot_honour_are_refused(run: Path, exported: Path) -> None:
    with pytest.raises(UserError, match="attention_dir= needs engine=torch"):
        translate(exported, engine="ctranslate2", attention_dir=run.parent / "attention",
                  stdin=io.BytesIO(b"x\n"), stdout=io.BytesIO())
    with pytest.raises(UserError, match="not a CTranslate2 export"):
        translate(run / "checkpoints", engine="ctranslate2", stdin=io.BytesIO(b"x\n"),
                  stdout=io.BytesIO())


@pytest.fixture(scope="module")
def ding_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small Transformer trained for 60 s on the real Ding corpus (data/, `make corpus`)."""
    tmp = tmp_path_factory.mktemp("ding_transformer")
    register_configs()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[
            "model=transformer", "model.d_model=64", "model.num_heads=4", "model.ff_dim=256",
            "model.num_encoder_layers=2", "model.num_decoder_layers=2", "model.dropout=0.1",
            f"run_dir={tmp / 'run'}", f"runs_root={tmp / 'runs'}", *QUICK_TRAINER,
            "trainer.batch_tokens=1500", "trainer.max_steps=null", "trainer.max_time=60",
            "trainer.eval_every=100000", "trainer.save_every=100000", "trainer.final_test=false",
            "trainer.lr=3e-3", "trainer.warmup_steps=100", "trainer.ema_decay=null",
        ])
    train(cfg)
    return tmp / "run"


@pytest.mark.slow
def test_ding_agreement_and_int8_bleu(ding_run: Path) -> None:
    """On 300 Ding validation sentences: float32 greedy token ids equal the project decoder's
    for all of them, beam-5 ones for at least 99%, those that run to the length limit included
    (how many do varies with how far the minute's training gets: 8 to 41 seen); int8 is within
    0.5 BLEU of float32."""
    loaded = load_for_inference(ding_run / "checkpoints/best.pt", "cpu")
    float32 = export_ctranslate2(loaded, ding_run.parent / "float32")
    int8 = export_ctranslate2(loaded, ding_run.parent / "int8", quantization="int8")
    corpus = load_corpus(loaded.config.data)["validation"]
    split = encode_split(loaded.tokenizer, corpus["src"], corpus["tgt"], 256, 256).subset(
        list(range(300)))
    assert agreement(loaded, float32, split.src_ids, beam_size=1) == 1.0
    settings = search_settings(loaded.config, 5, None)
    ours = decode_ids(loaded.model, split.src_ids, settings, CPU)
    theirs = ctranslate2_decode_ids(load_exported(float32, threads=1), split.src_ids, settings)
    same = [a[0].tokens == b[0].tokens for a, b in zip(ours, theirs, strict=True)]
    at_limit = [
        i for i, (hyps, ids) in enumerate(zip(ours, split.src_ids, strict=True))
        if len(hyps[0].tokens) == max_output_length(len(ids) + 1, settings.max_len_a,
                                                    settings.max_len_b)
    ]
    print(f"beam 5: {sum(same)}/{len(same)} equal, {sum(same[i] for i in at_limit)} of the "
          f"{len(at_limit)} at the length limit")
    assert sum(same) >= 0.99 * len(same)
    bleu = {}
    for name, export in (("float32", float32), ("int8", int8)):
        found = ctranslate2_decode_ids(load_exported(export, threads=1), split.src_ids, settings)
        hypotheses = [loaded.tokenizer.decode_tgt(h[0].tokens) for h in found]
        bleu[name] = score(hypotheses, split.tgt_text).bleu
    print(f"BLEU float32 {bleu['float32']:.2f}, int8 {bleu['int8']:.2f}")
    assert abs(bleu["int8"] - bleu["float32"]) <= 0.5


@pytest.mark.slow
def test_benchmark_script_end_to_end(run: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "scripts/benchmark_ctranslate2.py", "--ckpt",
         str(run / "checkpoints/best.pt"), "--split", "test", "--max-sentences", "6"],
        cwd=ROOT, capture_output=True, timeout=300,
    )
    stdout = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr.decode()
    rows = [line.split() for line in stdout.splitlines() if line.split()[:1] in
            (["torch"], ["ctranslate2-float32"], ["ctranslate2-int8"])]
    assert [row[0] for row in rows] == ["torch", "ctranslate2-float32", "ctranslate2-int8"]
    for row in rows:
        seconds, per_second, bleu = (float(x) for x in row[1:4])
        assert seconds > 0 and per_second > 0 and 0 <= bleu <= 100
    assert "6 sentences" in stdout and "beam 5" in stdout
