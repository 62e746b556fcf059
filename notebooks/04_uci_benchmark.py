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
# # 4. The UCI regression benchmark against the published tables
#
# The benchmark (`python -m benchmarks.uci`, in the repository) follows Hernández-Lobato &
# Adams (2015): one hidden layer of 50 ReLU units, the standard 20 train/test splits of each data
# set, hyper-parameters chosen on the last 20% of each training split, retrained on the whole
# training split, test log-likelihood and RMSE in the original units of `y`, mean ± standard
# error over splits. This notebook only *reads* its results file; it trains nothing.
#
# The file is `benchmarks/results/uci/uci.json`, written by
#
# ```
# python -m benchmarks.uci --data benchmarks/uci/data --out benchmarks/results/uci --jobs 2
# ```
#
# Set `BNN_PYRO_UCI_RESULTS=/path/to/uci.json` to show another run (e.g. a `--quick` smoke run).

# %%
import json
import os
import sys
from pathlib import Path

import matplotlib.pyplot as plt
from IPython.display import Markdown, display

sys.path.insert(0, str(Path.cwd().parent))  # the harness lives in the repository's benchmarks/
from benchmarks.uci import markdown_report, plot_uci_results  # noqa: E402
from benchmarks.uci.targets import evaluate_targets  # noqa: E402

FAST = os.environ.get("BNN_PYRO_NOTEBOOK_FAST", "") == "1"  # nothing to shrink here
plt.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100})
print("mode:", "fast (BNN_PYRO_NOTEBOOK_FAST=1)" if FAST else "full")

path = Path(os.environ.get("BNN_PYRO_UCI_RESULTS", "../benchmarks/results/uci/uci.json"))
if not path.is_file():
    raise FileNotFoundError(
        f"no benchmark results at {path}: run python -m benchmarks.uci first, or set "
        "BNN_PYRO_UCI_RESULTS to a uci.json"
    )
payload = json.loads(path.read_text())
labels = {name: info["label"] for name, info in payload["methods"].items()}
summary = [
    {**row, "method": labels.get(row["method"], row["method"])} for row in payload["summary"]
]
n_splits = sorted({row["n_splits"] for row in payload["summary"]})
print(f"{path.name}: {payload['date']}, {payload['wall_time']}, splits per cell: {n_splits}")
print("settings:", json.dumps(payload["settings"], sort_keys=True))
print("command:", payload["command"])

# %% [markdown]
# ## The tables
#
# Ours (best in bold) beside the published values (in italics in the header). Then the
# hyper-parameters the validation search chose most often.

# %%
report = markdown_report(payload)
display(Markdown("## " + report.split("\n## ", 1)[1]))  # the header was printed above

# %% [markdown]
# ## The charts
#
# Solid bars are ours, hatched bars the published values, both with their standard errors over
# the splits (the published RMSEs carry none here).

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
# ## Against the targets set from the published results
#
# `benchmarks.uci.targets.evaluate_targets` checks them on the summary (test
# log-likelihood, higher is better). The standard error of a difference combines both sides,
# `sqrt(se_ours² + se_published²)`; **reaches** means a mean at least as high as the published
# one; **within 1 s.e.** means at least the published mean minus one combined standard error.
# The same table closes `uci.md` above; here we count what was met.

# %%
rows = evaluate_targets(payload["summary"])
met = sum(r["met"] for r in rows)
print(f"{met} of {len(rows)} targets met")
for r in rows:
    if not r["met"]:
        print(
            f"  missed: {r['dataset']}: {r['target']}: {r['ours']:.2f} ± {r['ours_stderr']:.2f} "
            f"vs {r['published']:.2f} ({r['difference']:+.2f})"
        )
datasets = list(dict.fromkeys(r["dataset"] for r in summary))

# %% [markdown]
# ## Split by split
#
# Each dot is one split's test log-likelihood: the spread shows how much of a difference in the
# means is noise.

# %%
runs = [r for r in payload["runs"] if "error" not in r]
methods = list(payload["methods"])
fig, axes = plt.subplots(1, len(datasets), figsize=(4 * len(datasets), 4), squeeze=False)
for ax, d in zip(axes[0], datasets, strict=True):
    for i, m in enumerate(methods):
        values = [r["test_ll"] for r in runs if r["dataset"] == d and r["method"] == m]
        ax.plot([i] * len(values), values, "o", alpha=0.5, ms=4)
    ax.set_xticks(
        range(len(methods)), [labels[m] for m in methods], rotation=60, ha="right", fontsize="small"
    )
    ax.set_title(d)
axes[0, 0].set_ylabel("test log-likelihood")
fig.tight_layout()
plt.show()
