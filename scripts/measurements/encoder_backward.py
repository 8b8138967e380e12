"""The recurrent encoder on a CPU (seq2seq/models/layers.py `encode_source`): forward and
backward of a bidirectional GRU (emb 256, hidden 256 a direction) over a padded batch, each
direction run over the padded rows (the backward one over each row reversed within its length),
against the packed sequence, whose CPU backward fills a zero (tokens, 3H) tensor at every time
step. One thread, fp32, the two interleaved, medians of 7 (ms).

    python scripts/measurements/encoder_backward.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from seq2seq.models.layers import encode_packed_sequence, encode_source  # noqa: E402

# (pairs, source pieces) of a batch: Ding's default (1,500 tokens), the documentation corpus's
# (4,096 tokens of ~28 pieces) and its long sentences
BATCHES = [(100, 15), (130, 32), (60, 64), (16, 256)]


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rnn = nn.GRU(256, 256, batch_first=True, bidirectional=True)
    print("| batch (pairs x pieces) | packed ms | padded ms | packed / padded |")
    print("|---|---|---|---|")
    for pairs, pieces in BATCHES:
        lengths = torch.randint(max(1, pieces - pieces // 4), pieces + 1, (pairs,))
        lengths[0] = pieces
        mask = torch.arange(pieces)[None] < lengths[:, None]
        emb = torch.randn(pairs, pieces, 256, requires_grad=True)
        times: dict[str, list[float]] = {"packed": [], "padded": []}
        for repeat in range(8):  # the first round warms up and is not counted
            for name, encode in (("packed", encode_packed_sequence), ("padded", encode_source)):
                start = time.perf_counter()
                states, final = encode(rnn, emb, mask)
                (states.sum() + final.sum()).backward()
                if repeat:
                    times[name].append(time.perf_counter() - start)
        packed, padded = (1000 * statistics.median(times[k]) for k in ("packed", "padded"))
        print(f"| {pairs} x {pieces} | {packed:.1f} | {padded:.1f} | {packed / padded:.2f}x |")


if __name__ == "__main__":
    main()
