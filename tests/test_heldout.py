"""Held-out hygiene: the twin rules (seq2seq.data.leakage) against an exact pass, the families
of the documentation corpus kept on one side of the split, the removal of held-out twins, the
leakage report, and the document (cluster) bootstrap of the length study."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from seq2seq.config import register_configs
from seq2seq.data.docs.filters import (
    AGGREGATOR_LINKS,
    document_families,
    name_family,
    remove_train_twins,
    split_of_document,
)
from seq2seq.data.docs.segments import Segment
from seq2seq.data.leakage import (
    TwinIndex,
    format_report,
    leakage_report,
    normalise,
    similarity,
    similarity_form,
)
from seq2seq.evaluation.metrics import bleu_difference, bleu_gap_by_length
from seq2seq.prepare import statistics
from tests.tiny import CONFIG_DIR, corpus_overrides


def lcs_ratio(a: str, b: str) -> float:
    """2 * LCS / (len(a) + len(b)) by dynamic programming: the exact pass."""
    if not a and not b:
        return 1.0
    previous = [0] * (len(b) + 1)
    for ca in a:
        current = [0]
        for j, cb in enumerate(b):
            current.append(previous[j] + 1 if ca == cb else max(previous[j + 1], current[j]))
        previous = current
    return 2 * previous[-1] / (len(a) + len(b))


@pytest.mark.slow  # over 10 s: the second tier
def test_near_search_finds_exactly_what_an_exhaustive_pass_finds() -> None:
    rng = random.Random(0)
    words = "Zelle Tabelle Seite Absatz Formel Wert Spalte Zeile Datei Öffnen Bild".split()

    def sentence() -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(1, 9)))

    def edited(text: str) -> str:  # a few characters changed, inserted or dropped
        chars = list(text)
        for _ in range(rng.randint(0, 4)):
            i = rng.randrange(len(chars) + 1)
            op = rng.choice("sid")
            if op == "i" or not chars:
                chars.insert(i, rng.choice("aeßü:."))
            elif op == "d":
                del chars[min(i, len(chars) - 1)]
            else:
                chars[min(i, len(chars) - 1)] = rng.choice("xyzä")
        return "".join(chars)

    train = [sentence() for _ in range(300)]
    queries = [edited(rng.choice(train)) for _ in range(150)] + [sentence() for _ in range(50)]
    index = TwinIndex(train)
    forms = [similarity_form(t) for t in train]
    found = 0
    for query in queries:
        best = max(lcs_ratio(similarity_form(query), f) for f in forms)
        twin = index.near_twin(query)
        assert (twin is not None) == (best >= 0.9 - 1e-12), (query, best)
        if twin is not None:
            found += 1
            assert lcs_ratio(similarity_form(query), twin) >= 0.9 - 1e-12
    assert 20 < found < len(queries)  # the sample holds both kinds
    assert similarity("URL der Präsentation:", "URL der Präsentation") >= 0.9


def test_the_three_rules_and_their_order() -> None:
    index = TwinIndex(["Update links when loading", "Characters per standardized page:"])
    assert index.rule("Update links when loading") == "exact"
    assert normalise("Update Links, when Loading 2!") == "updatelinkswhenloading"
    assert index.rule("Update Links when Loading") == "normalised"
    assert index.rule("Characters per standardised page") == "near"
    assert index.rule("Characters per page") is None
    assert index.rule("") is None and index.rule("42") is None  # nothing left to compare


def test_a_normalised_and_a_near_twin_leave_the_held_out_splits() -> None:
    splits = {
        "train": [Segment("Links beim Laden aktualisieren", "Update links when loading", "h/a"),
                  Segment("Zeichen pro Normseite:", "Characters per standardized page:", "l/b")],
        "validation": [Segment("Links beim Laden Aktualisieren.", "Update Links when Loading",
                               "h/c"),
                       Segment("Eine ganz andere Zeile hier.", "Another line entirely.", "h/c")],
        "test": [Segment("Zeichen je Normseite", "Characters per standardised page", "l/d"),
                 Segment("Fußnoten am Seitenende.", "Footnotes at the end of a page.", "l/d")],
    }
    removed = remove_train_twins(splits)
    assert removed["validation"] == {"exact": {}, "normalised": {"h": 1}, "near": {}}
    assert removed["test"] == {"exact": {}, "normalised": {}, "near": {"l": 1}}
    assert [s.en for s in splits["validation"]] == ["Another line entirely."]
    assert [s.en for s in splits["test"]] == ["Footnotes at the end of a page."]
    report = leakage_report({name: ([s.translation for s in rows], [s.en for s in rows])
                             for name, rows in splits.items()})
    assert report["test"] == {"pairs": 1, "exact": 0, "normalised": 0, "near": 0, "loose": 0}


def test_the_loose_diagnostic_finds_what_the_removal_lets_through() -> None:
    """A held-out pair at similarity 0.85 to a train side passes the removal (0.9) and is
    counted by the diagnostic (0.8); the report says both in one line."""
    train = ("Speichern Sie das Dokument jetzt.", "Save the document now, please.")
    near = "Save the document now, pleas."  # above 0.9: removed by the near rule
    loose = "Save this document now, thanks."
    assert 0.8 <= similarity(loose, train[1]) < 0.9 < similarity(near, train[1])
    splits = {"train": ([train[0]], [train[1]]),
              "validation": (["Ganz anders.", "Etwas ganz Neues hier."], [loose, "New text."]),
              "test": (["Noch etwas."], [near])}
    report = leakage_report(splits)
    assert report["validation"] == {"pairs": 2, "exact": 0, "normalised": 0, "near": 0,
                                    "loose": 1}
    assert report["test"] == {"pairs": 1, "exact": 0, "normalised": 0, "near": 1, "loose": 1}
    line = format_report(report)[0]
    assert line.endswith("diagnostic, similarity >= 0.8 (nothing removed): 1 (50.0%)")


def test_an_l10n_family_goes_to_one_split() -> None:
    numbering = [f"libreoffice-l10n/sw/STR_POOLNUMRULE_NUM{n}" for n in range(1, 6)]
    opcodes = ["libreoffice-l10n/sc/SC_OPCODE_COLUMNS", "libreoffice-l10n/sc/SC_OPCODE_ROWS"]
    assert {name_family(d) for d in numbering} == {"libreoffice-l10n/sw/STR_POOLNUMRULE"}
    assert {name_family(d) for d in opcodes} == {"libreoffice-l10n/sc/SC_OPCODE"}
    assert name_family("libreoffice-l10n/cui/optfltrpage") == "libreoffice-l10n/cui/optfltrpage"
    segments = [Segment(f"Nummerierung {n} Ende", f"Numbering {n} End", d)
                for n, d in enumerate(numbering, start=1)]
    families, aggregators = document_families(segments)
    assert len(set(families.values())) == 1 and not aggregators
    assert len({split_of_document(families[d]) for d in numbering}) == 1


def test_a_man_page_family_goes_to_one_split_and_an_aggregator_to_train() -> None:
    # a name family: sane-teco1/2/3 in any section
    teco = [f"program-manpages/man5/sane-teco{n}.5" for n in (1, 2, 3)]
    assert {name_family(d) for d in teco} == {"program-manpages/sane-teco"}
    # a content family: chmod.2 and chown.2 share a paragraph (equal once normalised)
    shared = ("EACCES Suchberechtigung für einen Teil des Pfades wurde verweigert.",
              "EACCES Search permission is denied on a component of the path prefix.")
    segments = [
        Segment(*shared, "manpages/man2/chmod.2"),
        Segment("chmod ändert die Rechte.", "chmod changes the mode.", "manpages/man2/chmod.2"),
        Segment(shared[0], shared[1].replace("prefix.", "prefix"), "manpages/man2/chown.2"),
        Segment("chown ändert den Besitzer.", "chown changes the owner.",
                "manpages/man2/chown.2"),
    ]
    # an index page repeating the NAME lines of more pages than AGGREGATOR_LINKS
    units = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike".split()
    assert len(units) > AGGREGATOR_LINKS + 1
    pages = [f"manpages/man5/{unit}.5" for unit in units]
    for unit, page in zip(units, pages, strict=True):
        name = (f"{unit} – Konfiguration der Einheit", f"{unit} – unit configuration")
        segments += [Segment(*name, page), Segment(*name, "manpages/man7/units.index.7")]
    families, aggregators = document_families(segments)
    assert families["manpages/man2/chmod.2"] == families["manpages/man2/chown.2"]
    assert families["manpages/man7/units.index.7"] in aggregators
    # the aggregator joins nobody: each unit page keeps a family of its own
    assert len({families[p] for p in pages}) == len(pages)


def test_the_document_bootstrap_is_wider_when_pairs_inside_a_document_are_alike() -> None:
    # 10 documents of 8 identical pairs each: half the documents right, half wrong
    refs, system, baseline, documents, sources = [], [], [], [], []
    for d in range(10):
        for _ in range(8):
            ref = f"the cat of document {d} sat on the mat"
            refs.append(ref)
            system.append(ref if d % 2 else "a dog ran away")
            baseline.append("a dog ran away" if d % 2 else ref)
            documents.append(f"doc{d}")
            sources.append("w " * (3 if d < 5 else 12))
    by_sentence = bleu_gap_by_length(sources, system, baseline, refs, edges=(5,),
                                     resamples=300)
    by_document = bleu_gap_by_length(sources, system, baseline, refs, edges=(5,),
                                     documents=documents, resamples=300)
    for s, d in zip(by_sentence["buckets"], by_document["buckets"], strict=True):
        assert s["gap"] == d["gap"]
        assert d["high"] - d["low"] > 1.5 * (s["high"] - s["low"])
    step_s, step_d = by_sentence["steps"][0], by_document["steps"][0]
    assert step_s["from"] == "1-5" and step_s["to"] == "6+"
    assert step_d["change"] == pytest.approx(
        by_document["buckets"][1]["gap"] - by_document["buckets"][0]["gap"])
    assert step_d["high"] - step_d["low"] > step_s["high"] - step_s["low"]
    whole_s = bleu_difference(system, baseline, refs, resamples=300)
    whole_d = bleu_difference(system, baseline, refs, documents=documents, resamples=300)
    assert whole_s["difference"] == whole_d["difference"]
    assert whole_d["high"] - whole_d["low"] > 1.5 * (whole_s["high"] - whole_s["low"])


def test_prepare_reports_the_twins_of_any_corpus(tmp_path: Path, capsys) -> None:
    register_configs()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("prepare", overrides=[*corpus_overrides(tmp_path / "data"),
                                            "trainer.threads=1"])
    stats = statistics(cfg)
    corpus = {split: list(zip(*(Path(cfg.data[f"{side}_files"][split]).read_text(
        encoding="utf-8").splitlines() for side in ("src", "tgt")), strict=True))
        for split in ("train", "validation", "test")}
    train_src = {src for src, _ in corpus["train"]}
    train_tgt = {tgt for _, tgt in corpus["train"]}
    for split in ("validation", "test"):
        exact = sum(src in train_src or tgt in train_tgt for src, tgt in corpus[split])
        report = stats["leakage"][split]
        assert report["pairs"] == len(corpus[split]) and report["exact"] == exact > 0


def test_package_descriptions_that_share_a_paragraph_are_one_family() -> None:
    """libfoo1 and libfoo-dev repeat libfoo's paragraph: one family, so one split; a line
    every -dev package repeats is boilerplate and joins nobody."""
    shared = Segment("libfoo는 foo 파일을 읽는 라이브러리입니다.",
                     "libfoo is a library that reads foo files.", "")
    boiler = Segment("이 패키지에는 개발 파일이 있습니다.",
                     "This package contains the development files.", "")
    segments = [shared._replace(document="package-descriptions/libfoo1"),
                shared._replace(document="package-descriptions/libfoo-dev"),
                boiler._replace(document="package-descriptions/libfoo-dev")]
    segments += [boiler._replace(document=f"package-descriptions/lib{n}-dev")
                 for n in "abcdef"]
    families, _ = document_families(segments)
    assert families["package-descriptions/libfoo1"] == families["package-descriptions/libfoo-dev"]
    assert len({families[f"package-descriptions/lib{n}-dev"] for n in "abcdef"}) == 6
