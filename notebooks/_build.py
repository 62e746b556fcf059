"""Build the notebooks from the cell sources in this file, execute them, write the ``.ipynb``.

The cell sources live here, in one reviewable Python file; the ``.ipynb`` files are generated
from them and committed executed at full size (with their plots)::

    .venv/bin/python notebooks/_build.py              # build + execute all, full size, write
    .venv/bin/python notebooks/_build.py 02 03        # only these (name prefixes)
    .venv/bin/python notebooks/_build.py --fast       # fast mode, a check: writes nothing

The fast mode sets ``BNN_PYRO_NOTEBOOK_FAST=1`` (few epochs, few samples: the numbers are
meaningless, the code paths are the same); ``tests/test_notebooks.py`` runs it. Notebook 04
reads ``BNN_PYRO_UCI_RESULTS`` (default ``benchmarks/results/uci/uci.json``).

Source format: ``# %% [markdown]`` starts a markdown cell (its lines are plain markdown),
``# %%`` a code cell.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent
FAST_ENV = "BNN_PYRO_NOTEBOOK_FAST"
KERNEL = "python3"

# --------------------------------------------------------------------------- 01 toy regression
NB01 = r'''
# %% [markdown]
# 1. Toy regression: which methods know what they do not know?

One-dimensional data with a gap: 100 points of `y = sin(2x) + x/2 + 0.1 ε` on
`[-3, -1] ∪ [1, 3]`, nothing in `(-1, 1)`. Between the two clouds the wiggle of `sin(2x)` is
not observed, so a good posterior should be *less sure* there ("in-between uncertainty",
Foong et al. 2019).

Every method gets the same 1-50-1 tanh net (same initial weights) and the true observation
noise (0.1), so the bands below differ only in their **epistemic** part. The reference is NUTS
run on the very `VariationalBNN.model` that SVI trains: the model holds no parameters of its
own, so `MCMC(NUTS(bnn.model))` works unchanged and `bnn.predict(x, posterior_samples=...)`
predicts from the chain.

What to look at: the width of the bands in the grey gap against their width on the data,
the table's ratio `std in the gap / std on the data`, and the test log-likelihood in the gap
(a band that is too narrow where the function is unknown is punished there).

Run time: about a minute on one CPU core. `BNN_PYRO_NOTEBOOK_FAST=1` shrinks epochs and
samples for the test suite (its numbers mean nothing).

# %%
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
plt.rcParams.update({"figure.dpi": 72, "savefig.dpi": 72})

VI_EPOCHS = 300 if FAST else 3000  # full-batch SVI steps
TORCH_EPOCHS = 100 if FAST else 2000  # dropout, ensemble, Laplace's MAP (full batch)
SWAG_EPOCHS = 50 if FAST else 1000  # minibatches of 10
NUTS_WARMUP, NUTS_SAMPLES = (20, 20) if FAST else (300, 400)
S = 50 if FAST else 200  # predictive samples
print("mode:", "fast (BNN_PYRO_NOTEBOOK_FAST=1)" if FAST else "full")

# %% [markdown]
## Data

The test points cover the whole range `[-3, 3]` with fresh noise; the metrics are reported
separately on the data region and in the gap.

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
## Variational inference: weight space and local reparameterization

`VariationalBNN` with the layerwise prior `N(0, 1/fan_in)` (Neal's scaling, so the prior over
functions does not blow up with the width) and the exact mean-field guide; full-batch SVI with
`elbo="meanfield"` (closed-form KL). The second model is the same posterior family trained with
local reparameterization (pre-activations are sampled instead of weights).

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
## The classic alternatives

All four train the same net with Adam or SGD on the squared error and take the known noise:

* **MC dropout** (Gal & Ghahramani 2016): dropout 0.05 after the hidden layer, kept on at test
  time.
* **Deep ensemble** (Lakshminarayanan et al. 2017): 5 nets from different initial weights.
* **SWAG** (Maddox et al. 2019): SGD at a constant learning rate, a Gaussian (diagonal + rank
  20) fitted to the iterates of the second half.
* **Laplace** (MacKay 1992; Immer et al. 2021): MAP, full GGN Hessian, linearised (GLM)
  predictive, prior precision chosen by the evidence.

# %%
with clock("MC dropout"):
    dropout = bp.MCDropout(
        make_net(dropout=0.05), num_samples=S, dropout_rate=0.05, likelihood="regression",
        noise_scale=NOISE,
    )
    dropout.fit(X, y, epochs=TORCH_EPOCHS, batch_size=100, lr=1e-2, progress=False, seed=0)
with clock("deep ensemble"):
    torch.manual_seed(0)  # the members' initial weights
    ensemble = bp.DeepEnsemble(
        lambda: bp.nn.mlp(1, [50], 1, activation="tanh"), num_models=5,
        likelihood="regression", noise_scale=NOISE,
    )
    ensemble.fit(X, y, epochs=TORCH_EPOCHS, batch_size=100, lr=1e-2, progress=False, seed=0)
with clock("SWAG"):
    swag = bp.SWAG(make_net(), num_samples=S, likelihood="regression", noise_scale=NOISE)
    swag.fit(X, y, epochs=SWAG_EPOCHS, batch_size=10, lr=1e-2, progress=False, seed=0)
with clock("Laplace"):
    laplace = bp.LaplaceApproximation(
        make_net(), "regression", num_samples=S, hessian="ggn", hessian_structure="full",
        predictive="glm", noise_scale=NOISE,
    )
    laplace.fit(X, y, epochs=TORCH_EPOCHS, batch_size=100, lr=1e-2, progress=False, seed=0)
    print(f"Laplace prior precision from the evidence: {laplace.optimize_prior_precision():.3g}")

# %% [markdown]
## NUTS on the same model: the reference

`vi.model` is a plain Pyro model, so NUTS samples its exact posterior. The chain is short
(300 warm-up steps, 400 draws, trees of depth at most 6, about half a minute with the JIT) and
a BNN posterior is multimodal: read it as a reference for the *shape* of the bands, not as the
last word. The effective sample sizes are printed.

# %%
with clock("NUTS (reference)"):
    pyro.set_rng_seed(0)
    kernel = NUTS(vi.model, max_tree_depth=6, jit_compile=True, ignore_jit_warnings=True)
    mcmc = MCMC(kernel, num_samples=NUTS_SAMPLES, warmup_steps=NUTS_WARMUP, disable_progbar=True)
    mcmc.run(X, y)
posterior = mcmc.get_samples()  # {site: (draws, *shape)}, the same sites as the guide's
n_eff = {k: float(v["n_eff"].median()) for k, v in mcmc.diagnostics().items() if "n_eff" in v}
print(f"step size {kernel.step_size:.3g}; median n_eff per site:",
      {k: round(v, 1) for k, v in n_eff.items()})

# %% [markdown]
## Predictive bands side by side

Every method answers `predictive_gaussian(x)`: `locs` `(S, N, 1)`, one predictive mean per
weight sample (or member, or dropout mask), and the noise `scales`. The bands are the epistemic
`mean ± 1σ, 2σ` of the `locs`; the last panel overlays the epistemic std of all methods.

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
}

fig, axes = plt.subplots(2, 4, figsize=(16, 7), sharex=True)
for ax, (name, predict) in zip(axes.flat, predictive.items(), strict=False):  # 7 of 8
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
## Which methods widen in the gap?

`std` is the mean epistemic standard deviation over the test points on the data and in the
gap; the test log-likelihood (nats per point, higher is better) is that of the Gaussian mixture
over the samples, with the noise 0.1 added.

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

header = ["method", "std on the data", "std in the gap", "gap / data", "test LL, data",
          "test LL, gap", "RMSE, gap", "fit (s)"]
lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
for name, *values, seconds in rows:
    cells = [name, *(f"{v:.3f}" for v in values), f"{seconds:.1f}"]
    lines.append("| " + " | ".join(cells) + " |")
display(Markdown("\n".join(lines)))

# %% [markdown]
How to read it:

* NUTS, the two VI models, the ensemble and Laplace (GLM) widen their band in the gap; by very
  different amounts. NUTS is tight on the data and about five times wider in the gap.
  Mean-field VI widens less and pays with a band that is also wide on the data: it under-fits
  (the KL of 151 independent Gaussians pulls them towards the prior); local reparameterization,
  the same posterior family with a better gradient, is tighter on the data.
* MC dropout's band has about the same width everywhere: with dropout on one hidden layer the
  spread follows the size of the activations, not the distance to the data.
* SWAG's snapshots come from one SGD trajectory around one mode; here they vary more on the data
  than in the gap.
* The test log-likelihood in the gap rewards a band that is as wide as the error of the mean,
  not the widest: Laplace's band is far too wide there, the ensemble's too narrow for how far
  its mean is off (look at its RMSE in the gap); both lose. On this one data set the VI means
  also happen to follow `sin(2x)` in the gap better than the short NUTS chain does, which is
  why they beat the reference on that column.
'''

# --------------------------------------------------------------------------- 02 classification
NB02 = r'''
# %% [markdown]
# 2. Classification: weight space, local reparameterization and flipout

`VariationalBNN(..., local_reparameterization=False | True | "flipout")` trains the same
mean-field posterior with three gradient estimators: sampling the weights (one draw per
minibatch, shared by all rows), sampling the pre-activations (Kingma et al. 2015: independent
per row, lower variance) or flipout (Wen et al. 2018: pseudo-independent weight perturbations
per row). Prediction always draws whole weight matrices.

Two data sets: two moons (2-D, so the uncertainty can be drawn as a map) and scikit-learn's
8×8 digits. On each we compare accuracy, NLL and calibration, then feed the models inputs
unlike the training data and look at the split of the predictive entropy into its aleatoric
part (expected entropy) and its epistemic part (mutual information, BALD).

Run time: about a minute on one CPU core; `BNN_PYRO_NOTEBOOK_FAST=1` shrinks it for the tests.

# %%
import math
import os
import time
import warnings

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto, no ipywidgets
import bnn_pyro as bp  # noqa: E402
from bnn_pyro.datasets import load_digits_split, two_moons  # noqa: E402
from bnn_pyro.metrics import (  # noqa: E402
    accuracy,
    brier_score,
    entropy_decomposition,
    expected_calibration_error,
    nll,
)
from bnn_pyro.plots import plot_reliability_diagram  # noqa: E402

FAST = os.environ.get("BNN_PYRO_NOTEBOOK_FAST", "") == "1"
torch.set_num_threads(1)
plt.rcParams.update({"figure.dpi": 72, "savefig.dpi": 72})

MOONS_EPOCHS = 20 if FAST else 200
DIGITS_EPOCHS = 10 if FAST else 200
S = 20 if FAST else 100  # predictive samples
ESTIMATORS = {"weight space": False, "local reparam.": True, "flipout": "flipout"}
print("mode:", "fast (BNN_PYRO_NOTEBOOK_FAST=1)" if FAST else "full")


def markdown_table(header, rows, digits=3):
    """A list of rows as a markdown table (floats rounded)."""
    def fmt(v):
        return f"{v:.{digits}f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return Markdown("\n".join(lines))


def train(net_fn, X, y, estimator, epochs, batch_size):
    """A Categorical VariationalBNN trained with the given estimator; returns (bnn, seconds)."""
    torch.manual_seed(0)  # the same initial weights for every estimator
    bnn = bp.VariationalBNN(net_fn(), bp.Categorical(), local_reparameterization=estimator)
    start = time.perf_counter()
    bnn.fit(X, y, epochs=epochs, batch_size=batch_size, lr=1e-2, progress=False, seed=0)
    return bnn, time.perf_counter() - start

# %% [markdown]
## Two moons

500 training points, 1000 test points from a different seed, and 200 out-of-distribution
points on a circle of radius 5 around the data. A 2-32-32-2 ReLU net, minibatches of 64.

# %%
X, y = two_moons(n=500, noise=0.15, seed=0)
X_test, y_test = two_moons(n=1000, noise=0.15, seed=1)
angle = torch.linspace(0, 2 * math.pi, 200)
X_far = torch.stack([0.5 + 5 * angle.cos(), 0.25 + 5 * angle.sin()], dim=1)

moons = {}
for name, estimator in ESTIMATORS.items():
    moons[name] = train(lambda: bp.nn.mlp(2, [32, 32], 2), X, y, estimator, MOONS_EPOCHS, 64)

rows = []
for name, (bnn, seconds) in moons.items():
    probs, _, samples = bnn.predict(X_test, return_samples=True, num_samples=S, seed=0)
    far = entropy_decomposition(bnn.predict(X_far, True, num_samples=S, seed=0)[2])
    near = entropy_decomposition(samples)
    ece = expected_calibration_error(probs, y_test)
    scores = [accuracy(probs, y_test), nll(probs, y_test), ece]
    entropies = [near.total.mean(), far.total.mean(), near.epistemic.mean(), far.epistemic.mean()]
    rows.append([name, *scores, *(e.item() for e in entropies), f"{seconds:.1f}"])
markdown_table(["estimator", "accuracy", "NLL", "ECE", "entropy, test", "entropy, far",
                "MI, test", "MI, far", "fit (s)"], rows)

# %% [markdown]
Top row: the predictive probability of class 1. Bottom row: the mutual information (epistemic
uncertainty, nats), with the far-away ring drawn in white. The mutual information is low on the
data and highest where the decision boundary runs off into empty space: there the weight
samples disagree on which side a point falls. Far away but off that line, a ReLU net's logits
grow linearly with the distance and every sample agrees, so the far ring as a whole is only
moderately more uncertain than the test set (the table above): a known limit of ReLU BNNs with
a factorised posterior, not of the estimator.

# %%
g0, g1 = torch.meshgrid(torch.linspace(-6, 7, 120), torch.linspace(-5.5, 6.5, 120), indexing="xy")
grid = torch.stack([g0.flatten(), g1.flatten()], dim=1)

fig, axes = plt.subplots(2, 3, figsize=(13, 8.5), sharex=True, sharey=True)
for j, (name, (bnn, _)) in enumerate(moons.items()):
    probs, _, samples = bnn.predict(grid, return_samples=True, num_samples=S, seed=0)
    mi = entropy_decomposition(samples).epistemic
    top = axes[0, j].contourf(g0, g1, probs[:, 1].reshape(g0.shape), levels=20, cmap="RdBu_r",
                              vmin=0, vmax=1)
    bottom = axes[1, j].contourf(g0, g1, mi.reshape(g0.shape), levels=20, cmap="viridis")
    for ax in axes[:, j]:
        ax.scatter(*X.T, c=y, cmap="coolwarm", s=4, edgecolors="k", linewidths=0.2)
    axes[1, j].plot(*X_far.T, "w.", ms=2)
    axes[0, j].set_title(f"{name}: P(class 1)")
    axes[1, j].set_title(f"{name}: mutual information")
    fig.colorbar(top, ax=axes[0, j], fraction=0.046)
    fig.colorbar(bottom, ax=axes[1, j], fraction=0.046)
fig.tight_layout()
plt.show()

# %% [markdown]
## Digits

scikit-learn's 1797 8×8 digits (pixels in `[0, 1]`), 80/20 split; a 64-100-10 ReLU net,
minibatches of 128, the default `N(0, 1)` prior and exact mean-field guide, Adam at `1e-2`,
the same number of steps for the three estimators.

# %%
digits = load_digits_split(seed=0)
models = {}
for name, estimator in ESTIMATORS.items():
    models[name] = train(lambda: bp.nn.mlp(64, [100], 10), digits.X_train, digits.y_train,
                         estimator, DIGITS_EPOCHS, 128)

rows, test_probs = [], {}
for name, (bnn, seconds) in models.items():
    probs = bnn.predict(digits.X_test, num_samples=S, seed=0)[0]
    test_probs[name] = probs
    rows.append([name, accuracy(probs, digits.y_test), nll(probs, digits.y_test),
                 expected_calibration_error(probs, digits.y_test),
                 brier_score(probs, digits.y_test), f"{seconds:.1f}"])
markdown_table(["estimator", "accuracy", "NLL", "ECE", "Brier", "fit (s)"], rows)

# %% [markdown]
Reliability diagrams: bars are the accuracy per confidence bin, red dots the mean confidence
in the bin. Dots *below* their bar mean under-confidence, which is the usual failure of
mean-field VI with a broad prior: the posterior is wider than the data justify (notebook 3
shows what tempering does to it).

# %%
fig, axes = plt.subplots(1, 3, figsize=(14, 4.5))
for ax, (name, probs) in zip(axes, test_probs.items(), strict=True):
    plot_reliability_diagram(probs, digits.y_test, n_bins=10, ax=ax)
    ax.set_title(f"{name}\n{ax.get_title()}")
fig.tight_layout()
plt.show()

# %% [markdown]
## Out-of-distribution digits

Two kinds of inputs the nets never saw: the test digits rotated by 90°, and images of uniform
noise. A useful model is more uncertain on both; the mutual information tells whether the
uncertainty is epistemic (the weight samples disagree) rather than a flat prediction every
sample agrees on.

# %%
rotated = torch.rot90(digits.X_test.reshape(-1, 8, 8), 1, dims=(1, 2)).reshape(-1, 64)
noise = torch.rand(len(digits.X_test), 64, generator=torch.Generator().manual_seed(0))
inputs = {"test digits": digits.X_test, "rotated 90°": rotated, "uniform noise": noise}

rows, mi_values = [], {}
for name, (bnn, _) in models.items():
    for kind, x in inputs.items():
        parts = entropy_decomposition(bnn.predict(x, True, num_samples=S, seed=0)[2])
        mi_values[name, kind] = parts.epistemic
        rows.append([name, kind, parts.total.mean().item(), parts.aleatoric.mean().item(),
                     parts.epistemic.mean().item()])
markdown_table(["estimator", "inputs", "predictive entropy", "expected entropy (aleatoric)",
                "mutual information (epistemic)"], rows)

# %%
fig, axes = plt.subplots(1, 3, figsize=(14, 3.5), sharey=True)
bins = torch.linspace(0, math.log(10), 36)  # log 10: the largest possible value
for ax, name in zip(axes, models, strict=True):
    for kind in inputs:
        ax.hist(mi_values[name, kind], bins=bins, alpha=0.5, label=kind, density=True)
    ax.set(title=name, xlabel="mutual information (nats)")
axes[0].set_ylabel("density")
axes[0].legend(fontsize="small")
fig.tight_layout()
plt.show()

# %% [markdown]
What to take away: the three estimators reach similar test metrics here, with local
reparameterization and flipout ahead of weight-space sampling after the same number of steps
(their gradients have less variance, see `benchmarks/local_reparam.py`). All three separate
the in-distribution digits from noise images by their mutual information; rotated digits sit in
between, as many of them still look like some digit.
'''

# --------------------------------------------------------------------------- 03 priors, guides
NB03 = r"""
# %% [markdown]
# 3. Priors, guides, annealing and tempering

One knob at a time, from one base configuration: a 64-50-10 ReLU net on scikit-learn's
digits, the `N(0, 1)` prior on every weight, the library's exact mean-field guide, Adam at
`1e-2`, minibatches of 128, 200 epochs, the same initial weights. Then:

* **priors**: `LayerwiseNormalPrior("radford")` (std `1/sqrt(fan_in)`) and Blundell et al.'s
  `ScaleMixturePrior(0.5, 1, e^-6)`;
* **guides**: Pyro's `AutoLowRankMultivariateNormal` (correlations between weights) and
  `AutoDelta` (a point estimate: MAP, with the prior as a weight penalty);
* **the ELBO's KL**: Monte Carlo (`Trace_ELBO`, the default) vs exact (`elbo="meanfield"`);
* **KL annealing**: `kl_weight=linear_annealing(100)` (β rises from 0 to 1 over 100 epochs);
* **tempered posteriors**: `kl_weight=0.1` and `0.01` for the whole run (β < 1: the data count
  more than the prior; Wenzel et al. 2020's "cold posterior").

Measured on the test split: the test log-likelihood (mean log predictive probability of the
true label, higher is better), accuracy, expected calibration error and Brier score.

Run time: about a minute and a half on one CPU core (the low-rank guide is most of it);
`BNN_PYRO_NOTEBOOK_FAST=1` shrinks it for the tests.

# %%
import math
import os
import time
import warnings

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown, display

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto, no ipywidgets
from pyro.infer.autoguide import AutoDelta, AutoLowRankMultivariateNormal  # noqa: E402

import bnn_pyro as bp  # noqa: E402
from bnn_pyro.datasets import load_digits_split  # noqa: E402
from bnn_pyro.metrics import accuracy, brier_score, expected_calibration_error, nll  # noqa: E402
from bnn_pyro.plots import plot_reliability_diagram  # noqa: E402

FAST = os.environ.get("BNN_PYRO_NOTEBOOK_FAST", "") == "1"
torch.set_num_threads(1)
plt.rcParams.update({"figure.dpi": 72, "savefig.dpi": 72})

EPOCHS = 10 if FAST else 200
S = 20 if FAST else 100  # predictive samples
print("mode:", "fast (BNN_PYRO_NOTEBOOK_FAST=1)" if FAST else "full")

# %% [markdown]
## The configurations

Each entry is the constructor arguments of `VariationalBNN` and the `fit` arguments that differ
from the base. Passing an autoguide *class* lets the library start its means at the net's
initial weights (as the mean-field guide does) and its scales at `init_scale`.

# %%
CONFIGS = {
    "base: N(0,1), mean-field": ({}, {}),
    "prior: layerwise (radford)": ({"prior": bp.LayerwiseNormalPrior("radford")}, {}),
    "prior: scale mixture": ({"prior": bp.ScaleMixturePrior(0.5, 1.0, math.exp(-6))}, {}),
    "guide: low-rank MVN": ({"guide": AutoLowRankMultivariateNormal}, {}),
    "guide: AutoDelta (MAP)": ({"guide": AutoDelta}, {}),
    "exact KL (elbo='meanfield')": ({}, {"elbo": "meanfield"}),
    "KL annealing": ({}, {"kl_weight": bp.linear_annealing(max(1, EPOCHS // 2))}),
    "tempered, kl_weight=0.1": ({}, {"kl_weight": 0.1}),
    "tempered, kl_weight=0.01": ({}, {"kl_weight": 0.01}),
}

digits = load_digits_split(seed=0)
results = {}
for name, (model_kw, fit_kw) in CONFIGS.items():
    torch.manual_seed(0)  # the same initial weights for every configuration
    bnn = bp.VariationalBNN(bp.nn.mlp(64, [50], 10), bp.Categorical(), **model_kw)
    start = time.perf_counter()
    history = bnn.fit(digits.X_train, digits.y_train, epochs=EPOCHS, batch_size=128, lr=1e-2,
                      progress=False, seed=0, **fit_kw)
    seconds = time.perf_counter() - start
    probs = bnn.predict(digits.X_test, num_samples=S, seed=0)[0]
    results[name] = {"bnn": bnn, "history": history, "probs": probs, "seconds": seconds}
    print(f"{name:30s} {seconds:5.1f} s")

# %% [markdown]
## The table

# %%
y_test = digits.y_test
header = ["configuration", "test log-lik.", "accuracy", "ECE", "Brier", "fit (s)"]
lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
for name, r in results.items():
    p = r["probs"]
    r["metrics"] = {"test_ll": -nll(p, y_test), "ece": expected_calibration_error(p, y_test)}
    cells = [-nll(p, y_test), accuracy(p, y_test), r["metrics"]["ece"], brier_score(p, y_test)]
    lines.append("| " + " | ".join([name, *(f"{c:.4f}" for c in cells),
                                     f"{r['seconds']:.1f}"]) + " |")
display(Markdown("\n".join(lines)))

# %%
names = list(results)
fig, axes = plt.subplots(1, 2, figsize=(13, 4), sharey=True)
axes[0].barh(names, [results[n]["metrics"]["test_ll"] for n in names], color="C0")
axes[0].set(xlabel="test log-likelihood per digit (higher is better)")
axes[1].barh(names, [results[n]["metrics"]["ece"] for n in names], color="C3")
axes[1].set(xlabel="expected calibration error (lower is better)")
axes[0].invert_yaxis()
fig.tight_layout()
plt.show()

# %% [markdown]
## Calibration

Reliability diagrams of every configuration: a red dot below its bar is under-confidence
(the predictions are right more often than they claim), above it over-confidence.

# %%
fig, axes = plt.subplots(3, 3, figsize=(13, 12))
for ax, (name, r) in zip(axes.flat, results.items(), strict=True):
    plot_reliability_diagram(r["probs"], y_test, n_bins=10, ax=ax)
    ax.set_title(f"{name}\nECE = {r['metrics']['ece']:.4f}")
    ax.get_legend().remove()
axes.flat[0].legend(fontsize="small", loc="upper left")
fig.tight_layout()
plt.show()

# %% [markdown]
## What annealing and tempering do to the two terms of the ELBO

`fit` returns a `History` with the expected negative log-likelihood (`nll`) and the KL per
epoch. Annealing starts with β = 0 (no KL pressure), so the fit to the data comes first and the
KL is paid later; tempering keeps β small, so the KL may grow for a better fit.

# %%
fig, axes = plt.subplots(1, 2, figsize=(13, 4))
for name in ["base: N(0,1), mean-field", "KL annealing", "tempered, kl_weight=0.1"]:
    h = results[name]["history"]
    axes[0].plot(h["epoch"], h["nll"], label=name)
    axes[1].plot(h["epoch"], h["kl"], label=name)
axes[0].set(xlabel="epoch", ylabel="expected NLL (whole training set)", yscale="log")
axes[1].set(xlabel="epoch", ylabel="KL(q || prior)", yscale="log")
axes[0].legend(fontsize="small")
fig.tight_layout()
plt.show()

# %% [markdown]
What to take away:

* The prior's *scale* matters more than its shape. The layerwise `1/sqrt(fan_in)` prior, a good
  prior over functions for wide nets, makes mean-field VI on 1 437 digits badly under-confident:
  the KL keeps the weights small and the logits flat. The broad `N(0, 1)` and the scale mixture
  (whose wide component is `N(0, 1)`) do much better.
* The low-rank guide (rank `sqrt(#weights)` by default) costs several times more per step and
  lands where the mean-field guide does. The MAP point estimate (`AutoDelta`) is sharper and
  better calibrated than either, which says the mean-field posterior under `N(0, 1)` is too wide
  for this data, not too narrow.
* The exact KL and the Monte Carlo KL train to about the same place. Annealing changes the path
  (the training curves: the fit comes first, the KL is paid later) more than the end point.
* Tempering gives the best test log-likelihood and calibration of all, better than MAP, with
  β = 0.01 ahead of β = 0.1: with a factorised guide and a broad prior, the full KL
  over-regularises (the base's expected NLL *rises* after epoch 20 while its KL keeps falling).
  That is a statement about this model, guide and data size (Wenzel et al. 2020's cold
  posterior), not a licence to drop the KL everywhere; β is a hyper-parameter to choose on
  validation data (`fit(..., validation_data=...)` records `val_nll`).
"""

# --------------------------------------------------------------------------- 04 UCI benchmark
NB04 = r"""
# %% [markdown]
# 4. The UCI regression benchmark against the published tables

The benchmark of `benchmarks/uci.py` (`bnn-pyro benchmark uci`) follows Hernández-Lobato &
Adams (2015): one hidden layer of 50 ReLU units, the standard 20 train/test splits of each data
set, hyper-parameters chosen on the last 20% of each training split, retrained on the whole
training split, test log-likelihood and RMSE in the original units of `y`, mean ± standard
error over splits. This notebook only *reads* its results file; it trains nothing.

The file is `benchmarks/results/uci/uci.json`, written by

```
python benchmarks/uci.py --data ../shared/data/uci --out benchmarks/results/uci --jobs 2
```

Set `BNN_PYRO_UCI_RESULTS=/path/to/uci.json` to show another run (e.g. a `--quick` smoke run).

# %%
import json
import os
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
from IPython.display import Markdown, display

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto, no ipywidgets
from bnn_pyro.datasets import PUBLISHED_UCI  # noqa: E402
from bnn_pyro.plots import plot_uci_results  # noqa: E402
from bnn_pyro.uci_benchmark import markdown_report  # noqa: E402

FAST = os.environ.get("BNN_PYRO_NOTEBOOK_FAST", "") == "1"  # nothing to shrink here
plt.rcParams.update({"figure.dpi": 72, "savefig.dpi": 72})
print("mode:", "fast (BNN_PYRO_NOTEBOOK_FAST=1)" if FAST else "full")

path = Path(os.environ.get("BNN_PYRO_UCI_RESULTS", "../benchmarks/results/uci/uci.json"))
if not path.is_file():
    raise FileNotFoundError(
        f"no benchmark results at {path}: run benchmarks/uci.py first, or set "
        "BNN_PYRO_UCI_RESULTS to a uci.json"
    )
payload = json.loads(path.read_text())
labels = {name: info["label"] for name, info in payload["methods"].items()}
summary = [{**row, "method": labels.get(row["method"], row["method"])}
           for row in payload["summary"]]
n_splits = sorted({row["n_splits"] for row in payload["summary"]})
print(f"{path.name}: {payload['date']}, {payload['wall_time']}, splits per cell: {n_splits}")
print("settings:", json.dumps(payload["settings"], sort_keys=True))
print("command:", payload["command"])

# %% [markdown]
## The tables

Ours (best in bold) beside the published values (in italics in the header). Then the
hyper-parameters the validation search chose most often.

# %%
report = markdown_report(payload)
display(Markdown("## " + report.split("\n## ", 1)[1]))  # the header was printed above

# %% [markdown]
## The charts

Solid bars are ours, hatched bars the published values, both with their standard errors over
the splits (the published RMSEs carry none here).

# %%
for metric, title in (("test_ll", "test log-likelihood"), ("rmse", "test RMSE")):
    fig, ax = plt.subplots(figsize=(12, 4.5))
    plot_uci_results(summary, metric=metric, ax=ax)
    ax.set_title(f"UCI regression: {title} (ours solid, published hatched)")
    if metric == "rmse":
        ax.set_yscale("log")
    fig.tight_layout()
    plt.show()

# %% [markdown]
## Against the targets of issue 5

`bnn_pyro.uci_benchmark.targets.evaluate_targets` checks them on the summary (test
log-likelihood, higher is better). The standard error of a difference combines both sides,
`sqrt(se_ours² + se_published²)`; **reaches** means a mean at least as high as the published
one; **within 1 s.e.** means at least the published mean minus one combined standard error.
The same table closes `uci.md` above; here we count what was met.

# %%
from bnn_pyro.uci_benchmark.targets import evaluate_targets  # noqa: E402

rows = evaluate_targets(payload["summary"])
met = sum(r["met"] for r in rows)
print(f"{met} of {len(rows)} targets met")
for r in rows:
    if not r["met"]:
        print(f"  missed: {r['dataset']}: {r['target']}: {r['ours']:.2f} ± {r['ours_stderr']:.2f} "
              f"vs {r['published']:.2f} ({r['difference']:+.2f})")
datasets = list(dict.fromkeys(r["dataset"] for r in summary))

# %% [markdown]
## Split by split

Each dot is one split's test log-likelihood: the spread shows how much of a difference in the
means is noise.

# %%
runs = [r for r in payload["runs"] if "error" not in r]
methods = list(payload["methods"])
fig, axes = plt.subplots(1, len(datasets), figsize=(4 * len(datasets), 4), squeeze=False)
for ax, d in zip(axes[0], datasets, strict=True):
    for i, m in enumerate(methods):
        values = [r["test_ll"] for r in runs if r["dataset"] == d and r["method"] == m]
        ax.plot([i] * len(values), values, "o", alpha=0.5, ms=4)
    ax.set_xticks(range(len(methods)), [labels[m] for m in methods], rotation=60, ha="right",
                  fontsize="small")
    ax.set_title(d)
axes[0, 0].set_ylabel("test log-likelihood")
fig.tight_layout()
plt.show()
"""

SOURCES = {
    "01_toy_regression": NB01,
    "02_classification": NB02,
    "03_priors_and_guides": NB03,
    "04_uci_benchmark": NB04,
}


def parse_cells(text: str) -> list[nbformat.NotebookNode]:
    """Cells from the source format of this file (see the module docstring)."""
    cells, kind, lines = [], None, []

    def flush() -> None:
        if kind is not None:
            source = "\n".join(lines).strip("\n")
            make = nbformat.v4.new_markdown_cell if kind == "md" else nbformat.v4.new_code_cell
            cells.append(make(source))

    for line in text.strip("\n").splitlines():
        if line.startswith("# %%"):
            flush()
            kind, lines = ("md" if "[markdown]" in line else "code"), []
        else:
            lines.append(line)
    flush()
    return cells


def build(name: str) -> nbformat.NotebookNode:
    """The unexecuted notebook ``name`` (a key of :data:`SOURCES`)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = parse_cells(SOURCES[name])
    for i, cell in enumerate(nb.cells):
        cell.id = f"{name[:2]}-{i:02d}"  # stable ids: no diff noise between builds
    nb.metadata = {
        "kernelspec": {"name": KERNEL, "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    }
    return nb


def execute(nb: nbformat.NotebookNode, fast: bool, timeout: int = 600) -> float:
    """Run ``nb`` in place (cwd: this folder) with the fast switch on or off; returns seconds."""
    from nbclient import NotebookClient

    saved = os.environ.get(FAST_ENV)
    if fast:
        os.environ[FAST_ENV] = "1"
    else:
        os.environ.pop(FAST_ENV, None)
    try:
        start = time.perf_counter()
        NotebookClient(
            nb, timeout=timeout, kernel_name=KERNEL, resources={"metadata": {"path": str(HERE)}}
        ).execute()
        return time.perf_counter() - start
    finally:
        if saved is None:
            os.environ.pop(FAST_ENV, None)
        else:
            os.environ[FAST_ENV] = saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="notebook name prefixes (default: all)")
    parser.add_argument("--fast", action="store_true", help=f"{FAST_ENV}=1; write nothing")
    args = parser.parse_args(argv)
    names = [n for n in SOURCES if not args.names or any(n.startswith(p) for p in args.names)]
    if not names:
        parser.error(f"no notebook matches {args.names}; choose from {list(SOURCES)}")
    for name in names:
        nb = build(name)
        seconds = execute(nb, fast=args.fast)
        mode = "fast" if args.fast else "full"
        print(f"{name}: {seconds:.1f} s ({mode})", flush=True)
        if not args.fast:
            nbformat.write(nb, HERE / f"{name}.ipynb")
    return 0


if __name__ == "__main__":
    sys.exit(main())
