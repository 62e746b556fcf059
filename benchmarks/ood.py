"""Out-of-distribution detection, offline: every classifier against a plain net and laplace-torch.

For every method of :data:`bnn_pyro.METHODS` that takes a ``Categorical`` likelihood, how well
its uncertainty tells inputs like the training data from inputs unlike it. Four shifts, no
download (scikit-learn's bundled ``load_digits`` and ``make_moons``):

* ``held-out classes``: trained on digits 0–4; in distribution the test images of 0–4, out of
  distribution the test images of 5–9;
* ``permuted pixels``: the same nets; out, the test images of 0–4 with their 64 pixels shuffled by
  one fixed (seeded) permutation;
* ``uniform noise``: the same nets; out, images of uniform noise in the pixels' range ``[0, 1]``;
* ``moons: far ring``: trained on ``make_moons``; in, fresh moons points; out, points on a ring of
  radius 5–6 around the training data's centre.

Beside the methods: a plain network (the same MLP trained on cross-entropy with Adam, scored by
its softmax) and laplace-torch's last-layer Laplace (Kronecker-factored GGN, prior precision by
the marginal likelihood, GLM predictive with the probit link) fitted around that same plain
network. Scores, higher meaning more out of distribution (:mod:`bnn_pyro.metrics`): predictive
entropy, mutual information (more than one sample), ``1 - max p`` and the energy (where
``predict`` gives logits). Per score: AUROC, AUPR (out of distribution as positives) and FPR at
95% TPR; a row's "best" score is its highest AUROC.

Targets: every Bayesian method's best AUROC on the held-out classes ≥ the plain network's
entropy AUROC + 0.02; the best method ≥ laplace-torch's best AUROC − 0.01 on every shift.

Run: ``python benchmarks/ood.py [--quick] [--seed 0] [--out PATH]``; the full run writes
``benchmarks/results/ood.md`` (copied into the Results page by ``update_readme.py``) and the
same numbers as ``ood.json`` beside it. laplace-torch is
the ``ood`` extra (``pip install ".[ood]"``); without it its rows say "not installed". It
needs torchvision, which pip takes from PyPI, built for PyPI's (CUDA) torch: next to a CPU build
of torch, install torchvision from the index that torch came from, or uninstall it (laplace-torch
runs without it), else ``import torchmetrics`` and with it ``import laplace`` fail.

The problems and their shifts are in ``ood_data.py``, the targets and the markdown in
``ood_report.py``, beside this script.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pyro
import torch
import torch.nn as nn

# the scripts import their siblings from this folder (python benchmarks/ood.py)
from _report import publish  # benchmarks/_report.py (scripts run from this folder)
from ood_data import (  # benchmarks/ood_data.py: the problems and their shifts
    DIGITS_HIDDEN,
    MOONS_HIDDEN,
    MOONS_NOISE,
    RING_RADIUS,
    RING_WIDTH,
    Problem,
    digits_problem,
    moons_problem,
)
from ood_report import (  # benchmarks/ood_report.py: the targets and the markdown
    INSTALL,
    LAPLACE_TORCH,
    PLAIN,
    SCORES,
    SHIFTS,
    Entry,
    Metrics,
    Results,
    render,
)

import bnn_pyro as bp
from bnn_pyro.base import to_probabilities
from bnn_pyro.metrics import (
    accuracy,
    energy_score,
    fpr_at_95_tpr,
    max_probability_score,
    mutual_information,
    ood_aupr,
    ood_auroc,
    predictive_entropy,
)
from bnn_pyro.registry import method_spec

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "ood.md")
DROPOUT = 0.1  # MC dropout's rate, after each hidden layer
#: Rows beside a method's defaults: label -> (registry name, options). ``make("laplace")``'s
#: defaults are the GGN and the GLM predictive (what laplace-torch runs); beside them, the
#: diagonal empirical Fisher with the sampled ("nn") predictive, the library's earlier default.
VARIANTS = {"laplace (Fisher, sampled)": ("laplace", {"hessian": "fisher", "predictive": "nn"})}

Scorer = Callable[[torch.Tensor], tuple[torch.Tensor, dict[str, torch.Tensor]]]


@dataclass(frozen=True)
class Settings:
    """Epochs, minibatch size and predictive samples of a run."""

    epochs: int
    batch_size: int
    samples: int


FULL = Settings(epochs=200, batch_size=64, samples=100)
QUICK = Settings(epochs=2, batch_size=64, samples=10)


def _say(message: str) -> None:
    print(f"[ood] {message}", file=sys.stderr, flush=True)


# --- scores and metrics --------------------------------------------------------------------
def scores_from(
    probs_samples: torch.Tensor, logits: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """The OOD scores of ``(S, N, C)`` class-probability samples (and their logits, if known).

    Mutual information needs more than one sample; the energy needs logits.

    Example:
        >>> probs = torch.tensor([[[0.9, 0.1]], [[0.5, 0.5]]])
        >>> sorted(scores_from(probs))
        ['entropy', 'max-prob', 'mutual information']
    """
    if probs_samples.dim() != 3:
        raise ValueError(f"probs_samples must be (S, N, C), got {tuple(probs_samples.shape)}")
    out = {"entropy": predictive_entropy(probs_samples)}
    if probs_samples.shape[0] > 1:
        out["mutual information"] = mutual_information(probs_samples)
    out["max-prob"] = max_probability_score(probs_samples)
    if logits is not None:
        out["energy"] = energy_score(logits)
    return out


def ood_metrics(scores_in: torch.Tensor, scores_out: torch.Tensor) -> Metrics:
    """AUROC, AUPR and FPR at 95% TPR of one score (higher meaning more OOD).

    Example:
        >>> ood_metrics(torch.tensor([0.1, 0.2]), torch.tensor([0.3, 0.4]))
        {'auroc': 1.0, 'aupr': 1.0, 'fpr95': 0.0}
    """
    return {
        "auroc": ood_auroc(scores_in, scores_out),
        "aupr": ood_aupr(scores_in, scores_out),
        "fpr95": fpr_at_95_tpr(scores_in, scores_out),
    }


def evaluate(scorer: Scorer, problem: Problem) -> dict[str, Entry]:
    """Per shift of ``problem``: every score's metrics and the in-distribution accuracy."""
    mean_in, s_in = scorer(problem.X_in)
    acc = accuracy(mean_in, problem.y_in)
    out = {}
    for shift, x in problem.shifts.items():
        s_out = scorer(x)[1]
        out[shift] = {
            "scores": {k: ood_metrics(s_in[k], s_out[k]) for k in SCORES if k in s_in},
            "accuracy": acc,
        }
    return out


# --- the contenders ------------------------------------------------------------------------
def fit_plain(problem: Problem, settings: Settings, seed: int) -> nn.Module:
    """The plain network: the MLP trained on cross-entropy with Adam (lr 1e-3)."""
    torch.manual_seed(seed)
    net = bp.nn.mlp(problem.X_train.shape[1], problem.hidden, problem.classes)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(seed)
    n = len(problem.X_train)
    net.train()
    for _ in range(settings.epochs):
        for rows in torch.randperm(n, generator=g).split(settings.batch_size):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(net(problem.X_train[rows]), problem.y_train[rows])
            loss.backward()
            opt.step()
    return net.eval()


def plain_scorer(net: nn.Module) -> Scorer:
    """Softmax entropy, ``1 - max p`` and energy of a deterministic net."""

    def score(x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        with torch.no_grad():
            logits = net(x)
        probs = logits.softmax(-1)
        return probs, scores_from(probs[None], logits)

    return score


def laplace_class() -> type | None:
    """laplace-torch's ``Laplace``, or ``None`` where it is not installed."""
    try:
        from laplace import Laplace
    except ImportError:
        return None
    return Laplace


def laplace_scorer(net: nn.Module, problem: Problem, settings: Settings, seed: int) -> Scorer:
    """laplace-torch's last-layer Laplace around the trained ``net``: KFAC GGN, prior precision
    by the marginal likelihood; entropy and ``1 - max p`` of the probit GLM predictive, mutual
    information of ``settings.samples`` GLM samples."""
    from torch.utils.data import DataLoader, TensorDataset

    Laplace = laplace_class()
    if Laplace is None:
        raise ImportError(f"laplace-torch is not installed: {INSTALL}")
    la = Laplace(net, "classification", subset_of_weights="last_layer", hessian_structure="kron")
    la.fit(DataLoader(TensorDataset(problem.X_train, problem.y_train), settings.batch_size))
    with warnings.catch_warnings():  # a reminder it always gives for classification: the
        # marginal likelihood does not read link_approx; the predictive below uses probit
        warnings.filterwarnings("ignore", message="By default `link_approx` is `probit`")
        la.optimize_prior_precision(pred_type="glm", method="marglik", link_approx="probit")

    def score(x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            probs = la(x, pred_type="glm", link_approx="probit")
            draws = la.predictive_samples(
                x, pred_type="glm", n_samples=settings.samples, generator=g
            )
        out = scores_from(probs[None])
        out["mutual information"] = mutual_information(draws)
        return probs, out

    return score


def method_net(name: str, problem: Problem, seed: int) -> nn.Module:
    """The MLP a method starts from (with dropout layers where the method needs them)."""
    torch.manual_seed(seed)
    dropout = DROPOUT if method_spec(name).dropout_net else 0.0
    return bp.nn.mlp(problem.X_train.shape[1], problem.hidden, problem.classes, dropout=dropout)


def contenders() -> list[tuple[str, str, dict[str, Any]]]:
    """``(row label, registry name, options)``: every method that classifies (its registry
    entry's ``classifies``) with its defaults, in :data:`bnn_pyro.METHODS` order, each followed
    by its :data:`VARIANTS`.

    Example:
        >>> [label for label, _, _ in contenders()][:2]
        ['vi', 'lrt']
    """
    out = []
    for name in bp.METHODS:
        if not bp.registry.method_spec(name).classifies:
            continue
        out.append((name, name, {}))
        out += [(label, n, dict(o)) for label, (n, o) in VARIANTS.items() if n == name]
    return out


def build_method(name: str, problem: Problem, settings: Settings, seed: int, **options: Any) -> Any:
    """``bp.make(name, mlp, Categorical(), **options)`` with ``settings.samples`` predictive
    samples (an ensemble: its members)."""
    if not method_spec(name).own_samples:
        options.setdefault("num_samples", settings.samples)
    return bp.make(name, method_net(name, problem, seed), bp.Categorical(), **options)


def fit_method(model: Any, name: str, problem: Problem, settings: Settings, seed: int) -> None:
    """Train with the method's own optimizer and learning rate; Laplace then sets its prior
    precision by the marginal likelihood, as laplace-torch does."""
    model.fit(
        problem.X_train,
        problem.y_train,
        epochs=settings.epochs,
        batch_size=settings.batch_size,
        progress=False,
        seed=seed,
    )
    if name == "laplace":
        model.optimize_prior_precision()


def method_scorer(model: Any, seed: int) -> Scorer:
    """Scores of a method's ``predict``; the energy from its logits where ``predict`` gives
    them (``normalize_output=False``)."""
    takes = inspect.signature(model.predict).parameters
    logits_too = "normalize_output" in takes

    def score(x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        kwargs: dict[str, Any] = {"return_samples": True}
        if "seed" in takes:
            kwargs["seed"] = seed
        if logits_too:
            logits = model.predict(x, normalize_output=False, **kwargs)[2]
            probs = to_probabilities(logits)
            return probs.mean(0), scores_from(probs, logits)
        mean, _, probs = model.predict(x, **kwargs)
        return mean, scores_from(probs)

    return score


# --- the run -------------------------------------------------------------------------------
def run_problem(
    problem: Problem, settings: Settings, seed: int, results: Results, skipped: dict[str, str]
) -> list[str]:
    """Every contender on ``problem``, into ``results``; returns the methods that ran."""
    for shift in problem.shifts:
        results.setdefault(shift, {})

    def put(row: str, scorer: Scorer) -> None:
        for shift, entry in evaluate(scorer, problem).items():
            results[shift][row] = entry

    start = time.perf_counter()
    plain = fit_plain(problem, settings, seed)
    put(PLAIN, plain_scorer(plain))
    _say(f"{problem.name}: {PLAIN} {time.perf_counter() - start:.1f} s")
    ran = []
    for label, name, options in contenders():
        start = time.perf_counter()
        try:
            model = build_method(name, problem, settings, seed, **options)
        except (TypeError, ValueError, NotImplementedError) as err:
            skipped[label] = f"{type(err).__name__}: {err}"
            _say(f"{problem.name}: {label} skipped ({skipped[label]})")
            continue
        fit_method(model, name, problem, settings, seed)
        put(label, method_scorer(model, seed))
        ran.append(label)
        _say(f"{problem.name}: {label} {time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    if laplace_class() is None:
        for shift in problem.shifts:
            results[shift][LAPLACE_TORCH] = f"not installed (`{INSTALL}`)"
    else:
        put(LAPLACE_TORCH, laplace_scorer(plain, problem, settings, seed))
        _say(f"{problem.name}: {LAPLACE_TORCH} {time.perf_counter() - start:.1f} s")
    return ran


def _version(module: str) -> str:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:  # noqa: BLE001 - a missing package is reported, not raised
        return "not installed"


def describe(
    settings: Settings, digits: Problem, moons: Problem, no_logits: Sequence[str]
) -> list[str]:
    """The report's paragraphs after its first line (versions and command, from ``main``):
    data, nets, training and scores, every figure read from the run's own objects."""
    s, n_out = settings, {k: len(x) for k, x in {**digits.shifts, **moons.shifts}.items()}
    digits_net = "→".join(map(str, [digits.X_train.shape[1], *DIGITS_HIDDEN, digits.classes]))
    moons_net = "→".join(map(str, [moons.X_train.shape[1], *MOONS_HIDDEN, moons.classes]))
    no_energy = ", ".join(f"`{m}`" for m in no_logits) or "none"
    return [
        "",
        f"Digits: scikit-learn's bundled 8×8 digits (pixels / 16), one seeded 80/20 split; every "
        f"net trains on the {len(digits.X_train)} training images of classes 0–4 ({digits_net} "
        f"MLP); in distribution: the {len(digits.X_in)} test images of 0–4; out: the "
        f"{n_out['held-out classes']} test images of 5–9, those {n_out['permuted pixels']} "
        f"images of 0–4 with their pixels shuffled by one seeded permutation, and "
        f"{n_out['uniform noise']} images of uniform noise on [0, 1]. Moons: make_moons, "
        f"{len(moons.X_train)} points, noise {MOONS_NOISE} ({moons_net} MLP); in: "
        f"{len(moons.X_in)} fresh points; out: {n_out['moons: far ring']} points on a ring of "
        f"radius {RING_RADIUS:g}–{RING_RADIUS + RING_WIDTH:g} around the training points' "
        f"centre.",
        "",
        f"Every net: {s.epochs} epochs, minibatches of {s.batch_size}. The methods: "
        f"`bp.make(name, mlp, bp.Categorical())` with their own defaults (optimizer, learning "
        f"rate, prior), {s.samples} predictive samples (the deep ensemble: its members), MC "
        f"dropout at rate {DROPOUT} after each hidden layer, the Laplace approximation's prior "
        f"precision set by its marginal likelihood (`laplace`: `make`'s defaults, a diagonal "
        f"GGN and the GLM predictive; `laplace (Fisher, sampled)`: "
        f'`hessian="fisher", predictive="nn"`, a diagonal empirical Fisher and the sampled '
        f"predictive, the library's earlier default). The plain network: the same MLP, "
        f"cross-entropy, Adam at 1e-3. "
        f"laplace-torch LLLA: last layer, Kronecker-factored GGN around the plain network's "
        f"weights, prior precision by the marginal likelihood, GLM predictive with the probit "
        f"link (mutual information: {s.samples} GLM samples).",
        "",
        f"Scores, higher meaning more out of distribution (`bnn_pyro.metrics`): the predictive "
        f"entropy, the mutual information (more than one sample), max-prob `1 - max p` and the "
        f"energy `-logsumexp` of the mean logits, where `predict(normalize_output=False)` gives "
        f"logits (not: {no_energy}, whose `predict` gives probabilities, which fix the logits "
        f"only up to a constant per row; nor laplace-torch, whose GLM mean logits are the plain "
        f"network's). AUROC, AUPR (out of distribution as positives) and FPR at 95% TPR of each "
        f"row's best score (its highest AUROC); accuracy: on the in-distribution test inputs. "
        f"An AUROC below 0.5: the score ranks the out-of-distribution inputs as more familiar "
        f"than the in-distribution test inputs.",
    ]


def main(argv: list[str] | None = None) -> int:
    """Run every contender on both problems, print the report and write it (``--out``; a full
    run's default: ``benchmarks/results/ood.md``). Returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny epochs and samples (smoke)")
    parser.add_argument("--seed", type=int, default=0, help="data, weights and draws (>= 0)")
    parser.add_argument(
        "--out",
        "--output",
        dest="out",
        default=None,
        help=f"markdown report (default: {RESULTS} for a full run)",
    )
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    if args.seed < 0:
        parser.error(f"--seed must be >= 0, got {args.seed}")
    out = args.out if args.out is not None else (None if args.quick else RESULTS)
    settings = QUICK if args.quick else FULL
    if laplace_class() is None:
        _say(f"laplace-torch is not installed: its rows say so ({INSTALL} adds it)")
    wall = time.perf_counter()
    pyro.set_rng_seed(args.seed)
    results: Results = {}
    skipped: dict[str, str] = {}
    with warnings.catch_warnings(), bp.threads():
        warnings.simplefilter("ignore", bp.PosteriorCollapseWarning)  # --quick's short fits
        digits = digits_problem(args.seed)
        methods = run_problem(digits, settings, args.seed, results, skipped)
        moons = moons_problem(args.seed)
        run_problem(moons, settings, args.seed, results, skipped)
    seconds = time.perf_counter() - wall
    no_logits = [m for m in methods if "energy" not in results[SHIFTS[0]][m]["scores"]]
    header = [
        f"torch {torch.__version__}, pyro {pyro.__version__}, laplace-torch "
        f"{_version('laplace-torch')}, scikit-learn {_version('scikit-learn')}; `--seed "
        f"{args.seed}`; {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; wall time "
        f"{seconds:.0f} s on {os.cpu_count()} cores; command: "
        f"`python benchmarks/ood.py{''.join(' ' + a for a in argv)}`",
        *describe(settings, digits, moons, no_logits),
    ]
    if skipped:
        header += [
            "",
            "Skipped (no classification): "
            + "; ".join(f"`{n}` ({why})" for n, why in skipped.items())
            + ".",
        ]
    publish(render(results, methods, header), out)
    if out is not None:  # the same numbers for programs: the docs' method guide reads them
        with open(os.path.splitext(out)[0] + ".json", "w", encoding="utf-8") as handle:
            json.dump({"header": header, "methods": methods, "results": results}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
