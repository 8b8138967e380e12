"""The attention focus metric: does a target word attend to the source word it copies?

For every target word that equals exactly one source word (names, numbers, words both languages
share: "Jane", "AIDS", "Berlin"), the attention is aggregated from sentencepiece pieces to words
(sum over a source word's pieces, mean over a target word's pieces) and the word counts as
*focused* when the matching source word holds the largest weight of its row. Reported: the share
of such words that are focused (accuracy) and the mean weight on the matching word.

Conventions:
- Words are runs of pieces; a piece that starts with "▁" starts a new word, any other piece
  (including punctuation such as "." after "▁Laden") continues the current one, so words are the
  whitespace-separated words of the detokenized text.
- Special pieces (`<s>`, `</s>`, `<pad>`) belong to no word: their rows and columns are dropped.
  The attention matrix may also carry one trailing row (the EOS the model emitted) and one
  trailing column (the EOS appended to the source) beyond the pieces given; those are dropped too.
  Weights are NOT renormalised after dropping: the weight on the matching word is what the model
  gave it, so the weight a model puts on EOS counts against its focus.
- Ties: a word is focused only when the matching word's weight is strictly larger than every
  other source word's, so a uniform row focuses nothing (no bias towards the first word).

Shapes: T target pieces, S source pieces, T_w target words, S_w source words, L layers, H heads.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import torch
from torch import Tensor

WORD_START = "▁"
SPECIAL_PIECES = frozenset({"<s>", "</s>", "<pad>"})


@dataclass
class FocusResult:
    """Focus over a corpus.

    Attributes:
        accuracy: share of copy-aligned target words whose attention argmax is the matching
            source word; None when the corpus has no copy-aligned word.
        mean_weight: mean attention weight on the matching source word; None likewise.
        n_words: number of copy-aligned target words.
    """

    accuracy: float | None
    mean_weight: float | None
    n_words: int

    def as_dict(self) -> dict:
        """The result as a plain dict (for metrics.json and CSV rows)."""
        return asdict(self)


def word_spans(pieces: list[str]) -> list[list[int]]:
    """Group sentencepiece pieces into words.

    Args:
        pieces: e.g. `["▁Jane", "▁ging", "▁in", "▁den", "▁La", "den", ".", "</s>"]`.

    Returns:
        The piece indices of each word, e.g. `[[0], [1], [2], [3], [4, 5, 6]]`. Special pieces
        (`<s>`, `</s>`, `<pad>`) are in no word; a first piece without "▁" starts a word.
    """
    spans: list[list[int]] = []
    starts_word = True
    for i, piece in enumerate(pieces):
        if piece in SPECIAL_PIECES:
            starts_word = True
            continue
        if starts_word or piece.startswith(WORD_START):
            spans.append([i])
        else:
            spans[-1].append(i)
        starts_word = False
    return spans


def span_words(pieces: list[str], spans: list[list[int]]) -> list[str]:
    """The text of each word: its pieces joined, without the "▁" markers."""
    return ["".join(pieces[i] for i in span).replace(WORD_START, "") for span in spans]


def aggregate_to_words(
    attn: Tensor, src_spans: list[list[int]], tgt_spans: list[list[int]]
) -> Tensor:
    """Turn piece-level attention into word-level attention.

    A source word gets the sum of its pieces' weights (the weight the model put on the word);
    a target word gets the mean of its pieces' rows (its average attention while writing it).
    Pieces in no span are dropped without renormalising.

    Args:
        attn: (..., T, S) piece attention; leading dims (layers, heads) are kept.
        src_spans: piece indices of each source word, indices < S.
        tgt_spans: piece indices of each target word, indices < T.

    Returns:
        (..., T_w, S_w) word attention.
    """
    if attn.dtype not in (torch.float32, torch.float64):
        attn = attn.float()
    num_tgt, num_src = attn.shape[-2:]
    for name, spans, size in (("source", src_spans, num_src), ("target", tgt_spans, num_tgt)):
        if any(not span or min(span) < 0 or max(span) >= size for span in spans):
            raise ValueError(f"{name} spans {spans} do not fit an attention dimension of {size}")
    src_sum = attn.new_zeros(num_src, len(src_spans))  # (S, S_w)
    for word, span in enumerate(src_spans):
        src_sum[span, word] = 1.0
    tgt_mean = attn.new_zeros(len(tgt_spans), num_tgt)  # (T_w, T)
    for word, span in enumerate(tgt_spans):
        tgt_mean[word, span] = 1.0 / len(span)
    return tgt_mean @ attn @ src_sum  # (..., T_w, S_w)


def _strip_punctuation(word: str) -> str:
    """Remove leading and trailing Unicode punctuation (categories P*), keep inner ones."""
    start, end = 0, len(word)
    while start < end and unicodedata.category(word[start]).startswith("P"):
        start += 1
    while end > start and unicodedata.category(word[end - 1]).startswith("P"):
        end -= 1
    return word[start:end]


def copy_alignments(src_words: list[str], tgt_words: list[str]) -> list[tuple[int, int]]:
    """Pair target words with the one source word they copy.

    Words are compared case-sensitively after stripping surrounding punctuation ("Laden." ==
    "Laden", "Jane's" stays as it is). Punctuation-only words are skipped, and so is a target
    word that matches no source word or more than one.

    Returns:
        `(target word index, source word index)` for every copy-aligned target word.
    """
    positions: dict[str, list[int]] = {}
    for s, word in enumerate(src_words):
        key = _strip_punctuation(word)
        if key:
            positions.setdefault(key, []).append(s)
    pairs = []
    for t, word in enumerate(tgt_words):
        matches = positions.get(_strip_punctuation(word), [])
        if len(matches) == 1:
            pairs.append((t, matches[0]))
    return pairs


def _trim_eos(attn: Tensor, src_pieces: list[str], tgt_pieces: list[str]) -> Tensor:
    """Drop a trailing EOS row and/or column that the piece lists do not name."""
    num_tgt, num_src = attn.shape[-2:]
    if num_tgt not in (len(tgt_pieces), len(tgt_pieces) + 1) or num_src not in (
        len(src_pieces),
        len(src_pieces) + 1,
    ):
        raise ValueError(
            f"attention of shape {tuple(attn.shape)} does not match {len(tgt_pieces)} target "
            f"and {len(src_pieces)} source pieces (one extra EOS row/column is allowed)"
        )
    return attn[..., : len(tgt_pieces), : len(src_pieces)]


def _word_attention(
    attn: Tensor, src_pieces: list[str], tgt_pieces: list[str]
) -> tuple[Tensor, list[tuple[int, int]]]:
    """Word attention (..., T_w, S_w) of one sentence and its copy alignments."""
    attn = _trim_eos(attn, src_pieces, tgt_pieces)
    src_spans, tgt_spans = word_spans(src_pieces), word_spans(tgt_pieces)
    pairs = copy_alignments(span_words(src_pieces, src_spans), span_words(tgt_pieces, tgt_spans))
    return aggregate_to_words(attn, src_spans, tgt_spans), pairs


def _count(word_attn: Tensor, pairs: list[tuple[int, int]]) -> tuple[int, Tensor, Tensor]:
    """Count focused words.

    Args:
        word_attn: (..., T_w, S_w) word attention.
        pairs: copy alignments (target word, source word).

    Returns:
        The number of pairs, and per leading index the number focused (...) and the summed
        weight on the matching words (...).
    """
    lead = word_attn.shape[:-2]
    if not pairs:
        return 0, torch.zeros(lead), torch.zeros(lead)
    device = word_attn.device
    tgt_idx = torch.tensor([t for t, _ in pairs], device=device)
    src_idx = torch.tensor([s for _, s in pairs], device=device)
    pair_idx = torch.arange(len(pairs), device=device)
    rows = word_attn[..., tgt_idx, :]  # (..., A, S_w)
    weight = rows[..., pair_idx, src_idx]  # (..., A)
    others = rows.clone()
    others[..., pair_idx, src_idx] = float("-inf")
    focused = weight > others.max(dim=-1).values  # (..., A) strict: ties are not focused
    return len(pairs), focused.sum(-1).cpu().double(), weight.sum(-1).cpu().double()


def focus_of_sentence(
    attn_pieces: Tensor, src_pieces: list[str], tgt_pieces: list[str]
) -> tuple[int, int, float]:
    """Focus counts of one sentence.

    Args:
        attn_pieces: (T, S) attention of the hypothesis pieces over the source pieces, or
            (T + 1, S + 1) with the EOS row and column (see the module notes).
        src_pieces: the source pieces.
        tgt_pieces: the hypothesis pieces the model emitted.

    Returns:
        (number of copy-aligned target words, number focused, summed weight on the matches).
    """
    word_attn, pairs = _word_attention(attn_pieces.detach(), src_pieces, tgt_pieces)
    n, focused, weight = _count(word_attn, pairs)
    return n, int(focused.item()), float(weight.item())


def copied_word_weights(
    attn_pieces: Tensor, src_pieces: list[str], tgt_pieces: list[str]
) -> list[tuple[str, float]]:
    """Each copy-aligned target word of one sentence with the weight it puts on its match.

    Arguments as in `focus_of_sentence`; e.g. `[("Jane", 0.83), ("in", 0.91)]` for the probe.
    """
    word_attn, pairs = _word_attention(attn_pieces.detach(), src_pieces, tgt_pieces)
    words = span_words(tgt_pieces, word_spans(tgt_pieces))
    return [(_strip_punctuation(words[t]), float(word_attn[t, s])) for t, s in pairs]


def focus_metric(items: Iterable[tuple[Tensor, list[str], list[str]]]) -> FocusResult:
    """Focus over a corpus.

    Args:
        items: `(attn (T, S), src_pieces, tgt_pieces)` per sentence, as in `focus_of_sentence`.

    Returns:
        Accuracy and mean weight over all copy-aligned words (None when there are none).
    """
    total = focused = 0
    weight = 0.0
    for attn, src_pieces, tgt_pieces in items:
        n, f, w = focus_of_sentence(attn, src_pieces, tgt_pieces)
        total, focused, weight = total + n, focused + f, weight + w
    if total == 0:
        return FocusResult(accuracy=None, mean_weight=None, n_words=0)
    return FocusResult(accuracy=focused / total, mean_weight=weight / total, n_words=total)


def transformer_focus(items: Iterable[tuple[Tensor, list[str], list[str]]]) -> dict:
    """Focus of a Transformer's cross-attention: the best single head and the last layer.

    Args:
        items: `(attn (L, H, T, S), src_pieces, tgt_pieces)` per sentence.

    Returns:
        `{"best_head": {"layer", "head", "accuracy", "mean_weight", "n_words"},
        "last_layer_mean": FocusResult.as_dict()}`. Layers and heads count from 0; the best
        head has the highest accuracy (then the highest mean weight, then the lowest index).
        `last_layer_mean` scores the last layer's attention averaged over its heads. With no
        copy-aligned word every value is None and `n_words` is 0.
    """
    total = 0
    focused: Tensor | None = None  # (L, H)
    weight: Tensor | None = None  # (L, H)
    last_focused = 0
    last_weight = 0.0
    for attn, src_pieces, tgt_pieces in items:
        if attn.dim() != 4:
            raise ValueError(f"expected attention of shape (L, H, T, S), got {tuple(attn.shape)}")
        word_attn, pairs = _word_attention(attn.detach(), src_pieces, tgt_pieces)  # (L, H, ...)
        n, f, w = _count(word_attn, pairs)
        _, last_f, last_w = _count(word_attn[-1].mean(dim=0), pairs)
        total += n
        focused = f if focused is None else focused + f
        weight = w if weight is None else weight + w
        last_focused += int(last_f.item())
        last_weight += float(last_w.item())
    if total == 0 or focused is None or weight is None:
        none = FocusResult(accuracy=None, mean_weight=None, n_words=0)
        best = {"layer": None, "head": None, **none.as_dict()}
        return {"best_head": best, "last_layer_mean": none.as_dict()}
    num_heads = focused.shape[1]
    heads = [(layer, head) for layer in range(focused.shape[0]) for head in range(num_heads)]
    layer, head = max(heads, key=lambda lh: (focused[lh].item(), weight[lh].item()))
    best = {
        "layer": layer,
        "head": head,
        "accuracy": focused[layer, head].item() / total,
        "mean_weight": weight[layer, head].item() / total,
        "n_words": total,
    }
    last = FocusResult(last_focused / total, last_weight / total, total)
    return {"best_head": best, "last_layer_mean": last.as_dict()}
