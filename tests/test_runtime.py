"""Process set-up that is not covered by a training run."""

from __future__ import annotations

import subprocess
import sys

import pytest

from seq2seq.runtime import pick_precision

PROBE = """
import sys, torch
from seq2seq.runtime import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else False
def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20
big = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
before = rss_mib()
del big
print(applied, before - rss_mib())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc settings")
def test_freed_blocks_stay_in_the_process_for_reuse() -> None:
    def released(mode: str) -> tuple[str, float]:
        out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True,
                             text=True, check=True).stdout.split()
        return out[0], float(out[1])

    applied, kept = released("keep")
    if applied != "True":
        pytest.skip("not glibc")
    _, default = released("default")
    assert default > 48  # glibc's default: the 64 MiB block goes back to the OS on free
    assert kept < 16  # with the settings it stays, to serve the next big tensor


TRIM = """
import torch
from seq2seq.runtime import keep_freed_memory, release_freed_memory
assert keep_freed_memory()
def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20
big = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
pin = torch.ones(2**20 // 4)  # allocated after it: the freed block is inside the heap, not on top
del big
kept = rss_mib()
released = release_freed_memory()
print(released, kept - rss_mib())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc settings")
def test_freed_blocks_go_back_to_the_os_before_a_decode() -> None:
    try:
        out = subprocess.run([sys.executable, "-c", TRIM], capture_output=True, text=True,
                             check=True).stdout.split()
    except subprocess.CalledProcessError as error:
        if "AssertionError" in error.stderr:
            pytest.skip("not glibc")
        raise
    assert out[0] == "True"
    assert float(out[1]) > 48  # the 64 MiB block's pages leave the process though it stays mapped


def test_precision_auto_is_fp32_on_the_cpu() -> None:
    import torch

    assert pick_precision("auto", torch.device("cpu")) == "fp32"
    with pytest.raises(ValueError, match="precision"):
        pick_precision("fp8", torch.device("cpu"))
