"""The explorer's web side: a FastAPI app over an `Explorer`, its one page, and the saved view.

The page, its script, styles and font come from this package (and the CJK font from the
machine or the fonts-nanum package the project fetches): nothing is loaded from another host.
FastAPI's documentation pages are off for that reason (they fetch their assets from a CDN);
the schema stays at /api/openapi.json. Every refusal is a 4xx whose body is
`{"error": "<one line>"}`, and the server goes on serving.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

from seq2seq.data import data_root
from seq2seq.explorer.session import SPLITS, Explorer, Head, RequestError
from seq2seq.fonts import FONT, cjk_font

STATIC = Path(__file__).with_name("static")


class HeadRequest(BaseModel):
    kind: str = Field(description="encoder | decoder | cross")
    layer: int = Field(description="the layer, from 0")
    head: int = Field(description="the head, from 0")


class TranslateRequest(BaseModel):
    model: int = Field(0, description="the checkpoint, from 0 (GET /api/models)")
    text: str = Field(description="the source sentence")
    beam_size: int = Field(1, description="1: greedy")
    nbest: int = Field(1, description="hypotheses returned, at most beam_size")
    target: str | None = Field(None, description="read the attention on this target instead "
                                                 "of the best hypothesis")
    reference: str | None = Field(None, description="scores the translation (sentence BLEU, "
                                                    "chrF)")
    mask: list[HeadRequest] = Field(default_factory=list, description="heads to switch off")


class ViewRequest(BaseModel):
    title: str = Field("seq2seq attention", description="the saved page's title")
    source: str = Field("", description="the sentence shown")
    models: list[dict[str, Any]] = Field(description="GET /api/models's entries shown")
    results: list[dict[str, Any]] = Field(description="POST /api/translate's answers shown")


def one_line(message: str) -> str:
    return " ".join(str(message).split())


def create_app(explorer: Explorer) -> FastAPI:
    """The app: the page at /, its files under /static, the JSON API under /api."""
    app = FastAPI(title="seq2seq explorer", docs_url=None, redoc_url=None,
                  openapi_url="/api/openapi.json")
    font = cjk_font(data_root(None) / "raw")  # installed, or fonts-nanum's where fetched

    @app.exception_handler(RequestError)
    def refused(request: Request, err: RequestError) -> JSONResponse:
        return JSONResponse({"error": one_line(str(err))}, status_code=422)

    @app.exception_handler(RequestValidationError)
    def malformed(request: Request, err: RequestValidationError) -> JSONResponse:
        first = err.errors()[0] if err.errors() else {"loc": (), "msg": "malformed request"}
        where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
        return JSONResponse({"error": one_line(f"malformed request: {where or 'body'}: "
                                               f"{first.get('msg', '')}")}, status_code=422)

    @app.exception_handler(HTTPException)
    def http_error(request: Request, err: HTTPException) -> JSONResponse:
        return JSONResponse({"error": one_line(f"{request.url.path}: {err.detail}")},
                            status_code=err.status_code)

    @app.get("/", response_class=HTMLResponse)
    def page() -> str:
        return (STATIC / "index.html").read_text(encoding="utf-8")

    @app.get("/static/{name}")
    def static(name: str) -> FileResponse:
        path = STATIC / name
        if name not in {p.name for p in STATIC.iterdir()}:
            raise HTTPException(404, "no such file")
        return FileResponse(path)

    @app.get("/font/cjk")
    def cjk() -> FileResponse:
        if font is None:
            raise HTTPException(404, f"no CJK font on this machine (fonts-nanum, or one of "
                                     f"{', '.join(FONT)})")
        return FileResponse(font)

    @app.get("/api/models")
    def models() -> list[dict[str, Any]]:
        return [column.describe() for column in explorer.columns]

    @app.get("/api/examples")
    def examples(model: int = 0, split: str = Query("validation", description=" | ".join(
            SPLITS))) -> list[dict[str, str]]:
        return explorer.column(model).examples(split)

    @app.post("/api/translate")
    def translate(request: TranslateRequest) -> dict[str, Any]:
        return explorer.translate(
            request.model, request.text, request.beam_size, request.nbest, request.target,
            request.reference, [Head(h.kind, h.layer, h.head) for h in request.mask])

    @app.post("/api/view.html", response_class=HTMLResponse)
    def view(request: ViewRequest) -> str:
        return saved_view(request.model_dump())

    return app


def saved_view(snapshot: dict[str, Any]) -> str:
    """One self-contained HTML file drawing `snapshot` ({title, source, models, results}) with
    the page's own script and styles inlined: it opens offline, in a report or a notebook."""
    script = (STATIC / "explorer.js").read_text(encoding="utf-8")
    styles = (STATIC / "explorer.css").read_text(encoding="utf-8")
    data = json.dumps(snapshot, ensure_ascii=False).replace("</", "<\\/")
    title = snapshot.get("title", "seq2seq attention").replace("<", "&lt;")
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}"
            f"</title><style>{styles}</style></head><body><main id=\"app\" class=\"saved\">"
            f"</main><script>window.SNAPSHOT = {data};</script><script>{script}</script>"
            "</body></html>")
