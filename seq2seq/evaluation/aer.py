"""Attention scored against word alignments (AER), teacher-forced on the reference.

Pieces to words, by character offsets: a sentencepiece piece belongs to every word its
characters overlap (a zero-width byte-fallback piece to the word at its position). A target
word's row is the mean of its pieces' rows; a source word's column is the sum of its pieces'
columns (a piece shared by k words gives each 1/k); the source EOS stays a column of its own,
the null link. A target word is linked to the column with the strictly largest weight unless
that column is EOS; a tie links nothing, so attention that is uniform over the word columns
aligns nothing.

Metrics over the target words of a split (Och & Ney 2003; for attention: Koehn & Knowles 2017,
Ghader & Monz 2017, Garg et al. 2019), with A the model's links, S the sure and P the possible
reference links:
- aer = 1 - (|A∩S| + |A∩P|) / (|A| + |S|)
- sure_accuracy: of the target words with a sure link, the share linked to one of their sure
  source words; sure_mass: the mean attention those words put on their sure source words
- copy_accuracy, copy_mass: the same for copies, target words equal to exactly one source word
The baselines link target word t of T to source word round(t * S / T) (the diagonal) and to the
word after it (the diagonal shifted by one), scored on the same words.

Two readings of a Transformer's cross-attention, each per decoder layer (mean over heads):
the row of the step that predicts target piece t (the reading of the RNNs, and of the
heatmaps), and Shift-Att (Chen et al. 2020), the row of the step that reads piece t as its
input, one step later. Both go through the same piece-to-word aggregation and argmax rule;
the best head and the best Shift-Att layer are chosen on one split (validation) and reported
on another (test).

Shapes: T target pieces and S source pieces, each with its EOS; Tw, Sw words; L layers, H heads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
from torch import Tensor, nn

from seq2seq.alignment import Links, word_spans, words
from seq2seq.data.batching import budget_chunks, collate
from seq2seq.tokenization import EOS_ID, Tokenizer

TIE = 1e-6  # relative margin under which the two largest columns count as a tie
# Sentences times (S + 1) * (T + 1) per teacher-forced batch: the docs Transformer's cross-
# attention, 2 decoder layers of 4 heads, holds 32 MiB in float32 at this budget (48 MiB for
# configs/model/transformer.yaml's 3 layers; 64 pairs of ~28 pieces fit in a batch, 15 of 256)
ALIGNMENT_BATCH_CELLS = 2**20


def piece_words(
    piece_spans: list[tuple[int, int]], spans: list[tuple[int, int]]
) -> list[list[int]]:
    """For each piece (character span), the words (character spans) it overlaps."""
    result = []
    for start, end in piece_spans:
        end = max(end, start + 1)  # a zero-width piece stands at its position
        result.append([w for w, (ws, we) in enumerate(spans) if ws < end and start < we])
    return result


def word_attention(
    attn: Tensor, src_words: list[list[int]], tgt_words: list[list[int]], n_src: int, n_tgt: int
) -> Tensor:
    """Piece attention (..., T, S) -> word attention (..., Tw, Sw + 1), the last column EOS.

    Args:
        attn: rows for each target piece and the EOS, columns for each source piece and the EOS.
        src_words, tgt_words: `piece_words` of the source and target pieces (EOS not included).
        n_src, n_tgt: the number of source and target words.
    """
    columns = torch.zeros(len(src_words) + 1, n_src + 1)  # (S, Sw + 1)
    for piece, owners in enumerate(src_words):
        for word in owners:
            columns[piece, word] = 1.0 / len(owners)
    columns[len(src_words), n_src] = 1.0  # EOS -> EOS
    rows = torch.zeros(n_tgt, len(tgt_words) + 1)  # (Tw, T): the EOS row is no word
    for piece, owners in enumerate(tgt_words):
        rows[owners, piece] = 1.0
    rows = rows / rows.sum(dim=1, keepdim=True).clamp(min=1.0)  # mean over a word's pieces
    return rows @ attn.float() @ columns


def hard_alignment(word_attn: Tensor) -> Tensor:
    """(..., Tw, Sw + 1) -> (..., Tw): the source word of the strictly largest column, or -1
    where EOS wins or the two largest columns tie."""
    eos = word_attn.shape[-1] - 1
    if eos == 0:
        return torch.full(word_attn.shape[:-1], -1, dtype=torch.long)
    top = word_attn.topk(2, dim=-1)
    best, first, second = top.indices[..., 0], top.values[..., 0], top.values[..., 1]
    linked = (best != eos) & (first - second > TIE * first.abs().clamp(min=1e-12))
    return torch.where(linked, best, torch.full_like(best, -1))


def shift_att(attn: Tensor) -> Tensor:
    """Shift-Att: piece attention (..., T, S) -> (..., T, S) whose row t is row t + 1, the step
    that reads target piece t as its input (teacher forcing feeds BOS, piece 0, piece 1, ...).
    The last row, the target EOS, is never read: it becomes zeros, and `word_attention`
    drops it."""
    return torch.cat([attn[..., 1:, :], torch.zeros_like(attn[..., :1, :])], dim=-2)


def diagonal(n_tgt: int, n_src: int, shift: int = 0) -> Tensor:
    """(Tw,) target word t -> source word round(t * Sw / Tw) + shift, -1 past the last word."""
    linked = [min(math.floor(t * n_src / n_tgt + 0.5), n_src - 1) + shift for t in range(n_tgt)]
    return torch.tensor([i if 0 <= i < n_src else -1 for i in linked], dtype=torch.long)


@dataclass
class Counts:
    """What the metrics of a split are made of; additive over sentences."""

    links: int = 0  # |A|
    sure: int = 0  # |S|
    links_sure: int = 0  # |A ∩ S|
    links_possible: int = 0  # |A ∩ P|
    sure_words: int = 0
    sure_hits: int = 0
    sure_mass: float = 0.0
    copy_words: int = 0
    copy_hits: int = 0
    copy_mass: float = 0.0

    def __iadd__(self, other: Counts) -> Counts:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    def summary(self, with_mass: bool = True) -> dict[str, float | int | None]:
        def share(part: float, whole: int) -> float | None:
            return part / whole if whole else None

        denominator = self.links + self.sure
        result: dict[str, float | int | None] = {
            "aer": 1 - (self.links_sure + self.links_possible) / denominator
            if denominator else None,
            "sure_accuracy": share(self.sure_hits, self.sure_words),
            "copy_accuracy": share(self.copy_hits, self.copy_words),
            "sure_words": self.sure_words,
            "copy_words": self.copy_words,
        }
        if with_mass:
            result["sure_mass"] = share(self.sure_mass, self.sure_words)
            result["copy_mass"] = share(self.copy_mass, self.copy_words)
        return result


def sentence_counts(
    aligned: Tensor, links: Links, src_words: list[str], tgt_words: list[str],
    word_attn: Tensor | None = None,
) -> Counts:
    """Counts of one sentence pair from its hard alignment (Tw,) and, for the mass figures,
    its word attention (Tw, Sw + 1)."""
    model = {(int(i), j) for j, i in enumerate(aligned.tolist()) if i >= 0}
    counts = Counts(len(model), len(links.sure), len(model & links.sure),
                    len(model & links.possible))
    sure_of: dict[int, list[int]] = {}
    for i, j in links.sure:
        sure_of.setdefault(j, []).append(i)
    for j, sources in sure_of.items():
        counts.sure_words += 1
        counts.sure_hits += int(int(aligned[j]) in sources)
        if word_attn is not None:
            counts.sure_mass += float(word_attn[j, sources].sum())
    for j, word in enumerate(tgt_words):
        matches = [i for i, source in enumerate(src_words) if source == word]
        if len(matches) == 1:
            counts.copy_words += 1
            counts.copy_hits += int(int(aligned[j]) == matches[0])
            if word_attn is not None:
                counts.copy_mass += float(word_attn[j, matches[0]])
    return counts


@dataclass(frozen=True)
class WordPair:
    """One sentence pair at word level: its words, which words each piece belongs to, and its
    reference links."""

    src: list[str]
    tgt: list[str]
    src_map: list[list[int]]  # per source piece, its words
    tgt_map: list[list[int]]
    links: Links

    @classmethod
    def of(cls, src_text: str, tgt_text: str, src_spans: list[tuple[int, int]],
           tgt_spans: list[tuple[int, int]], links: Links) -> WordPair:
        return cls(words(src_text), words(tgt_text),
                   piece_words(src_spans, word_spans(src_text)),
                   piece_words(tgt_spans, word_spans(tgt_text)), links)

    def word_attention(self, piece_attn: Tensor) -> Tensor:
        """(..., T, S) over pieces and EOS -> (..., Tw, Sw + 1)."""
        return word_attention(piece_attn.float().cpu(), self.src_map, self.tgt_map,
                              len(self.src), len(self.tgt))

    def counts(self, word_attn: Tensor | None = None, aligned: Tensor | None = None) -> Counts:
        """The counts of word attention (Tw, Sw + 1), or of a given hard alignment (Tw,)."""
        if aligned is None:
            assert word_attn is not None
            aligned = hard_alignment(word_attn)
        return sentence_counts(aligned, self.links, self.src, self.tgt, word_attn)


def lowest_aer(scored: list[tuple[Counts, tuple[int, ...]]]) -> tuple[int, ...] | None:
    """The key of the counts with the lowest AER (the first on a tie); None if none has one."""
    known = [(aer, key) for counts, key in scored
             if (aer := counts.summary()["aer"]) is not None]
    return min(known)[1] if known else None


@dataclass(frozen=True)
class Chosen:
    """The Transformer's best head and best Shift-Att layer, chosen on one split (validation)
    to be reported on another (test)."""

    head: tuple[int, int] | None
    shift_layer: int | None


@dataclass
class SplitAlignment:
    """The counts of a split: the model's attention (for the Transformer, the last layer
    averaged over heads, as its heatmaps show), each layer's mean and each head, each layer's
    Shift-Att, the baselines."""

    model: Counts
    diagonal: Counts
    shifted: Counts
    layers: list[Counts] | None = None  # (L,)
    heads: list[list[Counts]] | None = None  # (L, H)
    shift_layers: list[Counts] | None = None  # (L,) Shift-Att, each layer's mean over heads
    shift_model: Counts | None = None  # an RNN's attention read with Shift-Att
    skipped: int = 0  # pairs cut to the maximum length, not scored

    def add(self, pair: WordPair, attn: Tensor, heads: Tensor | None = None) -> None:
        """Count one sentence pair: its attention (T, S) over pieces and EOS and, for the
        Transformer, every layer's and head's (L, H, T, S); the baselines on its words."""
        self.model += pair.counts(pair.word_attention(attn))
        n_tgt, n_src = len(pair.tgt), len(pair.src)
        self.diagonal += pair.counts(aligned=diagonal(n_tgt, n_src))
        self.shifted += pair.counts(aligned=diagonal(n_tgt, n_src, shift=1))
        if heads is None:  # Bahdanau's query is the previous state: the next row may fit better
            if self.shift_model is None:
                self.shift_model = Counts()
            self.shift_model += pair.counts(pair.word_attention(shift_att(attn)))
            return
        word_heads = pair.word_attention(heads)  # (L, H, Tw, Sw + 1)
        word_shifted = pair.word_attention(shift_att(heads.mean(dim=1)))  # (L, Tw, Sw + 1)
        num_layers, num_heads = word_heads.shape[:2]
        if self.layers is None or self.heads is None or self.shift_layers is None:
            self.layers = [Counts() for _ in range(num_layers)]
            self.heads = [[Counts() for _ in range(num_heads)] for _ in range(num_layers)]
            self.shift_layers = [Counts() for _ in range(num_layers)]
        for layer in range(num_layers):
            self.layers[layer] += pair.counts(word_heads[layer].mean(dim=0))
            self.shift_layers[layer] += pair.counts(word_shifted[layer])
            for head in range(num_heads):
                self.heads[layer][head] += pair.counts(word_heads[layer, head])

    def best_head(self) -> tuple[int, int] | None:
        """The (layer, head) with the lowest AER (the first on a tie); None without heads."""
        found = lowest_aer([(c, (layer, head)) for layer, row in enumerate(self.heads or [])
                            for head, c in enumerate(row)])
        return None if found is None else (found[0], found[1])

    def best_shift_layer(self) -> int | None:
        """The layer whose Shift-Att has the lowest AER (the first on a tie); None without."""
        found = lowest_aer([(c, (layer,)) for layer, c in enumerate(self.shift_layers or [])])
        return None if found is None else found[0]

    def choose(self) -> Chosen:
        """The best head and Shift-Att layer of this split, to report on another."""
        return Chosen(self.best_head(), self.best_shift_layer())

    def report(self, chosen: Chosen | None = None) -> dict:
        """Every figure as plain data. `chosen`: the head and Shift-Att layer to report as best
        (chosen on another split, e.g. validation for test); None chooses them on this split.
        "shift_att" is, for an RNN, its one attention read with Shift-Att (layer None)."""
        picked = chosen if chosen is not None else self.choose()
        chosen_on = "this split" if chosen is None else "validation"
        result: dict = {
            **self.model.summary(),
            "baselines": {"diagonal": self.diagonal.summary(with_mass=False),
                          "diagonal_shifted": self.shifted.summary(with_mass=False)},
            "skipped_pairs": self.skipped,
            "shift_att": None,
        }
        if self.layers is not None and self.heads is not None:
            result["layers"] = [c.summary() for c in self.layers]
            result["heads"] = [[c.summary() for c in row] for row in self.heads]
            if picked.head is not None:
                layer, index = picked.head
                result["best_head"] = {"layer": layer, "head": index, "chosen_on": chosen_on,
                                       **self.heads[layer][index].summary()}
        if self.shift_layers is not None and picked.shift_layer is not None:
            result["shift_att"] = {"layer": picked.shift_layer, "chosen_on": chosen_on,
                                   **self.shift_layers[picked.shift_layer].summary(),
                                   "layers": [c.summary() for c in self.shift_layers]}
        elif self.shift_model is not None:
            result["shift_att"] = {"layer": None, "chosen_on": "no choice",
                                   **self.shift_model.summary(), "layers": []}
        return result


@torch.inference_mode()
def score_alignment(
    model: nn.Module,
    tokenizer: Tokenizer,
    src_text: list[str],
    tgt_text: list[str],
    src_ids: list[list[int]],
    tgt_ids: list[list[int]],
    links: list[Links],
    device: torch.device,
    batch_size: int = 64,
    batch_cells: int = ALIGNMENT_BATCH_CELLS,
) -> SplitAlignment | None:
    """Teacher-force the references and score the attention against `links`; None for a model
    without attention (the vanilla model). The model's figure ("aer") reads the attention the
    model returns (a guided Transformer's: the layer and head it was guided on).

    Pairs are taken by length in batches of at most `batch_size` whose sentences times the
    largest (S + 1) * (T + 1) stay within `batch_cells`: the Transformer's per-layer, per-head
    attention is that many cells times layers times heads. The caller runs the model in eval
    mode. Pairs whose piece ids were cut to the maximum
    length are not scored (their words would have no pieces); `skipped` counts them.
    """
    src_spans, tgt_spans = tokenizer.src_spans(src_text), tokenizer.tgt_spans(tgt_text)
    rows = [i for i in range(len(src_ids))
            if len(src_spans[i]) == len(src_ids[i]) and len(tgt_spans[i]) == len(tgt_ids[i])]
    rows.sort(key=lambda i: len(src_ids[i]))  # similar lengths batch together
    result = SplitAlignment(Counts(), Counts(), Counts(), skipped=len(src_ids) - len(rows))
    cells = [(len(s) + 1) * (len(t) + 1) for s, t in zip(src_ids, tgt_ids, strict=True)]
    for chunk in budget_chunks(rows, cells, batch_size, batch_cells):
        batch = collate([src_ids[i] for i in chunk], [tgt_ids[i] for i in chunk], chunk)
        batch = batch.to(device)
        # project=False: the attention is all that is scored; the (B, T, V) logits of a long
        # batch would be the largest tensor of the final phase (about 0.5 GiB at 16k pieces)
        _, attn = model(batch.src, batch.src_mask, batch.tgt_in, project=False)  # (B, T, S)
        if attn is None:
            return None
        heads = model.cross_attention(batch.src, batch.src_mask, batch.tgt_in)  # (L,B,H,T,S)
        for b, i in enumerate(chunk):
            pair = WordPair.of(src_text[i], tgt_text[i], src_spans[i], tgt_spans[i], links[i])
            if not pair.src or not pair.tgt:
                continue
            s_len, t_len = len(src_ids[i]) + 1, len(tgt_ids[i]) + 1  # EOS included
            result.add(pair, attn[b, :t_len, :s_len],
                       None if heads is None else heads[:, b, :, :t_len, :s_len])
    return result


def probe_alignment(
    model: nn.Module, tokenizer: Tokenizer, src_text: str, tgt_text: str,
    device: torch.device, shift_layer: int | None = None,
) -> tuple[Tensor, list[str], list[str]] | None:
    """The probe sentence teacher-forced on its reference, at word level: (Tw, Sw + 1) word
    attention, the source words (and EOS) and the target words; None without attention.

    `shift_layer`: None reads the attention as the metric's "aer" does (the step predicting
    each word: the attention the model returns, a Transformer's last layer's mean unless it
    is read by the layer and head it was guided on); a layer reads that layer's
    Shift-Att (mean over heads), None for a model without per-layer attention. The caller runs
    the model in eval mode."""
    src_ids, tgt_ids = tokenizer.encode_src([src_text])[0], tokenizer.encode_tgt([tgt_text])[0]
    batch = collate([src_ids], [tgt_ids], [0]).to(device)
    with torch.inference_mode():
        if shift_layer is None:
            _, attn = model(batch.src, batch.src_mask, batch.tgt_in, need_attn=True)  # (1,T,S)
        else:
            heads = model.cross_attention(batch.src, batch.src_mask, batch.tgt_in)  # (L,1,H,T,S)
            attn = None if heads is None else shift_att(heads[shift_layer].mean(dim=1))
    if attn is None:
        return None
    pair = WordPair.of(src_text, tgt_text, tokenizer.src_spans([src_text])[0],
                       tokenizer.tgt_spans([tgt_text])[0], Links(frozenset(), frozenset()))
    eos = tokenizer.src_pieces([EOS_ID])[0]
    return pair.word_attention(attn[0]), [*pair.src, eos], pair.tgt
