"""Data-parallel training: what the one loop does when a ``torch.distributed`` group is running.

A training script that calls ``method.fit(X, y, ...)`` runs unchanged under
``torchrun --nproc_per_node=K train.py`` (gloo on CPUs, nccl on GPUs; the script, or torchrun's
environment, initialises the process group). Every rank holds the whole data set; inside
``fit``:

* **rows** -- each rank reads its shard of the rows with ``DistributedSampler`` semantics: one
  permutation of all ``N`` rows per epoch from a seed shared by every rank, padded to a multiple
  of ``K`` by repeating its first rows, rank ``r`` taking positions ``r, r + K, ...``;
  ``batch_size`` is per rank;
* **the ELBO** -- the data plate keeps the *global* ``N`` (a minibatch of ``B`` rows on a rank
  stands for ``N / B``), and the gradients are averaged over the ranks, so the KL enters once
  per global step (averaging ``K`` copies of it) and the likelihood once per row;
* **parameters** -- broadcast from rank 0 before the first step; gradients all-reduced (one
  flat buffer per step) after ``backward`` and before the optimizer: every rank takes the same
  step, so the parameters stay identical without a broadcast per step;
* **randomness** -- each rank draws its own reparameterisation noise and dropout masks (the
  run's seed, then an offset per rank), the row order is shared;
* **Laplace** -- the curvature is summed over the ranks' parts of the rows (every row once);
* **predict** -- a collective: each rank summarises a contiguous run of the row blocks (with
  the same posterior draws: a seed shared by the ranks), and every rank gathers all of them;
  call it on every rank, or inside :func:`local` on one;
* **what a user sees** -- the progress bar on rank 0 only; every history row is the mean over
  the ranks (the same on all of them); :class:`~bnn_pyro.training.callbacks.Checkpoint` writes
  from rank 0 only; a non-finite loss on any rank stops every rank with
  :class:`~bnn_pyro.TrainingDivergedError`; a rank that dies makes the others raise a
  ``RuntimeError`` naming the collective (gloo reports the closed connection at once, otherwise
  the group's timeout).

Without a process group (or with one of size 1) every function here is a no-op.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

import torch
import torch.distributed as dist

__all__ = [
    "DistributedError",
    "active",
    "all_sum",
    "average_gradients",
    "broadcast_module",
    "gather_rows",
    "gradient_bytes",
    "local",
    "mean_row",
    "partition",
    "rank",
    "shared_seed",
    "shard",
    "world_size",
]


class DistributedError(RuntimeError):
    """A collective operation failed: a peer died or the group timed out."""


def _launched_by_torchrun() -> bool:
    env = os.environ
    return int(env.get("WORLD_SIZE", "1")) > 1 and "RANK" in env and "MASTER_ADDR" in env


def active() -> bool:
    """Whether an initialised ``torch.distributed`` group of more than one process is running.

    Under ``torchrun`` (``WORLD_SIZE > 1``, ``RANK`` and ``MASTER_ADDR`` in the environment) a
    script that did not initialise the default group gets one here, on first use: where this
    machine has a GPU for each of its ranks, ``"cpu:gloo,cuda:nccl"`` (each rank on its own GPU,
    collectives on CUDA tensors by nccl), else gloo (more ranks than GPUs, a model kept on the
    CPU of a one-GPU machine among them). So a plain training script runs data-parallel
    unchanged.
    A group made here is destroyed when the interpreter exits (:func:`_destroy_own_group`):
    left alive, gloo's threads can abort the process at exit after the script has finished.

    Example:
        >>> active()  # a plain process
        False
    """
    if not dist.is_available() or _LOCAL[0]:
        return False
    if not dist.is_initialized() and _launched_by_torchrun():
        env = os.environ
        local_ranks = int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"]))
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if local_ranks <= gpus:  # a GPU for each rank on this machine
            dist.init_process_group("cpu:gloo,cuda:nccl")
            torch.cuda.set_device(int(env.get("LOCAL_RANK", "0")))
        else:
            dist.init_process_group("gloo")
        atexit.register(_destroy_own_group)
    return dist.is_initialized() and dist.get_world_size() > 1


_LOCAL = [0]  # depth of local() blocks


def _destroy_own_group() -> None:
    """Destroy the default group that :func:`active` made, if the script has not already:
    after a barrier, so that no rank closes its connections while a peer still waits on them
    (a gloo rank whose peer had gone aborted at exit, "terminate called without an active
    exception", on a busy machine)."""
    if dist.is_available() and dist.is_initialized():
        try:
            dist.barrier()
        except Exception:  # noqa: BLE001 - a peer already gone: tear down regardless
            pass
        dist.destroy_process_group()


@contextmanager
def local() -> Iterator[None]:
    """A block in which this process acts alone: no sharding, no collectives (e.g. a
    ``predict`` that only rank 0 runs; ``predict`` is otherwise a collective).

    Example:
        >>> with local():
        ...     active()
        False
    """
    _LOCAL[0] += 1
    try:
        yield
    finally:
        _LOCAL[0] -= 1


def rank() -> int:
    """This process's rank (0 without a group)."""
    return dist.get_rank() if active() else 0


def world_size() -> int:
    """The number of processes (1 without a group)."""
    return dist.get_world_size() if active() else 1


def _collective(what: str, call) -> None:  # noqa: ANN001
    try:
        call()
    except RuntimeError as err:
        raise DistributedError(
            f"distributed training: {what} failed on rank {dist.get_rank()} of "
            f"{dist.get_world_size()} (a peer process died or the group timed out): {err}"
        ) from err


def _device() -> torch.device:
    """Where the group's collectives run: this rank's GPU for a group with nccl (it needs CUDA
    tensors), else the CPU (gloo)."""
    if "nccl" in str(dist.get_backend()):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def broadcast_module(module: torch.nn.Module) -> None:
    """Copy rank 0's parameters and buffers to every rank, in place."""
    if not active():
        return
    for name, tensor in module.state_dict(keep_vars=True).items():
        data = tensor.data if isinstance(tensor, torch.nn.Parameter) else tensor
        if not isinstance(data, torch.Tensor) or data.numel() == 0:
            continue
        buffer = data.to(_device())
        _collective(f"broadcasting {name!r}", lambda b=buffer: dist.broadcast(b, src=0))
        if buffer is not data:
            data.copy_(buffer)


def shared_seed(seed: int | None) -> int:
    """``seed``, or a random one drawn on rank 0, the same on every rank.

    Example:
        >>> shared_seed(7)
        7
    """
    if seed is None:
        seed = int(torch.randint(2**31, ()).item())
    if not active():
        return seed
    value = torch.tensor([seed], dtype=torch.int64, device=_device())
    _collective("sharing the seed", lambda: dist.broadcast(value, src=0))
    return int(value.item())


def shard(n: int, order: torch.Tensor | None = None) -> torch.Tensor:
    """This rank's rows of ``order`` (``arange(n)`` by default), ``DistributedSampler`` style:
    padded by repeating its first rows to a multiple of the world size, every K-th from the
    rank.

    Example:
        >>> shard(5).tolist()  # one process: every row
        [0, 1, 2, 3, 4]
    """
    order = torch.arange(n) if order is None else order
    k = world_size()
    if k == 1:
        return order
    total = -(-n // k) * k
    padded = torch.cat([order, order[: total - n]]) if total > n else order
    return padded[rank() : total : k]


def partition(n: int) -> torch.Tensor:
    """This rank's rows of ``n``, every row on exactly one rank (no padding): for sums over
    the data, such as a Laplace curvature.

    Example:
        >>> partition(4).tolist()  # one process: every row
        [0, 1, 2, 3]
    """
    return torch.arange(rank(), n, world_size())


def all_sum(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` summed over the ranks (itself without a group)."""
    if not active():
        return tensor
    total = tensor.detach().to(_device()).clone()
    _collective("summing over the ranks", lambda: dist.all_reduce(total))
    return total.to(tensor.device)


def average_gradients(params: Iterable[torch.Tensor], finite: bool = True) -> bool:
    """All-reduce the gradients of ``params`` to their mean over the ranks, in one flat
    buffer, together with whether the loss was finite on every rank.

    Args:
        params: the trained tensors (a missing ``.grad`` counts as zeros).
        finite: whether this rank's loss was finite.

    Returns:
        Whether the loss was finite on every rank (``finite`` itself without a group).
    """
    if not active():
        return finite
    params = list(params)
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    device = _device()
    dtype = grads[0].dtype if grads else torch.float32  # the gradients' own precision
    flag = torch.tensor([0.0 if finite else 1.0], device=device, dtype=dtype)
    flat = torch.cat([*(g.reshape(-1).to(device, dtype) for g in grads), flag])  # one copy
    _collective("averaging the gradients", lambda: dist.all_reduce(flat))
    if flat[-1].item() > 0:
        return False
    flat.div_(dist.get_world_size())
    start = 0
    for p, g in zip(params, grads, strict=True):
        part = flat[start : start + g.numel()].view_as(g)
        if p.grad is None:
            p.grad = part.to(g).clone()
        else:
            p.grad.copy_(part)  # back in place: no new tensors
        start += g.numel()
    return True


def gradient_bytes(params: Iterable[torch.Tensor]) -> int:
    """Bytes :func:`average_gradients` all-reduces per step: one buffer of every gradient in
    the parameters' dtype, plus the finite-loss flag.

    Example:
        >>> gradient_bytes([torch.zeros(3, 4), torch.zeros(4)])  # 16 float32 + the flag
        68
    """
    params = list(params)
    size = params[0].element_size() if params else 4
    return size * (sum(p.numel() for p in params) + 1)


def gather_rows(part: torch.Tensor, counts: list[int], dim: int) -> torch.Tensor:
    """Every rank's ``part`` joined along ``dim`` in rank order; ``counts`` are the sizes of
    the parts along ``dim`` (known on every rank), padded to the largest for the all-gather."""
    if not active():
        return part
    size = max(counts)
    pad = list(part.shape)
    pad[dim] = size - part.shape[dim]
    padded = torch.cat([part, part.new_zeros(pad)], dim).to(_device())
    parts = [torch.empty_like(padded) for _ in counts]
    _collective("gathering the predictions", lambda: dist.all_gather(parts, padded.contiguous()))
    pieces = [p.narrow(dim, 0, c).to(part.device) for p, c in zip(parts, counts, strict=True)]
    return torch.cat(pieces, dim)


def mean_row(row: Mapping[str, float]) -> dict[str, float]:
    """A history row averaged over the ranks (every rank has the same keys)."""
    if not active():
        return dict(row)
    keys = sorted(row)
    values = torch.tensor([float(row[k]) for k in keys], dtype=torch.float64, device=_device())
    _collective("averaging the history row", lambda: dist.all_reduce(values))
    values = (values / dist.get_world_size()).tolist()
    return {k: (row[k] if k == "epoch" else v) for k, v in zip(keys, values, strict=True)}


def rank_noise_seed() -> None:
    """Give this rank its own stream of the global RNG: the run's stream (the same on every
    rank after a seed) advanced by one draw, offset by the rank."""
    if active():
        base = int(torch.randint(2**31, ()).item())
        torch.manual_seed(base + 1_000_003 * rank())
