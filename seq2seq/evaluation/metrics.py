"""Corpus BLEU and chrF with sacrebleu, reported with their signatures.

Hypotheses and references are detokenized text, one sentence per item; sacrebleu tokenizes them
itself, with the tokenizer sacrebleu picks for the target language unless a corpus names one
(`bleu_tokenize_for`), so scores compare across papers.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import numpy as np
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.metrics.bleu import BLEUScore

from seq2seq.errors import UserError

DEFAULT_TOKENIZE = "13a"
TARGET_TOKENIZE = {"zh": "zh", "ja": "ja-mecab", "ko": "ko-mecab"}  # as sacrebleu chooses them


def bleu_tokenize_for(tgt_lang: str, tokenize: str | None = None) -> str:
    """sacrebleu's BLEU tokenizer for a target language: `tokenize` when set, else `zh`,
    `ja-mecab` or `ko-mecab` for a Chinese, Japanese or Korean target (`zh-TW` counts as zh),
    else 13a. The name comes back even when its tokenizer lacks its packages; scoring says so.
    """
    if tokenize is not None:
        return tokenize
    language = tgt_lang.lower().replace("_", "-").split("-")[0]
    return TARGET_TOKENIZE.get(language, DEFAULT_TOKENIZE)


@dataclass
class Scores:
    """Corpus scores of one hypothesis set against one reference set.

    Attributes:
        bleu: corpus BLEU, 0-100.
        chrf: corpus chrF, 0-100.
        bleu_signature: sacrebleu's BLEU signature, e.g. `nrefs:1|case:mixed|...|tok:13a|...`.
        chrf_signature: sacrebleu's chrF signature.
        n: number of sentence pairs scored.
    """

    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str
    n: int

    def as_dict(self) -> dict:
        """The scores as a plain dict (for metrics.json and CSV rows)."""
        return asdict(self)


def _check_pairs(hypotheses: list[str], references: list[str]) -> None:
    if len(hypotheses) != len(references):
        raise UserError(
            f"cannot score: {len(hypotheses)} hypotheses but {len(references)} references; "
            "every reference line needs exactly one hypothesis line"
        )
    if not hypotheses:
        raise UserError("cannot score: there are no sentences (empty hypotheses and references)")


_FELL_BACK: set[str] = set()  # the tokenizers whose fallback was announced in this process


def _bleu_metric(tokenize: str | None) -> BLEU:
    """sacrebleu's BLEU with `tokenize`; a tokenizer that lacks its packages (ko-mecab and
    ja-mecab need the `ko` / sacrebleu[ja] extras) falls back to 13a, said in one line (once a
    process); the signature then names 13a."""
    name = tokenize or DEFAULT_TOKENIZE
    try:
        return BLEU(tokenize=name)
    except KeyError:
        raise UserError(
            f"unknown BLEU tokenizer {name!r}; use one of sacrebleu's: "
            f"{', '.join(sorted(BLEU.TOKENIZERS))}"
        ) from None
    except RuntimeError as err:  # sacrebleu's "requires extra dependencies"
        if name not in _FELL_BACK:
            _FELL_BACK.add(name)
            extra = "pip install -e '.[ko]'" if name == "ko-mecab" else "pip install sacrebleu[ja]"
            why = str(err).strip().splitlines()[0]
            print(f"BLEU: sacrebleu's {name} tokenizer cannot run ({why} {extra}): BLEU falls back"
                  f" to {DEFAULT_TOKENIZE}, as its signature says")
        return BLEU(tokenize=DEFAULT_TOKENIZE)


def bleu_signature(tokenize: str | None) -> str:
    """The signature the BLEU of `tokenize` would carry here (its fallback included), from
    scoring one sentence against itself (sacrebleu signs a metric once it has scored)."""
    metric = _bleu_metric(tokenize)
    _corpus_score(metric, ["a b c d"], ["a b c d"])
    return metric.get_signature().format()


def signature_tokenizer(signature: str) -> str:
    """The tokenizer a BLEU signature names, without versions: `ko-mecab` for
    `...|tok:ko-mecab-0.996/ko-0.9.2-KO|...`, `13a` for `...|tok:13a|...`. Scores compare when
    this agrees (a sacrebleu or mecab upgrade keeps it)."""
    for field in signature.split("|"):
        if field.startswith("tok:"):
            name = field.removeprefix("tok:")
            return re.sub(r"-\d.*$", "", name)
    return ""


def _corpus_score(metric: BLEU, hypotheses: list[str], references: list[str]) -> BLEUScore:
    try:
        return metric.corpus_score(hypotheses, [references])
    except RuntimeError as err:  # sacrebleu raises this when ko-mecab / ja-mecab are missing
        raise UserError(f"BLEU tokenizer {metric.tokenize!r} cannot run: {err}".strip()) from None


def score(hypotheses: list[str], references: list[str], tokenize: str | None = None) -> Scores:
    """Corpus BLEU and chrF of detokenized hypotheses against one reference each.

    Args:
        hypotheses: system outputs, one detokenized sentence each.
        references: the reference translations, aligned with `hypotheses`.
        tokenize: sacrebleu's BLEU tokenizer (`13a` when None; `ko-mecab` for Korean, `zh`,
            `intl`, ...). chrF works on characters and needs none.

    Returns:
        The scores with the signatures that make them reproducible.

    Raises:
        UserError: the lists differ in length or are empty, or the tokenizer is unknown or
            lacks its extra dependencies.
    """
    _check_pairs(hypotheses, references)
    bleu = _bleu_metric(tokenize)
    chrf = CHRF()
    bleu_score = float(_corpus_score(bleu, hypotheses, references).score)
    chrf_score = float(chrf.corpus_score(hypotheses, [references]).score)
    return Scores(
        bleu=bleu_score,
        chrf=chrf_score,
        bleu_signature=bleu.get_signature().format(),
        chrf_signature=chrf.get_signature().format(),
        n=len(hypotheses),
    )


def _bucket_labels(edges: tuple[int, ...]) -> list[str]:
    lows = (1, *(edge + 1 for edge in edges[:-1]))
    closed = [f"{low}-{high}" for low, high in zip(lows, edges, strict=True)]
    return [*closed, f"{edges[-1] + 1}+"]


def bleu_by_length(
    sources: list[str],
    hypotheses: list[str],
    references: list[str],
    edges: tuple[int, ...] = (5, 10, 15, 20, 30),
    tokenize: str | None = None,
) -> list[dict]:
    """Corpus BLEU per bucket of source length, to show where long sentences lose quality, with
    what BLEU is made of there: the output's length against the reference's (a ratio under 1 is
    output cut short, which the brevity penalty charges) and the n-gram precisions (wrong or
    missing words at the right length).

    A sentence's length is its number of whitespace-separated source words. The buckets are
    `1-e0`, `e0+1-e1`, ..., and `e_last+1+`; an empty source line counts in the first bucket.

    Args:
        sources: the detokenized source sentences.
        hypotheses: system outputs aligned with `sources`.
        references: reference translations aligned with `sources`.
        edges: strictly increasing positive upper bounds of the buckets (inclusive).
        tokenize: sacrebleu's BLEU tokenizer, as in `score`.

    Returns:
        `[{"bucket": "1-5", "n": 12, "bleu": 31.4, "length_ratio": 0.97,
        "precisions": [64.1, 40.2, 27.5, 19.0]}, ...]` in length order (the ratio of the
        hypotheses' tokens to the references', the 1- to 4-gram precisions in percent, both
        sacrebleu's under `tokenize`); buckets with no sentence are left out, so the `n` add
        up to the corpus size.

    Raises:
        UserError: the three lists differ in length or are empty, or the tokenizer is unknown.
        ValueError: `edges` is empty, not positive, or not strictly increasing.
    """
    _check_by_length(sources, references, hypotheses)
    bleu = _bleu_metric(tokenize)
    rows = []
    for label, idx in _bucket_members(sources, edges):
        hyps = [hypotheses[i] for i in idx]
        refs = [references[i] for i in idx]
        found = _corpus_score(bleu, hyps, refs)
        rows.append({"bucket": label, "n": len(idx), "bleu": float(found.score),
                     "length_ratio": found.sys_len / max(found.ref_len, 1),
                     "precisions": [float(p) for p in found.precisions]})
    return rows


def domain_scores(domains: list[str] | None, hypotheses: list[str], references: list[str],
                  tokenize: str | None = None) -> list[dict]:
    """`scores_by_domain` where the split's pairs carry domains stored by the corpus build and
    name several (data=debian_en_ko: documentation, interface, descriptions, fiction); else []."""
    if not domains or "" in domains or len(set(domains)) < 2:
        return []
    return scores_by_domain(domains, hypotheses, references, tokenize)


def scores_by_domain(
    domains: list[str], hypotheses: list[str], references: list[str],
    tokenize: str | None = None,
) -> list[dict]:
    """Corpus BLEU and chrF of each domain's sentences (a corpus whose sources have domains:
    documentation, interface, fiction, ...), beside the whole test set's.

    Args:
        domains: each sentence's domain, aligned with `hypotheses`.
        hypotheses: system outputs.
        references: reference translations.
        tokenize: sacrebleu's BLEU tokenizer, as in `score`.

    Returns:
        `[{"domain": "fiction", "n": 812, "bleu": 18.2, "chrf": 27.0}, ...]`, domains sorted
        by name; the `n` add up to the corpus size.
    """
    _check_pairs(hypotheses, references)
    if len(domains) != len(references):
        raise UserError(f"cannot score by domain: {len(domains)} domains for "
                        f"{len(references)} references")
    rows = []
    for domain in sorted(set(domains)):
        idx = [i for i, d in enumerate(domains) if d == domain]
        found = score([hypotheses[i] for i in idx], [references[i] for i in idx], tokenize)
        rows.append({"domain": domain, "n": len(idx), "bleu": found.bleu, "chrf": found.chrf})
    return rows


def _check_by_length(sources: list[str], references: list[str], *systems: list[str]) -> None:
    for hypotheses in systems:
        _check_pairs(hypotheses, references)
    if len(sources) != len(references):
        raise UserError(
            f"cannot score by length: {len(sources)} sources but {len(references)} references"
        )


def _bucket_members(sources: list[str], edges: tuple[int, ...]) -> list[tuple[str, list[int]]]:
    """(label, indices of the sources in it) for every bucket that holds a sentence."""
    if not edges or edges[0] < 1 or any(b <= a for a, b in zip(edges[:-1], edges[1:], strict=True)):
        raise ValueError(f"edges must be positive and strictly increasing, got {edges}")
    labels = _bucket_labels(edges)
    members: list[list[int]] = [[] for _ in labels]
    for i, source in enumerate(sources):
        n_words = len(source.split())
        bucket = next((b for b, edge in enumerate(edges) if n_words <= edge), len(edges))
        members[bucket].append(i)
    return [(label, idx) for label, idx in zip(labels, members, strict=True) if idx]


def bleu_gap_by_length(
    sources: list[str],
    hypotheses: list[str],
    baseline: list[str],
    references: list[str],
    edges: tuple[int, ...] = (5, 10, 15, 20, 30),
    tokenize: str | None = None,
    documents: list[str] | None = None,
    resamples: int = 1000,
    seed: int = 0,
) -> dict[str, list[dict]]:
    """Per bucket of source length, corpus BLEU of `hypotheses` minus that of `baseline` on the
    same sentences, with a 95% paired bootstrap interval (Koehn 2004), and the interval of the
    change of that gap from each bucket to the next.

    Each resample draws, within each bucket, that bucket's sampling units with replacement, as
    many as it holds: its pairs' families when `documents` names them (a cluster bootstrap,
    since pairs of one family are alike and the docs corpus's split draws families; a family
    with pairs in two buckets is drawn in each apart), else its sentences. So every draw holds
    every bucket (drawn from the whole test set, a bucket of few units would be missing from
    some draws and score a gap of 0 there, pulling its interval toward 0). Both systems are
    scored on the same draw, from sacrebleu's sentence statistics (as its own paired test
    does). Whether the gap grows from one bucket to the next is read from the interval of the
    difference of the two gaps over the same draws (the buckets' draws independent, as the
    strata of a stratified bootstrap are); overlapping intervals of the two gaps do not answer
    it.

    Args:
        documents: each pair's sampling unit (the `document` column: the docs corpus's
            families), or None to draw sentences.

    Returns:
        `{"buckets": [{"bucket": "1-5", "n": 12, "gap": 3.1, "low": 1.0, "high": 5.2}, ...],
        "steps": [{"from": "1-5", "to": "6-10", "change": 0.4, "low": -1.2, "high": 2.0}, ...]}`,
        buckets in length order as in `bleu_by_length`, steps between neighbouring buckets.

    Raises:
        UserError, ValueError: as `bleu_by_length`; also when `baseline` or `documents` is not
            aligned.
    """
    _check_by_length(sources, references, hypotheses, baseline)
    _check_units(documents, len(sources))
    buckets = _bucket_members(sources, edges)
    bleu = _bleu_metric(tokenize)
    system = np.asarray(bleu._extract_corpus_statistics(hypotheses, [references]))
    base = np.asarray(bleu._extract_corpus_statistics(baseline, [references]))
    rng = np.random.default_rng(seed)
    draws = np.zeros((resamples, len(sources)))
    for _, idx in buckets:  # stratified: each bucket draws from its own units
        draws[:, idx] = _bootstrap_weights(
            len(idx), None if documents is None else [documents[i] for i in idx], resamples, rng)

    def gaps(weights: np.ndarray) -> np.ndarray:
        """(resamples, buckets) gaps under per-pair weights (resamples, pairs)."""
        return np.stack([
            _weighted_bleu(bleu, system[idx], weights[:, idx])
            - _weighted_bleu(bleu, base[idx], weights[:, idx])
            for _, idx in buckets], axis=1)

    point = gaps(np.ones((1, len(sources))))[0]
    drawn = gaps(draws)
    rows = []
    for b, (label, idx) in enumerate(buckets):
        low, high = np.percentile(drawn[:, b], [2.5, 97.5])
        rows.append({"bucket": label, "n": len(idx), "gap": float(point[b]),
                     "low": float(low), "high": float(high)})
    steps = []
    for b in range(len(buckets) - 1):
        low, high = np.percentile(drawn[:, b + 1] - drawn[:, b], [2.5, 97.5])
        steps.append({"from": buckets[b][0], "to": buckets[b + 1][0],
                      "change": float(point[b + 1] - point[b]),
                      "low": float(low), "high": float(high)})
    return {"buckets": rows, "steps": steps}


def bleu_difference(
    hypotheses: list[str],
    other: list[str],
    references: list[str],
    tokenize: str | None = None,
    documents: list[str] | None = None,
    resamples: int = 1000,
    seed: int = 0,
) -> dict[str, float]:
    """Corpus BLEU of `hypotheses` minus that of `other`, with the 95% paired bootstrap interval
    over the units `bleu_gap_by_length` draws (the families `documents` names, else
    sentences), drawn from the whole test set.

    Returns:
        `{"difference": d, "low": l, "high": h}`.
    """
    _check_pairs(hypotheses, references)
    _check_pairs(other, references)
    bleu = _bleu_metric(tokenize)
    a = np.asarray(bleu._extract_corpus_statistics(hypotheses, [references]))
    b = np.asarray(bleu._extract_corpus_statistics(other, [references]))
    _check_units(documents, len(references))
    draws = _bootstrap_weights(len(references), documents, resamples,
                               np.random.default_rng(seed))
    drawn = _weighted_bleu(bleu, a, draws) - _weighted_bleu(bleu, b, draws)
    ones = np.ones((1, len(references)))
    low, high = np.percentile(drawn, [2.5, 97.5])
    return {"difference": float((_weighted_bleu(bleu, a, ones) - _weighted_bleu(bleu, b, ones))[0]),
            "low": float(low), "high": float(high)}


def _check_units(documents: list[str] | None, n: int) -> None:
    if documents is not None and len(documents) != n:
        raise UserError(f"cannot resample by family: {len(documents)} families for {n} pairs")


def _bootstrap_weights(
    n: int, documents: list[str] | None, resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """(resamples, n) how often each of n pairs is drawn when its units (the families
    `documents` names, or the pairs themselves) are drawn with replacement, as many units as
    there are."""
    names = documents if documents is not None else range(n)
    unit_of = {name: u for u, name in enumerate(dict.fromkeys(names))}
    units = np.asarray([unit_of[name] for name in names])
    drawn = rng.integers(0, len(unit_of), size=(resamples, len(unit_of)))
    counts = np.stack([np.bincount(row, minlength=len(unit_of)) for row in drawn])
    return counts[:, units].astype(np.float64)


def _weighted_bleu(metric: BLEU, stats: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """BLEU of each row of `weights` (resamples, pairs) over the sentence statistics `stats`."""
    totals = weights @ stats
    return np.asarray([metric._compute_score_from_stats(row.tolist()).score for row in totals])
