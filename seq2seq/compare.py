"""`python -m seq2seq.compare [overrides]`: train every variant on the same data and budget,
then write results/compare.{md,csv}, BLEU plots, the length study and the probe heatmaps.

Overrides named `compare.<key>` set configs/compare.yaml (`compare.max_time=300`,
`compare.variants=[bahdanau,transformer]`, `compare.out_dir=DIR`); every other override applies
to each variant's training config (e.g. `data=ding_en_de`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from seq2seq.config import register_configs
from seq2seq.corpus import documents_of, domains_of, encode_split
from seq2seq.data import data_root, load_corpus
from seq2seq.decoding import DecodeSettings, decode_settings
from seq2seq.errors import UserError, exit_on_user_error
from seq2seq.evaluation.aer import probe_alignment
from seq2seq.evaluation.compare_report import write_report
from seq2seq.evaluation.decode_and_score import decode_and_score, decode_ids
from seq2seq.evaluation.hypotheses import read_hypotheses
from seq2seq.evaluation.metrics import (
    bleu_by_length,
    bleu_difference,
    bleu_gap_by_length,
    bleu_tokenize_for,
    domain_scores,
)
from seq2seq.evaluation.word_links import aer_label
from seq2seq.fonts import fonts_for
from seq2seq.inference import load_for_inference
from seq2seq.tokenization import EOS_ID

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"


def split_overrides(overrides: list[str]) -> tuple[list[str], list[str]]:
    """(configs/compare.yaml's overrides without their `compare.` prefix, the others)."""
    own = [o.removeprefix("compare.") for o in overrides if o.startswith("compare.")]
    return own, [o for o in overrides if not o.startswith("compare.")]


def variant_overrides(
    variant: str, max_time: float, overrides: list[str], run_dir: Path,
    recipe: str | None = None,
) -> list[str]:
    """A variant's training overrides: its recipe (`experiment=<recipe>_<variant>`) if any,
    the comparison's budget, then the user's overrides."""
    chosen = [f"experiment={recipe}_{variant}"] if recipe else []
    budget = [f"trainer.max_time={max_time}", "trainer.max_steps=null", "trainer.progress=false"]
    return [*chosen, *budget, *overrides, f"model={variant}", f"run_dir={run_dir}"]


def compose_variant(
    variant: str, max_time: float, overrides: list[str], run_dir: Path,
    recipe: str | None = None,
) -> DictConfig:
    """A variant's training config (`variant_overrides` composed)."""
    register_configs()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=variant_overrides(variant, max_time, overrides,
                                                             run_dir, recipe))


def train_in_a_process(variant: str, overrides: list[str], run_dir: Path,
                       echo: bool = False) -> dict[str, Any]:
    """Train one variant in a process of its own (whose peak memory is the variant's own), its
    console to run_dir/console.log and, with `echo`, to this one; returns its metrics.json."""
    run_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-u", "-m", "seq2seq.train", *overrides, f"hydra.run.dir={run_dir}"]
    with (open(run_dir / "console.log", "w", encoding="utf-8", buffering=1) as log,
          subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           encoding="utf-8", errors="replace") as done):
        for line in done.stdout or []:
            log.write(line)
            if echo:
                print(line, end="", flush=True)
    if done.returncode != 0:
        raise UserError(f"{variant} failed (exit status {done.returncode}): see "
                        f"{run_dir / 'console.log'}")
    return json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))


def tokens_per_second(run_dir: Path) -> float | None:
    """Mean training speed from the run's TensorBoard scalars."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard")).Reload()
    values = [e.value for e in events.Scalars("train/tokens_per_s")
              ] if "train/tokens_per_s" in events.Tags()["scalars"] else []
    return sum(values) / len(values) if values else None


def study_variant(variant: str, run_dir: Path, metrics: dict[str, Any]) -> dict[str, Any]:
    """Greedy test BLEU, length buckets and the probe of a trained variant's best checkpoint."""
    loaded = load_for_inference(run_dir / "checkpoints" / "best.pt", "cpu")
    cfg, cpu = loaded.config, torch.device("cpu")
    corpus = load_corpus(cfg.data)
    fonts_for((cfg.data.src_lang, cfg.data.tgt_lang), data_root(cfg.data.root) / "raw")
    test = encode_split(loaded.tokenizer, corpus["test"]["src"], corpus["test"]["tgt"],
                        cfg.tokenizer.max_src_len, cfg.tokenizer.max_tgt_len,
                        documents=documents_of(corpus["test"]),
                        domains=domains_of(corpus["test"]))
    tokenize = bleu_tokenize_for(cfg.data.tgt_lang, cfg.data.bleu_tokenize)
    greedy = decode_and_score(loaded.model, loaded.tokenizer, test,
                              decode_settings(cfg.decoding, 1), cpu, bleu_tokenize=tokenize)
    beam_hyps = read_hypotheses(run_dir / "test.hyp")
    buckets = bleu_by_length(test.src_text, beam_hyps, test.tgt_text,
                             edges=tuple(cfg.data.length_buckets), tokenize=tokenize)
    by_domain = domain_scores(test.domains, beam_hyps, test.tgt_text, tokenize)
    probes = [probe_study(loaded, source, cpu) for source in cfg.data.probe]
    probe_row: dict[str, Any] = probes[0] if probes else {}
    forced = None if not probes or cfg.data.probe_reference is None else probe_alignment(
        loaded.model, loaded.tokenizer, probes[0]["source"], cfg.data.probe_reference, cpu)
    if forced is not None:  # the first probe teacher-forced on its reference, at word level
        word_attn, src_words, tgt_words = forced
        probe_row["teacher_forced"] = {
            "reference": cfg.data.probe_reference,
            "weights": [{"target": t, "source": s,
                         "weight": float(word_attn[tgt_words.index(t), src_words.index(s)])}
                        for t, s in cfg.data.probe_words if t in tgt_words and s in src_words]}
        probe_row["weights"] = ", ".join(f"{w['target']}→{w['source']} {w['weight']:.2f}"
                                         for w in probe_row["teacher_forced"]["weights"])
    test_metrics = metrics["test"]
    alignment = test_metrics.get("alignment") or {}
    baselines = alignment.get("baselines", {})
    row = {
        "variant": variant,
        "parameters": metrics["parameters"],
        "steps": metrics["steps"],
        "train_time_s": metrics["train_time"],
        "train_tokens_per_s": tokens_per_second(run_dir),
        "peak_memory_mib_training": metrics.get("peak_memory_mib_training"),
        "peak_memory_mib": metrics.get("peak_memory_mib"),
        "valid_bleu": metrics["best_valid_bleu"],
        "test_bleu_greedy": greedy.scores.bleu,
        "test_bleu_beam5": test_metrics["bleu"],
        "test_chrf_beam5": test_metrics["chrf"],
        "aer": alignment.get("aer"),
        "aer_diagonal": baselines.get("diagonal", {}).get("aer"),
        "aer_shifted": baselines.get("diagonal_shifted", {}).get("aer"),
        "sure_accuracy": alignment.get("sure_accuracy"),
        "copy_accuracy": alignment.get("copy_accuracy"),
        "aer_best_head": alignment.get("best_head", {}).get("aer"),
        "aer_shift_att": (alignment.get("shift_att") or {}).get("aer"),
        "probe_translation": probe_row.get("translation", ""),
        "probe_weights": probe_row.get("weights", ""),
    }
    return {"row": row, "buckets": buckets, "by_domain": by_domain, "probe": probe_row,
            "probes": probes,
            "aer_measures": aer_label(cfg),
            "history": metrics["history"],
            "signature": test_metrics["bleu_signature"], "test_set": test_metrics["test_set"],
            "alignment": alignment, "scored": (test.src_text, beam_hyps, test.tgt_text),
            "documents": test.documents, "edges": tuple(cfg.data.length_buckets),
            "tokenize": tokenize}


def probe_study(loaded: Any, source: str, device: torch.device) -> dict[str, Any]:
    """One probe sentence's greedy translation and the attention it was written with (the
    model's alignment reading), with the pieces that label the map's columns and rows."""
    split = encode_split(loaded.tokenizer, [source], [""], 10_000, 10_000)
    hyp = decode_ids(loaded.model, split.src_ids, DecodeSettings(beam_size=1), device)[0][0]
    eos = loaded.tokenizer.tgt_pieces([EOS_ID])[0]
    return {"source": source,
            "translation": loaded.tokenizer.decode_tgt(hyp.tokens),
            "attention": hyp.attention,
            "src_pieces": loaded.tokenizer.src_pieces(split.src_ids[0]) + [eos],
            "tgt_pieces": loaded.tokenizer.tgt_pieces(hyp.tokens) + [eos]}


def trained_runs(root: Path, variants: list[str]) -> dict[str, dict[str, Any]]:
    """The metrics of an earlier comparison's variants (`compare.from_runs`), refused in one
    line where a variant did not finish there."""
    missing = [v for v in variants if not (root / v / "metrics.json").is_file()
               or not (root / v / "checkpoints" / "best.pt").is_file()]
    if missing:
        raise UserError(f"compare.from_runs={root}: no finished {', '.join(missing)} there "
                        "(metrics.json and checkpoints/best.pt)")
    return {v: json.loads((root / v / "metrics.json").read_text(encoding="utf-8"))
            for v in variants}


def gap_intervals(studies: dict[str, dict[str, Any]], baseline: str = "vanilla"
                  ) -> dict[str, dict[str, list[dict]]]:
    """Each variant's BLEU gap to the baseline per length bucket and its change from bucket to
    bucket, with 95% paired bootstrap intervals (`bleu_gap_by_length` on the beam hypotheses:
    each bucket's own families, or sentences, drawn); none without the baseline."""
    if baseline not in studies:
        return {}
    sources, base_hyps, references = _same_test_set(studies)[baseline]
    return {variant: bleu_gap_by_length(sources, s["scored"][1], base_hyps, references,
                                        edges=s["edges"], tokenize=s["tokenize"],
                                        documents=s["documents"])
            for variant, s in studies.items() if variant != baseline}


def pairwise_differences(studies: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """For every two variants, the whole-test BLEU difference (beam 5) with its 95% paired
    bootstrap interval over the same units as `gap_intervals`."""
    scored = _same_test_set(studies)
    names = list(studies)
    return [{"a": a, "b": b, **bleu_difference(
                scored[a][1], scored[b][1], scored[a][2], tokenize=studies[a]["tokenize"],
                documents=studies[a]["documents"])}
            for i, a in enumerate(names) for b in names[i + 1:]]


def _same_test_set(studies: dict[str, dict[str, Any]]) -> dict[str, tuple]:
    first = next(iter(studies.values()))
    for variant, s in studies.items():
        if (s["scored"][0], s["scored"][2], s["documents"]) != (
                first["scored"][0], first["scored"][2], first["documents"]):
            raise ValueError(f"{variant} was tested on other sentences than {next(iter(studies))}")
    return {variant: s["scored"] for variant, s in studies.items()}


@exit_on_user_error
def main(argv: list[str] | None = None) -> None:
    overrides = list(sys.argv[1:] if argv is None else argv)
    own, training = split_overrides(overrides)
    register_configs()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        settings = compose("compare", overrides=own)
        base = compose("config", overrides=training)
    for variant in settings.variants:  # a wrong override or recipe fails before training
        compose_variant(variant, settings.max_time, training, Path("unused"), settings.recipe)
    stamp = f"{datetime.now():%Y-%m-%d_%H-%M-%S}"
    root = Path(base.runs_root) / "compare" / stamp
    if settings.from_runs is not None:  # the report again from finished runs, nothing trained
        root = Path(settings.from_runs)
        trained = trained_runs(root, list(settings.variants))

    def train_variant(variant: str) -> tuple[str, dict[str, Any]]:
        run_dir = root / variant
        print(f"=== {variant}: {settings.max_time:.0f}s of training into {run_dir}", flush=True)
        start = time.monotonic()
        chosen = variant_overrides(variant, settings.max_time, training, run_dir, settings.recipe)
        metrics = train_in_a_process(variant, chosen, run_dir, echo=settings.jobs == 1)
        print(f"=== {variant} done in {time.monotonic() - start:.0f}s", flush=True)
        return variant, metrics

    if settings.from_runs is None:
        pool = ThreadPoolExecutor(max_workers=settings.jobs)  # trainer.threads shares the cores
        try:  # on Ctrl-C the running variants save last.pt (their own SIGINT), no other starts
            trained = dict(pool.map(train_variant, settings.variants))
        finally:
            pool.shutdown(cancel_futures=True)
    studies = {variant: study_variant(variant, root / variant, metrics)
               for variant, metrics in trained.items()}
    out_dir = Path(settings.out_dir)
    intervals = gap_intervals(studies)
    differences = pairwise_differences(studies)
    write_report(out_dir, studies, " ".join(["python -m seq2seq.compare", *overrides]),
                 intervals, differences)
    (out_dir / "compare.json").write_text(json.dumps(
        {"variants": {v: {**{k: s[k] for k in ("row", "buckets", "by_domain", "history")},
                          **({"gap_to_vanilla": intervals[v]} if v in intervals else {})}
                      for v, s in studies.items()},
         "differences": differences,
         "bootstrap_unit": "sentence" if next(iter(studies.values()))["documents"] is None
         else "family"}, indent=2))
    print((out_dir / "compare.md").read_text(encoding="utf-8"))
    print(f"runs: {root} (make tensorboard overlays them)")


if __name__ == "__main__":
    main()
