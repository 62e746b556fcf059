"""The contenders of ``sgmcmc_peers.py``: the problem, its exact posterior, and one sampler per
library, each a function ``(X, y, epochs) -> (S, 4)`` samples of ``(w1, w2, w3, b)``.

Every sampler starts from the same net and weights (:func:`start_net`), draws the same
minibatches (:func:`batches`) and keeps the same steps (:func:`kept_steps`).
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import sys
from collections.abc import Callable, Iterator

import torch

import bnn_pyro as bp

ROWS, INPUTS, NOISE, BATCH, SAMPLES = 200, 3, 0.5, 128, 1000
#: posteriors has no default step size: 1e-2 is its examples' (``sghmc`` in
#: examples/pyro_pima_indians, a Bayesian logistic regression; ``sgld`` in tests/sgmcmc)
POSTERIORS_LR = 1e-2

Batches = Callable[[], Iterator[tuple[torch.Tensor, torch.Tensor]]]
Sampler = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]


def data() -> tuple[torch.Tensor, torch.Tensor]:
    """The tests' data (``tests/methods/vi/test_exact_posterior.py``): ``X (200, 3)``,
    ``y (200, 1)``.

    Example:
        >>> X, y = data()
        >>> tuple(X.shape), tuple(y.shape)
        ((200, 3), (200, 1))
    """
    g = torch.Generator().manual_seed(3)
    X = torch.randn(ROWS, INPUTS, generator=g)
    w = torch.tensor([[0.8], [-1.5], [0.3]])
    return X, X @ w + 0.7 + NOISE * torch.randn(ROWS, 1, generator=g)


def exact_posterior(X: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The posterior of ``(w1, w2, w3, b)``: mean ``(4,)`` and covariance ``(4, 4)``, float64.

    Example:
        >>> mean, cov = exact_posterior(*data())
        >>> [round(v, 2) for v in mean.tolist()], round(float(cov[3, 3].sqrt()), 3)
        ([0.81, -1.55, 0.24, 0.73], 0.035)
    """
    phi = torch.cat([X, torch.ones(len(X), 1)], 1).double()
    precision = torch.eye(INPUTS + 1, dtype=torch.float64) + phi.T @ phi / NOISE**2
    covariance = torch.linalg.inv(precision)
    return (covariance @ phi.T @ y.double() / NOISE**2).squeeze(-1), covariance


def start_net() -> torch.nn.Module:
    """Every contender's net and initial weights: ``mlp(3, [], 1)`` made after seed 0.

    Example:
        >>> bool(torch.equal(flat(start_net()), flat(start_net())))
        True
    """
    torch.manual_seed(0)
    return bp.nn.mlp(INPUTS, [], 1)


def flat(net: torch.nn.Module) -> torch.Tensor:
    """The net's ``(w1, w2, w3, b)`` as a float64 ``(4,)`` copy.

    Example:
        >>> flat(start_net()).shape
        torch.Size([4])
    """
    return torch.cat([p.detach().flatten() for p in net.parameters()]).double()


def batches(X: torch.Tensor, y: torch.Tensor) -> Batches:
    """Minibatches of ``BATCH`` rows (the last one of an epoch shorter), reshuffled each epoch
    by a generator of their own (seed 0), as bnn_pyro's ``fit`` draws them.

    Example:
        >>> [len(xb) for xb, _ in batches(*data())()]
        [128, 72]
    """
    generator = torch.Generator().manual_seed(0)

    def epoch() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order = torch.randperm(len(X), generator=generator)
        for start in range(0, len(X), BATCH):
            idx = order[start : start + BATCH]
            yield X[idx], y[idx]

    return epoch


def kept_steps(total: int) -> torch.Tensor:
    """The steps whose positions are kept: ``SAMPLES`` (or every step, if fewer remain) evenly
    over the steps after a burn-in of a quarter of the run.

    Example:
        >>> kept_steps(10_000)[[0, 1, -1]].tolist()
        [2500, 2508, 9999]
    """
    burn_in = total // 4
    return torch.linspace(burn_in, total - 1, min(SAMPLES, total - burn_in)).round().long()


def run_chain(step: Callable[[torch.Tensor, torch.Tensor], None], read: Callable[[], torch.Tensor],
              X: torch.Tensor, y: torch.Tensor, epochs: int) -> torch.Tensor:  # fmt: skip
    """Run ``step(xb, yb)`` on each minibatch of ``epochs`` epochs; the kept ``read()``s.

    Example:
        >>> count = [0]
        >>> run_chain(lambda xb, yb: count.__setitem__(0, count[0] + 1),
        ...           lambda: torch.tensor(float(count[0])), *data(), 4).tolist()
        [3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    """
    total = epochs * math.ceil(len(X) / BATCH)
    keep, kept, k = set(kept_steps(total).tolist()), [], 0
    epoch = batches(X, y)
    for _ in range(epochs):
        for xb, yb in epoch():
            step(xb, yb)
            if k in keep:
                kept.append(read())
            k += 1
    return torch.stack(kept)


def ours(sampler: str, batch_size: int | None = None) -> Sampler:
    """bnn_pyro's ``sampler`` at its defaults: only ``epochs`` chosen (the whole data set per
    step), or with ``batch_size`` and ``lr="measured"`` (the minibatch chain with its control
    variate and measured step).

    Example:
        >>> ours("sghmc")(*data(), 10).shape  # 10 steps: 8 after the burn-in of 2
        torch.Size([8, 4])
        >>> ours("sghmc", BATCH)(*data(), 10).shape  # 2 minibatches of 100 an epoch
        torch.Size([15, 4])
    """

    def run(X: torch.Tensor, y: torch.Tensor, epochs: int) -> torch.Tensor:
        method = bp.make(sampler, start_net(), bp.Gaussian(scale=NOISE))
        lr = None if batch_size is None else "measured"
        method.fit(X, y, epochs=epochs, batch_size=batch_size, lr=lr, progress=False, seed=0)
        s = method.samples()
        return torch.cat([s["net.0.weight"].flatten(1), s["net.0.bias"]], 1).double()

    return run


def mean_log_posterior(net: torch.nn.Module, n: int) -> Callable:
    """posteriors' convention (docs/log_posteriors.md): the log posterior *averaged over the
    data*, ``log p(θ) / N + mean_batch log p(y|x, θ)``, to be sampled at ``temperature=1/N``.

    Example:
        >>> X, y = data()
        >>> net = start_net()
        >>> params = dict(net.named_parameters())
        >>> value, _ = mean_log_posterior(net, 200)(params, (X, y))
        >>> round(float(value), 2)
        -12.51
    """

    def log_posterior(params: dict, batch: tuple[torch.Tensor, torch.Tensor]) -> tuple:
        xb, yb = batch
        f = torch.func.functional_call(net, params, (xb,))
        log_lik = torch.distributions.Normal(f, NOISE).log_prob(yb).mean()
        log_prior = sum(-0.5 * p.square().sum() for p in params.values())
        return log_lik + log_prior / n, torch.tensor([])

    return log_posterior


def posteriors_run(sampler: str, lr: float = POSTERIORS_LR, temperature: float | None = None,
                   **options: float) -> Sampler:  # fmt: skip
    """posteriors' ``sgmcmc.<sampler>.build(log_posterior, lr, temperature=1/N, **options)``,
    every other argument at its default (SGHMC: ``alpha=0.01``, ``sigma=1``, momenta drawn from
    N(0, 1)). ``temperature`` replaces ``1/N`` (0: the noise-free drift, for the scaling
    check of ``sgmcmc_peers.py``).

    Example:
        >>> import pytest; _ = pytest.importorskip("posteriors")
        >>> posteriors_run("sgld")(*data(), 10).shape
        torch.Size([15, 4])
    """

    def run(X: torch.Tensor, y: torch.Tensor, epochs: int) -> torch.Tensor:
        import posteriors

        net = start_net()
        params = {k: v.detach().clone() for k, v in net.named_parameters()}
        temp = 1.0 / len(X) if temperature is None else temperature
        build = getattr(posteriors.sgmcmc, sampler).build
        transform = build(mean_log_posterior(net, len(X)), lr=lr, temperature=temp, **options)
        state = [transform.init(params)]

        def step(xb: torch.Tensor, yb: torch.Tensor) -> None:
            state[0], _ = transform.update(state[0], (xb, yb))

        def read() -> torch.Tensor:
            return torch.cat([v.flatten() for v in state[0].params.values()]).double()

        return run_chain(step, read, X, y, epochs)

    return run


@functools.cache
def load_torch_uncertainty_optim() -> object:
    """torch-uncertainty's ``optim`` module: imported, or (if the package's ``__init__`` needs a
    missing heavy dependency) its ``sghmc.py`` and ``sgld.py`` loaded by path (torch only); its
    ``loaded`` attribute says which.

    Example:
        >>> import importlib.util, pytest  # installed, even where its own import fails
        >>> if importlib.util.find_spec("torch_uncertainty") is None:
        ...     pytest.skip("torch-uncertainty is not installed: pip install -e '.[peers]'")
        >>> sorted(n for n in ("SGHMC", "SGLD") if hasattr(load_torch_uncertainty_optim(), n))
        ['SGHMC', 'SGLD']
    """
    try:
        import torch_uncertainty.optim as optim

        optim.loaded = "imported"
        return optim
    except ImportError as error:
        spec = importlib.util.find_spec("torch_uncertainty")
        if spec is None or not spec.submodule_search_locations:
            raise
        folder = os.path.join(list(spec.submodule_search_locations)[0], "optim")
        module = type(sys)("torch_uncertainty_optim")
        for name, cls in (("sghmc", "SGHMC"), ("sgld", "SGLD")):
            file = importlib.util.spec_from_file_location(f"tu_{name}", f"{folder}/{name}.py")
            loaded = importlib.util.module_from_spec(file)
            file.loader.exec_module(loaded)
            setattr(module, cls, getattr(loaded, cls))
        module.loaded = f"sghmc.py and sgld.py loaded by path (the package: {error})"
        return module


def torch_uncertainty_run(optimizer: str, noise_factor: float | None, summed: bool,
                          lr: float | None = None, **more: float) -> Sampler:  # fmt: skip
    """torch-uncertainty's ``optimizer`` (``"SGHMC"`` | ``"SGLD"``) at its defaults but for
    ``noise_factor`` (``None``: its default 1e-2), ``lr`` (``None``: its default) and ``more``, on
    ``loss.backward(); opt.step()``. The loss: the Gaussian NLL averaged over the minibatch, as
    their routines minimise (``nn.GaussianNLLLoss``, reduction ``mean``, variance 0.5²), the
    N(0, 1) prior as ``weight_decay = 1/N``: ``U(θ)/N``; or, ``summed``, that times ``N``
    with ``weight_decay = 1``: the minibatch estimate of ``U(θ) = -log p(θ, D)`` itself.

    Example:
        >>> import importlib.util, pytest  # installed, even where its own import fails
        >>> if importlib.util.find_spec("torch_uncertainty") is None:
        ...     pytest.skip("torch-uncertainty is not installed: pip install -e '.[peers]'")
        >>> torch_uncertainty_run("SGLD", 1.0, summed=True)(*data(), 10).shape
        torch.Size([15, 4])
    """

    def run(X: torch.Tensor, y: torch.Tensor, epochs: int) -> torch.Tensor:
        cls = getattr(load_torch_uncertainty_optim(), optimizer)
        net, n = start_net(), len(X)
        options = {"weight_decay": 1.0 if summed else 1.0 / n, **more}
        if noise_factor is not None:
            options["noise_factor"] = noise_factor
        if lr is not None:
            options["lr"] = lr
        opt = cls(net.parameters(), **options)
        nll = torch.nn.GaussianNLLLoss(reduction="mean")

        def step(xb: torch.Tensor, yb: torch.Tensor) -> None:
            opt.zero_grad()
            loss = nll(net(xb), yb, torch.full_like(yb, NOISE**2))
            (loss * n if summed else loss).backward()
            opt.step()

        return run_chain(step, lambda: flat(net), X, y, epochs)

    return run


def available(module: str) -> bool:
    """Whether ``module`` can be found (a peer that is not installed gives no rows).

    Example:
        >>> available("torch"), available("no_such_module")
        (True, False)
    """
    return importlib.util.find_spec(module) is not None
