"""Process set-up that is not covered by a training run."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from seq2seq.runtime import (
    ONEDNN_PRIMITIVE_CACHE,
    ProcessGroupEnv,
    first_host,
    pick_precision,
    process_group_env,
)

ROOT = Path(__file__).resolve().parents[1]

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


@pytest.mark.slow  # 3 s on the 2-vCPU machine: the second tier keeps the fast one under 4 minutes
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


SETUP = """
import sys
from seq2seq.runtime import setup_runtime
rt = setup_runtime("cpu", sys.argv[1], 1, 0)
import torch
def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20
big = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
before = rss_mib()
del big
print(rt.precision, before - rss_mib())
"""


@pytest.mark.slow  # 3 s on the 2-vCPU machine: the second tier keeps the fast one under 4 minutes
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc settings")
def test_setup_runtime_keeps_freed_blocks_in_fp32_only() -> None:
    """The kept heap serves fp32's next step; in bf16 it only grows, so glibc's defaults stay."""
    released = {}
    for precision in ("fp32", "bf16"):
        out = subprocess.run([sys.executable, "-c", SETUP, precision], capture_output=True,
                             text=True, check=True).stdout.split()
        assert out[0] == precision
        released[precision] = float(out[1])
    if released["fp32"] > 48:
        pytest.skip("not glibc")
    assert released["fp32"] < 16 and released["bf16"] > 48


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


JIT_CODE = """
import re, sys, torch
from seq2seq.runtime import setup_runtime
setup_runtime("cpu", "bf16", 1, 0)
w = torch.randn(512, 256, dtype=torch.bfloat16)
for rows in range(100, 1000, 3):  # 300 shapes, as a few batches of a training run bring
    (torch.randn(rows, 256, dtype=torch.bfloat16) @ w.t()).sum()
kib, code = 0, False
for line in open("/proc/self/smaps"):
    head = re.match(r"^[0-9a-f]+-[0-9a-f]+ (\\S+) \\S+ \\S+ \\S+\\s*(.*)$", line)
    if head:  # oneDNN's JIT kernels: anonymous executable mappings
        code = head.group(1) == "rwxp" or (head.group(1) == "r-xp" and not head.group(2))
    elif line.startswith("Rss:") and code:
        kib += int(line.split()[1])
print(kib, __import__("os").environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"])
"""


@pytest.mark.slow  # 5 s on the 2-vCPU machine: the second tier keeps the fast one under 4 minutes
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_onednn_keeps_few_primitives_unless_the_user_sets_it() -> None:
    """setup_runtime on a CPU caps oneDNN's primitive cache, which otherwise keeps the JIT
    kernels of every shape a bf16 product has seen; a capacity the user set is kept."""
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    runs = {}
    for capacity in (None, "1024"):
        if capacity is not None:
            env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = capacity
        out = subprocess.run([sys.executable, "-c", JIT_CODE], capture_output=True, text=True,
                             check=True, env=env).stdout.split()
        runs[capacity] = (int(out[0]), out[1])
    assert runs[None][1] == str(ONEDNN_PRIMITIVE_CACHE) and runs["1024"][1] == "1024"
    if runs["1024"][0] < 500:
        pytest.skip("bf16 products here make no JIT kernels to keep")
    assert runs[None][0] < 0.75 * runs["1024"][0]


# torch.cpu.get_capabilities() of three kinds of CPU, the keys pick_precision reads
EPYC = {"cpu_name": "AMD EPYC", "avx512_bf16": True, "amx_bf16": False, "amx_tile": False}
AVX2 = {"cpu_name": "Intel Core", "avx2": True, "avx512_bf16": False, "amx_bf16": False}
SAPPHIRE_RAPIDS = {"cpu_name": "Intel Xeon", "avx512_bf16": True, "amx_bf16": True,
                   "amx_tile": True}


@pytest.mark.parametrize(
    ("capabilities", "recurrent", "expected"),
    [(EPYC, False, "bf16"), (EPYC, True, "fp32"), (AVX2, False, "fp32"), (AVX2, True, "fp32"),
     (SAPPHIRE_RAPIDS, False, "bf16"), (SAPPHIRE_RAPIDS, True, "fp32"), ({}, False, "fp32")],
)
def test_precision_auto_on_a_cpu_takes_bf16_only_with_bf16_units_and_no_recurrent_cell(
    monkeypatch: pytest.MonkeyPatch, capabilities: dict, recurrent: bool, expected: str
) -> None:
    """auto on a CPU: bf16 for the Transformer where the CPU multiplies bf16 natively (AMX on
    a Xeon, AVX512-BF16 on an EPYC); fp32 on a CPU without either (AVX2) and for the
    recurrent models. The capabilities are faked only to test the choice; an explicit
    precision is kept on any CPU."""
    import torch

    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: capabilities)
    cpu = torch.device("cpu")
    assert pick_precision("auto", cpu, recurrent=recurrent) == expected
    assert pick_precision("bf16", cpu, recurrent=True) == "bf16"
    assert pick_precision("fp32", cpu) == "fp32"
    with pytest.raises(ValueError, match="precision"):
        pick_precision("fp8", cpu)


def test_precision_auto_reads_this_cpu() -> None:
    """Unfaked, auto follows what torch reports of this CPU."""
    import torch

    found = torch.cpu.get_capabilities()
    units = found["amx_bf16"] or found["avx512_bf16"]
    assert pick_precision("auto", torch.device("cpu")) == ("bf16" if units else "fp32")
    assert pick_precision("auto", torch.device("cpu"), recurrent=True) == "fp32"


@pytest.mark.parametrize(
    ("nodelist", "host"),
    [("gpu[07-09,12],cpu1", "gpu07"), ("cpu1,gpu[1-2]", "cpu1"), ("node3", "node3"),
     ("a100-[4]", "a100-4"), ("n[010-011]", "n010")],
)
def test_first_host_of_a_slurm_node_list(nodelist: str, host: str) -> None:
    assert first_host(nodelist) == host


def test_a_slurm_task_of_several_joins_a_group_at_the_first_node() -> None:
    task = {"SLURM_STEP_NUM_TASKS": "16", "SLURM_NTASKS": "16", "SLURM_PROCID": "9",
            "SLURM_LOCALID": "1",
            "SLURM_JOB_NODELIST": "gpu[03-04]", "SLURM_JOB_ID": "123456"}
    assert process_group_env(task) == ProcessGroupEnv(9, 16, 1, "tcp://gpu03:23456")
    explicit = process_group_env({**task, "MASTER_ADDR": "head", "MASTER_PORT": "29400"})
    assert explicit.init_method == "tcp://head:29400"
    # torchrun's variables win, also under `srun torchrun`
    torchrun = {**task, "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "3"}
    assert process_group_env(torchrun) == ProcessGroupEnv(3, 4, 3, None)
    # a step of one task, or a batch script (SLURM_PROCID=0 of the allocation's SLURM_NTASKS,
    # no step of several): one process
    assert process_group_env({**task, "SLURM_STEP_NUM_TASKS": "1"}) == ProcessGroupEnv()
    batch_script = {k: v for k, v in task.items() if k != "SLURM_STEP_NUM_TASKS"}
    assert process_group_env({**batch_script, "SLURM_PROCID": "0"}) == ProcessGroupEnv()
    assert process_group_env({}) == ProcessGroupEnv()


SLURM_TASK = """
import torch, torch.distributed as dist
from seq2seq.runtime import setup_runtime, teardown
rt = setup_runtime("cpu", "fp32", threads=1)
total = torch.tensor([float(rt.rank + 1)])
dist.all_reduce(total)
print(rt.rank, rt.world_size, rt.local_rank, int(total.item()), dist.get_backend())
teardown(rt)
"""


def test_two_slurm_tasks_form_one_gloo_group() -> None:
    """Two processes with only SLURM's variables (as srun sets them) meet and all-reduce."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = {k: v for k, v in os.environ.items()
            if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")}
    base.update(SLURM_STEP_NUM_TASKS="2", SLURM_NTASKS="2", SLURM_JOB_NODELIST="localhost",
                SLURM_JOB_ID="1",
                MASTER_PORT=str(port))
    tasks = [subprocess.Popen([sys.executable, "-c", SLURM_TASK], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**base, "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank)})
             for rank in (0, 1)]
    outputs = [task.communicate(timeout=120) for task in tasks]
    for task, (_, err) in zip(tasks, outputs, strict=True):
        assert task.returncode == 0, err[-2000:]
    assert [out.split() for out, _ in outputs] == [["0", "2", "0", "3", "gloo"],
                                                   ["1", "2", "1", "3", "gloo"]]
