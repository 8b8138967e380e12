"""Decoding time and BLEU of a Transformer checkpoint: the project's decoder against its
CTranslate2 exports (float32 and int8), in one run, beam 5, one CPU thread.

    python scripts/benchmark_ctranslate2.py --ckpt runs/.../checkpoints/best.pt
    python scripts/benchmark_ctranslate2.py --ckpt PATH --split test --data docs_de_en

The split is the checkpoint's corpus (or the corpus `--data` names, a configs/data/ file,
which must use the checkpoint's languages), encoded with its tokenizer; the sentences are
decoded with the checkpoint's decoding settings and beam 5 by `decode_ids` (torch) and by
`seq2seq.ctranslate2_engine.decode_ids` over exports written by `seq2seq.export` into a
temporary folder, each engine timed on the whole split once (loading excluded). BLEU is
sacrebleu's, as the project scores (`seq2seq.evaluation.metrics.score`, the corpus's BLEU
tokenizer). Prints one line per engine: seconds, sentences/s, BLEU, and the share of sentences
whose best hypothesis is the torch decoder's, token for token (`--json FILE` keeps them).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from seq2seq.config import register_configs
from seq2seq.corpus import SPLITS, encode_split
from seq2seq.ctranslate2_engine import decode_ids as ctranslate2_decode_ids
from seq2seq.ctranslate2_engine import load_exported
from seq2seq.data import load_corpus
from seq2seq.evaluation.decode_and_score import decode_ids
from seq2seq.evaluation.metrics import bleu_tokenize_for, score
from seq2seq.export import export_ctranslate2
from seq2seq.inference import load_for_inference, search_settings
from seq2seq.search import Hypothesis

ROOT = Path(__file__).resolve().parents[1]
BEAM_SIZE = 5


def data_config(name: str) -> DictConfig:
    """The data config group `configs/data/<name>.yaml`, composed as the CLI would."""
    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose("config", overrides=[f"data={name}", "model=transformer"]).data


def timed(decode: Callable[[], list[list[Hypothesis]]]) -> tuple[float, list[list[Hypothesis]]]:
    start = time.perf_counter()
    found = decode()
    return time.perf_counter() - start, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ckpt", required=True, help="a Transformer checkpoint (best.pt)")
    parser.add_argument("--split", default="test", choices=SPLITS)
    parser.add_argument("--data", default=None,
                        help="a configs/data name; default: the checkpoint's corpus")
    parser.add_argument("--max-sentences", type=int, default=None,
                        help="decode only the first N sentences of the split")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()

    torch.set_num_threads(1)
    loaded = load_for_inference(args.ckpt, "cpu")
    cfg = loaded.config
    data = data_config(args.data) if args.data else cfg.data
    corpus = load_corpus(data)[args.split]
    split = encode_split(loaded.tokenizer, corpus["src"], corpus["tgt"],
                         cfg.tokenizer.max_src_len, cfg.tokenizer.max_tgt_len)
    if args.max_sentences is not None:
        split = split.subset(list(range(min(args.max_sentences, len(split)))))
    settings = search_settings(cfg, BEAM_SIZE, None)
    print(f"{args.ckpt}: {data.name} {args.split}, {len(split)} sentences, beam {BEAM_SIZE}, "
          f"length penalty {settings.length_penalty}, batch {settings.batch_size}, 1 thread")

    rows: list[tuple[str, float, list[list[Hypothesis]]]] = []
    seconds, found = timed(lambda: decode_ids(loaded.model, split.src_ids, settings,
                                              torch.device("cpu")))
    rows.append(("torch", seconds, found))
    with tempfile.TemporaryDirectory() as tmp:
        for quantization in ("float32", "int8"):
            out = export_ctranslate2(loaded, Path(tmp) / quantization, quantization)
            exported = load_exported(out, "cpu", threads=1)
            seconds, found = timed(lambda e=exported: ctranslate2_decode_ids(
                e, split.src_ids, settings))
            rows.append((f"ctranslate2-{quantization}", seconds, found))

    tokenize = bleu_tokenize_for(data.tgt_lang, data.bleu_tokenize)
    reference = [hyps[0].tokens for hyps in rows[0][2]]
    print(f"{'engine':<20} {'seconds':>8} {'sent/s':>8} {'BLEU':>6} {'same as torch':>14}")
    results = []
    for name, seconds, found in rows:
        hypotheses = [loaded.tokenizer.decode_tgt(hyps[0].tokens) for hyps in found]
        bleu = score(hypotheses, split.tgt_text, tokenize=tokenize).bleu
        same = sum(h[0].tokens == r for h, r in zip(found, reference, strict=True))
        print(f"{name:<20} {seconds:8.3f} {len(split) / seconds:8.2f} {bleu:6.2f} "
              f"{same / len(split):14.1%}")
        results.append({"engine": name, "seconds": seconds, "sentences": len(split),
                        "bleu": bleu, "same_as_torch": same})
    if args.json is not None:
        args.json.write_text(json.dumps({"ckpt": str(args.ckpt), "data": data.name,
                                         "split": args.split, "beam_size": BEAM_SIZE,
                                         "threads": 1, "results": results}, indent=2))


if __name__ == "__main__":
    main()
