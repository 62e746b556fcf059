"""Posterior samples handed to a prediction (``posterior_samples=``), checked against the model.

A dict ``{site: (S, *shape)}`` from ``MCMC(NUTS(bnn.model)).get_samples()``, from an SG-MCMC
run or written by hand stands in for the guide's draws. Before any work it is checked against
the sites of the model (:func:`model_site_shapes`) by :func:`check_posterior_samples`: every
weight site present, no site the model does not have, each site's shape, one ``S`` for all, no
NaN or inf; draws grouped by chain ``(C, S, *shape)`` (``get_samples(group_by_chain=True)``) or
laid out by ``Predictive`` ``(S, 1, *shape)`` are flattened to ``(C * S, *shape)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyro.poutine as poutine
import torch
from pyro.poutine.util import site_is_subsample

from bnn_pyro._rng import seeded

__all__ = ["check_posterior_samples", "model_site_shapes"]

#: What ``Predictive`` adds to its output besides the sites (the model's return value).
_NOT_SITES = ("_RETURN",)


def model_site_shapes(model: Callable[..., Any], *args: Any) -> dict[str, tuple[int, ...]]:
    """The shape of one value of every sample site of the Pyro ``model`` run on ``args``.

    The model runs once under ``poutine.trace`` on a forked RNG (the caller's random stream is
    left as it was), without gradients; subsample sites are left out.

    Args:
        model: a Pyro model, e.g. ``bnn.model``.
        *args: its arguments, e.g. one row ``x (1, *features)``.

    Returns:
        ``{site: shape}``, e.g. ``{"net.0.weight": (1, 1), "net.0.bias": (1,), "obs": (1, 1)}``.

    Example:
        >>> import bnn_pyro as bp
        >>> bnn = bp.VariationalBNN(bp.nn.mlp(2, [], 1), bp.Gaussian(scale="learned"))
        >>> model_site_shapes(bnn.model, torch.zeros(1, 2))
        {'net.0.weight': (1, 2), 'net.0.bias': (1,), 'likelihood.scale': (1,), 'obs': (1, 1)}
    """
    device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
    with seeded(0, device), torch.no_grad():
        trace = poutine.trace(model).get_trace(*args)
    return {
        name: tuple(site["value"].shape)
        for name, site in trace.nodes.items()
        if site["type"] == "sample" and not site_is_subsample(site)
    }


def _layout(shape: tuple[int, ...]) -> str:
    return f"({', '.join(['S', *map(str, shape)])}{',' if not shape else ''})"


def _as_draws(name: str, value: Any, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    try:
        tensor = value if isinstance(value, torch.Tensor) else torch.as_tensor(value, device=device)
    except (TypeError, ValueError, RuntimeError):
        tensor = None
    if tensor is None or tensor.dtype.is_complex or tensor.dim() == 0:
        got = type(value).__name__ if tensor is None else f"shape {tuple(tensor.shape)}"
        raise TypeError(
            f"posterior_samples[{name!r}] must be a real tensor or array of draws (S, *shape), "
            f"got {got}"
        )
    return tensor.detach().to(device=device, dtype=dtype)


def check_posterior_samples(
    samples: Any,
    shapes: Mapping[str, tuple[int, ...]],
    weights: Sequence[str],
    latents: Sequence[str] = (),
    needed_by: str | None = None,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    note: str = "",
) -> dict[str, torch.Tensor]:
    """``samples`` checked against a model's sites, as the prediction reads them.

    Args:
        samples: ``{site: (S, *shape)}``, or ``(C, S, *shape)`` for every site (chains, or
            ``Predictive``'s ``(S, 1, *shape)``), flattened to ``(C * S, *shape)``.
        shapes: the shape of one draw of every site of the model (:func:`model_site_shapes`);
            a given site that is not one of them is refused.
        weights: the sites the net reads: each must be given.
        latents: the likelihood's own sites (a learned noise scale): checked and kept when
            given; required when ``needed_by`` is set.
        needed_by: the call that reads ``latents`` (named in the error when one is missing), or
            ``None`` when nothing reads them.
        device, dtype: where the draws are put.
        note: appended to a shape error (e.g. how a model lays its sites out).

    Returns:
        ``{site: (S, *shape)}`` for the ``weights`` and the given ``latents``; other sites of
        the model (the observations, a prior's scales) are left out.

    Raises:
        TypeError: ``samples`` is not a dict of tensors or arrays.
        ValueError: a weight site missing; a site the model does not have; a shape that is not
            ``(S, *shape)``; sites with different ``S``, or ``S = 0``; NaN or inf in a draw.

    Example:
        >>> draws = {"w": torch.ones(5, 2), "obs": torch.zeros(5, 3)}
        >>> check_posterior_samples(draws, {"w": (2,), "obs": (3,)}, ["w"])["w"].shape
        torch.Size([5, 2])
        >>> check_posterior_samples({"w": torch.ones(5, 3)}, {"w": (2,)}, ["w"])
        Traceback (most recent call last):
        ...
        ValueError: posterior_samples['w'] must have shape (S, 2) (or (C, S, 2) with a chain dimension), got (5, 3)
    """  # noqa: E501
    if not isinstance(samples, Mapping):
        raise TypeError(
            "posterior_samples must be a dict {site: (S, *shape)} such as mcmc.get_samples(), "
            f"got {type(samples).__name__}"
        )
    bad_keys = [k for k in samples if not isinstance(k, str)]
    if bad_keys:
        raise TypeError(f"posterior_samples must be keyed by site names, got keys {bad_keys}")
    unknown = [k for k in samples if k not in shapes and k not in _NOT_SITES]
    if unknown:
        raise ValueError(
            f"posterior_samples has site(s) {unknown} that are not sites of this model (its "
            f"sites: {list(shapes)}): were they drawn from another model?"
        )
    missing = [k for k in weights if k not in samples]
    if missing:
        raise ValueError(
            f"posterior_samples lacks the weight site(s) {missing}: give a draw of each of "
            f"{list(weights)} (MCMC on bnn.model samples them all)"
        )
    absent = [k for k in latents if k not in samples]
    if needed_by is not None and absent:
        raise ValueError(
            f"{needed_by} needs the likelihood's site(s) {absent} (a learned noise) in "
            "posterior_samples: add their draws (MCMC on bnn.model samples them)"
        )
    used = [*weights, *(k for k in latents if k in samples)]
    if not used:
        raise ValueError("posterior_samples: this model reads no site (it has no weight site)")
    draws = {k: _as_draws(k, samples[k], torch.device(device), dtype) for k in used}
    chained = []
    for name, value in draws.items():
        want, got = tuple(shapes[name]), tuple(value.shape)
        if len(got) == len(want) + 2 and got[2:] == want:
            chained.append(name)
        elif len(got) != len(want) + 1 or got[1:] != want:
            raise ValueError(
                f"posterior_samples[{name!r}] must have shape {_layout(want)} (or (C, "
                f"{_layout(want)[1:]} with a chain dimension), got {got}{note}"
            )
    if chained and len(chained) < len(draws):
        plain = [k for k in draws if k not in chained]
        raise ValueError(
            f"posterior_samples mixes sites with a chain dimension (C, S, ...) {chained} and "
            f"without {plain}: pass mcmc.get_samples() (group_by_chain=False) for every site"
        )
    if chained:
        leading = {k: tuple(v.shape[:2]) for k, v in draws.items()}
        if len(set(leading.values())) > 1:
            raise ValueError(f"posterior_samples must hold one S for all sites, got {leading}")
        draws = {k: v.flatten(0, 1) for k, v in draws.items()}
    counts = {k: v.shape[0] for k, v in draws.items()}
    if len(set(counts.values())) > 1:
        raise ValueError(f"posterior_samples must hold one S for all sites, got {counts}")
    num = next(iter(counts.values()))
    if num == 0:
        raise ValueError("posterior_samples must hold at least one draw (S >= 1), got S = 0")
    for name, value in draws.items():
        bad = int((~torch.isfinite(value)).reshape(num, -1).any(1).sum())
        if bad:
            raise ValueError(
                f"posterior_samples[{name!r}] holds non-finite values in {bad} of {num} draws: "
                "drop those draws (e.g. a diverged chain's) first"
            )
    return draws
