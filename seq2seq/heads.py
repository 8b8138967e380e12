"""`python -m seq2seq.heads ckpt=PATH [split=test] [max_sentences=N] [out=DIR]`: what every
attention head of a Transformer does, and what it is worth.

For each layer and head of its three attentions (the encoder's self-attention, the decoder's
masked self-attention, the cross-attention), over the split teacher-forced on its references:
the statistics of `seq2seq.evaluation.head_stats` (entropy, confidence, the share of weight on
the previous, same and next position, on the boundary token and on punctuation) and, for the
cross-attention, each head's AER against the split's eflomal links. Then importance as Michel
et al. (2019): the BLEU (greedy) lost with that head alone masked, its output zeroed before
W^O, on `select_split` (validation), which orders the heads and decides how many go together
within `prune_budget`, and on `split` (test), reported with each difference's 95% paired
bootstrap interval, never chosen on. Writes `heads.md`, `heads.json` (valid JSON: what is not
applicable is null), `heads_importance.png` and `heads_previous/same/next.png` to `out`, and the
figures as TensorBoard scalars (`heads/...`) beside the run's.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torch.utils.tensorboard import SummaryWriter

from seq2seq.alignment import corpus_links
from seq2seq.config import register_configs
from seq2seq.corpus import EncodedSplit, encode_split
from seq2seq.data import data_root, load_corpus
from seq2seq.data.batching import collate
from seq2seq.decoding import decode_settings
from seq2seq.errors import UserError, exit_on_user_error
from seq2seq.evaluation.aer import score_alignment
from seq2seq.evaluation.decode_and_score import decode_and_score, eval_mode
from seq2seq.evaluation.head_stats import KINDS, STATISTICS, HeadStatistics, is_punctuation
from seq2seq.evaluation.metrics import bleu_difference, bleu_tokenize_for, score
from seq2seq.fonts import fonts_for
from seq2seq.inference import Loaded, load_for_inference, resolve_device
from seq2seq.tokenization import BOS_ID, EOS_ID, PAD_ID
from seq2seq.visualization import figure_to_png, heads_figure

register_configs()
Head = tuple[str, int, int]  # (kind, layer, head)


def attention_module(model: nn.Module, kind: str, layer: int) -> nn.Module:
    """The MultiHeadAttention of one kind and layer of a Transformer."""
    if kind == "encoder":
        return model.encoder_layers[layer].self_attn
    block = model.decoder_layers[layer]
    return block.self_attn if kind == "decoder" else block.cross_attn


@contextlib.contextmanager
def masked(model: nn.Module, heads: list[Head]) -> Iterator[None]:
    """The model with `heads` masked (their outputs zeroed before W^O) inside."""
    gated: list[nn.Module] = []
    try:
        for kind, layer, head in heads:
            module = attention_module(model, kind, layer)
            if module.head_gate is None:
                module.head_gate = torch.ones(module.num_heads)
                gated.append(module)
            module.head_gate[head] = 0.0
        yield
    finally:
        for module in gated:
            module.head_gate = None


@torch.inference_mode()
def loss_per_token(model: nn.Module, split: EncodedSplit, device: torch.device,
                   batch_size: int = 64) -> float:
    """The split's teacher-forced NLL per target token (EOS included), in nats."""
    total, tokens = 0.0, 0
    with eval_mode(model):
        for start in range(0, len(split), batch_size):
            rows = range(start, min(start + batch_size, len(split)))
            batch = collate([split.src_ids[i] for i in rows], [split.tgt_ids[i] for i in rows],
                            list(rows)).to(device)
            logits, _ = model(batch.src, batch.src_mask, batch.tgt_in, need_attn=False)
            total += torch.nn.functional.cross_entropy(
                logits.flatten(0, 1).float(), batch.tgt_out.flatten(), ignore_index=PAD_ID,
                reduction="sum").item()
            tokens += int((batch.tgt_out != PAD_ID).sum())
    return total / max(tokens, 1)


@torch.inference_mode()
def statistics(loaded: Loaded, split: EncodedSplit, batch_size: int = 32
               ) -> dict[str, HeadStatistics]:
    """Each attention kind's statistics over the split, teacher-forced on the references."""
    model, tok, device = loaded.model, loaded.tokenizer, loaded.device
    found = {kind: HeadStatistics() for kind in KINDS}
    eos, bos = tok.src_pieces([EOS_ID])[0], tok.tgt_pieces([BOS_ID])[0]
    with eval_mode(model):
        for start in range(0, len(split), batch_size):
            rows = list(range(start, min(start + batch_size, len(split))))
            batch = collate([split.src_ids[i] for i in rows], [split.tgt_ids[i] for i in rows],
                            rows).to(device)
            encoder, decoder = model.self_attention(batch.src, batch.src_mask, batch.tgt_in)
            cross = model.cross_attention(batch.src, batch.src_mask, batch.tgt_in)
            for b, i in enumerate(rows):
                s, t = len(split.src_ids[i]) + 1, len(split.tgt_ids[i]) + 1
                src_punct = torch.tensor([is_punctuation(p) for p in
                                          tok.src_pieces(split.src_ids[i]) + [eos]])
                tgt_punct = torch.tensor([is_punctuation(p) for p in
                                          [bos] + tok.tgt_pieces(split.tgt_ids[i])])
                found["encoder"].add(encoder[:, b, :, :s, :s].cpu(), s - 1, src_punct, True)
                found["decoder"].add(decoder[:, b, :, :t, :t].cpu(), 0, tgt_punct, True,
                                     causal=True)
                found["cross"].add(cross[:, b, :, :t, :s].cpu(), s - 1, src_punct, False)
    return found


def importance(loaded: Loaded, select: EncodedSplit, report: EncodedSplit, tokenize: str,
               budget: float, documents: list[str] | None = None) -> dict[str, Any]:
    """Each head masked alone, and the heads masked together, chosen on one split and
    reported on another (Michel et al. 2019's importance, without tuning on test).

    On `select` (validation): the BLEU (greedy) each masked head loses orders the heads, least
    important first, and decides how many go together within `budget`. On `report` (test):
    the whole model's BLEU and loss per token, and each head's (and the pruned model's) BLEU
    lost with its 95% paired bootstrap interval (over `documents`' families where given, else
    sentences: `metrics.bleu_difference`).
    """
    model, tok, device = loaded.model, loaded.tokenizer, loaded.device
    greedy = decode_settings(loaded.config.decoding, 1)  # as compare's greedy test BLEU

    def hypotheses(split: EncodedSplit) -> list[str]:
        return decode_and_score(model, tok, split, greedy, device,
                                bleu_tokenize=tokenize).hypotheses

    def lost(base: list[str], masked_hyps: list[str]) -> dict[str, float]:
        return bleu_difference(base, masked_hyps, report.tgt_text, tokenize, documents)

    def select_bleu(hyps: list[str]) -> float:
        return score(hyps, select.tgt_text, tokenize).bleu

    base_select, base_report = hypotheses(select), hypotheses(report)
    base_select_bleu = select_bleu(base_select)
    num_heads = attention_module(model, "encoder", 0).num_heads
    layers = {"encoder": len(model.encoder_layers), "decoder": len(model.decoder_layers),
              "cross": len(model.decoder_layers)}
    heads: dict[Head, dict[str, float]] = {}
    for kind in KINDS:
        for layer in range(layers[kind]):
            for head in range(num_heads):
                with masked(model, [(kind, layer, head)]):
                    chosen, reported = hypotheses(select), hypotheses(report)
                    loss = loss_per_token(model, report, device)
                diff = lost(base_report, reported)
                heads[(kind, layer, head)] = {
                    "select_bleu_lost": base_select_bleu - select_bleu(chosen),
                    "bleu_lost": diff["difference"], "low": diff["low"], "high": diff["high"],
                    "loss": loss}
                print(f"  {kind} layer {layer} head {head} masked: BLEU lost "
                      f"{heads[(kind, layer, head)]['select_bleu_lost']:+.2f} (selection), "
                      f"{diff['difference']:+.2f} ({diff['low']:+.2f} to {diff['high']:+.2f}) "
                      "reported", flush=True)
    order = sorted(heads, key=lambda h: heads[h]["select_bleu_lost"])
    pruned: list[dict[str, Any]] = []
    for count in range(1, len(order) + 1):
        if heads[order[count - 1]]["select_bleu_lost"] > budget:
            break  # alone it already costs more than the budget
        with masked(model, order[:count]):
            chosen, reported = hypotheses(select), hypotheses(report)
        diff = lost(base_report, reported)
        pruned.append({"heads": count, "select_bleu_lost": base_select_bleu - select_bleu(chosen),
                       "bleu_lost": diff["difference"], "low": diff["low"], "high": diff["high"]})
        if pruned[-1]["select_bleu_lost"] > budget:
            break
    within = [row["heads"] for row in pruned if row["select_bleu_lost"] <= budget]
    return {"bleu": score(base_report, report.tgt_text, tokenize).bleu,
            "loss": loss_per_token(model, report, device), "select_bleu": base_select_bleu,
            "num_heads": num_heads, "layers": layers,
            "heads": {f"{k}/{layer}/{head}": v for (k, layer, head), v in heads.items()},
            "pruning_order": [f"{k}/{layer}/{head}" for k, layer, head in order],
            "pruned": pruned, "prunable": max(within, default=0), "budget": budget}


def matrices(found: dict[str, HeadStatistics], measured: dict[str, Any], key: str
             ) -> dict[str, list[list[float]]]:
    """Per kind, the (layer, head) matrix of one statistic or of importance (`bleu_lost`)."""
    if key == "bleu_lost":
        return {kind: [[measured["heads"][f"{kind}/{layer}/{head}"]["bleu_lost"]
                        for head in range(measured["num_heads"])]
                       for layer in range(measured["layers"][kind])] for kind in KINDS}
    column = STATISTICS.index(key)
    found_means = {kind: found[kind].means()[:, :, column].tolist() for kind in KINDS}
    return {kind: rows for kind, rows in found_means.items()  # not applicable: not drawn
            if any(x == x for row in rows for x in row)}


def write_report(out: Path, found: dict[str, HeadStatistics], measured: dict[str, Any],
                 heading: str, select_heading: str) -> None:
    """heads.md and heads.json (valid JSON: a statistic not applicable is null): every head's
    statistics, AER and importance."""
    lines = [f"# Attention heads: {heading}", "",
             f"Whole model: BLEU {measured['bleu']:.2f} (greedy), loss {measured['loss']:.3f} "
             f"nats a token; on {select_heading}, which orders the heads and decides the "
             f"pruning, BLEU {measured['select_bleu']:.2f}. Each head masked alone: BLEU lost "
             "there, and here with its 95% paired bootstrap interval (positive: the head was "
             "worth that much). Shares of weight on the previous, same, next position "
             "(self-attention only; the decoder's next is never allowed, its BOS is the "
             "boundary; rows the mask forces are skipped), the boundary token (source EOS, "
             "target BOS) and punctuation; entropy in nats; confidence the mean largest weight.",
             "", "| attention | layer | head | BLEU lost (selection) | BLEU lost [95%] | loss "
             "| entropy | confidence | previous | same | next | boundary | punctuation | AER |",
             "|" + "---|" * 14]
    for kind in KINDS:
        means = found[kind].means()
        for layer in range(means.shape[0]):
            for head in range(means.shape[1]):
                m = means[layer, head].tolist()
                h = measured["heads"][f"{kind}/{layer}/{head}"]
                aer = found[kind].aer[layer][head] if found[kind].aer else None
                cells = [f"{h['select_bleu_lost']:+.2f}",
                         f"{h['bleu_lost']:+.2f} [{h['low']:+.2f}, {h['high']:+.2f}]",
                         f"{h['loss']:.3f}", *("–" if x != x else f"{x:.2f}" for x in m),
                         "–" if aer is None else f"{aer:.3f}"]
                lines.append(f"| {kind} | {layer} | {head} | " + " | ".join(cells) + " |")
    total = sum(measured["layers"].values()) * measured["num_heads"]
    lines += ["", f"Masked together, least important first on the selection split (budget "
              f"{measured['budget']} BLEU there): "
              + ", ".join(f"{r['heads']} heads {r['select_bleu_lost']:+.2f} there, "
                          f"{r['bleu_lost']:+.2f} [{r['low']:+.2f}, {r['high']:+.2f}] here"
                          for r in measured["pruned"])
              + f". {measured['prunable']} of {total} heads go within the budget.", ""]
    (out / "heads.md").write_text("\n".join(lines), encoding="utf-8")
    report = {"importance": measured, "statistics": {
        kind: {"names": list(STATISTICS), "means": found[kind].means().tolist(),
               "sentences": found[kind].sentences, "aer": found[kind].aer} for kind in KINDS}}
    (out / "heads.json").write_text(json.dumps(json_safe(report), indent=1, allow_nan=False),
                                    encoding="utf-8")


def json_safe(value: Any) -> Any:
    """`value` with every NaN or infinite float made None (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def report_heads(cfg: DictConfig) -> dict[str, Any]:
    """The whole report of `python -m seq2seq.heads` (see the module docstring)."""
    loaded = load_for_inference(cfg.ckpt, resolve_device(cfg.device))
    if loaded.model.self_attention(*_probe(loaded)) is None:
        raise UserError(f"{cfg.ckpt}: model={loaded.config.model.name} has no attention heads "
                        "(its encoder and decoder are recurrent); heads reads a Transformer")
    data = loaded.config.data
    corpus = load_corpus(data)
    for key, name in (("split", cfg.split), ("select_split", cfg.select_split)):
        if name not in corpus:
            raise UserError(f"{key}={name!r} is unknown; use train, validation or test")
    if cfg.split == cfg.select_split:
        raise UserError(f"split={cfg.split} and select_split={cfg.select_split}: the heads are "
                        "chosen on one split and reported on another (select_split=validation)")

    def spread(name: str) -> tuple[EncodedSplit, list[int]]:
        whole = encode_split(loaded.tokenizer, corpus[name]["src"], corpus[name]["tgt"],
                             loaded.config.tokenizer.max_src_len,
                             loaded.config.tokenizer.max_tgt_len)
        keep = whole.spread(cfg.max_sentences)  # spread evenly: the split's mix of sources
        return whole.subset(keep), keep

    split, keep = spread(cfg.split)
    select, _ = spread(cfg.select_split)
    columns = corpus[cfg.split].column_names
    documents = ([corpus[cfg.split]["document"][i] for i in keep] if "document" in columns
                 else None)
    print(f"heads of {cfg.ckpt} on {data.name}: chosen on {cfg.select_split} ({len(select)} "
          f"sentences), reported on {cfg.split} ({len(split)} sentences)")
    found = statistics(loaded, split)
    links = corpus_links({name: (corpus[name]["src"], corpus[name]["tgt"]) for name in corpus},
                         data_root(data.root), data.name)
    if links is not None and cfg.split in links:
        alignment = score_alignment(loaded.model, loaded.tokenizer, split.src_text,
                                    split.tgt_text, split.src_ids, split.tgt_ids,
                                    [links[cfg.split][i] for i in keep], loaded.device)
        if alignment is not None and alignment.heads is not None:
            found["cross"].aer = [[c.summary()["aer"] for c in row] for row in alignment.heads]
    measured = importance(loaded, select, split,
                          bleu_tokenize_for(data.tgt_lang, data.bleu_tokenize), cfg.prune_budget,
                          documents)
    out = Path(cfg.out) if cfg.out else loaded.checkpoint.parent.parent / "heads"
    out.mkdir(parents=True, exist_ok=True)
    write_report(out, found, measured, f"{data.name} {cfg.split} ({len(split)} sentences), "
                 f"{cfg.ckpt}", f"{cfg.select_split} ({len(select)} sentences)")
    fonts_for((data.src_lang, data.tgt_lang), data_root(data.root) / "raw")
    figure_to_png(heads_figure(matrices(found, measured, "bleu_lost"),
                               "BLEU lost with the head masked (Michel et al.)"),
                  out / "heads_importance.png")
    for key in ("previous", "same", "next"):
        figure_to_png(heads_figure(matrices(found, measured, key),
                                   f"share of weight on the {key} position"),
                      out / f"heads_{key}.png")
    _tensorboard(loaded.checkpoint.parent.parent / "tensorboard", found, measured, loaded.step)
    print((out / "heads.md").read_text(encoding="utf-8"))
    return measured


def _probe(loaded: Loaded) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    batch = collate([[EOS_ID]], [[EOS_ID]], [0]).to(loaded.device)
    return batch.src, batch.src_mask, batch.tgt_in


def _tensorboard(folder: Path, found: dict[str, HeadStatistics], measured: dict[str, Any],
                 step: int) -> None:
    writer = SummaryWriter(str(folder))
    try:
        for name, row in measured["heads"].items():
            writer.add_scalar(f"heads/{name}/bleu_lost", row["bleu_lost"], step)
        for kind in KINDS:
            means = found[kind].means()
            for layer in range(means.shape[0]):
                for head in range(means.shape[1]):
                    for column, stat in enumerate(STATISTICS):
                        value = float(means[layer, head, column])
                        if value == value:  # NaN: not measured (cross-attention positions)
                            writer.add_scalar(f"heads/{kind}/{layer}/{head}/{stat}", value, step)
    finally:
        writer.close()


@hydra.main(config_path="../configs", config_name="heads", version_base="1.3")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    if OmegaConf.is_missing(cfg, "ckpt"):
        raise UserError("ckpt=PATH is required: a Transformer checkpoint")
    report_heads(cfg)


if __name__ == "__main__":
    main()
