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
# Every method gets the same 1-50-1 tanh net (same initial weights) and the true observation
# noise (0.1), so the bands below differ only in their **epistemic** part. The reference is NUTS
# run on the very `VariationalBNN.model` that SVI trains: the model holds no parameters of its
# own, so `MCMC(NUTS(bnn.model))` works unchanged and `bnn.predict(x, posterior_samples=...)`
# predicts from the chain.
#
# What to look at: the width of the bands in the grey gap against their width on the data,
# the table's ratio `std in the gap / std on the data`, and the test log-likelihood in the gap
# (a band that is too narrow where the function is unknown is punished there).
#
# Run time: about a minute on one CPU core. `BNN_PYRO_NOTEBOOK_FAST=1` shrinks epochs and
# samples for the test suite (its numbers mean nothing).

# %%
import copy
import os
import time
import warnings
from contextlib import contextmanager

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown, display

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto, no ipywidgets
import pyro  # noqa: E402
from pyro.infer import MCMC, NUTS  # noqa: E402

import bnn_pyro as bp  # noqa: E402
from bnn_pyro.datasets import toy_function, toy_regression_1d  # noqa: E402
from bnn_pyro.metrics import gaussian_log_likelihood, rmse  # noqa: E402
from bnn_pyro.plots import plot_predictive_1d  # noqa: E402

FAST = os.environ.get("BNN_PYRO_NOTEBOOK_FAST", "") == "1"
torch.set_num_threads(1)  # small nets are faster on one thread
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100})

VI_EPOCHS = 300 if FAST else 3000  # full-batch SVI steps
TORCH_EPOCHS = 100 if FAST else 2000  # dropout, ensemble, Laplace's MAP (full batch)
SWAG_EPOCHS = 50 if FAST else 1000  # minibatches of 10
NUTS_WARMUP, NUTS_SAMPLES = (20, 20) if FAST else (300, 400)
SGHMC_EPOCHS = 20 if FAST else 1500  # minibatches of 32: about 10,000 sampler steps
S = 50 if FAST else 200  # predictive samples
print("mode:", "fast (BNN_PYRO_NOTEBOOK_FAST=1)" if FAST else "full")

# %% [markdown]
# ## Data
#
# The test points cover the whole range `[-3, 3]` with fresh noise; the metrics are reported
# separately on the data region and in the gap.

# %%
NOISE, GAP = 0.1, (-1.0, 1.0)
X, y = toy_regression_1d(n=100, gap=GAP, noise_std=NOISE, seed=0)
x_test = torch.linspace(-3, 3, 601).unsqueeze(-1)
y_test = toy_function(x_test) + NOISE * torch.randn(
    x_test.shape, generator=torch.Generator().manual_seed(1)
)
in_gap = ((x_test > GAP[0]) & (x_test < GAP[1])).squeeze(-1)
x_plot = torch.linspace(-4, 4, 400).unsqueeze(-1)


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
    vi = bp.VariationalBNN(make_net(), bp.Gaussian(scale=NOISE), prior=prior)
    vi.fit(X, y, **fit_kw)
with clock("VI, local reparam."):
    lrt = bp.VariationalBNN(
        make_net(), bp.Gaussian(scale=NOISE), prior=prior, local_reparameterization=True
    )
    lrt.fit(X, y, **fit_kw)
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
        noise_scale=NOISE,
    )
    dropout.fit(X, y, epochs=TORCH_EPOCHS, batch_size=100, lr=1e-2, progress=False, seed=0)
with clock("deep ensemble"):
    torch.manual_seed(0)  # the members' initial weights
    ensemble = bp.DeepEnsemble(
        lambda: bp.nn.mlp(1, [50], 1, activation="tanh"),
        num_models=5,
        likelihood="regression",
        noise_scale=NOISE,
    )
    ensemble.fit(X, y, epochs=TORCH_EPOCHS, batch_size=100, lr=1e-2, progress=False, seed=0)
with clock("SWAG"):
    swag = bp.SWAG(make_net(), num_samples=S, likelihood="regression", noise_scale=NOISE)
    swag.fit(X, y, epochs=SWAG_EPOCHS, batch_size=10, lr=1e-2, progress=False, seed=0)
with clock("Laplace"):
    laplace = bp.LaplaceApproximation(
        make_net(),
        "regression",
        num_samples=S,
        hessian="ggn",
        hessian_structure="full",
        predictive="glm",
        noise_scale=NOISE,
    )
    laplace.fit(X, y, epochs=TORCH_EPOCHS, batch_size=100, lr=1e-2, progress=False, seed=0)
    print(f"Laplace prior precision from the evidence: {laplace.optimize_prior_precision():.3g}")
with clock("Laplace, KFAC"):
    kfac = bp.LaplaceApproximation(
        copy.deepcopy(laplace.model),
        "regression",
        num_samples=S,
        hessian="ggn",
        hessian_structure="kron",
        predictive="glm",
        noise_scale=NOISE,
    )
    kfac.fit(X, y, epochs=0, progress=False)
    print(f"KFAC prior precision from the evidence: {kfac.optimize_prior_precision():.3g}")

# %% [markdown]
# ## SG-MCMC on the same Pyro model
#
# `bp.make("sghmc", ...)` samples the weights of the same Pyro model with scale-adapted
# stochastic-gradient HMC (Springenberg et al. 2016) on minibatches, at temperature 1: the
# posterior itself, not a tempered one. It keeps up to 1000 samples of the chain after a burn-in
# of a quarter of the steps.

# %%
with clock("SGHMC"):
    torch.manual_seed(0)  # the chain's starting weights
    sghmc = bp.make("sghmc", make_net(), bp.Gaussian(scale=NOISE), prior=prior)
    sghmc.fit(X, y, epochs=SGHMC_EPOCHS, batch_size=32, progress=False, seed=0)
print(f"{len(sghmc.kept_samples)} samples kept")

# %% [markdown]
# ## NUTS on the same model: the reference
#
# `vi.model` is a plain Pyro model, so NUTS samples its exact posterior. The chain is short
# (300 warm-up steps, 400 draws, trees of depth at most 6, about half a minute with the JIT) and
# a BNN posterior is multimodal: read it as a reference for the *shape* of the bands, not as the
# last word. The effective sample sizes are printed. A converged reference (four chains, checked
# on the predicted function at every point) for this problem and three others, with every method
# scored against it, is on the documentation's Results page, "Uncertainty where there is no
# data".

# %%
with clock("NUTS (reference)"):
    pyro.set_rng_seed(0)
    kernel = NUTS(vi.model, max_tree_depth=6, jit_compile=True, ignore_jit_warnings=True)
    mcmc = MCMC(kernel, num_samples=NUTS_SAMPLES, warmup_steps=NUTS_WARMUP, disable_progbar=True)
    mcmc.run(X, y)
posterior = mcmc.get_samples()  # {site: (draws, *shape)}, the same sites as the guide's
n_eff = {k: float(v["n_eff"].median()) for k, v in mcmc.diagnostics().items() if "n_eff" in v}
print(
    f"step size {kernel.step_size:.3g}; median n_eff per site:",
    {k: round(v, 1) for k, v in n_eff.items()},
)


# %% [markdown]
# ## Predictive bands side by side
#
# Every method answers `predictive_gaussian(x)`: `locs` `(S, N, 1)`, one predictive mean per
# weight sample (or member, or dropout mask), and the noise `scales`. The bands are the epistemic
# `mean ± 1σ, 2σ` of the `locs`; the last panel overlays the epistemic std of all methods.


# %%
def rng():
    return torch.Generator().manual_seed(0)


predictive = {
    "NUTS (reference)": lambda x: vi.predictive_gaussian(x, posterior_samples=posterior),
    "VI, mean-field": lambda x: vi.predictive_gaussian(x, num_samples=S, seed=0),
    "VI, local reparam.": lambda x: lrt.predictive_gaussian(x, num_samples=S, seed=0),
    "MC dropout": lambda x: dropout.predictive_gaussian(x, generator=rng()),
    "deep ensemble": lambda x: ensemble.predictive_gaussian(x),
    "SWAG": lambda x: swag.predictive_gaussian(x, generator=rng()),
    "Laplace": lambda x: laplace.predictive_gaussian(x, generator=rng()),
    "Laplace, KFAC": lambda x: kfac.predictive_gaussian(x, generator=rng()),
    "SGHMC": lambda x: sghmc.predictive_gaussian(x, num_samples=S, seed=0),
}

fig, axes = plt.subplots(2, 5, figsize=(20, 7), sharex=True)
for ax, (name, predict) in zip(axes.flat, predictive.items(), strict=False):  # 9 of 10
    locs, _ = predict(x_plot)
    mean, std = locs.mean(0), locs.std(0, correction=0)
    plot_predictive_1d(x_plot, mean, std, X, y, ax=ax, title=name)
    ax.plot(x_plot, toy_function(x_plot), "k:", lw=1)
    ax.axvspan(*GAP, color="0.9", zorder=0)
    ax.set_ylim(-3.5, 3.5)
    if ax is not axes.flat[0]:
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
# over the samples, with the noise 0.1 added.

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
#   by very different amounts. NUTS is tight on the data and about five times wider in the gap.
#   Mean-field VI widens less and pays with a band that is also wide on the data: it under-fits
#   (the KL of 151 independent Gaussians pulls them towards the prior); local reparameterization,
#   the same posterior family with a better gradient, is tighter on the data.
# * MC dropout's band has about the same width everywhere: with dropout on one hidden layer the
#   spread follows the size of the activations, not the distance to the data.
# * SWAG's snapshots come from one SGD trajectory around one mode; here they vary more on the data
#   than in the gap.
# * The test log-likelihood in the gap rewards a band that is as wide as the error of the mean,
#   not the widest: Laplace's band is far too wide there, the ensemble's too narrow for how far
#   its mean is off (look at its RMSE in the gap); both lose. Mean-field VI scores below local
#   reparameterization in the gap: its mean is further off there (the RMSE column).
# * KFAC, on the same MAP net as the full Laplace, drops the GGN's couplings between layers and
#   within a layer beyond its Kronecker factors. Its evidence then picks a larger prior
#   precision, and its band in the gap is narrower than the full GGN's, yet still several times
#   NUTS's; its fit time is the curvature alone (the MAP net is the full Laplace's).
# * SGHMC samples the same posterior as NUTS, from minibatches: its band widens in the gap by
#   about as much as VI's, and is wider than NUTS's on the data.
