# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 1. Toy regression: which methods know what they do not know?
#
# One-dimensional data with a gap: 100 points of `y = sin(2x) + x/2 + 0.1 ε` on
# `[-3, -1] ∪ [1, 3]`, nothing in `(-1, 1)`. Between the two clouds the wiggle of `sin(2x)` is
# not observed, so a good posterior should be *less sure* there ("in-between uncertainty",
# Foong et al. 2019).
#
# Every method gets the same 1-50-1 tanh net (same initial weights), trained on the standardised
# rows, and the true observation noise (0.1), so the bands below differ only in their
# **epistemic** part. The reference is NUTS run on the very `VariationalBNN.model` that SVI
# trains (the model holds no parameters of its own, so `MCMC(NUTS(bnn.model))` works unchanged):
# four chains, converged on the predicted function at every point, cached with the script that
# makes it.
#
# What to look at: the width of the bands in the grey gap against their width on the data,
# the table's ratio `std in the gap / std on the data`, and the test log-likelihood in the gap
# (a band that is too narrow where the function is unknown is punished there).
#
# Run time: under a minute on one CPU core (the NUTS reference is read from its cache).
# `BNN_PYRO_NOTEBOOK_FAST=1` shrinks epochs and samples for the test suite (its numbers mean
# nothing).

# %%
import copy
import os
import time
from contextlib import contextmanager
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown, display

import bnn_pyro as bp
from bnn_pyro.datasets import toy_function, toy_regression_1d
from bnn_pyro.metrics import gaussian_log_likelihood, rmse
from bnn_pyro.plots import plot_predictive_1d

FAST = os.environ.get("BNN_PYRO_NOTEBOOK_FAST", "") == "1"
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100})

VI_EPOCHS = 300 if FAST else 3000  # full-batch SVI steps
TORCH_EPOCHS = 100 if FAST else 2000  # dropout, ensemble, Laplace's MAP (full batch)
SWAG_EPOCHS = 50 if FAST else 1000  # minibatches of 10
SGHMC_EPOCHS = 80 if FAST else 6000  # full batch: one sampler step an epoch
S = 50 if FAST else 200  # predictive samples
print("mode:", "fast (BNN_PYRO_NOTEBOOK_FAST=1)" if FAST else "full")

# %% [markdown]
# ## Data
#
# The plots use the reference's grid of 201 points on `[-4, 4]`; the test points are its points
# in `[-3, 3]` with fresh noise, and the metrics are reported separately on the data region and
# in the gap. Every method trains on the rows standardised by their own mean and sd, with the
# noise in those units, and predicts back in the data's units (`raw` below).

# %%
NOISE, GAP = 0.1, (-1.0, 1.0)
X, y = toy_regression_1d(n=100, gap=GAP, noise_std=NOISE, seed=0)
# the converged NUTS reference of this problem and model, made by benchmarks/no_data_judge.py
CACHE = Path("benchmarks", "results", "no_data", "demo.pt")
REFERENCE = torch.load(CACHE if CACHE.exists() else ".." / CACHE, weights_only=True)
x_plot = REFERENCE["grid"]  # (201, 1)
x_test = x_plot[x_plot.abs().squeeze(-1) <= 3]
y_test = toy_function(x_test) + NOISE * torch.randn(
    x_test.shape, generator=torch.Generator().manual_seed(1)
)
in_gap = ((x_test > GAP[0]) & (x_test < GAP[1])).squeeze(-1)

x_mean, x_std, y_mean, y_std = float(X.mean()), float(X.std()), float(y.mean()), float(y.std())
Xs, ys = (X - x_mean) / x_std, (y - y_mean) / y_std
noise = NOISE / y_std  # the known noise, in the standardised units the methods train in


def raw(predict):
    """A method's `predictive_gaussian` on the data's units: `x (N, 1)` -> `(locs, scales)`."""

    def on_raw(x):
        locs, scales = predict((x - x_mean) / x_std)
        return locs * y_std + y_mean, torch.as_tensor(scales) * y_std

    return on_raw


def make_net(dropout=0.0, seed=0):
    """The 1-50-1 tanh net, with the same initial weights for every method."""
    torch.manual_seed(seed)
    return bp.nn.mlp(1, [50], 1, activation="tanh", dropout=dropout)


fit_seconds = {}


@contextmanager
def clock(name):
    """`with clock(name):` records the wall time of the block in `fit_seconds[name]`."""
    start = time.perf_counter()
    yield
    fit_seconds[name] = time.perf_counter() - start


fig, ax = plt.subplots(figsize=(7, 3))
ax.scatter(X, y, s=10, color="k", label="training data")
ax.plot(x_plot, toy_function(x_plot), "k:", lw=1, label="true f(x)")
ax.axvspan(*GAP, color="0.9", zorder=0, label="gap")
ax.legend(fontsize="small")
plt.show()

# %% [markdown]
# ## Variational inference: weight space and local reparameterization
#
# `VariationalBNN` with the layerwise prior `N(0, 1/fan_in)` (Neal's scaling, so the prior over
# functions does not blow up with the width) and the exact mean-field guide; full-batch SVI with
# `elbo="meanfield"` (closed-form KL). The second model is the same posterior family trained with
# local reparameterization (pre-activations are sampled instead of weights).

# %%
prior = bp.LayerwiseNormalPrior("radford")
fit_kw = dict(epochs=VI_EPOCHS, batch_size=None, lr=1e-2, elbo="meanfield", progress=False, seed=0)

with clock("VI, mean-field"):
    vi = bp.VariationalBNN(make_net(), bp.Gaussian(scale=noise), prior=prior)
    vi.fit(Xs, ys, **fit_kw)
with clock("VI, local reparam."):
    lrt = bp.VariationalBNN(
        make_net(), bp.Gaussian(scale=noise), prior=prior, local_reparameterization=True
    )
    lrt.fit(Xs, ys, **fit_kw)
print({name: f"{seconds:.1f} s" for name, seconds in fit_seconds.items()})

# %% [markdown]
# ## The classic alternatives
#
# All four train the same net with Adam or SGD on the squared error and take the known noise:
#
# * **MC dropout** (Gal & Ghahramani 2016): dropout 0.05 after the hidden layer, kept on at test
#   time.
# * **Deep ensemble** (Lakshminarayanan et al. 2017): 5 nets from different initial weights.
# * **SWAG** (Maddox et al. 2019): SGD at a constant learning rate, a Gaussian (diagonal + rank
#   20) fitted to the iterates of the second half.
# * **Laplace** (MacKay 1992; Immer et al. 2021): MAP, full GGN Hessian, linearised (GLM)
#   predictive, prior precision chosen by the evidence.
# * **Laplace, KFAC** (Ritter et al. 2018): the same MAP net, its GGN Kronecker-factored per
#   layer (`hessian_structure="kron"`; `fit(epochs=0)` takes the net as trained), the same GLM
#   predictive and evidence.

# %%
with clock("MC dropout"):
    dropout = bp.MCDropout(
        make_net(dropout=0.05),
        num_samples=S,
        dropout_rate=0.05,
        likelihood="regression",
        noise_scale=noise,
    )
    dropout.fit(Xs, ys, epochs=TORCH_EPOCHS, batch_size=100, lr=1e-2, progress=False, seed=0)
with clock("deep ensemble"):
    torch.manual_seed(0)  # the members' initial weights
    ensemble = bp.DeepEnsemble(
        lambda: bp.nn.mlp(1, [50], 1, activation="tanh"),
        num_models=5,
        likelihood="regression",
        noise_scale=noise,
    )
    ensemble.fit(Xs, ys, epochs=TORCH_EPOCHS, batch_size=100, lr=1e-2, progress=False, seed=0)
with clock("SWAG"):
    swag = bp.SWAG(make_net(), num_samples=S, likelihood="regression", noise_scale=noise)
    swag.fit(Xs, ys, epochs=SWAG_EPOCHS, batch_size=10, lr=1e-2, progress=False, seed=0)
with clock("Laplace"):
    laplace = bp.LaplaceApproximation(
        make_net(),
        "regression",
        num_samples=S,
        hessian="ggn",
        hessian_structure="full",
        predictive="glm",
        noise_scale=noise,
    )
    laplace.fit(Xs, ys, epochs=TORCH_EPOCHS, batch_size=100, lr=1e-2, progress=False, seed=0)
    print(f"Laplace prior precision from the evidence: {laplace.optimize_prior_precision():.3g}")
with clock("Laplace, KFAC"):
    kfac = bp.LaplaceApproximation(
        copy.deepcopy(laplace.model),
        "regression",
        num_samples=S,
        hessian="ggn",
        hessian_structure="kron",
        predictive="glm",
        noise_scale=noise,
    )
    kfac.fit(Xs, ys, epochs=0, progress=False)
    print(f"KFAC prior precision from the evidence: {kfac.optimize_prior_precision():.3g}")

# %% [markdown]
# ## SG-MCMC on the same Pyro model
#
# `bp.make("sghmc", ...)` samples the weights of the same Pyro model with stochastic-gradient
# HMC (the preconditioner of Springenberg et al. 2016), at temperature 1: the posterior itself,
# not a tempered one. At its defaults, only `epochs` chosen, each step takes the gradient of the
# whole data set and a step size the chain measures on the posterior's curvature while it burns
# in. On 100 rows minibatches would not save time: their gradient noise, at the step that
# curvature allows, is far larger than the noise the sampler injects. On minibatches
# (`batch_size=32`) a chain takes a fixed step on the plain minibatch gradient and its band comes
# out wider; `lr="measured"` measures the step there too, with a control variate, at about three
# passes over the data an epoch, and lands further from NUTS
# (`benchmarks/sgmcmc_minibatch_net.py` runs the three side by side). It keeps up to 1000
# samples of the chain after a burn-in of a quarter of the steps.

# %%
with clock("SGHMC"):
    torch.manual_seed(0)  # the chain's starting weights
    sghmc = bp.make("sghmc", make_net(), bp.Gaussian(scale=noise), prior=prior)
    sghmc.fit(Xs, ys, epochs=SGHMC_EPOCHS, progress=False, seed=0)
print(f"{len(sghmc.kept_samples)} samples kept")

# %% [markdown]
# ## NUTS on the same model: the reference
#
# `vi.model` is a plain Pyro model, so NUTS samples its exact posterior:
#
# ```python
# from pyro.infer import MCMC, NUTS
#
# mcmc = MCMC(NUTS(vi.model, max_tree_depth=8), num_samples=600, warmup_steps=300, num_chains=4)
# mcmc.run(Xs, ys)
# ```
#
# A BNN posterior is multimodal and one short chain mixes poorly, so the reference here is the
# run cached by `benchmarks/no_data_judge.py` on this very model (these rows, standardised the
# same way, the same prior and noise): four chains from independent starts, with convergence
# checked on the predicted function at every grid point (rank-normalised R̂ < 1.01, bulk-ESS ≥
# 400), not on the weights, which no chain can identify. It keeps 200 quantiles of `f` per grid
# point; below they stand in for its draws. The test suite re-checks the cache against the
# problem, the model and these thresholds.

# %%
settings = REFERENCE["settings"]
print(
    f"{settings['chains']} chains of {settings['samples']} draws after {settings['warmup']} "
    f"warm-up steps; over the grid: worst R-hat {float(REFERENCE['rhat'].max()):.4f}, least "
    f"bulk-ESS {float(REFERENCE['ess'].min()):.0f}; {REFERENCE['cpu_seconds']:.0f} CPU seconds"
)
fit_seconds["NUTS (reference)"] = REFERENCE["cpu_seconds"]
nuts_draws = REFERENCE["quantiles"].unsqueeze(-1)  # (200, 201, 1): f's quantiles as draws


def nuts_predictive(x):
    """The reference's draws of `f` at `x (N, 1)`, points of its grid, and the noise."""
    index = torch.cdist(x, x_plot).argmin(-1)
    assert torch.allclose(x_plot[index], x), "the reference knows its grid points only"
    return nuts_draws[:, index], torch.tensor(NOISE)


# %% [markdown]
# ## Predictive bands side by side
#
# Every method answers `predictive_gaussian(x)`: `locs` `(S, N, 1)`, one predictive mean per
# weight sample (or member, or dropout mask), and the noise `scales`. The bands are the epistemic
# `mean ± 1σ, 2σ` of the `locs`; the dashed red lines on every panel are NUTS's `mean ± 2σ`; the
# last panel overlays the epistemic std of all methods. Laplace's GLM predictive is one Gaussian
# in closed form (`predictive_gaussian` returns it as `S = 1`); to put it through the same
# sample-based table as the others, its rows use `S` draws of the linearised net
# (`predict(x, return_samples=True)`) with the noise.


# %%
def rng():
    return torch.Generator().manual_seed(0)


def glm_draws(method):
    """Laplace's GLM as `S` draws of the linearised net and the noise, like the others."""
    return lambda x: (method.predict(x, return_samples=True, generator=rng())[2], noise)


predictive = {
    "NUTS (reference)": nuts_predictive,
    "VI, mean-field": raw(lambda x: vi.predictive_gaussian(x, num_samples=S, seed=0)),
    "VI, local reparam.": raw(lambda x: lrt.predictive_gaussian(x, num_samples=S, seed=0)),
    "MC dropout": raw(lambda x: dropout.predictive_gaussian(x, generator=rng())),
    "deep ensemble": raw(lambda x: ensemble.predictive_gaussian(x)),
    "SWAG": raw(lambda x: swag.predictive_gaussian(x, generator=rng())),
    "Laplace": raw(glm_draws(laplace)),
    "Laplace, KFAC": raw(glm_draws(kfac)),
    "SGHMC": raw(lambda x: sghmc.predictive_gaussian(x, num_samples=S, seed=0)),
}
nuts_mean, nuts_sd = REFERENCE["mean"], REFERENCE["sd"]

fig, axes = plt.subplots(2, 5, figsize=(20, 7), sharex=True)
for ax, (name, predict) in zip(axes.flat, predictive.items(), strict=False):  # 9 of 10
    locs, _ = predict(x_plot)
    mean, std = locs.mean(0), locs.std(0, correction=0)
    plot_predictive_1d(x_plot, mean, std, X, y, ax=ax, title=name)
    ax.plot(x_plot, toy_function(x_plot), "k:", lw=1)
    for edge, label in ((nuts_mean - 2 * nuts_sd, "NUTS ± 2σ"), (nuts_mean + 2 * nuts_sd, None)):
        ax.plot(x_plot[:, 0], edge, color="C3", ls="--", lw=0.8, label=label)  # on every panel
    ax.axvspan(*GAP, color="0.9", zorder=0)
    ax.set_ylim(-3.5, 3.5)
    if ax is axes.flat[0]:
        ax.legend(fontsize="small")  # plot_predictive_1d's entries and NUTS's
    else:
        ax.get_legend().remove()
    axes.flat[-1].plot(x_plot, std, label=name)
last = axes.flat[-1]
last.axvspan(*GAP, color="0.9", zorder=0)
last.set(title="epistemic std (log scale)", yscale="log", xlabel="x")
last.legend(fontsize="x-small")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Which methods widen in the gap?
#
# `std` is the mean epistemic standard deviation over the test points on the data and in the
# gap; the test log-likelihood (nats per point, higher is better) is that of the Gaussian mixture
# over the samples, with the noise 0.1 added. NUTS's fit time is the CPU time of its cached run.

# %%
rows = []
for name, predict in predictive.items():
    locs, scales = predict(x_test)
    scales = torch.as_tensor(scales).expand_as(locs)
    std = locs.std(0, correction=0).squeeze(-1)
    data, gap = std[~in_gap].mean().item(), std[in_gap].mean().item()
    ll_data = gaussian_log_likelihood(locs[:, ~in_gap], scales[:, ~in_gap], y_test[~in_gap])
    ll_gap = gaussian_log_likelihood(locs[:, in_gap], scales[:, in_gap], y_test[in_gap])
    rmse_gap = rmse(locs.mean(0)[in_gap], y_test[in_gap])
    ratio = gap / data if data > 0 else float("nan")  # a stuck (fast-mode) chain has data = 0
    rows.append([name, data, gap, ratio, ll_data, ll_gap, rmse_gap, fit_seconds[name]])

header = [
    "method",
    "std on the data",
    "std in the gap",
    "gap / data",
    "test LL, data",
    "test LL, gap",
    "RMSE, gap",
    "fit (s)",
]
lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
for name, *values, seconds in rows:
    cells = [name, *(f"{v:.3f}" for v in values), f"{seconds:.1f}"]
    lines.append("| " + " | ".join(cells) + " |")
display(Markdown("\n".join(lines)))

# %% [markdown]
# How to read it:
#
# * NUTS, the two VI models, SGHMC, the ensemble and Laplace (GLM) widen their band in the gap,
#   by very different amounts. NUTS is tight on the data and about four times wider in the gap.
#   Mean-field VI widens less and pays with a band that is also wide on the data: it under-fits
#   there (the KL of 151 independent Gaussians pulls them towards the prior), and its test
#   log-likelihood on the data is the lowest of all; local reparameterization, the same
#   posterior family with a better gradient, fits the data far better.
# * MC dropout's band has about the same width everywhere: with dropout on one hidden layer the
#   spread follows the size of the activations, not the distance to the data.
# * SWAG's snapshots come from one SGD trajectory around one mode; here they vary more on the data
#   than in the gap.
# * The test log-likelihood in the gap rewards a band that is as wide as the error of the mean,
#   not the widest: Laplace's band is far too wide there and loses. The deep ensemble is tight
#   on the data (its members agree where they were trained) and about as wide as VI's band in the
#   gap, yet scores lower there.
# * KFAC, on the same MAP net as the full Laplace, drops the GGN's couplings between layers and
#   within a layer beyond its Kronecker factors. Its evidence then picks a larger prior
#   precision, and its band in the gap is narrower than the full GGN's, yet still several times
#   NUTS's; its fit time is the curvature alone (the MAP net is the full Laplace's).
# * SGHMC samples the same posterior as NUTS with one chain: its band is about as tight as
#   NUTS's on the data and about as wide in the gap, but its mean in the gap follows the few
#   modes that chain visited, not the four chains' average NUTS draws from, and its test
#   log-likelihood in the gap pays for that (several chains, `bp.fit_stacked`, judged by
#   `bnn_pyro.methods.sgmcmc.chain_diagnostics`, tell such a run apart).
# * Beyond the data (`|x| > 3`, the plots' edges) NUTS's band misses the true function: the
#   exact posterior of this model is confidently wrong there, and the two VI models with it.
#   The nets trained to a point (the ensemble, SWAG, Laplace's MAP net) keep the trend of the
#   last rows and follow the truth further. The documentation's Results page, "Uncertainty
#   where there is no data", scores every method there on this problem and three others.
