"""The attention explorer's API (seq2seq/explorer) through FastAPI's TestClient, on tiny
checkpoints of the three families: its translations are translate's, its attention align's,
its masked heads the heads report's; every bad input answers 4xx in one line and the server
goes on; the saved view and the page load nothing from another host."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import torch

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from seq2seq.align import align, teacher_forced_attention  # noqa: E402
from seq2seq.evaluation.decode_and_score import decode_ids  # noqa: E402
from seq2seq.evaluation.hypotheses import one_line  # noqa: E402
from seq2seq.explorer.server import create_app  # noqa: E402
from seq2seq.explorer.session import Explorer  # noqa: E402
from seq2seq.heads import masked  # noqa: E402
from seq2seq.inference import load_for_inference, search_settings  # noqa: E402
from seq2seq.training.loop import train  # noqa: E402
from seq2seq.translate import translate  # noqa: E402
from tests.tiny import tiny_config  # noqa: E402

SENTENCE = "Jane ging in den Laden."
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny de→en checkpoints sharing one corpus and tokenizer: vanilla, Bahdanau and a
    Transformer of two decoder layers with two heads."""
    tmp = tmp_path_factory.mktemp("explore")
    data = tmp / "data"
    found = {}
    for name, extra in (("vanilla", []), ("bahdanau", []),
                        ("transformer", ["model.num_decoder_layers=2"])):
        cfg = tiny_config(tmp / name, "trainer.final_test=false", "trainer.max_steps=40",
                          *extra, model=name, data_root=data)
        train(cfg)
        found[name] = Path(cfg.run_dir) / "checkpoints" / "best.pt"
    return found


@pytest.fixture(scope="module")
def client(checkpoints: dict[str, Path]) -> TestClient:
    explorer = Explorer([checkpoints[n] for n in ("vanilla", "bahdanau", "transformer")], CPU)
    return TestClient(create_app(explorer))


VANILLA, BAHDANAU, TRANSFORMER = 0, 1, 2


def post(client: TestClient, **body) -> dict:
    response = client.post("/api/translate", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_models_describe_the_columns(client: TestClient) -> None:
    models = client.get("/api/models").json()
    assert [m["model"] for m in models] == ["vanilla", "bahdanau", "transformer"]
    assert models[TRANSFORMER]["layers"] == {"encoder": 1, "decoder": 2, "cross": 2}
    assert models[TRANSFORMER]["heads"] == 2 and models[BAHDANAU]["heads"] == 0
    assert not models[VANILLA]["has_attention"] and models[BAHDANAU]["has_attention"]


@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("index", [VANILLA, BAHDANAU, TRANSFORMER])
def test_the_translation_is_translates(client: TestClient, checkpoints, index: int,
                                       beam: int) -> None:
    name = ("vanilla", "bahdanau", "transformer")[index]
    out = io.BytesIO()
    translate(checkpoints[name], beam_size=beam, device="cpu",
              stdin=io.BytesIO(f"{SENTENCE}\n".encode()), stdout=out)
    answer = post(client, model=index, text=SENTENCE, beam_size=beam)
    assert answer["hypotheses"][0]["text"] == out.getvalue().decode().rstrip("\n")
    assert answer["seconds"] > 0 and answer["notice"] is None


@pytest.mark.parametrize("index", [BAHDANAU, TRANSFORMER])
def test_the_attention_is_aligns(client: TestClient, checkpoints, tmp_path: Path,
                                 index: int) -> None:
    """On the best hypothesis and on a typed target: the piece matrix is the one
    `align.teacher_forced_attention` computes, to 1e-5, and the links are those
    `python -m seq2seq.align` writes for the pair."""
    name = ("vanilla", "bahdanau", "transformer")[index]
    loaded = load_for_inference(checkpoints[name], CPU)
    for target in (None, "Jane went to the garden ."):
        answer = post(client, model=index, text=SENTENCE, target=target)
        read_on = answer["target"]
        assert read_on == (target or answer["hypotheses"][0]["text"])
        expected = teacher_forced_attention(loaded, [SENTENCE], [read_on], ("s", "t"),
                                            verbose=False).attention[0]
        got = torch.tensor(answer["attention"]["pieces"])
        assert got.shape == expected.shape
        assert torch.allclose(got, expected, atol=1e-5, rtol=0)
        (tmp_path / "src").write_text(SENTENCE + "\n", encoding="utf-8")
        (tmp_path / "tgt").write_text(read_on + "\n", encoding="utf-8")
        align(checkpoints[name], tmp_path / "src", tmp_path / "tgt", out=tmp_path / "links",
              device="cpu")
        written = (tmp_path / "links").read_text(encoding="utf-8").split()
        assert sorted(f"{i}-{j}" for i, j in answer["attention"]["links"]) == sorted(written)
        words = answer["attention"]["words"]
        assert len(words) == len(read_on.split())
        assert len(words[0]) == len(SENTENCE.split()) + 1  # the source EOS last


def test_transformer_heads_are_every_layer_and_head(client: TestClient) -> None:
    attention = post(client, model=TRANSFORMER, text=SENTENCE)["attention"]
    heads = attention["heads"]
    s, t = len(attention["src_pieces"]), len(attention["tgt_pieces"])
    assert [len(heads["cross"]), len(heads["cross"][0])] == [2, 2]
    assert len(heads["cross"][0][0]) == t and len(heads["cross"][0][0][0]) == s
    assert len(heads["encoder"][0][0]) == s and len(heads["decoder"][1][1]) == t
    for row in heads["decoder"][0][0]:
        assert sum(row) == pytest.approx(1.0, abs=1e-4)


def test_a_masked_head_translates_as_the_heads_report_masks(client: TestClient,
                                                           checkpoints) -> None:
    loaded = load_for_inference(checkpoints["transformer"], CPU)
    ids = loaded.tokenizer.encode_src([SENTENCE])[0]
    settings = search_settings(loaded.config, 3, 1)
    for head in (("cross", 1, 0), ("decoder", 0, 1), ("encoder", 0, 0)):
        with masked(loaded.model, [head]):
            hyp = decode_ids(loaded.model, [ids], settings, CPU)[0][0]
        expected = one_line(loaded.tokenizer.decode_tgt(hyp.tokens))
        answer = post(client, model=TRANSFORMER, text=SENTENCE, beam_size=3,
                      reference="Jane went to the store.",
                      mask=[dict(zip(("kind", "layer", "head"), head, strict=True))])
        assert answer["hypotheses"][0]["text"] == expected
        assert answer["mask"] == [list(head)]
        unmasked = post(client, model=TRANSFORMER, text=SENTENCE, beam_size=3)
        assert answer["unmasked"]["text"] == unmasked["hypotheses"][0]["text"]
        assert set(answer["scores"]) == {"bleu", "chrf"} and "scores" in answer["unmasked"]


def test_vanilla_reads_one_fixed_context(client: TestClient) -> None:
    answer = post(client, model=VANILLA, text=SENTENCE, reference="Jane went to the store.")
    assert answer["attention"] is None and answer["hypotheses"][0]["text"]
    assert answer["scores"]["chrf"] >= 0


LONG = " ".join([SENTENCE] * 400)


@pytest.mark.parametrize(("body", "status", "says"), [
    ({"text": "   "}, 422, "the sentence is empty"),
    ({"text": SENTENCE, "target": " "}, 422, "the target is empty"),
    ({"text": SENTENCE, "target": "\u200b"}, 422, "the target does not tokenize"),
    ({"text": SENTENCE, "target": "제인이 가게에 갔다"}, 422, "the target does not tokenize"),
    ({"text": SENTENCE, "beam_size": 0}, 422, "beam size 0 is out of range"),
    ({"text": SENTENCE, "nbest": 4, "beam_size": 2}, 422, "n-best 4 is out of range"),
    ({"model": 7, "text": SENTENCE}, 422, "model 7 is not one of the 3"),
    ({"model": TRANSFORMER, "text": SENTENCE, "mask": [{"kind": "cross", "layer": 2,
                                                         "head": 0}]}, 422,
     "cross layer 2 is out of range: the model has layers 0 to 1"),
    ({"model": TRANSFORMER, "text": SENTENCE, "mask": [{"kind": "cross", "layer": 0,
                                                         "head": 5}]}, 422,
     "cross layer 0 head 5 is out of range: each layer has heads 0 to 1"),
    ({"model": TRANSFORMER, "text": SENTENCE, "mask": [{"kind": "self", "layer": 0,
                                                         "head": 0}]}, 422,
     "head kind 'self' is not one of encoder, decoder, cross"),
    ({"model": BAHDANAU, "text": SENTENCE, "mask": [{"kind": "cross", "layer": 0,
                                                      "head": 0}]}, 422,
     "the bahdanau model has no attention heads to mask"),
    ({"txt": SENTENCE}, 422, "malformed request: text: Field required"),
    ({"text": SENTENCE, "beam_size": "wide"}, 422, "malformed request: beam_size"),
])
def test_bad_input_answers_one_line_and_the_server_goes_on(client: TestClient, body: dict,
                                                           status: int, says: str) -> None:
    response = client.post("/api/translate", json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert error.startswith(says) and "\n" not in error
    assert post(client, model=BAHDANAU, text=SENTENCE)["hypotheses"]


def test_malformed_json_and_unknown_paths_answer_one_line(client: TestClient) -> None:
    response = client.post("/api/translate", content=b"{not json",
                           headers={"Content-Type": "application/json"})
    assert response.status_code == 422 and response.json()["error"].startswith("malformed")
    for path in ("/api/nothing", "/docs", "/redoc", "/static/../session.py"):
        response = client.get(path)
        assert response.status_code == 404 and "\n" not in response.json()["error"]
    assert client.get("/api/examples?split=train").status_code == 422
    assert post(client, model=BAHDANAU, text=SENTENCE)["hypotheses"]


def test_an_over_long_sentence_is_truncated_with_a_notice(client: TestClient) -> None:
    answer = post(client, model=TRANSFORMER, text=LONG)
    assert "2000 words) is longer than the model allows" in answer["notice"]
    assert "max_src_len=256" in answer["notice"]
    assert len(answer["attention"]["src_pieces"]) == 256  # 255 pieces and EOS


def test_an_over_long_target_is_read_as_far_as_the_model_reads(client: TestClient) -> None:
    answer = post(client, model=BAHDANAU, text=SENTENCE, target=LONG)
    assert "the target has" in answer["notice"] and "get no attention" in answer["notice"]
    assert len(answer["attention"]["tgt_pieces"]) == 256  # 255 pieces and EOS


def test_examples_come_from_the_checkpoints_corpus_with_references(client: TestClient) -> None:
    probes = client.get("/api/examples?model=1&split=probes").json()
    assert probes[0] == {"source": SENTENCE, "reference": "Jane went to the store."}
    validation = client.get("/api/examples?model=1&split=validation").json()
    assert len(validation) == 20 and all(row["reference"] for row in validation)


def test_the_page_and_the_saved_view_load_nothing_from_another_host(client: TestClient
                                                                    ) -> None:
    page = client.get("/").text
    assert re.findall(r'(?:src|href)="([^"]+)"', page) == [
        "data:,", "/static/explorer.css", "/static/explorer.js"]  # no favicon request
    for name in ("explorer.js", "explorer.css"):
        body = client.get(f"/static/{name}").text
        assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", body)  # the SVG namespace
    models = client.get("/api/models").json()
    results = [post(client, model=i, text=SENTENCE) for i in range(3)]
    saved = client.post("/api/view.html", json={"title": "Jane", "source": SENTENCE,
                                                "models": models, "results": results})
    assert saved.status_code == 200
    html = saved.text
    assert "window.SNAPSHOT = " in html and "<link" not in html and "<script src" not in html
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", html)
    assert results[2]["attention"]["tgt_pieces"][0] in html
