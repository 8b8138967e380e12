"""Decode with a CTranslate2 export of a Transformer (`python -m seq2seq.export`), following
the conventions of `seq2seq.decoding` and `seq2seq.search`, so its translations are the project
decoder's.

An export folder holds CTranslate2's files (model.bin, config.json, shared_vocabulary.json or
source_/target_vocabulary.json), the run's tokenizer (its sentencepiece model(s) and
tokenizer.json) and `seq2seq.json`: the run's resolved config, the tokenizer's identity, the
checkpoint it came from and the quantization.

How the project's search maps onto CTranslate2's (both take the best 2K of K * V candidates
and finish a hypothesis when EOS is among the first K; the project stops a sentence at K
finished ones):
- the source ends with EOS (`add_source_eos` in the export's config.json);
- PAD and BOS are never emitted (`suppress_sequences`); EOS may come first
  (`min_decoding_length=0`); inputs are never cut (`max_input_length=0`, translate truncates);
- the length limit int(max_len_a * src_len + max_len_b) is per sentence, so sentences are
  grouped by their limit. The project forces EOS on every beam live one step past the limit;
  CTranslate2 cannot force a token. It searches up to the limit (`max_decoding_length=limit`),
  where its last step registers the best K candidates, EOS or not: those without EOS are
  live beams. For each with EOS the project took the next best candidate without it as a
  beam, which CTranslate2 does not return; where some are missing, a search one step further
  (`limit + 1`) finds them as the prefixes of what its last step registers (the best K
  continuations of the live beams). Each beam is scored with EOS (`Translator.score_batch`),
  as the project's forced EOS is;
- the beam search runs with patience 2 and returns up to 2K finished hypotheses, so that the
  ones the project finishes in the step where it stops are all kept (with patience 1
  CTranslate2 keeps only the K of highest log-probability); the hypotheses it finishes after
  that step are dropped;
- CTranslate2 divides a score by len ** length_penalty, the project by the GNMT
  ((5 + len) / 6) ** alpha, and no exponent makes the two equal. CTranslate2 is given a
  vanishing exponent (`NO_EARLY_EXIT`; 0 would make it stop when its top beam ends, not at K
  finished hypotheses), returns each sentence's finished hypotheses with their summed
  log-probabilities (EOS kept, so len counts it as the project does), and they are ranked here
  by the GNMT score.

What still differs: CTranslate2 renormalizes the step's softmax without PAD and BOS (the
project bans them after it), which moves a score by log(1 - p(PAD) - p(BOS)), about nothing for
a trained model; the hypotheses ended at the limit are scored without that renormalization, as
the project scores them. A beam live at the limit is still missed when it replaced a finished
hypothesis in the limit's last free step and none of its continuations is among CTranslate2's
best K one step later (2 of 280 sentences reaching the limit in the measurement of
docs/benchmark.md; neither changed the best hypothesis). A sentence that finishes more than 2K
hypotheses by CTranslate2's own stop (it waits for 2K) keeps the 2K of highest log-probability,
which may drop one the project keeps. Greedy picks the project's tokens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from seq2seq.checkpoint import check_tokenizer
from seq2seq.decoding import DecodeSettings
from seq2seq.errors import UserError
from seq2seq.inference import schema_config
from seq2seq.search import Hypothesis, length_penalty_factor, max_output_length
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


def _translate(exported: Exported, sources: list[list[str]], max_length: int,
               settings: DecodeSettings) -> list[Any]:
    """CTranslate2's search over source pieces, `max_length` steps at most, returning what it
    finishes: a beam search runs with patience 2 and returns up to 2K hypotheses, so that a
    sentence keeps all those the project finishes up to its stop (see `_search`)."""
    k = settings.beam_size
    return exported.translator.translate_batch(
        sources,
        max_batch_size=settings.batch_size,
        beam_size=k,
        num_hypotheses=k if k == 1 else 2 * k,
        length_penalty=NO_EARLY_EXIT,
        patience=1 if k == 1 else 2,
        max_decoding_length=max_length,
        min_decoding_length=0,
        max_input_length=0,
        suppress_sequences=[[piece] for piece in
                            exported.tokenizer.tgt_pieces([PAD_ID, BOS_ID])],
        return_end_token=True,
        return_scores=True,
    )


def _search(
    exported: Exported, sources: list[list[str]], limit: int, settings: DecodeSettings
) -> list[list[Hypothesis]]:
    """Beam (or greedy) search over source pieces of sentences that share the length limit.

    CTranslate2 searches up to the limit. Its hypotheses ending in EOS are the project's up to
    the step where the project stops (the first step at which a sentence holds K); a sentence
    that gets there has no others. One that does not reaches the limit with K live beams, each
    of which the project ends with EOS. CTranslate2's last step registers the best K
    candidates, and those without EOS are live beams; for each with EOS the project took the
    next best candidate without it, which CTranslate2 does not return. Where some are missing,
    a search one step further finds them as the prefixes of what its last step registers
    (the best K continuations of the live beams). Each beam is scored with EOS
    (`Translator.score_batch`).
    """
    tokenizer = exported.tokenizer
    eos = tokenizer.tgt_pieces([EOS_ID])[0]
    k = settings.beam_size
    # per sentence: the finished hypotheses (pieces without EOS, summed log-probability) and
    # the beams live at the limit (None: the sentence stopped before it)
    finished: list[list[tuple[list[str], float]]] = [[] for _ in sources]
    live: list[set[tuple[str, ...]] | None] = [{()} for _ in sources]  # limit 0: BOS only
    if limit > 0:
        for s, result in enumerate(_translate(exported, sources, limit, settings)):
            ended = [(pieces[:-1], score * len(pieces) ** NO_EARLY_EXIT)  # CTranslate2 divided
                     for pieces, score in zip(result.hypotheses, result.scores, strict=True)
                     if pieces[-1:] == [eos]]
            stop = _stop_length(sorted(len(pieces) for pieces, _ in ended), k)
            if stop is None:
                finished[s] = ended
                live[s] = {tuple(pieces) for pieces in result.hypotheses if pieces[-1:] != [eos]}
            else:
                finished[s] = [(pieces, lp) for pieces, lp in ended if len(pieces) <= stop]
                live[s] = None
    short = [s for s, beams in enumerate(live) if beams is not None and len(beams) < k]
    if short and limit > 0:
        further = _translate(exported, [sources[s] for s in short], limit + 1, settings)
        for s, result in zip(short, further, strict=True):
            live[s] = (live[s] or set()) | {tuple(pieces[:limit]) for pieces in
                                            result.hypotheses if len(pieces) == limit + 1}
    forced = [(s, list(beam)) for s, beams in enumerate(live) if beams is not None
              for beam in sorted(beams)]
    forced_scores = exported.translator.score_batch(
        [sources[s] for s, _ in forced], [pieces for _, pieces in forced],
        max_batch_size=settings.batch_size, max_input_length=0,
    ) if forced else []
    for (s, pieces), scored in zip(forced, forced_scores, strict=True):
        finished[s].append((pieces, sum(scored.log_probs)))

    target_ids = {piece: i for i, piece in
                  enumerate(tokenizer.tgt_pieces(range(tokenizer.tgt_vocab_size)))}
    out = []
    for rows in finished:
        best: dict[tuple[int, ...], Hypothesis] = {}
        for pieces, log_prob in rows:
            tokens = tuple(target_ids[p] for p in pieces)
            score = log_prob / length_penalty_factor(len(tokens) + 1, settings.length_penalty)
            if tokens not in best or score > best[tokens].score:
                best[tokens] = Hypothesis(list(tokens), score, None)
        ranked = sorted(best.values(), key=lambda h: h.score, reverse=True)
        out.append(ranked[: settings.nbest])
    return out


def _stop_length(lengths: list[int], k: int) -> int | None:
    """The length (EOS excluded) of the hypotheses finished at the step where the project's
    search stops a sentence, the first at which it holds k, given the sorted lengths of the
    hypotheses finished before the limit; None: it holds fewer and reaches the limit."""
    for count, length in enumerate(lengths, start=1):
        if count >= k and (count == len(lengths) or lengths[count] > length):
            return length
    return None
