"""A built corpus exported to a folder and read back where its sources are not
(seq2seq.data.export): the same splits, document ids, piece ids, tokenizer, word alignments and
fingerprint, with no tokenizer trained and no eflomal run; an export that is incomplete, corrupt
or of another corpus or direction refused in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from seq2seq.config import register_configs
from seq2seq.corpus import PreparedData, export_corpus, prepare_data
from seq2seq.data import data_root, load_corpus
from seq2seq.errors import UserError
from seq2seq.evaluate import evaluate
from seq2seq.training.loop import train
from tests.tiny import CONFIG_DIR, HAS_EFLOMAL, tiny_config

ROOT = Path(__file__).resolve().parents[1]
REQUIRE_CORPUS = "SEQ2SEQ_REQUIRE_CORPUS"  # set by `make test`, which builds the Ding corpus


def compose_data(*overrides: str) -> DictConfig:
    """The real configuration of `python -m seq2seq.prepare` with `overrides`."""
    register_configs()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose("prepare", overrides=list(overrides))


def cut_off_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No apt-get or dpkg to fetch or unpack a package with (an empty PATH), no eflomal to
    align with; returns the empty folder, a place where no raw source is."""
    empty = tmp_path / "empty"
    empty.mkdir(exist_ok=True)
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setitem(sys.modules, "eflomal", None)
    return empty


def assert_same(a: PreparedData, b: PreparedData) -> None:
    """Equal splits (texts, piece ids, document ids), tokenizer, links and fingerprint."""
    assert b.fingerprint == a.fingerprint
    assert b.tokenizer.identity == a.tokenizer.identity
    for side in ("src", "tgt"):
        pieces = getattr(a.tokenizer, f"{side}_pieces")
        size = getattr(a.tokenizer, f"{side}_vocab_size")
        assert getattr(b.tokenizer, f"{side}_pieces")(range(size)) == pieces(range(size))
    for name, split in a.splits.items():
        assert b.splits[name] == split  # texts, ids, documents, dropped and truncated counts
    assert a.links is not None and b.links == a.links


# -- the real Ding corpus: exported by the entry point, read back without its dictionary --

def ding_dictionary() -> Path | None:
    for path in (data_root(None) / "raw/usr/share/trans/de-en", Path("/usr/share/trans/de-en")):
        if path.is_file():
            return path
    return None


@pytest.fixture(scope="module")
def ding_export(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """`python -m seq2seq.prepare export=DIR` on the Ding corpus built under data/."""
    if ding_dictionary() is None:
        reason = "the Ding corpus is not built (python -m seq2seq.prepare builds it)"
        if os.environ.get(REQUIRE_CORPUS):
            pytest.fail(f"{reason} ({REQUIRE_CORPUS} is set: `make test` builds it first)")
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("ding") / "export"
    proc = subprocess.run([sys.executable, "-m", "seq2seq.prepare", "leakage=false",
                           f"export={out}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0 and not HAS_EFLOMAL:  # and no alignments cached under data/
        assert "no word alignments" in proc.stderr and "pip install eflomal" in proc.stderr
        pytest.skip("an export carries the reference word alignments, which the align extra "
                    "(eflomal) builds: without it the export is refused in one line, as here")
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout


def test_the_ding_corpus_reads_back_from_its_export_without_the_dictionary(
    ding_export: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    export, printed = ding_export
    base = compose_data()
    built = prepare_data(base.data, base.tokenizer, verbose=False)
    empty = cut_off_tools(tmp_path, monkeypatch)
    capsys.readouterr()
    cfg = compose_data(f"data.root={tmp_path / 'elsewhere'}", f"data.raw_path={empty}/de-en",
                       f"data.export_dir={export}")
    read = prepare_data(cfg.data, cfg.tokenizer)
    out = capsys.readouterr().out
    assert_same(built, read)
    assert f"fingerprints: corpus {built.fingerprint[:16]} " in printed
    assert json.loads((export / "manifest.json").read_text())["fingerprint"] == built.fingerprint
    assert "read from the export" in out and "reusing tokenizer" in out
    assert "reusing word alignments" in out and "training sentencepiece" not in out
    assert not (tmp_path / "elsewhere" / "ding").exists()  # the dictionary was never read
    size = sum(path.stat().st_size for path in export.rglob("*") if path.is_file())
    assert size < 2_000_000, size  # 14,735 pairs, one tokenizer and their links: xz


@pytest.mark.parametrize(("override", "named"), [
    ("data=ding_en_de", "data.src_lang=en (the export's de)"),
    ("data.phrase_pairs=true", "data.phrase_pairs=True (the export's False)"),
])
def test_an_export_of_another_direction_or_pair_set_is_refused(
    ding_export: tuple[Path, str], tmp_path: Path, override: str, named: str,
) -> None:
    cfg = compose_data(override, f"data.root={tmp_path}", f"data.export_dir={ding_export[0]}")
    with pytest.raises(UserError, match="an export of ding_de_en") as err:
        load_corpus(cfg.data)
    assert named in str(err.value) and "\n" not in str(err.value)


def test_the_refusal_is_one_line_from_the_entry_point(ding_export: tuple[Path, str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "seq2seq.prepare", "data=ding_en_de",
                           f"data.export_dir={ding_export[0]}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr


# -- the tiny corpus: every entry point of a run, and the broken exports --

@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # an export carries the reference links, which eflomal writes when the corpus is built
    pytest.importorskip("eflomal", reason="needs the align extra (eflomal) to build the links")
    tmp = tmp_path_factory.mktemp("tiny")
    cfg = tiny_config(tmp, data_root=tmp / "data")
    prepare_data(cfg.data, cfg.tokenizer, verbose=False)
    export_corpus(cfg.data, tmp / "export")
    return tmp / "export"


def read_tiny(tmp_path: Path, export: Path, *overrides: str) -> DictConfig:
    """The tiny config reading `export` in a fresh data root, the source files deleted."""
    cfg = tiny_config(tmp_path, f"data.export_dir={export}", *overrides,
                      data_root=tmp_path / "fresh")
    shutil.rmtree(tmp_path / "fresh" / "corpus")  # the text files data=files would read
    return cfg


def test_training_and_evaluation_read_the_export(
    tiny_export: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = read_tiny(tmp_path, tiny_export, "trainer.max_steps=10")
    monkeypatch.setitem(sys.modules, "eflomal", None)  # the links come from the export
    trained = train(cfg)["test"]
    assert trained["alignment"] is not None  # the AER, on the export's links
    scored = evaluate(tmp_path / "run/checkpoints/best.pt", beam_size=trained["beam_size"],
                      device="cpu")
    assert scored["bleu"] == trained["bleu"]
    assert scored["alignment"]["aer"] == pytest.approx(trained["alignment"]["aer"])


def broken(export: Path, tmp_path: Path, damage: str) -> Path:
    """A copy of `export` with one kind of damage."""
    copy = tmp_path / "broken"
    shutil.copytree(export, copy)
    links = next(copy.glob("alignments/*"))
    if damage == "missing file":
        (links / "test.sure.xz").unlink()
    elif damage == "changed byte":
        data = bytearray((copy / "corpus.json.xz").read_bytes())
        data[len(data) // 2] ^= 1
        (copy / "corpus.json.xz").write_bytes(bytes(data))
    elif damage == "no folder":
        shutil.rmtree(copy)
    elif damage == "no manifest":
        (copy / "manifest.json").unlink()
    elif damage == "manifest without links":
        manifest = json.loads((copy / "manifest.json").read_text())
        manifest["files"] = {k: v for k, v in manifest["files"].items()
                             if not k.startswith("alignments/")}
        (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


@pytest.mark.parametrize(("damage", "message"), [
    ("missing file", "incomplete corpus export: alignments/.*/test.sure.xz is missing"),
    ("changed byte", "corrupt corpus export: corpus.json.xz does not match"),
    ("no folder", "no such folder"),
    ("no manifest", "not a corpus export"),
    ("manifest without links", "incomplete corpus export .*alignments/"),
])
def test_an_incomplete_or_corrupt_export_is_refused(
    tiny_export: Path, tmp_path: Path, damage: str, message: str,
) -> None:
    cfg = read_tiny(tmp_path, broken(tiny_export, tmp_path, damage))
    with pytest.raises(UserError, match=message) as err:
        load_corpus(cfg.data)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "fresh" / "tokenizers").exists()  # nothing installed


def test_other_links_cached_under_the_same_key_are_not_overwritten(
    tiny_export: Path, tmp_path: Path,
) -> None:
    key = next(tiny_export.glob("alignments/*")).name
    cached = tmp_path / "fresh" / "alignments" / "files" / key
    cached.mkdir(parents=True)
    (cached / "test.sure").write_text("0-0\n")
    cfg = read_tiny(tmp_path, tiny_export)
    with pytest.raises(UserError, match=f"{cached} is not what the export .* holds"):
        load_corpus(cfg.data)
    assert (cached / "test.sure").read_text() == "0-0\n"


def test_an_export_never_overwrites_a_folder_of_other_files(
    tiny_export: Path, tmp_path: Path,
) -> None:
    cfg = tiny_config(tmp_path, data_root=tiny_export.parent / "data")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(UserError, match="exists and is not a corpus export"):
        export_corpus(cfg.data, tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"


# -- the documentation corpus (slow: about a minute to compress and read back) --

@pytest.mark.slow
def test_the_docs_corpus_reads_back_from_an_export_within_40_mb(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    if not any(data_root(None).glob("docs/v*/corpus.json")):
        pytest.skip("the documentation corpus is not built under data/docs "
                    "(python -m seq2seq.prepare data=docs_de_en builds it)")
    base = compose_data("data=docs_de_en")
    built = prepare_data(base.data, base.tokenizer, verbose=False)
    export_corpus(base.data, tmp_path / "export")
    size = sum(path.stat().st_size for path in (tmp_path / "export").rglob("*") if path.is_file())
    assert size <= 40_000_000, size
    cut_off_tools(tmp_path, monkeypatch)  # a fresh data root: no package in its raw/
    cfg = compose_data("data=docs_de_en", f"data.root={tmp_path / 'elsewhere'}",
                       f"data.export_dir={tmp_path / 'export'}")
    capsys.readouterr()
    read = prepare_data(cfg.data, cfg.tokenizer)
    assert_same(built, read)
    assert read.splits["test"].documents is not None  # the families the split was drawn by
    assert set(read.splits["test"].domains) == {"documentation", "interface"}  # stored, carried
    out = capsys.readouterr().out
    assert "reusing tokenizer" in out and "training sentencepiece" not in out
