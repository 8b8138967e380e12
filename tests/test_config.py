"""Every YAML under configs/ composes against its schema; typos fail at compose time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from seq2seq.align import register_align_config
from seq2seq.config import register_configs
from seq2seq.explore import register_explore_config
from seq2seq.models import build_model

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
GROUP_FILES = sorted(p for p in CONFIGS.glob("*/*.yaml"))


def compose_with(*overrides: str):
    register_configs()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_the_config_tree_is_what_the_readme_documents() -> None:
    groups = {p.parent.name for p in GROUP_FILES}
    assert {"data", "model", "tokenizer", "trainer", "decoding", "experiment"} <= groups
    assert len(GROUP_FILES) >= 25  # counted, so a file that stops being globbed is noticed


@pytest.mark.parametrize("path", GROUP_FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_yaml_composes(path: Path) -> None:
    if path.parent.name == "hparams_search":
        pytest.importorskip("hydra_plugins.hydra_optuna_sweeper", reason="the sweep extra")
    cfg = compose_with(f"{path.parent.name}={path.stem}", "run_dir=/tmp/unused")
    OmegaConf.to_container(cfg.trainer, resolve=True, throw_on_missing=True)
    OmegaConf.to_container(cfg.model, resolve=True, throw_on_missing=True)
    if path.parent.name in ("model", "experiment"):
        model = build_model(cfg.model, src_vocab_size=64, tgt_vocab_size=64)
        assert sum(p.numel() for p in model.parameters()) > 0


def test_each_model_gets_its_schedule() -> None:
    assert compose_with("model=transformer").trainer.schedule == "inverse_sqrt"
    for rnn in ("vanilla", "bahdanau", "luong"):
        assert compose_with(f"model={rnn}").trainer.schedule == "plateau"
    assert compose_with("experiment=peer_transformer").trainer.warmup_steps == 200
    # a trainer chosen on the command line wins over the model's
    assert compose_with("model=bahdanau", "trainer=transformer").trainer.schedule == "inverse_sqrt"


def test_the_yaml_files_hold_every_value() -> None:
    """The schemas hold types only: every composed value comes from a YAML file."""
    cfg = compose_with("run_dir=/tmp/unused")
    for group in ("data", "tokenizer", "model", "trainer", "decoding"):
        OmegaConf.to_container(cfg[group], throw_on_missing=True)
    register_configs()
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        for name in ("compare", "evaluate", "translate"):
            values = OmegaConf.to_container(compose(name), resolve=True)
            assert [k for k, v in values.items() if v == "???"] == (
                [] if name == "compare" else ["ckpt"]
            )


@pytest.mark.parametrize(
    ("model", "option"),
    [("bahdanau", "input_feeding"), ("bahdanau", "score"), ("luong", "query_word"),
     ("luong", "conditional"), ("luong", "attn_dim"), ("vanilla", "lexical")],
)
def test_a_model_has_only_its_own_options(model: str, option: str) -> None:
    with pytest.raises(ConfigCompositionException) as err:
        compose_with(f"model={model}", f"model.{option}=1")
    assert option in str(err.value.__cause__ or err.value)


@pytest.mark.parametrize(
    ("data", "schema"),
    [("ding_en_de", "DingDataConfig"), ("iwslt2017_ko_en", "HFDataConfig"),
     ("files", "FilesDataConfig"), ("docs_en_de", "DocsDataConfig")],
)
def test_each_corpus_has_the_fields_of_its_source(data: str, schema: str) -> None:
    cfg = compose_with(f"data={data}")
    assert OmegaConf.get_type(cfg.data).__name__ == schema
    other = "hf_path" if schema != "HFDataConfig" else "raw_path"
    with pytest.raises(ConfigCompositionException):
        compose_with(f"data={data}", f"data.{other}=x")


@pytest.mark.parametrize(
    "override", ["trainer.max_stpes=5", "model.hiden_size=3", "data.src_lnag=fr"]
)
def test_a_misspelled_key_fails_at_compose_time(override: str) -> None:
    with pytest.raises(ConfigCompositionException) as err:
        compose_with(override)
    assert override.split("=")[0].split(".")[-1] in str(err.value.__cause__ or err.value)


def test_a_wrongly_typed_value_fails() -> None:
    with pytest.raises(ConfigCompositionException):
        compose_with("trainer.max_steps=many")


MODES = [
    ("trainer.schedule=cosine", "[constant, inverse_sqrt, plateau, linear, wsd]"),
    ("trainer.precision=fp8", "[auto, bf16, fp16, fp32]"),
    ("model=luong model.score=dott", "[dot, general]"),
    ("model.cell=rnn", "[gru, lstm]"),
    ("model.attention_fn=entmax", "[softmax, sparsemax, entmax15]"),
    ("data.source=web", "[ding, hf, files"),
]


@pytest.mark.parametrize(("overrides", "allowed"), MODES, ids=[o for o, _ in MODES])
def test_a_wrong_mode_fails_at_compose_time_naming_the_choices(overrides: str, allowed: str):
    """`overrides`: space-separated; the last one sets the wrong mode."""
    with pytest.raises(ConfigCompositionException) as err:
        compose_with(*overrides.split())
    message = str(err.value.__cause__)
    assert allowed in message and overrides.split()[-1].split("=")[0] in message


@pytest.mark.parametrize("overrides", ["trainer.schedule=cosine", "model=luong model.score=dott"])
def test_cli_names_the_key_and_the_choices_of_a_wrong_mode(overrides: str) -> None:
    """The training entry point refuses a wrong mode before it builds anything: no traceback."""
    bad = subprocess.run([sys.executable, "-m", "seq2seq.train", *overrides.split()], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    key, value = overrides.split()[-1].split("=")
    assert bad.returncode != 0
    assert "Traceback" not in bad.stderr and bad.stdout == ""
    assert f"Invalid value '{value}', expected one of [" in bad.stderr
    assert f"full_key: {key}" in bad.stderr


@pytest.mark.parametrize("override", ["trainer.optimizer=adamw", "decoding.nbest=2"])
def test_options_that_did_nothing_are_gone(override: str) -> None:
    with pytest.raises(ConfigCompositionException):
        compose_with(override)


def test_cli_prints_the_composed_config_and_names_a_typo() -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "seq2seq.train", "--cfg", "job", "model=transformer",
         "data=ding_en_de"], cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert "name: transformer" in ok.stdout and "src_lang: en" in ok.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "seq2seq.train", "--cfg", "job", "trainer.max_stpes=5"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert bad.returncode != 0
    assert "max_stpes" in bad.stderr


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_top_level_yaml_composes(path: Path) -> None:
    register_align_config()  # seq2seq.config's schemas and align's, which lives in align.py
    register_explore_config()  # and explore's, in explore.py
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose(path.stem)
    assert len(cfg) > 0
