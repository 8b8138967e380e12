"""The explorer's answer time: `POST /api/translate` for a 30-word sentence on each of the given
checkpoints, greedy and beam 5, through the real app (FastAPI's TestClient, no network), the
median and range of several requests (the first, warming up, not counted). Each answer includes
the teacher-forced attention and, for a Transformer, every head's.

    .venv/bin/python scripts/benchmark_explore.py CKPT [CKPT ...] [--requests 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from fastapi.testclient import TestClient

from seq2seq.explorer.server import create_app
from seq2seq.explorer.session import Explorer

# 30 words (de), the Ding default's language
SENTENCE = ("Als wir gestern Abend nach einem langen Arbeitstag endlich nach Hause kamen, "
            "stellten wir fest, dass jemand die Tür offen gelassen hatte und der Hund "
            "verschwunden war; wir suchten ihn.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ckpt", nargs="+")
    parser.add_argument("--requests", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    client = TestClient(create_app(Explorer(args.ckpt, torch.device("cpu"))))
    print(f"sentence: {len(SENTENCE.split())} words; torch threads {torch.get_num_threads()}")
    for beam in (1, 5):
        totals = []
        for _ in range(args.requests + 1):
            started = time.perf_counter()
            for model in range(len(args.ckpt)):
                response = client.post("/api/translate", json={"model": model, "text": SENTENCE,
                                                               "beam_size": beam})
                response.raise_for_status()
            totals.append(time.perf_counter() - started)
        runs = totals[1:]
        print(f"beam {beam}: {len(args.ckpt)} checkpoints, one request each: median "
              f"{statistics.median(runs):.3f} s (min {min(runs):.3f}, max {max(runs):.3f}) "
              f"over {len(runs)} requests")


if __name__ == "__main__":
    main()
