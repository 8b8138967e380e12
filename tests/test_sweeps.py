"""Hydra sweeps end to end: an Optuna study over tiny trainings, submitit's local launcher
running jobs as separate processes, and the SLURM launcher's config."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("hydra_plugins.hydra_optuna_sweeper", reason="needs the sweep extra")
pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="needs the sweep extra")

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra_plugins.hydra_optuna_sweeper._impl import create_optuna_distribution_from_override
from omegaconf import OmegaConf
from optuna.distributions import CategoricalDistribution

from seq2seq.config import register_configs
from seq2seq.corpus import prepare_data
from seq2seq.models import build_model
from tests.tiny import CONFIG_DIR, tiny_config, tiny_overrides

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted(p.stem for p in (CONFIG_DIR / "hparams_search").glob("*.yaml"))


def train_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "seq2seq.train", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def search_space(recipe: str) -> dict:
    """The recipe's composed config and its parameters as Optuna distributions."""
    register_configs()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"hparams_search={recipe}"],
                      return_hydra_config=True)
    parser = OverridesParser.create()
    space = {key: create_optuna_distribution_from_override(
        parser.parse_override(f"{key}={value}"))
        for key, value in cfg.hydra.sweeper.params.items()}
    return {"cfg": cfg, "space": space}


def test_there_is_a_recipe_per_family() -> None:
    assert RECIPES == ["rnn_optuna", "transformer_optuna"]


@pytest.mark.parametrize("recipe", RECIPES)
def test_a_recipe_is_a_seeded_tpe_study_that_maximises_and_every_size_builds(recipe: str) -> None:
    composed = search_space(recipe)
    cfg, space = composed["cfg"], composed["space"]
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper") and cfg.hydra.mode.name == "MULTIRUN"
    assert sweeper.direction == "maximize" and sweeper.n_trials >= 10
    assert sweeper.sampler._target_ == "optuna.samplers.TPESampler"
    assert isinstance(sweeper.sampler.seed, int)
    assert {"trainer.lr", "trainer.label_smoothing", "trainer.batch_tokens",
            "model.dropout"} <= set(space)
    assert cfg.model.name == ("transformer" if recipe.startswith("transformer") else "bahdanau")
    lows_highs = {key: (d.low, d.high) for key, d in space.items()
                  if not isinstance(d, CategoricalDistribution)}
    assert 0 < lows_highs["trainer.lr"][0] < lows_highs["trainer.lr"][1] < 0.1
    assert 0 <= lows_highs["model.dropout"][0] < lows_highs["model.dropout"][1] < 1
    sizes = {key: d.choices for key, d in space.items()
             if key.startswith("model.") and isinstance(d, CategoricalDistribution)}
    for values in itertools.product(*sizes.values()):
        model_cfg = OmegaConf.merge(cfg.model, dict(zip(
            (k.removeprefix("model.") for k in sizes), values, strict=True)))
        assert sum(p.numel() for p in build_model(model_cfg, 64, 64).parameters()) > 0


@pytest.mark.slow  # over 10 s: the second tier
def test_an_optuna_sweep_names_the_trial_with_the_best_validation_bleu(tmp_path: Path) -> None:
    """Three real tiny trainings; the study's best value and parameters are those of the trial
    whose metrics.json has the highest best_valid_bleu."""
    sweep = tmp_path / "sweep"
    fixed = [a for a in tiny_overrides(tmp_path, "transformer")
             if a not in ("model=transformer", "model.dropout=0.1")]  # dropout is searched
    out = train_cli(
        "hparams_search=transformer_optuna", *fixed, "hydra.sweeper.n_trials=3",
        "trainer.max_steps=150", "trainer.eval_every=75", "trainer.warmup_steps=10",
        "trainer.final_test=false", "trainer.lr=tag(log, interval(5e-3, 3e-2))",
        f"hydra.sweep.dir={sweep}",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    trials = sorted(sweep.glob("*_transformer"))
    assert [t.name for t in trials] == ["0_transformer", "1_transformer", "2_transformer"]
    bleu = {t: json.loads((t / "metrics.json").read_text())["best_valid_bleu"] for t in trials}
    assert len(set(bleu.values())) > 1  # the trials differ, so "best" means something
    best = max(bleu, key=bleu.__getitem__)
    assert results["best_value"] == pytest.approx(bleu[best])
    best_cfg = OmegaConf.load(best / "config.yaml")
    assert set(results["best_params"]) == {"trainer.lr", "trainer.label_smoothing",
                                           "model.dropout"}
    for key, value in results["best_params"].items():
        assert OmegaConf.select(best_cfg, key) == pytest.approx(value), key
    assert best_cfg.model.d_model == 32 and best_cfg.trainer.batch_tokens == 256  # fixed


@pytest.mark.slow  # over 10 s: the second tier
def test_submitit_local_runs_each_job_in_its_own_process(tmp_path: Path) -> None:
    prepare_data(tiny_config(tmp_path).data, tiny_config(tmp_path).tokenizer, verbose=False)
    sweep = tmp_path / "sweep"
    proc = subprocess.Popen(
        [sys.executable, "-m", "seq2seq.train", "-m", "hydra/launcher=submitit_local",
         *tiny_overrides(tmp_path), "trainer.lr=1e-3,2e-3", "trainer.final_test=false",
         "hydra.launcher.timeout_min=5", f"hydra.sweep.dir={sweep}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    for job, lr in (("0_bahdanau", 1e-3), ("1_bahdanau", 2e-3)):
        assert json.loads((sweep / job / "metrics.json").read_text())["steps"] == 20
        assert OmegaConf.load(sweep / job / "config.yaml").trainer.lr == lr
    logs = {}
    for log in sweep.glob(".submitit/*/*_0_log.out"):
        text = log.read_text()
        job_id = re.search(r"JobEnvironment\(job_id=(\d+)", text)
        run = re.search(r"run folder: (\S+)", text)
        assert job_id and run, text[-2000:]
        logs[Path(run.group(1)).name] = int(job_id.group(1))  # a local job's id is its pid
    assert set(logs) == {"0_bahdanau", "1_bahdanau"}
    assert len(set(logs.values())) == 2 and proc.pid not in logs.values()


def test_the_slurm_launcher_composes_with_the_documented_overrides() -> None:
    out = train_cli(
        "--cfg", "hydra", "hydra/launcher=submitit_slurm", "hydra.launcher.partition=gpu",
        "hydra.launcher.nodes=2", "hydra.launcher.gpus_per_node=8",
        "hydra.launcher.tasks_per_node=8", "hydra.launcher.cpus_per_task=6",
        "hydra.launcher.timeout_min=720", "model=transformer",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    launcher = yaml.safe_load(out.stdout)["hydra"]["launcher"]
    assert launcher["_target_"].endswith("SlurmLauncher")
    assert {key: launcher[key] for key in ("partition", "nodes", "gpus_per_node",
                                           "tasks_per_node", "cpus_per_task", "timeout_min")} \
        == {"partition": "gpu", "nodes": 2, "gpus_per_node": 8, "tasks_per_node": 8,
            "cpus_per_task": 6, "timeout_min": 720}
    assert launcher["submitit_folder"].endswith(".submitit/%j")
