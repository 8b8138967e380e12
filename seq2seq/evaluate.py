"""`python -m seq2seq.evaluate ckpt=PATH [split=test] [beam_size=K]`: score a checkpoint, or
with `ckpt=[A,B,...]` an ensemble of checkpoints sharing one tokenizer (`seq2seq.models.ensemble`).

Decodes a split of the corpus the checkpoint was trained on, with its tokenizer and decoding
settings, through the same `decode_and_score` the training loop uses, so the test BLEU of a run
is reproduced exactly. Prints BLEU and chrF with their sacrebleu signatures and the attention's
agreement with the reference word alignments (AER, with the diagonal baselines; the
Transformer's best head chosen on validation); writes the hypotheses and a metrics JSON next to
the run (or where `output` says). An ensemble's alignment is that of the members' mean
attention: the per-head and Shift-Att figures are a single Transformer's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from seq2seq.alignment import corpus_links
from seq2seq.config import register_configs
from seq2seq.corpus import SPLITS, domains_of, encode_split
from seq2seq.data import data_root, load_corpus
from seq2seq.errors import UserError, exit_on_user_error
from seq2seq.evaluation.decode_and_score import choose_best, decode_and_score
from seq2seq.evaluation.hypotheses import write_hypotheses
from seq2seq.evaluation.metrics import bleu_by_length, bleu_tokenize_for, domain_scores
from seq2seq.evaluation.word_links import aer_label
from seq2seq.inference import Loaded, load_models, resolve_device, search_settings
from seq2seq.models.base import count_parameters

register_configs()


def metrics_path(hypotheses: Path) -> Path:
    """`<run>/test.best.beam5.hyp` -> `<run>/test.best.beam5.metrics.json`."""
    return hypotheses.with_suffix(".metrics.json")


def evaluate(
    ckpt: str | Path | list[str | Path],
    split: str = "test",
    beam_size: int | None = None,
    batch_size: int | None = None,
    device: str = "auto",
    output: str | Path | None = None,
    tokenizer_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Decode and score one split with a checkpoint; write hypotheses and metrics JSON.

    Args:
        ckpt: the checkpoint, e.g. `<run>/checkpoints/best.pt`, or a list of several: an
            ensemble (`seq2seq.inference.load_models`), named `ensemble-<stem>+<stem>...`.
        split: train, validation or test.
        beam_size: beam size; None: the checkpoint's `decoding.beam_size` (1 is greedy).
        batch_size: sentences decoded at once; None: the checkpoint's `decoding.batch_size`.
        device: auto, cpu, cuda, cuda:N or mps.
        output: the hypotheses file; None: `<run>/<split>.<checkpoint>.beam<k>.hyp` (the
            checkpoint's file name without `.pt`: `test.best.beam5.hyp`), so evaluations of
            several checkpoints of a run stand side by side; an ensemble's goes to its first
            member's run, `test.ensemble-step-900+step-1200.beam5.hyp`. The metrics go next
            to it, `.hyp` replaced by `.metrics.json`.
        tokenizer_dir: the tokenizer folder; None: `<run>/tokenizer`.

    Returns:
        The metrics written to the JSON file: BLEU, chrF, signatures, alignment, BLEU by source
        length, the split, test set name, beam size and file paths.

    Raises:
        UserError: an unknown split, a bad setting, or a checkpoint, tokenizer or corpus that
            cannot be read.
    """
    if split not in SPLITS:
        raise UserError(f"split={split!r} is unknown; use one of {', '.join(SPLITS)}")
    loaded = load_models(ckpt, resolve_device(device), tokenizer_dir)
    cfg = loaded.config
    settings = search_settings(cfg, beam_size, batch_size)
    print(f"{described(loaded)}, "
          f"{count_parameters(loaded.model) / 1e6:.2f}M parameters, step {loaded.step}, "
          f"device {loaded.device}")
    corpus = load_corpus(cfg.data)
    encoded = {
        name: encode_split(loaded.tokenizer, corpus[name]["src"], corpus[name]["tgt"],
                           cfg.tokenizer.max_src_len, cfg.tokenizer.max_tgt_len)
        for name in {split, "validation"}
    }
    texts = {name: (corpus[name]["src"], corpus[name]["tgt"]) for name in SPLITS}
    links = corpus_links(texts, data_root(cfg.data.root), cfg.data.name)
    tokenize = bleu_tokenize_for(cfg.data.tgt_lang, cfg.data.bleu_tokenize)
    start = time.monotonic()
    result = decode_and_score(
        loaded.model, loaded.tokenizer, encoded[split], settings, loaded.device,
        bleu_tokenize=tokenize,
        links=None if links is None or split not in links else links[split],
    )
    seconds = time.monotonic() - start
    chosen = None  # the Transformer's best head and Shift-Att layer: chosen on validation
    if links is not None and split != "validation" and result.alignment is not None \
            and result.alignment.heads:
        chosen = choose_best(loaded.model, loaded.tokenizer, encoded["validation"],
                             links["validation"], loaded.device)
    run_dir = loaded.checkpoint.parent.parent
    hyp_path = Path(output) if output is not None else (
        run_dir / f"{split}.{model_name(loaded)}.beam{settings.beam_size}.hyp"
    )
    json_path = metrics_path(hyp_path)
    metrics = {
        **result.summary(chosen),
        "split": split,
        "data": cfg.data.name,
        "test_set": cfg.data.test_set if split == "test" else f"{cfg.data.name} {split}",
        "beam_size": settings.beam_size,
        "length_penalty": settings.length_penalty,
        "bleu_by_length": bleu_by_length(
            result.sources, result.hypotheses, result.references, tokenize=tokenize,
            **length_edges(cfg),
        ),
        "alignment_measures": aer_label(cfg),
        "by_domain": domain_scores(domains_of(corpus[split]), result.hypotheses,
                                   result.references, tokenize),
        "truncated": encoded[split].truncated,
        "decode_seconds": round(seconds, 2),
        "checkpoint": str(loaded.checkpoint),
        "ensemble": [str(path) for path in loaded.members] or None,
        "step": loaded.step,
        "hypotheses": str(hyp_path),
    }
    try:
        hyp_path.parent.mkdir(parents=True, exist_ok=True)
        write_hypotheses(hyp_path, result.hypotheses)
        json_path.write_text(json.dumps(metrics, indent=2, ensure_ascii=False) + "\n")
    except OSError as err:
        raise UserError(f"{err.filename}: cannot write ({err.strerror})") from None
    print(report(metrics))
    print(f"hypotheses: {hyp_path}\nmetrics: {json_path}")
    return metrics


def model_name(loaded: Loaded) -> str:
    """What output names call the decoding model: the checkpoint's stem (`best`), or for an
    ensemble `ensemble-` and its members' stems joined by `+` (`ensemble-best+best`)."""
    if not loaded.members:
        return loaded.checkpoint.stem
    return "ensemble-" + "+".join(path.stem for path in loaded.members)


def described(loaded: Loaded) -> str:
    """`checkpoint PATH: MODEL`, or `ensemble of N checkpoints: PATH (MODEL), ...`."""
    if not loaded.members:
        return f"checkpoint {loaded.checkpoint}: {loaded.config.model.name}"
    names = [getattr(m, "name", type(m).__name__) for m in loaded.model.members]
    return f"ensemble of {len(names)} checkpoints: " + ", ".join(
        f"{path} ({name})" for path, name in zip(loaded.members, names, strict=True))


def length_edges(cfg: DictConfig) -> dict[str, tuple[int, ...]]:
    """The corpus's length buckets (`data.length_buckets`, as `make compare` reports them), or
    none, for `bleu_by_length`'s own, where a checkpoint's config predates them."""
    edges = cfg.data.get("length_buckets")
    return {} if not edges else {"edges": tuple(edges)}


def report(metrics: dict[str, Any]) -> str:
    """The scores of `evaluate` as the lines it prints."""
    lines = [
        f"{metrics['test_set']} ({metrics['n']} sentences, beam {metrics['beam_size']}, "
        f"{metrics['decode_seconds']:.1f}s):",
        f"  BLEU {metrics['bleu']:.2f}  {metrics['bleu_signature']}",
        f"  chrF {metrics['chrf']:.2f}  {metrics['chrf_signature']}",
    ]
    lines += alignment_lines(metrics["alignment"], metrics.get("alignment_measures",
                                                               "AER against eflomal"))
    if metrics.get("by_domain"):
        lines.append("  BLEU / chrF by domain: " + ", ".join(
            f"{row['domain']} {row['bleu']:.1f} / {row['chrf']:.1f} ({row['n']})"
            for row in metrics["by_domain"]))
    buckets = ", ".join(f"{row['bucket']}: {row['bleu']:.1f} ({row['n']})"
                        for row in metrics["bleu_by_length"])
    lines.append(f"  BLEU by source words: {buckets}")
    if all("length_ratio" in row for row in metrics["bleu_by_length"]):
        ratios = ", ".join(f"{row['bucket']}: {row['length_ratio']:.2f} / "
                           f"{row['precisions'][3]:.1f}" for row in metrics["bleu_by_length"])
        lines.append(f"  output/reference length and 4-gram precision by source words: {ratios}")
    if metrics["truncated"]:
        lines.append(f"  {metrics['truncated']} sentences were truncated to the max length")
    return "\n".join(lines)


def alignment_lines(report: dict[str, Any] | None, measures: str = "AER against eflomal"
                    ) -> list[str]:
    """The attention-alignment figures of a split as printed lines; `measures` (`aer_label`)
    says what the AER is: a guided run's is its agreement with its teacher."""
    if report is None:
        return ["  attention alignment: none (no attention, or no reference links)"]

    def figures(row: dict[str, Any]) -> str:
        def fmt(key: str) -> str:
            return "n/a" if row.get(key) is None else f"{row[key]:.3f}"

        return f"AER {fmt('aer')}, sure-link accuracy {fmt('sure_accuracy')}" + (
            f", mass {fmt('sure_mass')}" if "sure_mass" in row else "")

    base = report["baselines"]
    lines = [
        f"  attention vs word alignments, {measures}: {figures(report)} "
        f"({report['sure_words']} words); "
        f"copies {report['copy_accuracy'] or 0:.3f} of {report['copy_words']}",
        f"  baselines: diagonal {figures(base['diagonal'])}; "
        f"shifted by one {figures(base['diagonal_shifted'])}",
    ]
    if "best_head" in report:
        best = report["best_head"]
        layers = ", ".join(f"{row['aer']:.3f}" for row in report["layers"])
        lines.append(f"  best head (chosen on {best['chosen_on']}): layer {best['layer']} head "
                     f"{best['head']} {figures(best)}; per-layer mean AER {layers}")
    if report.get("shift_att") is not None:
        shift = report["shift_att"]
        layers = ", ".join(f"{row['aer']:.3f}" for row in shift["layers"])
        lines.append(f"  Shift-Att (layer chosen on {shift['chosen_on']}): layer {shift['layer']} "
                     f"{figures(shift)}; per-layer AER {layers}")
    return lines


@hydra.main(config_path="../configs", config_name="evaluate", version_base="1.3")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    if OmegaConf.is_missing(cfg, "ckpt"):
        raise UserError("ckpt=PATH is required: the checkpoint to evaluate (or [A,B])")
    evaluate(**OmegaConf.to_container(cfg))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
