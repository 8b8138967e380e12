"""`make compare` end to end on the tiny corpus: the report, the CSV and the plots."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from seq2seq.compare import gap_intervals, main, pairwise_differences, trained_runs
from seq2seq.errors import UserError
from seq2seq.evaluation.compare_report import COLUMNS, against_baseline, write_report
from seq2seq.evaluation.metrics import bleu_by_length, score
from tests.tiny import QUICK_TRAINER, corpus_overrides


@pytest.mark.slow
@pytest.mark.parametrize("jobs", [1, 2])
def test_compare_writes_the_report(tmp_path: Path, jobs: int) -> None:
    """jobs=2: both variants train at once, each in a process of its own."""
    out = tmp_path / "results"
    probes = ["Jane ging in den Laden.", "Der Laden ist klein."]
    common = [*corpus_overrides(tmp_path / "data"), f"data.probe=[{','.join(probes)}]",
              *QUICK_TRAINER, "trainer.max_steps=150", "trainer.eval_every=75",
              "trainer.lr=1e-2", "model.emb_dim=16", "model.hidden_size=32",
              "compare.variants=[vanilla,bahdanau]", "compare.max_time=600"]
    main([f"compare.jobs={jobs}", "trainer.threads=1", *common,
          f"compare.out_dir={out}", f"runs_root={tmp_path / 'runs'}"])
    rows = list(csv.DictReader(open(out / "compare.csv", encoding="utf-8")))
    assert [r["variant"] for r in rows] == ["vanilla", "bahdanau"]
    assert list(rows[0]) == COLUMNS
    assert all(int(r["steps"]) == 150 for r in rows)
    assert all(0 < int(r["peak_memory_mib_training"]) <= int(r["peak_memory_mib"]) for r in rows)
    assert rows[0]["aer"] == "" and rows[1]["aer"] != ""  # the vanilla model has no attention
    assert rows[0]["aer_diagonal"] == "" and float(rows[1]["aer_diagonal"]) >= 0
    assert rows[0]["aer_shift_att"] == "" and float(rows[1]["aer_shift_att"]) >= 0  # Shift-Att
    assert rows[1]["probe_weights"].startswith("Jane→Jane ")  # teacher-forced on the reference
    report = (out / "compare.md").read_text(encoding="utf-8")
    assert "| vanilla |" in report and "by source length" in report
    for name in ("compare_bleu.png", "compare_curves.png", "compare_length.png",
                 "probe_attention.png", "probe_attention_2.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    # every probe's figures in JSON beside its picture: the attention the picture draws
    record = json.loads((out / "probes.json").read_text(encoding="utf-8"))
    assert [(p["source"], p["figure"]) for p in record] == [
        (probes[0], "probe_attention.png"), (probes[1], "probe_attention_2.png")]
    for probe in record:
        assert set(probe["variants"]) == {"vanilla", "bahdanau"}
        assert probe["variants"]["vanilla"]["attention"] is None  # one fixed context
        assert isinstance(probe["variants"]["vanilla"]["translation"], str)
        for variant, seen in probe["variants"].items():
            if seen["attention"] is None:
                continue
            height, width = len(seen["tgt_pieces"]), len(seen["src_pieces"])
            assert len(seen["attention"]) == height, variant
            assert {len(r) for r in seen["attention"]} == {width}, variant
            assert all(sum(r) == pytest.approx(1, abs=2e-3) for r in seen["attention"])
    forced = record[0]["variants"]["bahdanau"]["teacher_forced"]
    assert forced["reference"] == "Jane went to the store."
    assert rows_weights(rows[1]["probe_weights"]) == {
        (w["target"], w["source"]): round(w["weight"], 2) for w in forced["weights"]}
    assert "teacher_forced" not in record[1]["variants"]["bahdanau"]  # one reference only
    assert len(list((tmp_path / "runs" / "compare").glob("*/*/tensorboard"))) == 2
    # every variant trains in a process of its own, also one after another
    assert len(list((tmp_path / "runs" / "compare").glob("*/*/console.log"))) == 2
    # the length study's buckets are the corpus's (data.length_buckets: 10, 20, ... for files)
    assert "| variant | 1-10 |" in report
    # and per bucket the output's length against the reference's, and the 4-gram precision
    assert re.search(r"\| vanilla: output/reference length / 4-gram precision \| "
                     r"\d+\.\d\d / \d+\.\d \|", report)
    assert "| bahdanau − vanilla (BLEU points) |" in report and "| bahdanau / vanilla |" in report
    assert "| bahdanau − vanilla, 95% interval |" in report
    assert "| bahdanau: change of the gap from the bucket before, 95% interval |" in report
    assert "| vanilla − bahdanau |" in report  # the whole-test difference of every two variants
    whole = json.loads((out / "compare.json").read_text(encoding="utf-8"))
    studied = whole["variants"]
    assert whole["bootstrap_unit"] == "sentence"  # files name no documents
    gaps = {r["bucket"]: r for r in studied["bahdanau"]["gap_to_vanilla"]["buckets"]}
    assert "gap_to_vanilla" not in studied["vanilla"]
    for b, v in zip(studied["bahdanau"]["buckets"], studied["vanilla"]["buckets"], strict=True):
        gap = gaps[b["bucket"]]
        assert gap["gap"] == pytest.approx(b["bleu"] - v["bleu"])  # the table's buckets
        assert gap["low"] <= gap["gap"] <= gap["high"]
    [difference] = whole["differences"]
    assert (difference["a"], difference["b"]) == ("vanilla", "bahdanau")
    assert difference["difference"] == pytest.approx(
        studied["vanilla"]["row"]["test_bleu_beam5"]
        - studied["bahdanau"]["row"]["test_bleu_beam5"], abs=0.01)
    if jobs == 1:  # the report again from the finished runs: the same rows, nothing trained
        [root] = (tmp_path / "runs" / "compare").glob("*")
        again = tmp_path / "again"
        main([*common, f"compare.from_runs={root}", f"compare.out_dir={again}",
              f"runs_root={tmp_path / 'runs'}"])
        assert len(list((tmp_path / "runs" / "compare").glob("*"))) == 1
        assert list(csv.DictReader(open(again / "compare.csv", encoding="utf-8"))) == rows
        assert json.loads((again / "probes.json").read_text(encoding="utf-8")) == record


def rows_weights(text: str) -> dict[tuple[str, str], float]:
    """compare.csv's probe_weights, "Jane→Jane 0.93, store→Laden 0.41", as a dict."""
    pairs = [item.rsplit(" ", 1) for item in text.split(", ")]
    return {tuple(link.split("→")): float(weight) for link, weight in pairs}


def test_a_report_from_runs_that_did_not_finish_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "bahdanau").mkdir()
    (tmp_path / "bahdanau" / "metrics.json").write_text("{}")
    with pytest.raises(UserError, match=r"compare.from_runs=.*: no finished bahdanau, "
                                        r"transformer there \(metrics.json and "
                                        r"checkpoints/best.pt\)"):
        trained_runs(tmp_path, ["bahdanau", "transformer"])


@pytest.mark.slow
def test_one_after_another_each_variant_reports_its_own_peak_memory(tmp_path: Path) -> None:
    """jobs=1: a smaller model trained after a larger one reports its own, lower peak, not the
    larger one's (a process's peak resident memory never falls)."""
    out = tmp_path / "results"
    main(["compare.jobs=1", *corpus_overrides(tmp_path / "data"), *QUICK_TRAINER,
          "trainer.max_steps=4", "trainer.eval_every=4", "trainer.save_every=4",
          "compare.variants=[transformer,bahdanau]", f"compare.out_dir={out}",
          f"runs_root={tmp_path / 'runs'}"])
    rows = {r["variant"]: r for r in csv.DictReader(open(out / "compare.csv", encoding="utf-8"))}
    big, small = rows["transformer"], rows["bahdanau"]  # the models' default sizes
    assert int(big["parameters"]) > 1.5 * int(small["parameters"])
    for peak in ("peak_memory_mib_training", "peak_memory_mib"):
        assert 0 < int(small[peak]) < int(big[peak]), peak


def test_the_length_study_sets_each_variant_against_vanilla_in_points_and_as_a_ratio() -> None:
    def buckets(*bleu: float) -> list[dict]:
        return [{"bucket": name, "n": 100, "bleu": b}
                for name, b in zip(["1-10", "11-20", "21+"], bleu, strict=False)]

    rows = against_baseline({"vanilla": buckets(8.0, 4.0, 2.0),
                             "bahdanau": buckets(30.0, 28.0, 16.0),
                             "luong": buckets(20.0, 20.0)})  # luong has no long sentence
    assert rows == [
        "| bahdanau − vanilla (BLEU points) | 22.00 | 24.00 | 14.00 |",
        "| luong − vanilla (BLEU points) | 12.00 | 16.00 | – |",
        "| bahdanau / vanilla | 3.8× | 7.0× | 8.0× |",
        "| luong / vanilla | 2.5× | 5.0× | – |",
    ]
    assert against_baseline({"bahdanau": buckets(30.0)}) == []  # no baseline, no rows
    zero = against_baseline({"vanilla": buckets(0.0), "bahdanau": buckets(5.0)})
    assert zero == ["| bahdanau − vanilla (BLEU points) | 5.00 |", "| bahdanau / vanilla | – |"]
    spans = against_baseline({"vanilla": buckets(8.0, 4.0), "bahdanau": buckets(30.0, 28.0)},
                             intervals={"bahdanau": {
                                 "buckets": [{"bucket": "1-10", "n": 100, "gap": 22.0,
                                              "low": 19.5, "high": 24.25}],
                                 "steps": [{"from": "1-10", "to": "11-20", "change": 2.0,
                                            "low": -1.5, "high": 5.25}]}})
    assert spans[-2] == "| bahdanau − vanilla, 95% interval | 19.50 to 24.25 | – |"
    assert spans[-1] == ("| bahdanau: change of the gap from the bucket before, 95% interval "
                         "| – | 2.00 (-1.50 to 5.25) |")


def _study(variant: str, hypotheses: list[str], sources: list[str], references: list[str],
           families: list[str] | None) -> dict:
    """What `study_variant` gives `write_report` and `gap_intervals`, for hand-made outputs."""
    buckets = bleu_by_length(sources, hypotheses, references, edges=(5,))
    row = {**dict.fromkeys(COLUMNS), "variant": variant,
           "test_bleu_beam5": score(hypotheses, references).bleu}
    return {"row": row, "buckets": buckets, "probe": {}, "history": [],
            "signature": "nrefs:1|tok:13a", "test_set": "hand-made", "alignment": {},
            "scored": (sources, hypotheses, references), "documents": families,
            "edges": (5,), "tokenize": "13a"}


@pytest.mark.parametrize("by_family", [True, False])
def test_the_report_says_what_its_bootstrap_draws(tmp_path: Path, by_family: bool) -> None:
    """The docs corpus's `document` column holds each pair's family, the unit its split draws:
    the report says families are resampled (sentences without the column), and that the length
    study draws within each bucket."""
    references = [f"the cat number {i} sat on the mat" for i in range(12)]
    sources = ["w w w"] * 9 + ["w " * 12] * 3
    families = [f"manpages/page{i // 3}" for i in range(12)] if by_family else None
    studies = {"vanilla": _study("vanilla", ["a dog ran"] * 12, sources, references, families),
               "bahdanau": _study("bahdanau", references, sources, references, families)}
    write_report(tmp_path, studies, "python -m seq2seq.compare", gap_intervals(studies),
                 pairwise_differences(studies))
    report = (tmp_path / "compare.md").read_text(encoding="utf-8")
    [note] = [line for line in report.splitlines() if line.startswith("Intervals:")]
    unit = "families of documents" if by_family else "sentences"
    assert note == ("Intervals: 95% paired bootstrap, 1,000 draws with replacement of the test "
                    f"set's {unit}, within each length bucket for the length study (every draw "
                    "holds every bucket), over the whole test set for the differences.")
    assert "documents with" not in report
