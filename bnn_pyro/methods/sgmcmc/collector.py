"""``SampleCollector``: which states of a chain become posterior samples, in bounded memory.

A chain's steps ``0, 1, 2, ...`` are offered one by one. The first ``burn_in`` are dropped;
after them every ``thinning``-th step is a candidate (a caller may also veto a step, e.g. one
outside the sampling stage of a cyclical schedule). At most ``max_samples`` candidates are
kept: once more arrive, reservoir sampling (Vitter's algorithm R, from a seeded generator of
its own) keeps each of the ``n`` candidates seen so far with the same probability
``max_samples / n``, so the kept samples are a uniform subset of the chain's candidates,
however long it runs. They come back in the chain's order (each remembers its step), as
autocorrelation-based diagnostics need.
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
        self.store[slot] = value
        self.steps[slot] = step
        self.kept = max(self.kept, slot + 1)
        return True

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
