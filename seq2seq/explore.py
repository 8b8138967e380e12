"""`python -m seq2seq.explore ckpt=[A,B,...] [port=8000] [host=127.0.0.1] [device=auto]`
(`make explore ARGS=...`): a local web page for looking at attention, any sentence, every
checkpoint side by side, every head.

Open http://127.0.0.1:8000 (on a cluster node, through `ssh -L 8000:127.0.0.1:8000 node`).
The server binds 127.0.0.1 unless `host=` says otherwise, loads only the checkpoints given
here (weights only), and the page fetches nothing from another host: its script, styles and
font are the package's and the machine's (seq2seq/explorer/). Picking a sentence of the corpus
reads the checkpoint's corpus as training did: from its cache or export, or, the first time on a
machine without either, by building it (as `python -m seq2seq.prepare` would).

The JSON API the page uses (a notebook can call it; the schema is at /api/openapi.json):
- `GET /api/models`: the checkpoints, one entry each: `id`, `label`, `model` (vanilla,
  bahdanau, luong, transformer), `src_lang`, `tgt_lang`, `corpus`, `step`, `has_attention`,
  `layers` ({encoder, decoder, cross}: layer counts; {} for an RNN), `heads`, `beam_size`,
  `max_src_pieces`.
- `GET /api/examples?model=0&split=validation`: sentences of that checkpoint's corpus with
  their references, `[{source, reference}]`: `validation` or `test` (up to 200, spread over
  the split) or `probes` (the config's probe sentences).
- `POST /api/translate` `{model, text, beam_size=1, nbest=1, target=null, reference=null,
  mask=[{kind, layer, head}]}`: the translation (beam_size 1 is greedy; `hypotheses`: the
  n-best `[{text, score}]`), `seconds` it took, `notice` (the sentence truncated to the model's
  length, or null), `target` (the text the attention is read on: the best hypothesis, or
  `target`), `attention` (null for vanilla; else `reading` in words, `src_pieces`,
  `tgt_pieces`, `src_words`, `tgt_words`, `src_piece_words`, `tgt_piece_words`, `pieces` (T, S)
  the matrix `python -m seq2seq.align` reads, `words` (Tw, Sw + 1) over words with the source
  EOS last, `links` [[source word, target word]], and for a Transformer `heads` {cross,
  encoder, decoder}: [layer][head][query][key]), `scores` ({bleu, chrf} of the best hypothesis
  against `reference`, or null) and, with a `mask` (heads switched off as
  `python -m seq2seq.heads` does), `unmasked` ({text, scores}: the same request without it).
- `POST /api/view.html` `{title, source, models, results}`: one self-contained HTML file that
  draws those answers offline.
Bad input (an empty sentence, a target that does not tokenize, a head or beam out of range, a
malformed request, an unknown model) answers 422 with `{"error": "<one line>"}`; the server
goes on. Requests reach the models one at a time.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from seq2seq.config import register_configs
from seq2seq.errors import UserError, exit_on_user_error
from seq2seq.inference import resolve_device


@dataclass
class ExploreConfig:
    """`python -m seq2seq.explore` (configs/explore.yaml)."""

    ckpt: Any = MISSING  # a checkpoint, or a list of them: one column each
    host: str = MISSING
    port: int = MISSING
    device: str = MISSING


def register_explore_config() -> None:
    """Every schema of `seq2seq.config`, and this entry point's."""
    register_configs()
    ConfigStore.instance().store(name="explore_schema", node=ExploreConfig)


register_explore_config()


def serve(ckpt: str | list[str], host: str = "127.0.0.1", port: int = 8000,
          device: str = "auto") -> None:
    """Load the checkpoints and serve the explorer until interrupted.

    Raises:
        UserError: no checkpoint, an unreadable one, the server's extra not installed, a
            port that cannot be bound.
    """
    paths = [ckpt] if isinstance(ckpt, str) else [str(p) for p in ckpt]
    if not paths:
        raise UserError("ckpt=[]: name one checkpoint or more, e.g. "
                        "ckpt=runs/.../checkpoints/best.pt")
    try:
        import uvicorn

        from seq2seq.explorer.server import create_app
    except ImportError as err:
        raise UserError(f"the explorer needs its extra ({err.name} is missing): "
                        "pip install -e '.[explore]' (make installs it)") from None
    from seq2seq.explorer.session import Explorer

    explorer = Explorer(paths, resolve_device(device))
    for column in explorer.columns:
        print(f"model {column.index}: {column.label} ({column.loaded.checkpoint})")
    print(f"the explorer is at http://{host}:{port}/ (Ctrl-C stops it)", flush=True)
    config = uvicorn.Config(create_app(explorer), host=host, port=port, log_level="warning")
    server = uvicorn.Server(config)
    try:
        server.run()
    except SystemExit:  # uvicorn exits when it cannot bind
        if not server.started:
            raise UserError(f"cannot serve on {host}:{port} (in use? try port=...)") from None
        raise
    if not server.started:
        raise UserError(f"cannot serve on {host}:{port} (in use? try port=...)")


@hydra.main(config_path="../configs", config_name="explore", version_base="1.3")
@exit_on_user_error
def main(cfg: DictConfig) -> None:
    if OmegaConf.is_missing(cfg, "ckpt"):
        raise UserError("ckpt=PATH is required: the checkpoint(s) to explore, "
                        "e.g. ckpt=[A/checkpoints/best.pt,B/checkpoints/best.pt]")
    try:
        serve(**OmegaConf.to_container(cfg))  # type: ignore[arg-type]
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
