"""The canonical Ding extraction (seq2seq/data/ding.py), rule by rule, on crafted lines."""

from __future__ import annotations

import gzip
import os
import random
import re
import sys
import unicodedata
from pathlib import Path

import pytest

from seq2seq.data import data_root
from seq2seq.data.ding import (
    build_ding,
    extract_sentence_pairs,
    load_ding,
    package_version,
    read_lines,
    split_of,
)
from seq2seq.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
# Set by `make test`, which builds the real corpus first: its counts must be checked, not skipped.
REQUIRE_CORPUS = "SEQ2SEQ_REQUIRE_CORPUS"

# Sentences of the real dictionary whose split is pinned (from trans-de-en 1.9-6).
TEST_DE = "Abgemacht ist abgemacht!"
VALID_DE = "Abdrücken verboten!"
TRAIN_DE = "AIDS bedeutet „erworbenes Immundefektsyndrom“."

LINES = [
    "# Version :: devel 2023-01-30",
    "# a header :: Ein Kopf. | Zwei Köpfe. :: A head. | Two heads.",
    f"{TEST_DE} :: A bargain’s a bargain!",
    f"{VALID_DE} :: No humping!",
    f'{TRAIN_DE} :: AIDS means "Acquired Immune Deficiency Syndrome".',
    "Haus {n} | Ich gehe nach Hause. | Wir bauen ein Haus. :: "
    "house | I am going home. | We build a house.",
    "Er kommt. | Sie geht. :: He comes. | She goes. | Extra.",
    "Wie geht es? :: How are you?",
    "Wie geht es? :: How are you?",
    "  Es regnet heute.   ::   It is raining today.  ",
    "Das ist gut. :: That is good :: really.",
    "keine Ahnung. :: No idea.",
    "Keine Ahnung :: No idea.",
    "Keine Ahnung. :: No idea",
    "Ja! :: Yes!",
    "Na (gut). :: Well (fine).",
    "Er sagt / sie sagt. :: He says / she says.",
    "Er lacht; sie weint. :: He laughs; she cries.",
    "Ein [Test]. :: A [test].",
    "Ein {Test}. :: A {test}.",
    "Ein <Test>. :: A <test>.",
    "Etwa ~ so. :: About ~ so.",
    "Kein Trenner hier.",
    "einen Ansturm auf die Läden machen :: to make a run on the shops",
    f"{TEST_DE.lower()} :: a deal is a deal",
    "Abgemacht ist abgemacht! | einander die Hand geben :: a deal is a deal | to shake hands",
]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_each_rule_of_the_extraction() -> None:
    pairs = extract_sentence_pairs(LINES)
    assert pairs == [
        (TRAIN_DE, 'AIDS means "Acquired Immune Deficiency Syndrome".'),
        (VALID_DE, "No humping!"),
        (TEST_DE, "A bargain’s a bargain!"),
        ("Das ist gut.", "That is good :: really."),  # split at the first " :: " only
        ("Es regnet heute.", "It is raining today."),  # whitespace stripped
        ("Ich gehe nach Hause.", "I am going home."),  # the n-th sub-entries pair up
        ("Wie geht es?", "How are you?"),  # deduplicated
        ("Wir bauen ein Haus.", "We build a house."),
    ]
    # Sorted, and nothing from headers, count mismatches ("Er kommt."), lowercase starts,
    # missing end punctuation, one-word sides ("Ja!"), forbidden characters, or lines
    # without " :: ".
    assert pairs == sorted(pairs)


def test_nfc_normalization() -> None:
    decomposed = unicodedata.normalize("NFD", "Äpfel schmecken süß. :: Apples taste sweet.")
    assert decomposed != unicodedata.normalize("NFC", decomposed)
    assert extract_sentence_pairs([decomposed]) == [("Äpfel schmecken süß.", "Apples taste sweet.")]


def test_md5_split_is_pinned() -> None:
    assert split_of(TEST_DE) == "test"
    assert split_of(VALID_DE) == "validation"
    assert split_of(TRAIN_DE) == "train"


def test_load_ding_splits_direction_and_determinism(tmp_path: Path, capsys) -> None:
    raw = write(tmp_path / "de-en", LINES)
    corpus = load_ding(
        raw_path=str(raw), root=tmp_path / "root", src_lang="de", tgt_lang="en", phrase_pairs=False
    )
    assert corpus["test"]["src"] == [TEST_DE]
    assert corpus["validation"]["src"] == [VALID_DE]
    assert len(corpus["train"]) == 6
    assert "built" in capsys.readouterr().out

    shuffled = LINES[2:]
    random.Random(0).shuffle(shuffled)
    raw2 = write(tmp_path / "shuffled", shuffled)
    again = load_ding(
        raw_path=str(raw2), root=tmp_path / "root", src_lang="de", tgt_lang="en", phrase_pairs=False
    )
    for split in ("train", "validation", "test"):
        assert again[split].to_dict() == corpus[split].to_dict()

    reverse = load_ding(
        raw_path=str(raw), root=tmp_path / "root", src_lang="en", tgt_lang="de", phrase_pairs=False
    )
    assert reverse["train"]["src"] == corpus["train"]["tgt"]
    assert reverse["train"]["tgt"] == corpus["train"]["src"]
    assert "reusing" in capsys.readouterr().out


def test_cache_is_keyed_by_content(tmp_path: Path) -> None:
    root = tmp_path / "root"
    raw = write(tmp_path / "de-en", LINES)
    build_ding(str(raw), root)
    build_ding(str(raw), root)
    assert len(list((root / "ding").iterdir())) == 1
    write(raw, [*LINES, "Neue Zeile hier. :: New line here."])
    corpus = build_ding(str(raw), root)
    assert len(list((root / "ding").iterdir())) == 2
    assert ("Neue Zeile hier.", "New line here.") in corpus.splits[split_of("Neue Zeile hier.")]


def test_gzip_input_gives_the_same_corpus(tmp_path: Path) -> None:
    plain = write(tmp_path / "de-en", LINES)
    packed = tmp_path / "de-en.txt.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert (
        build_ding(str(packed), tmp_path / "a").splits
        == build_ding(str(plain), tmp_path / "b").splits
    )


def test_phrase_pairs_reach_train_only(tmp_path: Path) -> None:
    raw = write(tmp_path / "de-en", LINES)
    kwargs = {"raw_path": str(raw), "root": tmp_path / "root", "src_lang": "de", "tgt_lang": "en"}
    plain = load_ding(**kwargs, phrase_pairs=False)
    with_phrases = load_ding(**kwargs, phrase_pairs=True)
    for split in ("validation", "test"):
        assert with_phrases[split].to_dict() == plain[split].to_dict()
    added = list(zip(with_phrases["train"]["src"], with_phrases["train"]["tgt"], strict=True))[
        len(plain["train"]) :
    ]
    assert ("einen Ansturm auf die Läden machen", "to make a run on the shops") in added
    assert ("einander die Hand geben", "to shake hands") in added
    assert (TEST_DE.lower(), "a deal is a deal") in added  # differs from the test German side
    # A phrase whose German side is a test sentence never enters train; nor do sentence pairs
    # twice, forbidden characters, or one-word sides.
    assert all(de != TEST_DE and de != VALID_DE for de, _ in added)
    assert not set(added) & set(zip(plain["train"]["src"], plain["train"]["tgt"], strict=True))
    assert all("{" not in de and len(de.split()) >= 2 for de, _ in added)


def test_undecodable_bytes_name_file_and_line(tmp_path: Path) -> None:
    raw = tmp_path / "de-en"
    raw.write_bytes(b"Gut. Sehr gut. :: Good. Very good.\nKaputt \xff hier. :: Broken here.\n")
    with pytest.raises(UserError, match=r"de-en line 2: invalid UTF-8"):
        read_lines(raw)


def test_bad_direction_and_missing_file(tmp_path: Path) -> None:
    raw = write(tmp_path / "de-en", LINES)
    with pytest.raises(UserError, match="de and en"):
        load_ding(
            raw_path=str(raw), root=tmp_path, src_lang="de", tgt_lang="fr", phrase_pairs=False
        )
    with pytest.raises(UserError, match="no such file"):
        load_ding(
            raw_path=str(tmp_path / "nope"),
            root=tmp_path,
            src_lang="de",
            tgt_lang="en",
            phrase_pairs=False,
        )


def test_package_version_from_an_unpacked_deb(tmp_path: Path) -> None:
    raw = tmp_path / "usr" / "share" / "trans" / "de-en"
    raw.parent.mkdir(parents=True)
    write(raw, LINES)
    assert package_version(raw) is None
    doc = tmp_path / "usr" / "share" / "doc" / "trans-de-en"
    doc.mkdir(parents=True)
    (doc / "changelog.Debian.gz").write_bytes(
        gzip.compress(b"trans-de-en (1.9-6) unstable; urgency=medium\n\n  * Upload.\n")
    )
    assert package_version(raw) == "1.9-6"


def _real_dictionary() -> Path | None:
    for path in (data_root(None) / "raw/usr/share/trans/de-en", Path("/usr/share/trans/de-en")):
        if path.is_file():
            return path
    return None


def test_real_dictionary_gives_the_canonical_counts() -> None:
    """Skipped without the dictionary, unless SEQ2SEQ_REQUIRE_CORPUS is set (`make test`)."""
    raw = _real_dictionary()
    if raw is None:
        reason = ("the Ding dictionary is not installed (/usr/share/trans/de-en) nor unpacked "
                  "under data/raw; `python -m seq2seq.prepare` or `apt-get download "
                  "trans-de-en` provides it")
        if os.environ.get(REQUIRE_CORPUS):
            pytest.fail(f"{reason} ({REQUIRE_CORPUS} is set: `make test` builds it first)")
        pytest.skip(reason)
    if package_version(raw) != "1.9-6":
        pytest.skip(f"{raw} is trans-de-en {package_version(raw)}; the counts are pinned for 1.9-6")
    pairs = extract_sentence_pairs(read_lines(raw))
    counts = {"train": 0, "validation": 0, "test": 0}
    for de, _ in pairs:
        counts[split_of(de)] += 1
    assert len(pairs) == 14_735
    assert counts == {"train": 13_229, "validation": 753, "test": 753}


def test_a_missing_dictionary_fails_where_the_corpus_is_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys.modules[__name__], "_real_dictionary", lambda: None)
    monkeypatch.setenv(REQUIRE_CORPUS, "1")
    with pytest.raises(pytest.fail.Exception, match="make test"):
        test_real_dictionary_gives_the_canonical_counts()
    monkeypatch.delenv(REQUIRE_CORPUS)
    with pytest.raises(pytest.skip.Exception):
        test_real_dictionary_gives_the_canonical_counts()


def make_rules() -> dict[str, tuple[list[str], list[str]]]:
    """The Makefile's rules: target -> (prerequisites, recipe lines)."""
    rules: dict[str, tuple[list[str], list[str]]] = {}
    recipe: list[str] = []
    for line in (ROOT / "Makefile").read_text(encoding="utf-8").splitlines():
        rule = re.match(r"([^\s#:=][^:=]*):(?!=)([^#]*)", line)
        if rule:
            recipe = []
            for target in rule.group(1).split():
                rules[target] = (rule.group(2).split(), recipe)
        elif line.startswith("\t"):
            recipe.append(line.strip())
    return rules


def test_make_test_builds_the_real_corpus_first() -> None:
    """`make test`, the README's command and CI's, runs the canonical counts test: it builds
    the real corpus before the suite and tells the test not to skip without it."""
    rules = make_rules()
    for target in ("test", "test-slow", "test-all"):
        prerequisites, recipe = rules[target]
        builds = [rules[p][1] for p in prerequisites
                  if any("-m seq2seq.prepare" in line for line in rules.get(p, ([], []))[1])]
        assert builds, f"make {target} does not build the corpus first"
        assert all("$(ARGS)" not in line for line in builds[0])  # ARGS are pytest's
        assert any(f"{REQUIRE_CORPUS}=1" in line and "pytest" in line for line in recipe)
    ci = ROOT / ".ci" / "run"
    commands = [line for line in ci.read_text().splitlines() if line.startswith("make ")]
    assert commands == ["make test", "make test-slow", "make lint"]  # both tiers
