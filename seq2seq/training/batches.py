"""This process's training batches, epoch after epoch, and the micro-batches of each update.

An epoch is the training split as segmented for it (the prepared pieces, or with subword
sampling a segmentation drawn from (seed, epoch)), cut into batches of about `batch_tokens`
tokens and shared out among the processes. Batches are collated ahead by loader workers; every
update takes `accum_steps` of them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import torch
from torch import Tensor
from torch.utils.data import DataLoader

from seq2seq.corpus import EncodedSplit, SegmentationSampler
from seq2seq.data.batching import Batch, collate, token_batches


class TrainBatches:
    """The training batches of one process.

    Args:
        split: the prepared training split.
        device: where the batches go.
        batch_tokens: source + target tokens per batch, padding included.
        accum_steps: batches (micro-batches) per update.
        pad_to_multiple: sequence lengths are padded up to a multiple of this.
        num_workers: loader processes collating ahead (0: in this process).
        seed: the run's seed; with the epoch, it fixes each epoch's order (and segmentation).
        rank, world_size: this process among all of them; each takes its share of an epoch.
        sampler: builds the subword sampler, on first use (it segments the whole split n
            ways); None: every epoch trains on the prepared segmentation.
        reference: guided alignment's (rows, T, S) -> (B, T, S) references, built into each
            batch as it is collated (`Guidance.reference`); None: unguided.
        groups: (rows, S) -> (B, S) source word groups, collated the same way
            (`Guidance.groups`; None from it at the piece level).
    """

    def __init__(
        self,
        split: EncodedSplit,
        device: torch.device,
        *,
        batch_tokens: int,
        accum_steps: int = 1,
        pad_to_multiple: int = 1,
        num_workers: int = 0,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        sampler: Callable[[], SegmentationSampler] | None = None,
        reference: Callable[[Tensor, int, int], Tensor] | None = None,
        groups: Callable[[Tensor, int], Tensor | None] | None = None,
    ) -> None:
        self.train_split, self.device = split, device
        self.batch_tokens, self.accum_steps = batch_tokens, accum_steps
        self.pad_to_multiple, self.num_workers = pad_to_multiple, num_workers
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self._make_sampler = sampler
        self._reference, self._groups = reference, groups
        self._sampler: SegmentationSampler | None = None
        self._sampled: tuple[int, EncodedSplit] | None = None  # (epoch, its segmentation)

    def epoch_split(self, epoch: int) -> EncodedSplit:
        """The training pairs as segmented for `epoch`: the prepared split, or a segmentation
        sampled from (seed, epoch), the same on every process and again after a resume."""
        if self._make_sampler is None:
            return self.train_split
        if self._sampler is None:
            self._sampler = self._make_sampler()
        if self._sampled is None or self._sampled[0] != epoch:
            self._sampled = (epoch, self._sampler.sample(self.seed, epoch))
        return self._sampled[1]

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """This process's batches of `epoch`, as row indices into `epoch_split(epoch)`."""
        split = self.epoch_split(epoch)
        return token_batches(
            split.src_lens,
            split.tgt_lens,
            self.batch_tokens,
            shuffle=True,
            seed=self.seed,
            epoch=epoch,
            rank=self.rank,
            world_size=self.world_size,
        )

    def collate(self, split: EncodedSplit, indices: list[int]) -> Batch:
        """A batch of `split` rows on the CPU (in a loader worker when num_workers > 0), with
        guided alignment's references where guided."""
        batch = collate(
            [split.src_ids[i] for i in indices],
            [split.tgt_ids[i] for i in indices],
            indices,
            pad_to_multiple=self.pad_to_multiple,
        )
        if self._reference is not None:
            batch.reference = self._reference(batch.indices, batch.tgt_in.size(1),
                                              batch.src.size(1))
        if self._groups is not None:
            batch.groups = self._groups(batch.indices, batch.src.size(1))
        return batch

    def to_device(self, batch: Batch) -> Batch:
        return batch.to(self.device, non_blocking=self.device.type == "cuda")

    def stream(self, epoch: int, start: int) -> Iterator[Batch]:
        """The batches of `epoch` from position `start`, collated ahead by `num_workers`
        processes into pinned memory when training on a GPU."""
        batches = self.epoch_batches(epoch)[start:]
        return iter(DataLoader(
            batches,  # type: ignore[arg-type]
            batch_size=None,
            collate_fn=functools.partial(self.collate, self.epoch_split(epoch)),
            num_workers=self.num_workers,
            pin_memory=self.device.type == "cuda",
            prefetch_factor=4 if self.num_workers > 0 else None,
            # its own generator: a new iterator must not draw from the global RNG, or a
            # resumed run (which starts one mid-epoch) would drift from an uninterrupted one
            generator=torch.Generator().manual_seed(epoch),
        ))

    def updates(self, epoch: int, position: int) -> Iterator[tuple[list[Batch], int, int]]:
        """From batch `position` of `epoch` on: the `accum_steps` micro-batches of each update,
        on the device, with the (epoch, position) reached after them; an update that takes an
        epoch's last batch reaches the next epoch's start, so an epoch budget stops there."""
        length = len(self.epoch_batches(epoch))
        stream = self.stream(epoch, position)
        while True:
            micro: list[Batch] = []
            while len(micro) < self.accum_steps:
                batch = next(stream, None)
                if batch is None:
                    epoch, position = epoch + 1, 0
                    length = len(self.epoch_batches(epoch))
                    stream = self.stream(epoch, 0)
                    continue
                micro.append(self.to_device(batch))
                position += 1
            yield micro, *((epoch + 1, 0) if position == length else (epoch, position))
