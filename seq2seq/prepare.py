"""`python -m seq2seq.prepare [data=...] [tokenizer=...] [leakage=false] [export=DIR]`: build or
reuse the corpus and the tokenizer, and print their statistics, their fingerprints and the
leakage report: the validation and test pairs with an exact, a normalised or a near twin in
train (seq2seq.data.leakage). `export=DIR` then writes the corpus to a folder that
`data.export_dir=DIR` reads without the sources (seq2seq.data.export)."""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from seq2seq.alignment import links_fingerprint
from seq2seq.config import register_configs
from seq2seq.corpus import SPLITS, export_corpus, prepare_data
from seq2seq.data.batching import padding_fraction, token_batches
from seq2seq.data.leakage import NEAR_SIMILARITY, format_report, leakage_report
from seq2seq.errors import exit_on_user_error

register_configs()


def statistics(cfg: DictConfig) -> dict[str, object]:
    data = prepare_data(cfg.data, cfg.tokenizer)
    tok = data.tokenizer
    stats: dict[str, object] = {
        "pairs": sum(len(data.splits[s]) for s in SPLITS),
        **{f"{s}_pairs": len(data.splits[s]) for s in SPLITS},
        "src_vocab_size": tok.src_vocab_size,
        "tgt_vocab_size": tok.tgt_vocab_size,
        "fingerprint": data.fingerprint,
        "tokenizer_sha256": "/".join(dict.fromkeys(  # one model when joint
            str(tok.identity[f"{side}_model_sha256"])[:16] for side in ("src", "tgt"))),
        "links_fingerprint": None if data.links is None else links_fingerprint(data.links),
    }
    train = data.splits["train"]
    stats["mean_src_pieces"] = sum(train.src_lens) / max(len(train), 1)
    stats["mean_tgt_pieces"] = sum(train.tgt_lens) / max(len(train), 1)
    batches = token_batches(train.src_lens, train.tgt_lens, cfg.trainer.batch_tokens,
                            shuffle=True, seed=cfg.trainer.seed, epoch=0)
    stats["train_batches"] = len(batches)
    stats["padding_fraction"] = padding_fraction(batches, train.src_lens, train.tgt_lens)
    if cfg.leakage:  # the pairs the model trains on against those it is scored on
        stats["leakage"] = leakage_report(
            {s: (data.splits[s].src_text, data.splits[s].tgt_text) for s in SPLITS})
    return stats


@hydra.main(config_path="../configs", config_name="prepare", version_base="1.3")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    stats = statistics(cfg)
    print(f"corpus {cfg.data.name} ({cfg.data.src_lang}->{cfg.data.tgt_lang}): "
          f"{stats['pairs']:,} pairs: train {stats['train_pairs']:,}, "
          f"validation {stats['validation_pairs']:,}, test {stats['test_pairs']:,}")
    print(f"tokenizer {cfg.tokenizer.type}: vocabulary {stats['src_vocab_size']:,} (source) / "
          f"{stats['tgt_vocab_size']:,} (target); mean pieces per training sentence "
          f"{stats['mean_src_pieces']:.1f} (source) / {stats['mean_tgt_pieces']:.1f} (target)")
    print(f"batches of {cfg.trainer.batch_tokens:,} tokens: {stats['train_batches']:,} per "
          f"epoch, padding {stats['padding_fraction']:.1%}")
    links = stats["links_fingerprint"]
    print(f"fingerprints: corpus {stats['fingerprint'][:16]} (splits and document ids), "
          f"tokenizer {stats['tokenizer_sha256']} (sentencepiece model sha256), word alignments "
          + ("unavailable" if links is None else f"{links[:16]} (validation and test links)"))
    if cfg.leakage:
        print(f"leakage ({cfg.data.name}): held-out pairs with a twin in train, on either side "
              f"(exact; normalised; near: character similarity >= {NEAR_SIMILARITY})")
        print("\n".join(format_report(stats["leakage"])))
    if cfg.export is not None:
        manifest = export_corpus(cfg.data, Path(cfg.export))
        size = sum(entry["bytes"] for entry in manifest["files"].values())
        print(f"exported {cfg.data.name} to {cfg.export}: {size / 1e6:.1f} MB, "
              f"{len(manifest['tokenizers'])} tokenizer(s) ({', '.join(manifest['tokenizers'])}), "
              f"word alignments {manifest['alignments']}; read it with "
              f"data={cfg.data.name} data.export_dir={cfg.export}")


if __name__ == "__main__":
    main()
