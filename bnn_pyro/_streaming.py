"""Prediction in blocks of rows, summarised into buffers allocated once: bounded memory.

Every ``predict`` reduces ``S`` predictive samples per row to a mean and a variance. Computing all
``(S, N, O)`` samples first and reducing them afterwards needs several transient copies of that
tensor (and, over many small chunks, fragments the allocator's heap so badly that the peak
resident memory grew from run to run). Here the rows are taken ``block`` at a
time: each block's samples are reduced at once and written into the ``(N, O)`` result buffers, so
the memory of a call is the result plus one block, whatever ``N`` is. With
``return_samples=True`` the ``(S, N, O)`` samples *are* the result: they are written into one
buffer allocated once, never concatenated.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from bnn_pyro._rng import seed_from

__all__ = [
    "BLOCK_BUDGET",
    "block_rows",
    "block_seed",
    "reduce_samples",
    "stream_summary",
]

# Elements of one block's ``(S, rows, width)`` tensors: 4M floats (16 MB in float32). A block
# that size costs a few transient copies (tens of MB) and keeps the per-block Python overhead
# negligible (a 1M-row predict with S = 100 and width 50 takes about a thousand blocks).
BLOCK_BUDGET = 1 << 22

BlockFn = Callable[[int, int], tuple[torch.Tensor, torch.Tensor | None]]


def block_rows(num_samples: int, width: int, budget: int = BLOCK_BUDGET) -> int:
    """Rows per block so that one ``(num_samples, rows, width)`` tensor fits ``budget`` elements
    (at least 1 row).

    Args:
        num_samples: ``S``.
        width: the widest per-row tensor of a block (the widest layer, or the outputs).
        budget: elements per block.

    Returns:
        The number of rows of a block, ``>= 1``.

    Example:
        >>> block_rows(100, 50)
        838
        >>> block_rows(10**9, 10**9)
        1
    """
    return max(1, budget // (max(1, num_samples) * max(1, width)))


def block_seed(seed: int | None, start: int, row_wise: bool) -> int | None:
    """The seed of the block of rows starting at ``start``.

    ``seed`` itself for the first block, and for every block when the draws are whole posterior
    samples (each block must see the same ``S`` weight sets); a seed derived from
    ``(seed, start)`` when the draws are per row (MC dropout's masks), so that blocks do not
    repeat each other's draws.

    Example:
        >>> block_seed(3, 0, True), block_seed(3, 100, False), block_seed(3, 100, True) != 3
        (3, 3, True)
    """
    if seed is None or start == 0 or not row_wise:
        return seed
    cpu = torch.Generator(device="cpu")  # a seed source: the same seeds on every device
    return seed_from(cpu.manual_seed((seed * 1_000_003 + start) % 2**63))


def reduce_samples(samples: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean and population variance over the first dimension of ``samples``.

    Two passes over the data shifted by the first sample: as stable as ``torch.var``, exactly 0
    for identical samples, never negative, and faster on a CPU, where ``torch.var`` over the
    leading dimension runs an unvectorized Welford reduction.

    Args:
        samples: ``(S, N, ...)``.

    Returns:
        ``mean`` and ``variance``, each ``(N, ...)``.

    Example:
        >>> m, v = reduce_samples(torch.tensor([[1.0], [3.0]]))
        >>> m.tolist(), v.tolist()
        ([2.0], [1.0])
    """
    shifted = samples - samples[0]
    offset = shifted.mean(dim=0)
    mean = samples[0] + offset
    shifted -= offset
    variance = shifted.square_().mean(dim=0)
    return mean, variance


def stream_summary(
    num_rows: int, rows: int, block: BlockFn, return_samples: bool = False
) -> tuple[torch.Tensor, ...]:
    """Summarise ``num_rows`` rows, ``rows`` at a time, into result buffers allocated once.

    Args:
        num_rows: ``N``.
        rows: rows per block (see :func:`block_rows`).
        block: ``block(start, stop) -> (samples, extra)``: the ``(S, stop - start, ...)``
            predictive samples of those rows and an ``(stop - start, ...)`` variance to add to
            theirs (e.g. the aleatoric part), or ``None``.
        return_samples: also return the ``(S, N, ...)`` samples.

    Returns:
        ``mean (N, ...)``, ``variance (N, ...)`` and, if asked, ``samples (S, N, ...)``: the
        same numbers as reducing all the samples at once (the reduction is per row).

    Example:
        >>> x = torch.arange(12.0).reshape(3, 4, 1)  # S = 3 samples of 4 rows
        >>> mean, var, s = stream_summary(4, 3, lambda a, b: (x[:, a:b], None), True)
        >>> mean.squeeze(-1).tolist(), var[0].item(), bool(torch.equal(s, x))
        ([4.0, 5.0, 6.0, 7.0], 10.666666984558105, True)
    """
    if rows < 1:
        raise ValueError(f"rows must be >= 1, got {rows}")
    from bnn_pyro.training import distributed  # (here: training imports this module's users)

    if distributed.active():  # a collective: each rank its blocks, then gathered
        return _sharded(num_rows, rows, block, return_samples)
    return _summary(range(0, max(num_rows, 1), rows), num_rows, rows, block, return_samples)


def _sharded(
    num_rows: int, rows: int, block: BlockFn, return_samples: bool
) -> tuple[torch.Tensor, ...]:
    """:func:`stream_summary` under ``torch.distributed``: each rank summarises a contiguous
    run of whole blocks (the same blocks, hence the same draws, as one process), then every
    rank gathers all of them."""
    from bnn_pyro.training import distributed

    blocks = -(-num_rows // rows)
    k = distributed.world_size()

    def span(r: int) -> tuple[int, int]:  # rank r's rows
        return min(blocks * r // k * rows, num_rows), min(blocks * (r + 1) // k * rows, num_rows)

    lo, hi = span(distributed.rank())
    if num_rows == 0:  # nothing anywhere: as one process
        return _summary([0], 0, rows, block, return_samples)
    if hi > lo:
        mine = _summary(
            range(0, hi - lo, rows),
            hi - lo,
            rows,
            lambda a, b: block(lo + a, lo + b),
            return_samples,
        )
    else:  # no block here: empty parts, shaped by a one-row probe
        probe = _summary([0], 1, rows, lambda a, b: block(0, 1), return_samples)
        mine = tuple(t[:, :0] if i == 2 else t[:0] for i, t in enumerate(probe))
    counts = [b - a for a, b in (span(r) for r in range(k))]
    gathered = [distributed.gather_rows(t, counts, 0) for t in mine[:2]]
    if return_samples:
        gathered.append(distributed.gather_rows(mine[2], counts, 1))
    return tuple(gathered)


def _summary(
    starts: Iterable[int], num_rows: int, rows: int, block: BlockFn, return_samples: bool
) -> tuple[torch.Tensor, ...]:
    mean = variance = kept = None
    for start in starts:
        stop = min(start + rows, num_rows)
        samples, extra = block(start, stop)
        if mean is None:
            shape, dtype = (num_rows, *samples.shape[2:]), samples.dtype
            mean = torch.empty(shape, dtype=dtype, device=samples.device)
            variance = torch.empty_like(mean)
            if return_samples:
                kept = samples.new_empty((samples.shape[0], *shape))
        if kept is not None:
            kept[:, start:stop] = samples
        m, v = reduce_samples(samples if kept is None else kept[:, start:stop])
        del samples
        mean[start:stop] = m
        variance[start:stop] = v if extra is None else v + extra
    if return_samples:
        return mean, variance, kept
    return mean, variance
