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
# # 5. Uncertainty you can act on: recalibration, conformal intervals, OOD scores
#
# A Bayesian network's uncertainty is only useful if it can be trusted. This notebook asks the
# three questions a user asks of it, and answers each with `bnn_pyro.calibration` and
# `bnn_pyro.metrics`:
#
# 1. **Does a 90% interval hold 90% of the outcomes?** A reliability plot of the raw predictive,
#    then a recalibrated one (`ScaleRecalibration`, `IsotonicRecalibration`), fitted on held-out
#    *calibration* rows the model never saw.
# 2. **Can I get an interval whose coverage is guaranteed, whatever the model got wrong?**
#    Split conformal intervals (`SplitConformal`, two scores) and conformalized quantile
#    regression (`QuantileConformal`), with their coverage and width on test rows.
# 3. **Does the model know when an input is unlike its training data?** Digits 0–4 in
#    distribution, digits 5–9 and noise images out: predictive entropy, mutual information and
#    max-probability scores, with AUROC, AUPR and FPR at 95% TPR.
#
# Run time: about a minute on one CPU core; `BNN_PYRO_NOTEBOOK_FAST=1` shrinks it for the tests.

# %%
import os
import tempfile

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown

import bnn_pyro as bp
from bnn_pyro.calibration import (
    IsotonicRecalibration,
    QuantileConformal,
    ScaleRecalibration,
    SplitConformal,
    predictive_moments,
)
from bnn_pyro.datasets import load_digits_split
from bnn_pyro.metrics import (
    fpr_at_95_tpr,
    interval_score,
    max_probability_score,
    mean_interval_width,
    mutual_information,
    ood_aupr,
    ood_auroc,
    picp,
    predictive_entropy,
)
from bnn_pyro.plots import plot_regression_calibration

FAST = os.environ.get("BNN_PYRO_NOTEBOOK_FAST", "") == "1"
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100})

EPOCHS = 30 if FAST else 1000  # regression
DIGITS_EPOCHS = 5 if FAST else 150
S = 20 if FAST else 200  # predictive samples
print("mode:", "fast (BNN_PYRO_NOTEBOOK_FAST=1)" if FAST else "full")


def markdown_table(header, rows, digits=3):
    """A list of rows as a markdown table (floats rounded)."""

    def fmt(v):
        return f"{v:.{digits}f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return Markdown("\n".join(lines))


# %% [markdown]
# ## A regression whose noise the model gets wrong
#
# `y = x sin(x) + ε` with noise that grows away from 0 (sd `0.1 + 0.3 |x|`). The model is a
# mean-field `VariationalBNN` with a *fixed* Gaussian noise of 0.2: a guess that is too small
# where `|x| > 1/3`, the kind of mistake a real model makes somewhere. Three disjoint sets of
# rows: 300 to train on, 300 to calibrate on, 2000 to test on.


# %%
def make_rows(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = 6 * torch.rand(n, 1, generator=g) - 3
    noise = (0.1 + 0.3 * x.abs()) * torch.randn(n, 1, generator=g)
    return x, (x * torch.sin(x) + noise)[:, 0]


X_train, y_train = make_rows(300, 0)
X_cal, y_cal = make_rows(300, 1)
X_test, y_test = make_rows(2000, 2)

torch.manual_seed(0)
bnn = bp.make("vi", bp.nn.mlp(1, [50, 50], 1), bp.Gaussian(0.2))
bnn.fit(X_train, y_train, epochs=EPOCHS, batch_size=100, lr=1e-2, progress=False, seed=0)
options = {"num_samples": S, "seed": 0}  # the same posterior samples for every calibrator

# %% [markdown]
# ## 1. Reliability: does a p% interval hold p% of the outcomes?
#
# `plot_regression_calibration` draws the observed share of test targets inside each central
# interval of the predictive against its nominal level. The raw model is over-confident: its
# curve runs below the diagonal. Each recalibration is fitted on the calibration rows only:
#
# * `ScaleRecalibration`: one multiplier `s` for the predictive sd, in closed form
#   (`s² = mean(((y − μ)/σ)²)`, the maximum-likelihood value for a Gaussian);
# * `IsotonicRecalibration` (Kuleshov et al. 2018): a monotone map from the predictive's levels
#   to the observed ones.

# %%
locs, scales = bnn.predictive_gaussian(X_test, **options)
scaled = ScaleRecalibration(bnn, **options).fit(X_cal, y_cal)
isotonic = IsotonicRecalibration(bnn, **options).fit(X_cal, y_cal)
print(f"scale factor s = {float(scaled.factor[0]):.2f}")

levels = torch.linspace(0.05, 0.95, 19)
fig, axes = plt.subplots(1, 3, figsize=(13, 4), sharey=True)
plot_regression_calibration(locs, scales, y_test[:, None], ax=axes[0])
mean, sd = scaled.predict_moments(X_test)
plot_regression_calibration(mean[None], sd, y_test[:, None], ax=axes[1])
for ax, name in zip(axes[:2], ("raw", "scaled"), strict=True):
    ax.set_title(f"{name}: {ax.get_title()}")
coverage = []
for p in levels.tolist():
    lower, upper = isotonic.predict_interval(X_test, alpha=1 - p)
    coverage.append(picp(lower, upper, y_test[:, None]))
axes[2].plot([0, 1], [0, 1], "--", color="gray")
axes[2].plot(levels, coverage, "o-")
error = float((torch.tensor(coverage) - levels).abs().mean())
axes[2].set(title=f"isotonic (error = {error:.4f})", xlabel="nominal level")
plt.tight_layout()

# %% [markdown]
# The same story at one level, 90%, on the test rows:


# %%
def row(name, lower, upper, alpha=0.1):
    return [name, picp(lower, upper, y_test[:, None]), mean_interval_width(lower, upper),
            interval_score(lower, upper, y_test[:, None], alpha=alpha)]  # fmt: skip


mean_raw, sd_raw = predictive_moments(bnn, X_test, **options)
z = 1.6448536
rows = [
    row("raw (μ ± 1.645 σ)", mean_raw - z * sd_raw, mean_raw + z * sd_raw),
    row("scaled", mean - z * sd, mean + z * sd),
    row("isotonic", *isotonic.predict_interval(X_test, alpha=0.1)),
]
markdown_table(["90% interval", "coverage", "mean width", "Winkler score"], rows)

# %% [markdown]
# ## 2. Conformal intervals: coverage guaranteed
#
# Recalibration fixes the *average* miscalibration it saw, but promises nothing. Split
# conformal prediction does: with `n` calibration rows exchangeable with the test rows, the
# interval holds a new `y` with probability at least `1 − α` (and at most `1 − α + 1/(n+1)`),
# whatever the model got wrong. Three scores:
#
# * `SplitConformal(score="absolute")`: `|y − μ|`, one width everywhere;
# * `SplitConformal(score="normalized")`: `|y − μ|/σ`, wide where the model is unsure;
# * `QuantileConformal` (CQR, Romano et al. 2019): the predictive's own 5% and 95% quantiles,
#   moved out (or in) by one calibrated amount.

# %%
conformal = {
    "absolute score": SplitConformal(bnn, score="absolute", **options).calibrate(X_cal, y_cal),
    "σ-normalised score": SplitConformal(bnn, **options).calibrate(X_cal, y_cal),
}
bands = {name: c.predict_interval(X_test, alpha=0.1) for name, c in conformal.items()}
cqr = QuantileConformal(bnn, alpha=0.1, **options).calibrate(X_cal, y_cal)
bands["CQR"] = cqr.predict_interval(X_test)
markdown_table(
    ["90% conformal interval", "coverage", "mean width", "Winkler score"],
    [row(name, lower, upper) for name, (lower, upper) in bands.items()],
)

# %%
order = X_test[:, 0].argsort()
xs = X_test[order, 0]
fig, axes = plt.subplots(1, 3, figsize=(14, 4), sharey=True)
for ax, (name, (lower, upper)) in zip(axes, bands.items(), strict=True):
    ax.scatter(X_test[:, 0], y_test, s=2, color="gray", alpha=0.4, label="test rows")
    ax.fill_between(xs, lower[order, 0], upper[order, 0], alpha=0.3, label="90% interval")
    ax.plot(xs, mean_raw[order, 0], color="C3", lw=1, label="predictive mean")
    ax.set(title=name, xlabel="x")
axes[0].legend(loc="upper center")
plt.tight_layout()

# %% [markdown]
# The model assumed one noise level everywhere, so the σ-normalised score can only widen the
# band where the *epistemic* part of σ grows; none of the three bands follows the noise that
# grows with `|x|` as closely as a model of that noise would. Conformal prediction guarantees
# the average coverage, not the coverage at each `x`.
#
# A calibrator belongs to the model it was fitted on, so it is saved with it, in one file:

# %%
path = os.path.join(tempfile.mkdtemp(), "vi_with_cqr.pt")
cqr.save(path)
again = bp.load(path, net=bp.nn.mlp(1, [50, 50], 1))
lower, upper = again.predict_interval(X_test)
print(type(again).__name__, "wrapping", type(again.method).__name__)
print("same intervals after the round trip:", torch.equal(lower, bands["CQR"][0]))

# %% [markdown]
# ## 3. Out-of-distribution inputs
#
# A classifier trained on the digits 0–4 of scikit-learn's 8×8 digits meets three kinds of
# input: test digits 0–4 (in distribution), digits 5–9 (classes it has never seen) and
# uniform-noise images. A good OOD score is high on the latter two. Three scores from the
# `(S, N, C)` probability samples:
#
# * predictive entropy `H[E p]` (total uncertainty);
# * mutual information `H[E p] − E H[p]` (the epistemic part, BALD);
# * max-probability score `1 − max_c E p_c`.
#
# Each is summarised by AUROC, AUPR (OOD as positives) and the false-positive rate at 95% true
# positives (lower is better).

# %%
digits = load_digits_split(seed=0)
seen_train, seen_test = digits.y_train < 5, digits.y_test < 5
X_in, y_in = digits.X_train[seen_train], digits.y_train[seen_train]
torch.manual_seed(0)
classifier = bp.make("vi", bp.nn.mlp(64, [100], 5), bp.Categorical())
classifier.fit(X_in, y_in, epochs=DIGITS_EPOCHS, batch_size=64, lr=1e-2, progress=False, seed=0)

g = torch.Generator().manual_seed(0)
inputs = {
    "digits 0–4 (in)": digits.X_test[seen_test],
    "digits 5–9": digits.X_test[~seen_test],
    "noise images": digits.X_train.min()
    + (digits.X_train.max() - digits.X_train.min()) * torch.rand(300, 64, generator=g),
}
probs = {name: classifier.predict(x, True, num_samples=S, seed=0)[2] for name, x in inputs.items()}
accuracy = float(
    (probs["digits 0–4 (in)"].mean(0).argmax(-1) == digits.y_test[seen_test]).double().mean()
)
print(f"accuracy on digits 0–4: {accuracy:.3f}")

SCORES = {
    "entropy": predictive_entropy,
    "mutual information": mutual_information,
    "max-probability": max_probability_score,
}
rows = []
for shift in ("digits 5–9", "noise images"):
    for score_name, score in SCORES.items():
        inside, outside = score(probs["digits 0–4 (in)"]), score(probs[shift])
        rows.append([shift, score_name, ood_auroc(inside, outside), ood_aupr(inside, outside),
                     fpr_at_95_tpr(inside, outside)])  # fmt: skip
markdown_table(["out-of-distribution", "score", "AUROC", "AUPR", "FPR at 95% TPR"], rows)

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 3.5))
for ax, score_name in zip(axes, ("entropy", "mutual information"), strict=True):
    for name, p in probs.items():
        ax.hist(SCORES[score_name](p).numpy(), bins=30, alpha=0.5, density=True, label=name)
    ax.set(title=score_name, xlabel="score (higher: more out of distribution)")
axes[0].legend()
plt.tight_layout()

# %% [markdown]
# Classes never seen are the hard case: a 5–9 digit often looks like some 0–4 digit, and the
# scores overlap. Noise images are far from every training digit; how well each score separates
# them depends on whether the network extrapolates to confident or to uncertain outputs there.
# `benchmarks/ood.py` runs every method of the library on these shifts and on two moons,
# side by side with a plain network and a last-layer Laplace approximation.
