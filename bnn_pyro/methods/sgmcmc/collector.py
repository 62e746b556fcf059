"""``SampleCollector``: which states of a chain become posterior samples, in bounded memory.

A chain's steps ``0, 1, 2, ...`` are offered one by one. The first ``burn_in`` are dropped;
after them every ``thinning``-th step is a candidate (a caller may also veto a step, e.g. one
outside the sampling stage of a cyclical schedule). At most ``max_samples`` candidates are
kept: once more arrive, reservoir sampling (Vitter's algorithm R, from a seeded generator of
its own) keeps each of the ``n`` candidates seen so far with the same probability
``max_samples / n``, so the kept samples are a uniform subset of the chain's candidates,
however long it runs. They come back in the chain's order (each remembers its step), as
autocorrelation-based diagnostics need.

A chain that may step back (:mod:`~bnn_pyro.methods.sgmcmc.stability`) marks the collector
(:meth:`SampleCollector.mark`) and can later undo every offer since a mark
(:meth:`SampleCollector.rewind`): the collector then holds what it held at the mark, rows that
later samples replaced included (each replaced row is journaled until its mark is released).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from bnn_pyro._checks import check_int

__all__ = ["SampleCollector"]


class SampleCollector:
    """Keep at most ``max_samples`` flat ``(P,)`` samples of a chain (see the module docstring).

    Args:
        max_samples: the memory bound ``K`` (>= 1): the samples are one ``(K', P)`` tensor,
            ``K' <= K``.
        burn_in: steps dropped at the start (>= 0).
        thinning: keep every ``thinning``-th step after the burn-in (>= 1).
        seed: seeds the reservoir's choices (``None``: drawn from the global RNG).

    Shapes:
        :meth:`offer` takes a callable returning ``(P,)``; :attr:`samples` is ``(K', P)``.

    Example:
        >>> collector = SampleCollector(max_samples=3, burn_in=2, thinning=2, seed=0)
        >>> for step in range(10):
        ...     _ = collector.offer(step, lambda: torch.tensor([float(step)]))
        >>> collector.seen, collector.samples.shape  # candidates: steps 2, 4, 6, 8
        (4, torch.Size([3, 1]))
    """

    def __init__(
        self, max_samples: int, burn_in: int = 0, thinning: int = 1, seed: int | None = None
    ) -> None:
        self.max_samples = check_int("max_samples", max_samples)
        self.burn_in = check_int("burn_in", burn_in, minimum=0)
        self.thinning = check_int("thinning", thinning)
        if seed is None:
            seed = int(torch.randint(2**62, (1,)))  # in [0, 2^62)
        self.generator = torch.Generator().manual_seed(seed)
        self.seen = 0  # candidates offered so far
        self.store: torch.Tensor | None = None  # (<= max_samples, P), grown as samples come
        self.steps = torch.empty(0, dtype=torch.long)  # the step of each stored sample
        self.kept = 0
        # (slot, its row and step before an offer replaced them), kept while a mark may rewind
        self._journal: list[tuple[int, torch.Tensor, int]] = []
        self._released = 0  # journal entries dropped from the front (marks count from 0)
        self._journaling = False

    def is_candidate(self, step: int) -> bool:
        """Whether step ``step`` (0-based) is past the burn-in and on the thinning grid.

        Example:
            >>> [SampleCollector(5, burn_in=1, thinning=2).is_candidate(s) for s in range(5)]
            [False, True, False, True, False]
        """
        return step >= self.burn_in and (step - self.burn_in) % self.thinning == 0

    def offer(self, step: int, sample: Callable[[], torch.Tensor]) -> bool:
        """Offer step ``step``; ``sample()`` (a ``(P,)`` tensor, copied) is called only when
        the step is kept. Returns whether it was.

        Example:
            >>> collector = SampleCollector(2)
            >>> [collector.offer(s, lambda: torch.zeros(1)) for s in range(2)]
            [True, True]
        """
        if not self.is_candidate(step):
            return False
        self.seen += 1
        if self.kept < self.max_samples:
            slot = self.kept
        else:  # algorithm R: keep the n-th candidate with probability K / n, in a random slot
            slot = int(torch.randint(self.seen, (1,), generator=self.generator))  # [0, n)
            if slot >= self.max_samples:
                return False
        value = sample().detach()
        if self.store is None or slot >= len(self.store):  # grow by doubling, up to K rows
            rows = min(self.max_samples, max(16, 2 * self.kept))
            grown = value.new_empty((rows, *value.shape))
            steps = torch.empty(rows, dtype=torch.long)
            if self.store is not None:
                grown[: self.kept] = self.store[: self.kept]
                steps[: self.kept] = self.steps[: self.kept]
            self.store, self.steps = grown, steps
        if self._journaling and slot < self.kept:  # a replaced row: journaled for a rewind
            self._journal.append((slot, self.store[slot].clone(), int(self.steps[slot])))
        self.store[slot] = value
        self.steps[slot] = step
        self.kept = max(self.kept, slot + 1)
        return True

    def mark(self) -> tuple[int, int, torch.Tensor, int]:
        """A point :meth:`rewind` can return to; from the first mark on, each row an offer
        replaces is journaled (until :meth:`release` drops it).

        Example:
            >>> collector = SampleCollector(max_samples=2, seed=0)
            >>> _ = [collector.offer(s, lambda s=s: torch.tensor([float(s)])) for s in range(2)]
            >>> point = collector.mark()
            >>> _ = [collector.offer(s, lambda s=s: torch.tensor([float(s)])) for s in range(2, 9)]
            >>> collector.rewind(point)
            >>> collector.seen, collector.samples[:, 0].tolist()
            (2, [0.0, 1.0])
        """
        self._journaling = True
        state = self.generator.get_state()
        return (self.seen, self.kept, state, self._released + len(self._journal))

    def rewind(self, mark: tuple[int, int, torch.Tensor, int]) -> None:
        """Undo every offer since ``mark`` (one :meth:`mark` returned, not yet released): the
        samples, the count of candidates and the reservoir's generator are as they were then.

        Raises:
            ValueError: a mark already released.
        """
        seen, kept, state, at = mark
        if at < self._released:
            raise ValueError("this mark was released: the collector cannot rewind to it")
        while self._released + len(self._journal) > at:
            slot, row, step = self._journal.pop()
            self.store[slot] = row  # type: ignore[index]
            self.steps[slot] = step
        self.seen, self.kept = seen, kept
        self.generator.set_state(state)

    def release(self, mark: tuple[int, int, torch.Tensor, int]) -> None:
        """Forget the journal before ``mark``: no rewind will go back further (memory)."""
        drop = mark[3] - self._released
        if drop > 0:
            del self._journal[:drop]
            self._released += drop

    @property
    def samples(self) -> torch.Tensor:
        """The kept samples ``(K', P)`` (``K' = min(seen, max_samples)``), in the order of their
        steps in the chain.

        Example:
            >>> SampleCollector(4).samples.shape
            torch.Size([0, 0])
            >>> collector = SampleCollector(max_samples=5, seed=0)
            >>> for step in range(50):
            ...     _ = collector.offer(step, lambda: torch.tensor([float(step)]))
            >>> bool((collector.samples[1:, 0] > collector.samples[:-1, 0]).all())  # in order
            True
        """
        if self.store is None:
            return torch.empty(0, 0)
        order = self.steps[: self.kept].argsort().to(self.store.device)
        return self.store[: self.kept][order]
