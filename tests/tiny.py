"""A tiny real parallel corpus and configs for end-to-end tests (written by the tests)."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from seq2seq.config import register_configs

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"

# The reference word alignments (and so every AER, and the attention layer chosen on validation)
# come from eflomal, the align extra; without it a run reports the AER as unavailable.
HAS_EFLOMAL = importlib.util.find_spec("eflomal") is not None
needs_eflomal = pytest.mark.skipif(not HAS_EFLOMAL, reason="needs the align extra (eflomal) "
                                   "for reference word alignments")

NAMES = ["Jane", "Anna", "Peter", "Maria", "Tom", "Lisa", "Paul", "Eva"]
PLACES = [("Laden", "store"), ("Park", "park"), ("Garten", "garden"), ("Zoo", "zoo"),
          ("Hafen", "harbour"), ("Wald", "forest")]
VERBS = [("ging in den", "went to the"), ("sah den", "saw the"), ("mag den", "likes the")]


def pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        name = rng.choice(NAMES)
        (de_verb, en_verb), (de_place, en_place) = rng.choice(VERBS), rng.choice(PLACES)
        out.append((f"{name} {de_verb} {de_place}.", f"{name} {en_verb} {en_place}."))
    return out


def write_corpus(directory: Path) -> dict[str, dict[str, str]]:
    """Write train/validation/test files; returns {"src": {split: path}, "tgt": {...}}."""
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[str, dict[str, str]] = {"src": {}, "tgt": {}}
    for split, n, seed in (("train", 300, 0), ("validation", 20, 1), ("test", 20, 2)):
        rows = pairs(n, seed)
        for side, lang, col in (("src", "de", 0), ("tgt", "en", 1)):
            path = directory / f"{split}.{lang}"
            path.write_text("".join(r[col] + "\n" for r in rows), encoding="utf-8")
            files[side][split] = str(path)
    return files


def corpus_overrides(data_root: Path) -> list[str]:
    """Overrides that point `data=files` at the tiny corpus (written under data_root)."""
    files = write_corpus(data_root / "corpus")
    return [
        "data=files", f"data.root={data_root}",
        *(f"data.{side}_files.{split}={path}" for side in ("src", "tgt")
          for split, path in files[side].items()),
        "data.probe=['Jane ging in den Laden.']",
        "data.probe_reference='Jane went to the store.'",
        "data.probe_words=[[Jane,Jane],[store,Laden]]",
        "tokenizer.vocab_size=400",
    ]


# a tiny Transformer that learns some of the tiny corpus in 150 updates (tests that need one)
LEARNT_TRANSFORMER = ["trainer.max_steps=150", "trainer.eval_every=75", "trainer.lr=1e-2",
                      "trainer.warmup_steps=10"]

QUICK_TRAINER = [
    "trainer.batch_tokens=256", "trainer.max_time=null", "trainer.max_steps=20",
    "trainer.eval_every=10", "trainer.save_every=10", "trainer.log_every=5",
    "trainer.progress=false", "trainer.threads=1", "trainer.device=cpu",
    "trainer.precision=fp32",  # auto may be bf16 (runtime.pick_precision): same sums everywhere
    "decoding.beam_size=2",
]


def tiny_overrides(tmp_path: Path, model: str = "bahdanau",
                   data_root: Path | None = None) -> list[str]:
    """Overrides that size the real config to run in seconds on the tiny corpus, runs under
    `tmp_path / "runs"`; the run folder is left to Hydra (a sweep gives one per job)."""
    sizes = {
        "vanilla": ["model.emb_dim=16", "model.hidden_size=32"],
        "bahdanau": ["model.emb_dim=16", "model.hidden_size=32", "model.attn_dim=32"],
        "luong": ["model.emb_dim=16", "model.hidden_size=32"],  # dot/general: no attn_dim
        "transformer": ["model.d_model=32", "model.num_heads=2", "model.ff_dim=64",
                        "model.num_encoder_layers=1", "model.num_decoder_layers=1",
                        "model.dropout=0.1"],  # the default 0.2 is for d_model 256
    }[model]
    return [
        f"model={model}", *sizes,
        *corpus_overrides(data_root or tmp_path / "data"),
        f"runs_root={tmp_path / 'runs'}",
        *QUICK_TRAINER,
    ]


def tiny_config(
    tmp_path: Path, *overrides: str, model: str = "bahdanau", data_root: Path | None = None
) -> DictConfig:
    """The real composed config, pointed at the tiny corpus and sized to run in seconds.

    Runs that must share a tokenizer share `data_root` (corpus and tokenizer caches).
    """
    base = [*tiny_overrides(tmp_path, model, data_root), f"run_dir={tmp_path / 'run'}"]
    register_configs()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=[*base, *overrides])
