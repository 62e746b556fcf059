"""Posterior samples of the weights, and the net evaluated on all of them at once.

``draw_posterior`` takes ``S`` joint samples from any guide in one vectorized pass: the library's
own guide samples its Gaussians directly; a Pyro autoguide runs once under a plate of size ``S``
(what ``Predictive(parallel=True)`` does). ``NetEvaluator`` then evaluates the net on all ``S``
weight samples: as one batched forward pass of a plain-torch twin of the net when its layers
accept leading sample dimensions (verified once against ``torch.func.vmap`` on a small slice),
else under ``vmap``. Either way the net runs on the given weights alone: a prior's own latent
sites (a hierarchical scale) are neither needed nor drawn.
There is no Python loop over the samples on either path.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyro
import pyro.poutine as poutine
import torch
import torch.nn as nn
from pyro.poutine.util import site_is_subsample

from bnn_pyro._rows import fill_rows
from bnn_pyro.guides import MeanFieldNormalGuide
from bnn_pyro.nn.batched import BatchedTwin, chunk_rows, distinct_probe, same_results
from bnn_pyro.nn.chain import LinearChain
from bnn_pyro.nn.modes import modes
from bnn_pyro.nn.pyro_net import DEVICE_REF, BayesianSite, FixedLatents

__all__ = ["draw_posterior", "NetEvaluator"]

_PLATE = "_bnn_posterior_samples"


@torch.no_grad()
def draw_posterior(
    guide: nn.Module,
    num_samples: int,
    x: torch.Tensor,
    generator: torch.Generator | None = None,
) -> dict[str, torch.Tensor]:
    """``num_samples`` joint posterior samples of every latent site.

    Args:
        guide: a :class:`MeanFieldNormalGuide` or an
            :class:`~bnn_pyro.guides.AutoGuideWrapper`, already set up.
        num_samples: ``S``.
        x: ``(n, ...)`` a few inputs (autoguides run the guide with the model's arguments).
        generator: random source for the mean-field guide; autoguides use the global RNG.

    Returns:
        ``{site: (S, *site_shape)}``.
    """
    if isinstance(guide, MeanFieldNormalGuide):
        return guide.sample_posterior(num_samples, generator=generator)
    inner = guide  # an AutoGuideWrapper runs its guide in the model's own param store
    with pyro.plate(_PLATE, num_samples, dim=-2):
        trace = poutine.trace(inner).get_trace(x[:1], None)
    samples = {}
    for name, site in trace.iter_stochastic_nodes():
        if site["infer"].get("is_auxiliary") or site_is_subsample(site):
            continue
        value = site["value"]
        event_dim = site["fn"].event_dim
        # Under the plate a global site is laid out (S, 1, *event); drop the placeholder.
        if value.dim() == event_dim + 2:
            value = value.squeeze(1)
        samples[name] = value.expand(num_samples, *value.shape[1:])
    return samples


class NetEvaluator:
    """Evaluates a converted net on ``S`` weight samples: ``(params, x) -> (S, n, ...)``.

    The batched path runs a plain-torch *twin* of the net (the user's net with its linear/conv
    layers swapped for the sample-dimension-aware ones): the sampled weights are set on it once
    per call, its point-estimate parameters and buffers are the Pyro net's own tensors, and each
    chunk of rows is then one plain forward pass, without Pyro's per-call machinery. Whether the
    twin computes what the Pyro net computes under ``vmap`` is checked once, on a probe; if not,
    every call uses ``vmap``.

    Args:
        net: the ``PyroModule`` net from :func:`bnn_pyro.nn.pyro_net.make_bayesian_`.
        sites: its Bayesian sites.
        plain: a copy of the net as the user gave it (before the conversion).
    """

    def __init__(self, net: nn.Module, sites: list[BayesianSite], plain: nn.Module) -> None:
        self.net = net
        self.sites = list(sites)
        self.site_names = [s.name for s in self.sites]
        self.batched: bool | None = None  # decided on first use
        self.paths = {s.name: f"{s.module_name}.{s.param_name}".lstrip(".") for s in sites}
        self.twin = BatchedTwin(plain, list(self.paths.values()))
        self._chain = LinearChain.of(plain)  # the prediction kernel of a plain MLP, or None
        self._plain = plain

    def _shared(self) -> dict[str, torch.Tensor]:
        named = {**dict(self.net.named_parameters()), **dict(self.net.named_buffers())}
        return {k: v for k, v in named.items() if not k.endswith(DEVICE_REF)}

    def _batched(
        self, params: Mapping[str, torch.Tensor], x: torch.Tensor, chunk: int | None = None
    ) -> torch.Tensor:
        stacked = {self.paths[name]: value for name, value in params.items()}
        return self.twin.run(self._shared(), stacked, x, chunk, self.net.training)

    def _chained(
        self, params: Mapping[str, torch.Tensor], x: torch.Tensor, chunk: int | None = None
    ) -> torch.Tensor:
        assert self._chain is not None
        tensors = {**self._shared(), **{self.paths[k]: v for k, v in params.items()}}
        return self._chain.run(tensors, x, chunk)

    def _vmapped(self, params: Mapping[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        def one(p: dict[str, torch.Tensor]) -> torch.Tensor:
            # the weights given; a prior's own latents (a hierarchical scale) are not drawn:
            # the net does not read them, and vmap refuses a draw the batch does not carry
            with FixedLatents(p):
                return self.net(x)

        return torch.func.vmap(one, randomness="different")(dict(params))

    def _decide(self, params: Mapping[str, torch.Tensor], x: torch.Tensor) -> None:
        # the question is the forward's arithmetic, asked with every module in eval mode (each
        # one's flag given back after): in training mode its dropout would draw other masks on
        # each path and send every later call to vmap (the first call, the targets' check at
        # the start of fit, runs in training mode)
        with modes(self.net, lambda m: False):
            self._probe(params, x)

    def _probe(self, params: Mapping[str, torch.Tensor], x: torch.Tensor) -> None:
        probe = {k: v[:1].expand(2, *v.shape[1:]) for k, v in params.items()}
        self.batched = same_results(
            lambda: self._batched(probe, x[:3]), lambda: self._vmapped(probe, x[:3])
        )
        if not self.batched:  # the twin with the samples folded into the batch dim (flatten)
            self.twin.fold = True
            distinct = distinct_probe(params)
            self.batched = same_results(
                lambda: self._batched(distinct, x[:3]), lambda: self._vmapped(distinct, x[:3])
            )
            self.twin.fold = self.batched
        if self._chain is not None and not (
            self.batched
            and same_results(
                lambda: self._chained(probe, x[:3]), lambda: self._vmapped(probe, x[:3])
            )
        ):
            self._chain = None

    @torch.no_grad()
    def __call__(
        self, params: Mapping[str, torch.Tensor], x: torch.Tensor, chunk_size: int | None = None
    ) -> torch.Tensor:
        """Net outputs for every sample, ``chunk_size`` rows at a time.

        A net that is a chain of linear layers and activations runs through
        :class:`~bnn_pyro.nn.chain.LinearChain` (blocks of samples, see there), any other
        through the twin in chunks of rows, or ``vmap`` when the twin does not apply.

        Args:
            params: ``{site: (S, *site_shape)}`` (other keys are ignored).
            x: ``(n, ...)`` inputs.
            chunk_size: at most this many rows per pass (default: sized from the layer widths
                and ``S``, so that one pass's activations stay within a few MB).

        Returns:
            ``(S, n, ...)``.
        """
        params = {k: params[k] for k in self.site_names}
        if self.batched is None:
            self._decide(params, x)
        num_samples = next(iter(params.values())).shape[0]
        chunk = chunk_size or chunk_rows(self._plain, num_samples, device=x.device)
        if not self.batched:
            return fill_rows(lambda a, b: self._vmapped(params, x[a:b]), x.shape[0], chunk)
        if num_samples == 1:  # a lone sample dim of size 1 reads as "no sample dim": pad to 2
            padded = {k: v.expand(2, *v.shape[1:]) for k, v in params.items()}
            return self(padded, x, chunk_size)[:1]
        if self._chain is not None:
            return self._chained(params, x, chunk_size)
        return self._batched(params, x, chunk)
