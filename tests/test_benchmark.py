"""scripts/benchmark.py end to end on the tiny corpus: a real worker process per variant."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import pytest

from tests.tiny import corpus_overrides

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "benchmark.py"


@pytest.fixture(scope="module")
def benchmark():
    spec = importlib.util.spec_from_file_location("benchmark", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_spread_batches_cover_the_epoch_evenly(benchmark) -> None:
    epoch = [[i] for i in range(10)]
    assert benchmark.spread_batches(epoch, 5) == [[0], [2], [4], [6], [8]]
    assert benchmark.spread_batches(epoch, 12) == epoch + epoch[:2]  # repeated when short


def test_padded_share_counts_eos_and_rounding(benchmark) -> None:
    # one batch of two sentences: source 2+1 and 4+1 positions, target 1+1 and 1+1
    assert benchmark.padded_share([[0, 1]], [2, 4], [1, 1], 1) == pytest.approx(1 - 12 / 14)
    # rounding the lengths up to a multiple of 8 pads more
    assert benchmark.padded_share([[0, 1]], [2, 4], [1, 1], 8) == pytest.approx(1 - 12 / 32)


@pytest.mark.slow
def test_benchmark_measures_a_variant_and_writes_json(benchmark, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    overrides = [
        *corpus_overrides(tmp_path / "data"), "model.emb_dim=16", "model.hidden_size=32",
        "model.attn_dim=32", "trainer.batch_tokens=256", "trainer.threads=1",
    ]
    code = benchmark.main([
        "--variants", "bahdanau", "--steps", "3", "--repeats", "2", "--device", "cpu",
        "--decode-sentences", "4", "--src-lengths", "1-40", "41-99", "--json", str(out), "--",
        *overrides,
    ])
    assert code == 0
    result = json.loads(out.read_text())["results"]["bahdanau"]
    assert result["train_steps"] == 3
    assert len(result["train_tokens_per_s_runs"]) == 2
    assert result["train_tokens_per_s"] > 0
    assert 0.0 <= result["padding"] < 1.0
    # the tiny corpus: 300 training pairs of about 5 words a side
    assert result["pairs_per_batch"] * result["train_batches_per_epoch"] == pytest.approx(300)
    assert 3 < result["mean_src_pieces"] < 20
    # every tiny pair is under 41 pieces: the second range has no batch and is left out
    (short,) = result["by_src_length"]
    assert short["src_pieces"] == "1-40" and short["train_tokens_per_s"] > 0
    assert short["batches"] == result["train_batches_per_epoch"]
    assert short["mean_src_pieces"] == pytest.approx(result["mean_src_pieces"])
    assert result["decode_sentences"] == 4
    assert result["decode"]["beam5"]["seconds"] > 0
    assert result["peak_mem_train_mib"] > 0
    assert result["mfu"] is None  # CPU: no peak to compare against


def test_batches_in_range_pick_by_mean_source_length(benchmark) -> None:
    src_lens = [3, 5, 20, 22, 40]
    epoch = [[0, 1], [2, 3], [4]]  # means 4, 21, 40
    assert benchmark.batches_in_range(epoch, src_lens, 1, 15) == [[0, 1]]
    assert benchmark.batches_in_range(epoch, src_lens, 16, 60) == [[2, 3], [4]]
    assert benchmark.length_range("16-30") == (16, 30)
    for bad in ("30-16", "0-5", "16", "a-b"):
        with pytest.raises(argparse.ArgumentTypeError):
            benchmark.length_range(bad)


def test_matmul_shapes_and_the_cpu_gemm_ceiling(benchmark) -> None:
    from torch import nn

    model = nn.Sequential(nn.Linear(8, 16), nn.GRU(16, 4), nn.Linear(4, 8, bias=False))
    # Linear layers at the batch's tokens, the GRU's input and hidden weights at its rows
    assert benchmark.matmul_shapes(model, tokens=50, rows=5) == [
        (50, 8, 16), (5, 16, 12), (5, 4, 12), (50, 4, 8)]
    shapes = [(64, 64, 64), (64, 64, 64), (32, 128, 16)]
    for dtype in ("fp32", "bf16"):
        assert 1e6 < benchmark.gemm_ceiling(shapes, dtype, repeats=3) < 1e14  # FLOP/s


@pytest.mark.slow
def test_benchmark_trains_each_variant_in_each_precision(benchmark, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    code = benchmark.main([
        "--variants", "vanilla", "--steps", "2", "--repeats", "1", "--device", "cpu",
        "--decode-sentences", "2", "--precisions", "fp32", "bf16", "--json", str(out), "--",
        *corpus_overrides(tmp_path / "data"), "model.emb_dim=16", "model.hidden_size=32",
        "trainer.batch_tokens=256", "trainer.threads=1",
    ])
    assert code == 0
    results = json.loads(out.read_text())["results"]
    assert [(r["variant"], r["precision_asked"], r["precision"]) for r in results] == [
        ("vanilla", "fp32", "fp32"), ("vanilla", "bf16", "bf16")]
    for r in results:
        ceiling = r["cpu_gemm_ceiling_flops"]
        assert ceiling["fp32"] > 0 and ceiling["bf16"] > 0 and r["flops_per_tgt_token"] > 0
        assert r["cpu_ceiling_share"] == pytest.approx(
            r["flops_per_tgt_token"] * r["train_tokens_per_s"] / ceiling[r["precision"]])
    table = benchmark.precision_table(results, ["fp32", "bf16"])
    assert table.splitlines()[2].startswith("| vanilla | ") and "x) |" in table
