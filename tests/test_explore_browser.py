"""The explorer's page in a real browser: Playwright drives Debian's chromium (`/usr/bin/chromium`,
which `.ci/run` installs) against a live server on 127.0.0.1 with tiny checkpoints. Skipped
where the browser is missing, except under CI=true, where that is a failure."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow
CHROMIUM = os.environ.get("SEQ2SEQ_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run"]
SENTENCE = "Jane ging in den Laden."


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as err:
        return f"{err.name} is not installed (make installs the dev and explore extras)"
    if shutil.which(CHROMIUM) is None and not Path(CHROMIUM).is_file():
        return f"no browser at {CHROMIUM} (apt-get install chromium)"
    return None


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    missing = _missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the browser test must run in CI: {missing}")
        pytest.skip(missing)
    import uvicorn

    from seq2seq.explorer.server import create_app
    from seq2seq.explorer.session import Explorer
    from seq2seq.training.loop import train
    from tests.tiny import tiny_config

    tmp = tmp_path_factory.mktemp("browser")
    paths = []
    for name, extra in (("bahdanau", []), ("transformer", ["model.num_decoder_layers=2"])):
        cfg = tiny_config(tmp / name, "trainer.final_test=false", "trainer.max_steps=40", *extra,
                          model=name, data_root=tmp / "data")
        train(cfg)
        paths.append(Path(cfg.run_dir) / "checkpoints" / "best.pt")
    explorer = Explorer(paths, torch.device("cpu"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    live = uvicorn.Server(uvicorn.Config(create_app(explorer), host="127.0.0.1", port=port,
                                         log_level="warning"))
    thread = threading.Thread(target=live.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not live.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live.started, "the explorer did not start"
    yield f"http://127.0.0.1:{port}", explorer
    live.should_exit = True
    thread.join(timeout=10)


def test_the_page_in_a_browser(server) -> None:
    """Type a sentence, point at a target word and read the weight the API gave; tick a head
    and see the translation area change; every request went to 127.0.0.1."""
    from playwright.sync_api import sync_playwright

    url, explorer = server
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page()
        page.on("request", lambda request: requests.append(request.url))
        page.goto(url)
        page.wait_for_selector(".column[data-model='1']")
        page.fill("#source", SENTENCE)
        page.click("#translate")
        page.wait_for_selector(".column[data-model='1'] .hypothesis")
        page.wait_for_selector(".column[data-model='0'] table.heatmap")
        expected = explorer.translate(0, SENTENCE)["attention"]["words"][0]
        bahdanau = page.locator(".column[data-model='0']")
        bahdanau.locator("table.heatmap th.tgt[data-index='0']").hover()
        shown = bahdanau.locator(".weights .weight")
        assert shown.count() == len(expected)
        for s, weight in enumerate(expected):
            text = shown.nth(s).inner_text()
            assert text.endswith(f"{weight:.3f}"), (text, weight)
            assert float(shown.nth(s).get_attribute("data-value")) == pytest.approx(weight,
                                                                                    abs=1e-6)
        transformer = page.locator(".column[data-model='1']")
        before = transformer.locator(".translation").inner_text()
        transformer.locator(".mask summary").click()
        transformer.locator(".mask input[data-kind='cross'][data-layer='1'][data-head='0']").check()
        page.wait_for_function(
            "before => document.querySelector(\".column[data-model='1'] .translation\")"
            ".innerText !== before", arg=before)
        after = transformer.locator(".translation").inner_text()
        assert "heads off: cross 1 0" in after and "all heads on:" in after
        page.fill("#source", "   ")
        page.click("#translate")
        page.wait_for_function("document.querySelector('#message').innerText.length > 0")
        assert page.inner_text("#message").startswith("the sentence is empty")
        browser.close()
    assert requests and all(u.startswith(url + "/") or u == url for u in requests), requests
