"""The experiment recipes: each composes, builds its model at its real vocabulary size, and
sets what its comment promises; an IWSLT run without network stops with one clear line."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from seq2seq.config import register_configs
from seq2seq.models import build_model
from seq2seq.models.base import count_parameters

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
EXPERIMENTS = sorted((CONFIGS / "experiment").glob("*.yaml"))


def compose_experiment(name: str | None, *overrides: str) -> DictConfig:
    """The composed config of an experiment; None: the defaults (no experiment)."""
    register_configs()
    chosen = [f"experiment={name}"] if name is not None else []
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("config", overrides=[*chosen, "run_dir=/tmp/unused", *overrides])


def test_the_documented_experiments_exist() -> None:
    assert {p.stem for p in EXPERIMENTS} >= {
        "iwslt2017_de_en_transformer", "iwslt2017_de_en_bahdanau", "iwslt2017_de_en_vanilla",
        "iwslt2017_en_ko_transformer", "peer_rnn", "peer_transformer",
    }


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_every_experiment_builds_its_model_and_names_its_test_set(path: Path) -> None:
    cfg = compose_experiment(path.stem)
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# @package _global_\n")
    # The header comment says which test set the recipe's score is on.
    assert f"Test score: {cfg.data.test_set}" in text
    vocab = cfg.tokenizer.vocab_size  # joint: one vocabulary for both sides
    assert cfg.tokenizer.joint
    model = build_model(cfg.model, src_vocab_size=vocab, tgt_vocab_size=vocab)
    assert model.name == cfg.model.name
    if cfg.model.get("tie_embeddings"):
        assert model.generator.weight is model.tgt_emb.weight
    # 4,096 tokens a batch but where the docs validation split chose otherwise, and the GPU's
    # (docs_en_ko takes docs_de_en's settings)
    documents = path.stem.startswith(("docs_", "debian_"))
    expected = 2048 if path.stem.endswith("transformer") and documents else 4096
    assert cfg.trainer.batch_tokens == (16384 if "_gpu_" in path.stem else expected)


def test_the_iwslt_transformer_is_the_fairseq_recipe() -> None:
    cfg = compose_experiment("iwslt2017_de_en_transformer")
    assert cfg.data.name == "iwslt2017_de_en" and cfg.data.source == "hf"
    assert "tst2010-2015" in cfg.data.test_set
    assert (cfg.tokenizer.type, cfg.tokenizer.vocab_size, cfg.tokenizer.joint) == (
        "unigram", 10000, True)
    m, t, d = cfg.model, cfg.trainer, cfg.decoding
    assert (m.num_encoder_layers, m.num_decoder_layers, m.d_model, m.ff_dim, m.num_heads) == (
        6, 6, 512, 1024, 4)
    assert m.dropout == 0.3 and m.tie_embeddings
    assert (t.schedule, t.warmup_steps, t.lr, tuple(t.betas)) == (
        "inverse_sqrt", 4000, 5e-4, (0.9, 0.98))
    assert (t.weight_decay, t.label_smoothing, t.pad_to_multiple, t.precision) == (
        1e-4, 0.1, 8, "auto")
    assert t.max_time is None and t.max_epochs == 50 and t.patience is not None
    assert t.eval_every == 2000 and d.beam_size == 5

    model = build_model(m, src_vocab_size=10000, tgt_vocab_size=10000)
    assert len(model.encoder_layers) == 6 and len(model.decoder_layers) == 6
    assert model.src_emb is model.tgt_emb and model.generator.weight is model.tgt_emb.weight
    # 6 encoder layers of ~2.1M, 6 decoder layers of ~3.2M, one 10k x 512 embedding
    assert 36e6 < count_parameters(model) < 37.5e6


def test_the_other_iwslt_recipes() -> None:
    bahdanau = compose_experiment("iwslt2017_de_en_bahdanau")
    assert (bahdanau.model.name, bahdanau.model.attn_dim, bahdanau.model.hidden_size) == (
        "bahdanau", 512, 512)
    assert bahdanau.model.dropout == 0.3
    assert (bahdanau.trainer.schedule, bahdanau.trainer.lr) == ("plateau", 1e-3)
    vanilla = compose_experiment("iwslt2017_de_en_vanilla")
    assert (vanilla.model.name, vanilla.model.cell, vanilla.model.hidden_size) == (
        "vanilla", "gru", 1024)
    assert vanilla.data.name == "iwslt2017_de_en"


def test_the_korean_recipe_scores_with_ko_mecab() -> None:
    cfg = compose_experiment("iwslt2017_en_ko_transformer")
    assert (cfg.data.src_lang, cfg.data.tgt_lang) == ("en", "ko")
    assert cfg.data.bleu_tokenize == "ko-mecab"
    assert "en-ko" in cfg.data.test_set
    assert cfg.model.num_encoder_layers == 6 and cfg.trainer.warmup_steps == 4000


@pytest.mark.parametrize(
    ("name", "published"), [("peer_transformer", 7.58e6), ("peer_rnn", 6.00e6)]
)
def test_the_peer_recipes_match_the_peers_sizes(name: str, published: float) -> None:
    """PEERS.md: JoeyNMT on Ding en->de, joint 8k vocabulary, tied embeddings, 10 minutes."""
    cfg = compose_experiment(name)
    assert cfg.data.name == "ding_en_de"
    assert (cfg.tokenizer.vocab_size, cfg.trainer.max_time) == (8000, 600)
    model = build_model(cfg.model, src_vocab_size=8000, tgt_vocab_size=8000)
    # JoeyNMT also shares the source embedding in the RNN; ours keeps its own (+5%).
    assert abs(count_parameters(model) / published - 1) < 0.06


def test_the_benchmark_gives_luong_the_sizes_and_training_of_each_rnn_recipe() -> None:
    """scripts/benchmark.py restates each Bahdanau recipe's settings for Luong (the recipes'
    attn_dim and query_word are Bahdanau's own): every key the two models share agrees."""
    spec = importlib.util.spec_from_file_location("benchmark", ROOT / "scripts" / "benchmark.py")
    assert spec is not None and spec.loader is not None
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    for preset, variants in benchmark.PRESETS.items():
        bahdanau = compose_experiment(None, *variants["bahdanau"])
        luong = compose_experiment(None, *variants["luong"])
        assert (luong.model.name, luong.model.score) == ("luong", "general")
        for group in ("data", "tokenizer", "trainer", "decoding"):
            assert luong[group] == bahdanau[group], (preset, group)
        shared = set(luong.model) & set(bahdanau.model) - {"_target_", "name"}
        if preset in ("peer", "docs"):
            shared -= {"dropout"}  # their recipes set none: each model keeps its own
        for key in shared:
            assert luong.model[key] == bahdanau.model[key], (preset, key)


@pytest.mark.slow  # 4 s on the 2-vCPU machine: the second tier keeps the fast one under 4 minutes
def test_an_iwslt_run_without_network_says_how_to_fetch_the_data(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "HF_DATASETS_CACHE": str(tmp_path / "hf" / "datasets"),
    }
    run = subprocess.run(
        [sys.executable, "-m", "seq2seq.train", "experiment=iwslt2017_de_en_transformer",
         f"runs_root={tmp_path / 'runs'}", "trainer.progress=false"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=180,
    )
    assert run.returncode != 0
    assert "Traceback" not in run.stderr + run.stdout
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, run.stderr
    assert "could not fetch dataset IWSLT/iwslt2017 (iwslt2017-de-en)" in errors[0]
    assert "Fetch it once with network access" in errors[0]
    assert "python -m seq2seq.prepare" in errors[0]


def test_the_peer_and_paper_rnns_keep_their_published_architecture() -> None:
    """The default Bahdanau model adds the lexical model, the previous word in the query and
    one shared embedding; the peer preset (JoeyNMT) and the RNNsearch recipe must not."""
    default = compose_experiment(None)
    assert default.model.name == "bahdanau"
    assert default.model.lexical and default.model.query_word and default.model.share_embeddings
    for name, tied in (("peer_rnn", True), ("iwslt2017_de_en_bahdanau", False)):
        m = compose_experiment(name).model
        assert not (m.lexical or m.query_word or m.share_embeddings), name
        assert m.tie_embeddings == tied
        model = build_model(m, src_vocab_size=100, tgt_vocab_size=100)
        assert model.lexical is None and model.word_query is None
        assert model.src_emb is not model.tgt_emb


@pytest.mark.parametrize("variant", ["vanilla", "bahdanau", "luong", "transformer"])
def test_the_docs_recipes_run_each_variant_for_an_hour_on_the_docs_corpus(variant: str) -> None:
    cfg = compose_experiment(f"docs_de_en_{variant}")
    assert (cfg.data.name, cfg.model.name, cfg.trainer.max_time) == ("docs_de_en", variant, 3600)
    assert cfg.trainer.eval_max_sentences == 500
    assert cfg.tokenizer.vocab_size == (8000 if variant == "transformer" else 16000)
    assert list(cfg.data.length_buckets) == [10, 20, 30, 50]
    # the model keeps its defaults (configs/model/<variant>.yaml) but for what was decided on
    # the docs validation split (docs/docs_corpus.md)
    decided = {"vanilla": {"hidden_size": 256, "tie_embeddings": True},
               "luong": {"scaled_score": True},
               "transformer": {"dropout": 0.0, "num_encoder_layers": 2, "num_decoder_layers": 2,
                               "init": "xavier"},
               }.get(variant, {})
    default = compose_experiment(None, f"model={variant}").model
    assert {key: cfg.model[key] for key in cfg.model if cfg.model[key] != default[key]} == decided


def test_compare_takes_each_variants_recipe_and_its_own_budget() -> None:
    from seq2seq.compare import compose_variant

    for variant in ("vanilla", "transformer"):
        cfg = compose_variant(variant, 1200, ["trainer.threads=1"], Path("/tmp/unused"),
                              recipe="docs_de_en")
        recipe = compose_experiment(f"docs_de_en_{variant}")
        assert cfg.model == recipe.model and cfg.tokenizer == recipe.tokenizer
        assert cfg.trainer.max_time == 1200 and cfg.trainer.threads == 1
        assert cfg.trainer.eval_every == recipe.trainer.eval_every
    plain = compose_variant("luong", 600, [], Path("/tmp/unused"))
    assert (plain.data.name, plain.model.name, plain.trainer.max_time) == (
        "ding_de_en", "luong", 600)
