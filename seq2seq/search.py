"""Greedy and batched beam search over the model Protocol of `seq2seq.models.base`: one padded
batch of source sentences in, hypotheses out (`seq2seq.decoding` batches a corpus for them).

Search only calls `encode`, `init_state`, `decode_step`, `state.reorder` and
`EncoderOutput.reorder`, so one implementation serves every variant.

Shapes: B sentences, K beam size, N = B * K hypothesis rows, S source length, V target
vocabulary, t the number of steps taken so far.

Conventions shared by both searches:
- A hypothesis may emit at most `int(max_len_a * src_len + max_len_b)` tokens before its EOS,
  where src_len counts the real (unmasked) source tokens; at that step EOS is forced.
- PAD and BOS are never emitted.
- Scores are summed log-probabilities divided by the GNMT length penalty
  `((5 + len) / 6) ** length_penalty` (Wu et al. 2016), len counting the emitted tokens
  including EOS; `length_penalty=0` ranks by the raw log-probability.
- The caller puts the model in eval mode; the search runs under `torch.inference_mode()`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from seq2seq.errors import UserError
from seq2seq.models.base import Seq2SeqModel
from seq2seq.tokenization import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Hypothesis:
    """One finished translation.

    Attributes:
        tokens: target ids without BOS and without the final EOS.
        score: summed log-probability (EOS included) divided by the length penalty.
        attention: (len(tokens) + 1, S_real) attention of each emitted token, EOS step
            included, over the real source positions only (padding removed); float32 on the
            CPU. None for models without attention.
    """

    tokens: list[int]
    score: float
    attention: Tensor | None


def length_penalty_factor(length: int, alpha: float) -> float:
    """GNMT length penalty ((5 + length) / 6) ** alpha; a score is divided by it."""
    return ((5.0 + length) / 6.0) ** alpha


def max_output_length(src_len: int, max_len_a: float, max_len_b: int) -> int:
    """The most tokens (EOS excluded) a sentence of src_len real source tokens may emit."""
    return max(0, int(max_len_a * src_len + max_len_b))


def _max_lengths(src_mask: Tensor, max_len_a: float, max_len_b: int) -> list[int]:
    """The most tokens (EOS excluded) each of the B sentences may emit."""
    return [max_output_length(n, max_len_a, max_len_b) for n in src_mask.sum(dim=1).tolist()]


def _step_log_probs(logits: Tensor, force_eos: list[bool]) -> Tensor:
    """Log-probabilities of one step with PAD and BOS banned and EOS forced where asked.

    Args:
        logits: (N, V) scores from `decode_step`.
        force_eos: N flags, True where only EOS may follow (the length limit is reached).

    Returns:
        (N, V) float32 log-probabilities; banned entries are -inf, the EOS entry keeps the
        model's own log-probability.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    logp[:, PAD_ID] = float("-inf")
    logp[:, BOS_ID] = float("-inf")
    if any(force_eos):
        rows = torch.tensor(force_eos, device=logp.device)
        eos = logp[rows, EOS_ID]
        logp[rows] = float("-inf")
        logp[rows, EOS_ID] = eos
    return logp


def check_settings(beam_size: int, nbest: int) -> None:
    if beam_size < 1:
        raise UserError(f"beam_size must be at least 1, got {beam_size}")
    if not 1 <= nbest <= beam_size:
        raise UserError(f"nbest must be between 1 and beam_size ({beam_size}), got {nbest}")


def greedy_search(
    model: Seq2SeqModel,
    src_ids: Tensor,
    src_mask: Tensor,
    max_len_a: float = 1.5,
    max_len_b: int = 10,
    length_penalty: float = 1.0,
) -> list[list[Hypothesis]]:
    """Translate a batch by taking the most likely token at every step.

    Args:
        model: any model of the Protocol, in eval mode.
        src_ids: (B, S) source ids.
        src_mask: (B, S) True at real source tokens.
        max_len_a, max_len_b: a sentence emits at most int(a * src_len + b) tokens before EOS.
        length_penalty: GNMT alpha used for the reported score (greedy does not rank).

    Returns:
        One list per sentence, in input order, holding its single hypothesis.
    """
    with torch.inference_mode():
        enc = model.encode(src_ids, src_mask)
        state = model.init_state(enc)
        batch = src_ids.size(0)
        device = src_ids.device
        max_lens = _max_lengths(src_mask, max_len_a, max_len_b)
        prev = torch.full((batch,), BOS_ID, dtype=torch.long, device=device)
        scores = torch.zeros(batch, device=device)
        alive = torch.ones(batch, dtype=torch.bool, device=device)
        lengths = torch.zeros(batch, dtype=torch.long, device=device)  # emitted, EOS included
        step_tokens: list[Tensor] = []
        step_attn: list[Tensor] = []
        for step in range(max(max_lens) + 1):
            logits, state, attn = model.decode_step(prev, state, enc)
            logp = _step_log_probs(logits, [step >= m for m in max_lens])  # (B, V)
            tokens = logp.argmax(dim=-1)  # (B,)
            token_logp = logp.gather(1, tokens.unsqueeze(1)).squeeze(1)
            scores = torch.where(alive, scores + token_logp, scores)
            lengths += alive.long()
            step_tokens.append(tokens)
            if attn is not None:
                step_attn.append(attn.float())
            alive = alive & (tokens != EOS_ID)
            if not bool(alive.any()):
                break
            prev = tokens

        token_rows = torch.stack(step_tokens, dim=1).tolist()  # (B, t)
        attn_rows = torch.stack(step_attn, dim=1).cpu() if step_attn else None  # (B, t, S)
        masks = src_mask.cpu()
        results: list[list[Hypothesis]] = []
        for i, (length, score) in enumerate(zip(lengths.tolist(), scores.tolist(), strict=True)):
            attention = attn_rows[i, :length][:, masks[i]] if attn_rows is not None else None
            results.append(
                [
                    Hypothesis(
                        tokens=token_rows[i][: length - 1],
                        score=score / length_penalty_factor(length, length_penalty),
                        attention=attention,
                    )
                ]
            )
        return results


def beam_search(
    model: Seq2SeqModel,
    src_ids: Tensor,
    src_mask: Tensor,
    beam_size: int = 5,
    length_penalty: float = 1.0,
    max_len_a: float = 1.5,
    max_len_b: int = 10,
    nbest: int = 1,
) -> list[list[Hypothesis]]:
    """Translate a batch with beam search, all sentences and beams stepped together.

    Each step scores the K * V continuations of a sentence's K live beams by summed
    log-probability and takes the best 2K. A candidate ending in EOS among the first K of
    them finishes a hypothesis (ranked by the length-penalised score); the best K candidates
    not ending in EOS become the next beams. A sentence stops at the step where it holds at
    least K finished hypotheses, or when its length limit forces EOS on every beam (fairseq's
    rule: no bound on what live beams could still reach is used). Finished sentences leave
    the batch, so later steps only run the ones still searching.

    With beam_size=1 the result equals `greedy_search`.

    Args:
        model: any model of the Protocol, in eval mode.
        src_ids: (B, S) source ids.
        src_mask: (B, S) True at real source tokens.
        beam_size: K, live hypotheses per sentence.
        length_penalty: GNMT alpha; 0 ranks by the raw log-probability.
        max_len_a, max_len_b: a sentence emits at most int(a * src_len + b) tokens before EOS.
        nbest: hypotheses returned per sentence (at most beam_size).

    Returns:
        One list per sentence, in input order, of up to nbest hypotheses, best first.

    Raises:
        UserError: beam_size < 1 or nbest outside 1..beam_size.
    """
    check_settings(beam_size, nbest)
    with torch.inference_mode():
        k = beam_size
        batch = src_ids.size(0)
        device = src_ids.device
        enc = model.encode(src_ids, src_mask)
        enc = enc.reorder(torch.arange(batch, device=device).repeat_interleave(k))  # B*K rows
        state = model.init_state(enc)
        max_lens = _max_lengths(src_mask, max_len_a, max_len_b)  # of the live sentences
        masks = src_mask.cpu()
        sentence_ids = list(range(batch))  # original index of each live sentence
        finished: list[list[Hypothesis]] = [[] for _ in range(batch)]

        # Only the first beam of a sentence is live at the start, so no duplicates are taken.
        scores = torch.full((batch, k), float("-inf"), device=device)  # (B, K)
        scores[:, 0] = 0.0
        prev = torch.full((batch * k,), BOS_ID, dtype=torch.long, device=device)
        history = torch.empty(batch * k, 0, dtype=torch.long, device=device)  # (N, t)
        attn_history: Tensor | None = None  # (N, t, S)

        for step in range(max(max_lens) + 1):
            n = len(sentence_ids)
            logits, state, attn = model.decode_step(prev, state, enc)
            at_limit = [step >= m for m in max_lens]
            logp = _step_log_probs(logits, [a for a in at_limit for _ in range(k)])  # (n*K, V)
            vocab = logp.size(1)
            candidates = (scores.unsqueeze(2) + logp.view(n, k, vocab)).view(n, k * vocab)
            top_scores, top_index = candidates.topk(min(2 * k, k * vocab), dim=1)  # (n, 2K)
            top_beams = top_index // vocab
            top_tokens = top_index % vocab
            ends = top_tokens == EOS_ID  # (n, 2K)
            if attn is not None:
                attn = attn.float()

            # Finish hypotheses whose EOS is among the K best candidates.
            finishing = ends[:, :k] & torch.isfinite(top_scores[:, :k])
            if bool(finishing.any()):
                sent_pos, cand_pos = finishing.nonzero(as_tuple=True)
                rows = sent_pos * k + top_beams[sent_pos, cand_pos]  # (F,) rows in 0..n*K
                row_tokens = history.index_select(0, rows).tolist()
                row_scores = top_scores[sent_pos, cand_pos].tolist()
                row_attn = None
                if attn is not None:
                    last = attn.index_select(0, rows).unsqueeze(1)  # (F, 1, S)
                    if attn_history is not None:
                        last = torch.cat([attn_history.index_select(0, rows), last], dim=1)
                    row_attn = last.cpu()  # (F, t + 1, S)
                penalty = length_penalty_factor(step + 1, length_penalty)
                for j, s in enumerate(sent_pos.tolist()):
                    original = sentence_ids[s]
                    attention = row_attn[j][:, masks[original]] if row_attn is not None else None
                    finished[original].append(
                        Hypothesis(row_tokens[j], row_scores[j] / penalty, attention)
                    )

            done = [d or len(finished[o]) >= k for d, o in zip(at_limit, sentence_ids, strict=True)]
            if all(done):
                break

            # The next beams: the K best candidates that do not end in EOS (a stable sort
            # moves the EOS ones back and keeps the order of the rest).
            order = ends.long().sort(dim=1, stable=True).indices[:, :k]  # (n, K)
            live = torch.tensor([not d for d in done], device=device)  # (n,)
            scores = top_scores.gather(1, order)[live]  # (n', K)
            beams = top_beams.gather(1, order)[live]  # (n', K)
            tokens = top_tokens.gather(1, order)[live]  # (n', K)
            live_pos = live.nonzero(as_tuple=True)[0]  # (n',)
            rows = (live_pos.unsqueeze(1) * k + beams).view(-1)  # (n'*K,) rows in 0..n*K

            prev = tokens.view(-1)
            history = torch.cat([history.index_select(0, rows), prev.unsqueeze(1)], dim=1)
            if attn is not None:
                step_attn = attn.index_select(0, rows).unsqueeze(1)  # (n'*K, 1, S)
                attn_history = (
                    step_attn
                    if attn_history is None
                    else torch.cat([attn_history.index_select(0, rows), step_attn], dim=1)
                )
            state = state.reorder(rows)
            if len(live_pos) < n:
                # Every row of a sentence holds the same encoder output: keep whole blocks.
                blocks = (live_pos.unsqueeze(1) * k + torch.arange(k, device=device)).view(-1)
                enc = enc.reorder(blocks)
                max_lens = [m for m, d in zip(max_lens, done, strict=True) if not d]
                sentence_ids = [o for o, d in zip(sentence_ids, done, strict=True) if not d]

        return [sorted(hyps, key=lambda h: h.score, reverse=True)[:nbest] for hyps in finished]

