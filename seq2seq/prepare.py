"""`python -m seq2seq.prepare [data=...] [tokenizer=...] [leakage=false]`: build or reuse the
corpus and the tokenizer, and print their statistics and the leakage report: the validation
and test pairs with an exact, a normalised or a near twin in train (seq2seq.data.leakage)."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from seq2seq.config import register_configs
from seq2seq.corpus import SPLITS, prepare_data
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
    if cfg.leakage:
        print(f"leakage ({cfg.data.name}): held-out pairs with a twin in train, on either side "
              f"(exact; normalised; near: character similarity >= {NEAR_SIMILARITY})")
        print("\n".join(format_report(stats["leakage"])))


if __name__ == "__main__":
    main()
