"""Hypothesis files keep one hypothesis a line whatever characters the hypotheses hold."""

from __future__ import annotations

from pathlib import Path

from seq2seq.evaluation.hypotheses import one_line, read_hypotheses, write_hypotheses

BREAKS = ["\n", "\r", "\r\n", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


def test_line_breaking_characters_round_trip_as_one_line_per_hypothesis(tmp_path: Path) -> None:
    hypotheses = [f"vor{b}nach" for b in BREAKS] + ["", "das Ende"]
    path = tmp_path / "test.hyp"
    write_hypotheses(path, hypotheses)
    read = read_hypotheses(path)
    assert read == [f"vor{' ' * len(b)}nach" for b in BREAKS] + ["", "das Ende"]
    assert len(path.read_text(encoding="utf-8").splitlines()) == len(hypotheses)


def test_an_empty_file_holds_no_hypotheses(tmp_path: Path) -> None:
    path = tmp_path / "test.hyp"
    write_hypotheses(path, [])
    assert read_hypotheses(path) == []


def test_text_without_line_breaks_is_unchanged() -> None:
    assert one_line("Jane ging in den Laden. 東京 🙂") == "Jane ging in den Laden. 東京 🙂"
