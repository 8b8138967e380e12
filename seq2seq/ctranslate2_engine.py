"""Decode with a CTranslate2 export of a Transformer (`python -m seq2seq.export`), following
the conventions of `seq2seq.decoding` so its translations are the project decoder's.

An export folder holds CTranslate2's files (model.bin, config.json, shared_vocabulary.json or
source_/target_vocabulary.json), the run's tokenizer (its sentencepiece model(s) and
tokenizer.json) and `seq2seq.json`: the run's resolved config, the tokenizer's identity, the
checkpoint it came from and the quantization.

How the project's search maps onto CTranslate2's (both take the best 2K of K * V candidates,
finish a hypothesis when EOS is among the first K, and stop a sentence at K finished ones):
- the source ends with EOS (`add_source_eos` in the export's config.json);
- PAD and BOS are never emitted (`suppress_sequences`); EOS may come first
  (`min_decoding_length=0`); inputs are never cut (`max_input_length=0`, translate truncates);
- the length limit int(max_len_a * src_len + max_len_b) is per sentence, so sentences are
  grouped by their limit. The project forces EOS one step past the limit; CTranslate2 cannot
  force a token, so it decodes that step freely (`max_decoding_length=limit + 1`) and a
  hypothesis that ran past the limit is cut back to it and scored with EOS
  (`Translator.score_batch`), as the project's forced one is;
- CTranslate2 divides a score by len ** length_penalty, the project by the GNMT
  ((5 + len) / 6) ** alpha, and no exponent makes the two equal. CTranslate2 is given a
  vanishing exponent (`NO_EARLY_EXIT`; 0 would make it stop when its top beam ends, not at K
  finished hypotheses), returns each sentence's K finished hypotheses with their summed
  log-probabilities (EOS kept, so len counts it as the project does), and they are ranked here
  by the GNMT score.

What still differs: CTranslate2 renormalizes the step's softmax without PAD and BOS (the
project bans them after it), which moves a score by log(1 - p(PAD) - p(BOS)), about nothing
for a trained model. A sentence that finishes more than K hypotheses in one step keeps the K
of the highest log-probability before the GNMT ranking. In the free step past the limit a
beam none of whose continuations is among the best K is not ended, where the project ends
every beam. The last two touch only beams (greedy is the same search) and mostly sentences
that run to the length limit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from seq2seq.checkpoint import check_tokenizer
from seq2seq.decoding import DecodeSettings, Hypothesis, length_penalty_factor, max_output_length
from seq2seq.errors import UserError
from seq2seq.inference import schema_config
from seq2seq.tokenization import BOS_ID, EOS_ID, PAD_ID, Tokenizer

METADATA_FILE = "seq2seq.json"
# The length-penalty exponent given to CTranslate2: small enough that it ranks by the summed
# log-probability (recovered exactly in float32), not 0, which switches on its early exit.
NO_EARLY_EXIT = 1e-6


def import_ctranslate2() -> Any:
    """The ctranslate2 module, or a UserError saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise UserError(
            "the ctranslate2 engine needs the ctranslate2 package: pip install -e '.[serve]'"
        ) from None
    return ctranslate2


@dataclass
class Exported:
    """A CTranslate2 export ready to decode.

    Attributes:
        translator: the `ctranslate2.Translator` over the export folder.
        tokenizer: the tokenizer the model was trained with (copied into the folder).
        config: the run's resolved config (data, tokenizer, model, decoding, ...).
        directory: the export folder.
        quantization: the weights' type, float32 or int8.
        step: the optimizer updates the weights had seen, or None when not recorded.
    """

    translator: Any
    tokenizer: Tokenizer
    config: DictConfig
    directory: Path
    quantization: str
    step: int | None = None


def ctranslate2_device(name: str) -> tuple[str, int]:
    """CTranslate2's device and index for a device name of the torch engine (auto, cpu,
    cuda, cuda:N); auto takes a CUDA device when CTranslate2 sees one."""
    ctranslate2 = import_ctranslate2()
    gpus = ctranslate2.get_cuda_device_count()
    if name == "auto":
        return ("cuda", 0) if gpus else ("cpu", 0)
    if name == "cpu":
        return "cpu", 0
    kind, _, index = name.partition(":")
    if kind == "cuda" and (index == "" or index.isdigit()):
        if int(index or 0) >= gpus:
            raise UserError(f"device={name!r}: CTranslate2 sees {gpus} CUDA device(s)")
        return "cuda", int(index or 0)
    raise UserError(f"device={name!r}: the ctranslate2 engine runs on auto, cpu, cuda or cuda:N")


def load_exported(directory: Path | str, device: str = "cpu", threads: int = 0) -> Exported:
    """Load an export folder written by `seq2seq.export`.

    Args:
        directory: the export folder.
        device: auto, cpu, cuda or cuda:N.
        threads: CPU threads of one translation; 0: CTranslate2's default.

    Raises:
        UserError: the folder is not an export, its tokenizer is not the one the model was
            trained with, or CTranslate2 cannot load it. The message names the path.
    """
    ctranslate2 = import_ctranslate2()
    directory = Path(directory)
    metadata_path = directory / METADATA_FILE
    if not metadata_path.is_file():
        raise UserError(f"{directory}: not a CTranslate2 export of seq2seq (no {METADATA_FILE})")
    try:
        metadata = json.loads(metadata_path.read_text())
    except (OSError, ValueError) as err:
        raise UserError(f"{metadata_path}: not readable ({err})") from None
    config = schema_config(metadata, metadata_path)
    tokenizer = Tokenizer.load(directory)
    check_tokenizer(metadata, tokenizer, metadata_path, directory)
    kind, index = ctranslate2_device(device)
    try:
        translator = ctranslate2.Translator(str(directory), device=kind, device_index=index,
                                            intra_threads=threads)
    except (RuntimeError, ValueError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"{directory}: CTranslate2 cannot load the model ({reason})") from None
    return Exported(translator, tokenizer, config, directory, metadata["quantization"],
                    metadata.get("step"))


def decode_ids(
    exported: Exported, src_ids: list[list[int]], settings: DecodeSettings
) -> list[list[Hypothesis]]:
    """Translate piece-id sequences (without EOS) as `seq2seq.evaluation.decode_and_score.
    decode_ids` does with the torch model: one list of up to nbest hypotheses per sentence,
    in input order, ranked by the GNMT score. Hypotheses carry no attention."""
    tokenizer = exported.tokenizer
    by_limit: dict[int, list[int]] = {}
    for i, ids in enumerate(src_ids):  # src_len counts the EOS the export appends
        limit = max_output_length(len(ids) + 1, settings.max_len_a, settings.max_len_b)
        by_limit.setdefault(limit, []).append(i)
    results: list[list[Hypothesis]] = [[] for _ in src_ids]
    for limit, rows in by_limit.items():
        sources = [tokenizer.src_pieces(src_ids[i]) for i in rows]
        for i, hypotheses in zip(rows, _search(exported, sources, limit, settings), strict=True):
            results[i] = hypotheses
    return results


def _search(
    exported: Exported, sources: list[list[str]], limit: int, settings: DecodeSettings
) -> list[list[Hypothesis]]:
    """Beam (or greedy) search over source pieces of sentences that share the length limit."""
    tokenizer = exported.tokenizer
    eos = tokenizer.tgt_pieces([EOS_ID])[0]
    alpha = settings.length_penalty
    found = exported.translator.translate_batch(
        sources,
        max_batch_size=settings.batch_size,
        beam_size=settings.beam_size,
        num_hypotheses=settings.beam_size,
        length_penalty=NO_EARLY_EXIT,
        patience=1,
        max_decoding_length=limit + 1,  # one step past the limit: where the project ends
        min_decoding_length=0,
        max_input_length=0,
        suppress_sequences=[[piece] for piece in tokenizer.tgt_pieces([PAD_ID, BOS_ID])],
        return_end_token=True,
        return_scores=True,
    )
    # per sentence: (target pieces without EOS, summed log-probability or None: to score)
    candidates: list[list[tuple[list[str], float | None]]] = []
    for result in found:
        rows = []
        for pieces, score in zip(result.hypotheses, result.scores, strict=True):
            if pieces[-1:] == [eos]:  # CTranslate2 divided by len(pieces), EOS included
                rows.append((pieces[:-1], score * len(pieces) ** NO_EARLY_EXIT))
            else:  # ran past the limit: cut back to it and end with EOS, as the project does
                rows.append((pieces[:limit], None))
        candidates.append(rows)
    forced = [(sentence, pieces) for sentence, rows in enumerate(candidates)
              for pieces, log_prob in rows if log_prob is None]
    forced_scores = exported.translator.score_batch(
        [sources[sentence] for sentence, _ in forced], [pieces for _, pieces in forced],
        max_batch_size=settings.batch_size, max_input_length=0,
    ) if forced else []
    rescored = iter(forced_scores)

    target_ids = {piece: i for i, piece in
                  enumerate(tokenizer.tgt_pieces(range(tokenizer.tgt_vocab_size)))}
    out = []
    for rows in candidates:
        best: dict[tuple[int, ...], Hypothesis] = {}
        for pieces, log_prob in rows:
            total = log_prob if log_prob is not None else sum(next(rescored).log_probs)
            tokens = tuple(target_ids[p] for p in pieces)
            score = total / length_penalty_factor(len(tokens) + 1, alpha)  # EOS counted
            if tokens not in best or score > best[tokens].score:
                best[tokens] = Hypothesis(list(tokens), score, None)
        ranked = sorted(best.values(), key=lambda h: h.score, reverse=True)
        out.append(ranked[: settings.nbest])
    return out
