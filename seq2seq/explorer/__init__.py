"""The attention explorer behind `python -m seq2seq.explore`: `session` (the checkpoints and
what a request asks of them), `server` (the FastAPI app, the page, the saved view), `static/`
(the page's own script and styles)."""
