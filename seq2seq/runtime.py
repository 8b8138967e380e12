"""Device, precision, threads, seeds and distribution, decided once per process.

DDP is detected from the torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK), else from a
SLURM task's (SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID, the rendezvous on the first host
of SLURM_JOB_NODELIST): NCCL on GPUs, gloo on CPUs. Only the main process (rank 0) logs, evaluates
and writes files.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    precision: str  # bf16 | fp16 | fp32
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def autocast(self) -> contextlib.AbstractContextManager:
        """Mixed precision for the forward pass; a no-op in fp32."""
        if self.precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def grad_scaler(self) -> torch.amp.GradScaler | None:
        """Loss scaling is needed for fp16 only; bf16 has the range of fp32."""
        if self.precision != "fp16":
            return None
        return torch.amp.GradScaler(self.device.type)


def pick_device(name: str = "auto", local_rank: int = 0) -> torch.device:
    """auto: cuda > mps > cpu. Under torchrun each process takes the GPU of its local rank."""
    if name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda", local_rank)
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def cpu_has_bf16_units() -> bool:
    """Whether this CPU multiplies bf16 natively, as torch sees it: AMX-BF16 tiles (Sapphire
    Rapids and later Xeons) or AVX512-BF16 dot products (Cooper Lake, Zen 4 and later EPYCs);
    False where torch cannot say."""
    capabilities = getattr(torch.cpu, "get_capabilities", None)
    if capabilities is None:
        return False
    found = capabilities()
    return bool(found.get("amx_bf16", False) or found.get("avx512_bf16", False))


def pick_precision(name: str, device: torch.device, recurrent: bool = False) -> str:
    """auto: bf16 on CUDA that supports it, else fp16 on CUDA; on a CPU, bf16 for a model
    without a recurrent cell where the CPU multiplies bf16 natively (`cpu_has_bf16_units`),
    else fp32.

    The CPU choice is what the benchmark and docs validation measured (docs/benchmark.md,
    docs/docs_corpus.md). The docs Transformer on one thread trains 1.6x faster in bf16 on a
    Xeon with AMX and 2.4x on an EPYC with AVX512-BF16; at an equal number of updates its
    validation loss is 0.05 nats above fp32's at the same seed, where two fp32 seeds differ by
    0.34, so at an equal time it is well ahead. The recurrent models gain too (1.1-2.4x) but
    bf16 was not validated for them, so they stay in fp32. A CPU without bf16 units (AVX2)
    would only emulate it.
    """
    if name not in ("auto", "bf16", "fp16", "fp32"):
        raise ValueError(f"trainer.precision must be auto, bf16, fp16 or fp32, not {name!r}")
    if name != "auto":
        return name
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if device.type == "cpu" and not recurrent and cpu_has_bf16_units():
        return "bf16"
    return "fp32"


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to keep freed blocks for reuse instead of returning them to the OS.

    By default glibc serves blocks of more than 32 MiB (and, adaptively, smaller ones) with
    mmap and unmaps them on free, so every new (N, V) logits tensor or attention activation of
    a CPU training step is page-faulted in again. Disabling mmap for malloc and raising the trim
    threshold keeps that memory in the heap: about 6% more tokens/s for the RNN on this CPU
    (what jemalloc/tcmalloc give, without a preload). In fp32 peak memory is unchanged; the
    process just does not shrink after a peak. In bf16 the heap fragments (oneDNN's primitives
    come and go among the activations) and only grows, so setup_runtime keeps glibc's defaults
    there. Returns whether the settings were applied (Linux with
    glibc only).
    """
    mallopt = _glibc_function("mallopt")
    if mallopt is None:
        return False
    m_trim_threshold, m_top_pad, m_mmap_max = -1, -2, -4
    return all(
        mallopt(param, value) == 1
        for param, value in ((m_mmap_max, 0), (m_trim_threshold, 2**31 - 1), (m_top_pad, 2**28))
    )


ONEDNN_PRIMITIVE_CACHE = 64  # oneDNN primitives kept (its default: 1,024)


def limit_onednn_primitive_cache(capacity: int = ONEDNN_PRIMITIVE_CACHE) -> bool:
    """Keep fewer oneDNN primitives, unless ONEDNN_PRIMITIVE_CACHE_CAPACITY is set already.

    bf16 matrix products on a CPU run through oneDNN, which builds a primitive (JIT kernels
    and buffers) per shape and caches 1,024 of them. Every batch of a training run brings new
    shapes, so the cache only fills: the docs Transformer in bf16 grew to 6.0 GiB resident
    over 1,000 s (92 MiB of JIT code after 30 updates), against a flat 1.4 GiB in fp32. Too
    small a cache rebuilds the primitives an update reuses. The docs Bahdanau in bf16 made
    1,214 tokens/s with 8, 1,677 with 64 and 1,662 with 1,024, and its training peak was
    2,328 MiB with 64 against 2,765 with 1,024 (docs/benchmark.md). oneDNN reads the
    variable when it makes its first primitive, so this must run before any bf16 matrix
    product. Returns whether it set the variable.
    """
    if "ONEDNN_PRIMITIVE_CACHE_CAPACITY" in os.environ:
        return False
    os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = str(capacity)
    return True


def release_freed_memory() -> bool:
    """Hand the pages of freed blocks back to the OS now (glibc's malloc_trim(0)).

    keep_freed_memory() keeps the training step's freed blocks in the heap for the next step;
    a decode needs other shapes, so before one the heap the training left is returned
    instead of sitting under the decode's own allocations: the peak of a run is then the
    larger of the two phases, not their sum. A later training step faults its pages in
    again once (a fraction of a second). Returns whether anything was released (Linux with
    glibc only).
    """
    trim = _glibc_function("malloc_trim")
    return trim is not None and trim(0) == 1


def _glibc_function(name: str) -> Any:
    """glibc's function `name` through ctypes, or None off Linux or under another libc."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL("libc.so.6"), name)
    except (OSError, AttributeError):  # not glibc (e.g. musl)
        return None


def peak_memory_mib() -> float:
    """This process's peak resident memory so far (ru_maxrss), in MiB. It never falls: a run
    measured after another in the same process reads the larger peak of the two, so compare
    trains each variant in a process of its own."""
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 2**10  # bytes on macOS, else KiB


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)  # seeds CUDA too


def dropout_seed(seed: int, rank: int) -> int:
    """The seed of a process's random draws during training (dropout, sampling) once the model
    is built: each rank draws its own masks, as N processes that each see their own batches
    should; rank 0 of N processes draws what a single process would."""
    return seed + rank


@dataclass(frozen=True)
class ProcessGroupEnv:
    """Where this process stands in a data-parallel job, read from its environment.

    `init_method` is None under torchrun (torch reads MASTER_ADDR and MASTER_PORT itself), else
    the `tcp://host:port` rendezvous of a SLURM job.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    init_method: str | None = None


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: `gpu[07-09,12],cpu1` -> `gpu07`, `cpu1,gpu[1-2]` ->
    `cpu1`, `node3` -> `node3`."""
    prefix, bracket, ranges = nodelist.partition("[")
    if "," in prefix or not bracket:  # the first host is written out in full
        return prefix.split(",", 1)[0]
    return prefix + re.split(r"[,\-\]]", ranges, maxsplit=1)[0]


def process_group_env(environ: Mapping[str, str]) -> ProcessGroupEnv:
    """The data-parallel position that `environ` describes.

    torchrun's RANK, WORLD_SIZE and LOCAL_RANK win (also under `srun torchrun`). Else a task
    of a SLURM step of several (`srun`, or hydra's submitit launcher with one task per GPU):
    rank SLURM_PROCID of SLURM_STEP_NUM_TASKS, GPU SLURM_LOCALID, with the rendezvous at
    MASTER_ADDR (default: the first host of SLURM_JOB_NODELIST) and MASTER_PORT (default:
    20000 + SLURM_JOB_ID mod 20000, so two jobs on one node do not collide). The step's count,
    which srun sets (and which equals SLURM_NTASKS inside it), not the allocation's
    SLURM_NTASKS: a batch script also has SLURM_PROCID=0 and SLURM_NTASKS, and a plain
    `python` there is one process, which would otherwise wait for tasks that never start.
    Else one process.
    """
    if "RANK" in environ and "WORLD_SIZE" in environ:
        return ProcessGroupEnv(int(environ["RANK"]), int(environ["WORLD_SIZE"]),
                               int(environ.get("LOCAL_RANK", 0)))
    world_size = int(environ.get("SLURM_STEP_NUM_TASKS", 1))
    if world_size < 2 or "SLURM_PROCID" not in environ:
        return ProcessGroupEnv()
    addr = environ.get("MASTER_ADDR") or first_host(environ.get("SLURM_JOB_NODELIST", ""))
    if not addr:
        raise RuntimeError("a SLURM task of several without SLURM_JOB_NODELIST or MASTER_ADDR: "
                           "no host to meet the other tasks at")
    port = int(environ.get("MASTER_PORT") or 20000 + int(environ.get("SLURM_JOB_ID", 0)) % 20000)
    return ProcessGroupEnv(int(environ["SLURM_PROCID"]), world_size,
                           int(environ.get("SLURM_LOCALID", 0)), f"tcp://{addr}:{port}")


def setup_runtime(
    device: str = "auto", precision: str = "auto", threads: int | None = None, seed: int = 0,
    recurrent: bool = False,
) -> Runtime:
    """Set up this process: DDP group (under torchrun or as a SLURM task), device, precision
    (`pick_precision`; `recurrent`: the model has a recurrent cell), threads, seeds."""
    group = process_group_env(os.environ)
    rank, world_size, local_rank = group.rank, group.world_size, group.local_rank
    dev = pick_device(device, local_rank)
    if world_size > 1 and not dist.is_initialized():
        backend = "nccl" if dev.type == "cuda" else "gloo"
        # init_method None: torchrun's env:// (MASTER_ADDR, MASTER_PORT)
        dist.init_process_group(backend=backend, init_method=group.init_method, rank=rank,
                                world_size=world_size)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    chosen = pick_precision(precision, dev, recurrent)
    if dev.type == "cpu":
        if chosen == "fp32":
            # in bf16 the kept heap only grows: the docs Transformer peaked at 3,675 MiB
            # with it against 3,009 without, at the same losses and speed (docs/benchmark.md)
            keep_freed_memory()
        limit_onednn_primitive_cache()
    if threads:
        torch.set_num_threads(threads)
    elif world_size > 1 and dev.type == "cpu":
        # CPU processes share the cores; oversubscription makes every one of them slower.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    # Same seed on every rank: the model starts identical everywhere (DDP also broadcasts it).
    # The trainer reseeds each rank with seed + rank once the model is built (dropout_seed).
    seed_everything(seed)
    return Runtime(dev, chosen, rank, world_size, local_rank)


def teardown(runtime: Runtime) -> None:
    if runtime.distributed and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(value: torch.Tensor, runtime: Runtime) -> torch.Tensor:
    """Sum a tensor over all processes (a no-op for one process)."""
    if runtime.distributed:
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value


def gather_to_main(value: object, runtime: Runtime) -> list[object]:
    """`value` of every process in rank order on rank 0 (an empty list on the others)."""
    if not runtime.distributed:
        return [value]
    gathered: list[object] | None = [None] * runtime.world_size if runtime.is_main else None
    dist.gather_object(value, gathered, dst=0)
    return gathered or []
