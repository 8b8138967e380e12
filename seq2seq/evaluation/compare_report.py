"""The report of `python -m seq2seq.compare`: compare.md and compare.csv from the variants'
studies (seq2seq.compare.study_variant), and its plots."""

from __future__ import annotations

import csv
import json
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from seq2seq.visualization import bleu_bars, bleu_curves, figure_to_png, length_plot, side_by_side

COLUMNS = [  # peak_memory_mib: the training process's on the CPU, before / after its final test
    "variant", "parameters", "steps", "train_time_s", "train_tokens_per_s",
    "peak_memory_mib_training", "peak_memory_mib", "valid_bleu",
    "test_bleu_greedy", "test_bleu_beam5", "test_chrf_beam5", "aer", "aer_diagonal",
    "aer_shifted", "sure_accuracy", "copy_accuracy", "aer_best_head", "aer_shift_att",
    "probe_translation", "probe_weights",
]


def fmt(value: Any) -> str:
    if isinstance(value, float | int):
        return f"{value:,.2f}" if isinstance(value, float) else f"{value:,}"
    return "–" if value is None else str(value)


def against_baseline(buckets: dict[str, list[dict]], baseline: str = "vanilla",
                     intervals: dict[str, dict[str, list[dict]]] | None = None) -> list[str]:
    """The length study's gap rows: each variant's BLEU per bucket minus the baseline's, in BLEU
    points, then as a ratio (markdown rows in the order of `buckets`; none without the baseline),
    then the 95% interval of the gap in points where `intervals` (of `gap_intervals`) has it,
    then the change of the gap from the bucket before, with its interval.

    Both matter: a baseline near zero BLEU on long sentences has little left to lose there, so
    the difference in points can shrink while the ratio grows. The interval of a change says
    whether the gap moved from one bucket to the next by more than the bootstrap's draw.
    """
    if baseline not in buckets:
        return []
    names = [b["bucket"] for b in buckets[baseline]]
    base = {b["bucket"]: b["bleu"] for b in buckets[baseline]}
    others = {v: {b["bucket"]: b["bleu"] for b in bs} for v, bs in buckets.items() if v != baseline}

    def row(label: str, cells: list[str]) -> str:
        return f"| {label} | " + " | ".join(cells) + " |"

    points = [row(f"{v} − {baseline} (BLEU points)", [
        fmt(bleu[n] - base[n]) if n in bleu else "–" for n in names]) for v, bleu in others.items()]
    ratios = [row(f"{v} / {baseline}", [
        f"{bleu[n] / base[n]:.1f}×" if n in bleu and base[n] > 0 else "–" for n in names])
        for v, bleu in others.items()]
    spans, steps = [], []
    for v, study in (intervals or {}).items():
        by_name = {r["bucket"]: r for r in study["buckets"]}
        spans.append(row(f"{v} − {baseline}, 95% interval", [
            f"{by_name[n]['low']:.2f} to {by_name[n]['high']:.2f}" if n in by_name else "–"
            for n in names]))
        by_step = {r["to"]: r for r in study["steps"]}
        steps.append(row(f"{v}: change of the gap from the bucket before, 95% interval", [
            f"{fmt(by_step[n]['change'])} ({by_step[n]['low']:.2f} to {by_step[n]['high']:.2f})"
            if n in by_step else "–" for n in names]))
    return points + ratios + spans + steps


def domain_rows(by_domain: dict[str, list[dict]]) -> list[str]:
    """The section of test BLEU / chrF (beam 5) per domain (`metrics.scores_by_domain`), a row
    a variant; none where the test set has one domain."""
    if not any(by_domain.values()):
        return []
    domains = [row["domain"] for row in max(by_domain.values(), key=len)]
    counts = {row["domain"]: row["n"] for row in max(by_domain.values(), key=len)}
    lines = ["", "## Test BLEU / chrF (beam 5) by domain", "",
             "| variant | " + " | ".join(domains) + " |", "|---|" + "---|" * len(domains)]
    for variant, rows in by_domain.items():
        got = {row["domain"]: row for row in rows}
        lines.append(f"| {variant} | " + " | ".join(
            f"{got[d]['bleu']:.2f} / {got[d]['chrf']:.1f}" if d in got else "–"
            for d in domains) + " |")
    lines.append("| sentences | " + " | ".join(f"{counts[d]:,}" for d in domains) + " |")
    return lines


def difference_rows(differences: list[dict[str, Any]]) -> list[str]:
    """Markdown rows of `pairwise_differences`."""
    if not differences:
        return []
    return ["| a − b | test BLEU difference | 95% interval |", "|---|---|---|",
            *(f"| {d['a']} − {d['b']} | {fmt(d['difference'])} | {d['low']:.2f} to "
              f"{d['high']:.2f} |" for d in differences)]


def write_report(out_dir: Path, studies: dict[str, dict[str, Any]], command: str,
                 intervals: dict[str, dict[str, list[dict]]] | None = None,
                 differences: list[dict[str, Any]] | None = None) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = [s["row"] for s in studies.values()]
    with open(out_dir / "compare.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    any_study = next(iter(studies.values()))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip() or "unknown"
    lines = [
        "# Variant comparison",
        "",
        f"{datetime.now():%Y-%m-%d %H:%M}, commit {commit}, {torch.get_num_threads()} CPU "
        f"threads, `{command}`.",
        f"Test set: {any_study['test_set']}. BLEU signature: `{any_study['signature']}`.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
        *("| " + " | ".join(fmt(r[c]) for c in COLUMNS) + " |" for r in rows),
        "",
        "## Test BLEU (beam 5) by source length (words)",
        "",
    ]
    bucket_names = [b["bucket"] for b in max((s["buckets"] for s in studies.values()), key=len)]
    lines += ["| variant | " + " | ".join(bucket_names) + " |",
              "|---|" + "---|" * len(bucket_names)]
    for variant, s in studies.items():
        by_name = {b["bucket"]: b for b in s["buckets"]}
        lines.append(f"| {variant} | " + " | ".join(
            fmt(by_name[n]["bleu"]) if n in by_name else "–" for n in bucket_names) + " |")
    counts = {b["bucket"]: b["n"] for b in any_study["buckets"]}
    lines.append("| sentences | " + " | ".join(fmt(counts.get(n)) for n in bucket_names) + " |")
    lines += against_baseline({v: s["buckets"] for v, s in studies.items()},
                              intervals=intervals)
    lines += [f"| {v}: output/reference length / 4-gram precision | " + " | ".join(  # cut short,
        f"{got[n]['length_ratio']:.2f} / {got[n]['precisions'][3]:.1f}" if n in got else "–"
        for n in bucket_names) + " |"  # or wrong words at the right length
        for v, got in ((v, {b["bucket"]: b for b in s["buckets"]}) for v, s in studies.items())]
    lines += domain_rows({v: s.get("by_domain") or [] for v, s in studies.items()})
    unit = "sentences" if any_study["documents"] is None else "families of documents"
    lines += ["", "Intervals: 95% paired bootstrap, 1,000 draws with replacement of the test "
              f"set's {unit}, within each length bucket for the length study (every draw holds "
              "every bucket), over the whole test set for the differences.", "",
              "## Test BLEU difference between variants", "", *difference_rows(differences or [])]
    lines += ["", "AER: attention teacher-forced on the test references against eflomal word "
              "alignments (lower is better); aer_diagonal and aer_shifted score the diagonal "
              "and the diagonal shifted by one word on the same words; aer_shift_att: Shift-Att, "
              "the attention of the step that reads each word (the step after the one that "
              "predicts it), for the Transformer at the layer chosen on validation; "
              "probe_weights: the first probe teacher-forced on its reference."]
    lines += [f"\n{variant} trained on eflomal's links (guided alignment): its aer is its "
              "agreement with its teacher, not alignment quality."
              for variant, s in studies.items() if s.get("aer_measures", "").startswith("agree")]
    for variant, s in studies.items():
        if "best_head" in s["alignment"]:
            best, layers = s["alignment"]["best_head"], s["alignment"]["layers"]
            lines += ["", f"{variant}: best cross-attention head (chosen on validation) layer "
                      f"{best['layer']} head {best['head']}: AER {fmt(best['aer'])}; per-layer "
                      "mean over heads: " + ", ".join(
                          f"layer {i} {fmt(row['aer'])}" for i, row in enumerate(layers)) + "."]
        if (s["alignment"].get("shift_att") or {}).get("layers"):
            shift = s["alignment"]["shift_att"]
            lines += ["", f"{variant}: Shift-Att (layer chosen on validation) layer "
                      f"{shift['layer']}: AER {fmt(shift['aer'])}; per layer: " + ", ".join(
                          f"layer {i} {fmt(row['aer'])}"
                          for i, row in enumerate(shift["layers"])) + "."]
    probes = max((len(s.get("probes") or [s["probe"]]) for s in studies.values()), default=1)
    lines += ["", "Plots: `compare_bleu.png`, `compare_curves.png`, `compare_length.png`, "
              + ", ".join(f"`{probe_figure_name(i)}`" for i in range(probes))
              + " (each probe's attention; their figures in `probes.json`).", ""]
    (out_dir / "compare.md").write_text("\n".join(lines), encoding="utf-8")

    figure_to_png(bleu_bars({v: s["row"]["test_bleu_beam5"] for v, s in studies.items()},
                            "test BLEU, beam 5"), out_dir / "compare_bleu.png")
    figure_to_png(bleu_curves({v: [(h["time"], h["valid_bleu"]) for h in s["history"]]
                               for v, s in studies.items()}), out_dir / "compare_curves.png")
    figure_to_png(length_plot({v: s["buckets"] for v, s in studies.items()}),
                  out_dir / "compare_length.png")
    write_probes(out_dir, studies)


def probe_figure_name(index: int) -> str:
    """probe_attention.png for the first probe, probe_attention_2.png, ... for the others."""
    return "probe_attention.png" if index == 0 else f"probe_attention_{index + 1}.png"


def write_probes(out_dir: Path, studies: dict[str, dict[str, Any]]) -> None:
    """Each probe's attention under every variant, a figure per probe, and their figures in
    probes.json: translation, pieces, the attention rows (one per written piece and EOS) and,
    for the first probe, its teacher-forced word weights."""
    count = max((len(s.get("probes") or [s["probe"]]) for s in studies.values()), default=0)
    record = []
    for index in range(count):
        of = {v: (s.get("probes") or [s["probe"]])[index] for v, s in studies.items()
              if index < len(s.get("probes") or [s["probe"]])}
        of = {v: probe for v, probe in of.items() if probe.get("source") is not None}
        maps = {v: (p["attention"], p["src_pieces"], p["tgt_pieces"]) for v, p in of.items()
                if p["attention"] is not None}  # vanilla reads one fixed context: no map
        if not maps:
            continue
        source = next(iter(of.values()))["source"]
        figure_to_png(side_by_side(maps, title=source), out_dir / probe_figure_name(index))
        record.append({"source": source, "figure": probe_figure_name(index), "variants": {
            v: {"translation": p["translation"], "src_pieces": p["src_pieces"],
                "tgt_pieces": p["tgt_pieces"],
                "attention": None if p["attention"] is None else
                [[round(float(x), 4) for x in row] for row in p["attention"]],
                **({"teacher_forced": p["teacher_forced"]} if "teacher_forced" in p else {})}
            for v, p in of.items()}})
    if record:
        (out_dir / "probes.json").write_text(json.dumps(record, indent=1, ensure_ascii=False,
                                                        allow_nan=False), encoding="utf-8")
