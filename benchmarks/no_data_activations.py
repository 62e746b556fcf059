"""Does the activation make VI's uncertainty grow away from the data? VI as the demo trains it,
one activation at a time, on the four 1-D problems of ``benchmarks/no_data.py``.

Mean-field VI on the demo's tanh net covers the true ``f`` nowhere beyond the demo's data, and
its sd there equals its sd on the data (``benchmarks/results/no_data.md``). A tanh unit
saturates, so the net's functions flatten beyond the data; a unit that keeps growing (ReLU,
GELU, SiLU, ELU, softplus) or oscillating (``sin``: with Gaussian weights, the random-feature
form of a stationary prior) gives functions that keep moving there. This script trains the
demo's VI (1-50-1 net, the default i.i.d. ``N(0, 1)`` prior, the known noise, 5,000 full-batch
steps at 1e-2 with the exact KL) with each activation on each problem's standardised rows, and
scores its band on the problem's grid as ``benchmarks/no_data.py`` does
(:func:`benchmarks.no_data.score`, against the cached NUTS reference of the tanh net):

* ``cover``: the share of grid points in the region whose true ``f`` lies in ``mean ± 1.96
  sd``, on the data, in the gap and beyond the data;
* ``sd beyond / sd data``: how much the band widens beyond the data;
* ``grid sd ok``: the share of the grid whose sd is within 2x the tanh net's NUTS sd.

One seed per cell. Run: ``python benchmarks/no_data_activations.py [--quick]``; a full run
writes ``benchmarks/results/no_data_activations.md``.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import pyro
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import no_data_judge as judge  # noqa: E402
from benchmarks.no_data import score  # noqa: E402
from benchmarks.no_data_contenders import _vi  # noqa: E402
from bnn_pyro.datasets import FUNCTION_PROBLEMS  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "no_data_activations.md"
STEPS = 5000  #: the demo's full-batch steps


class Sin(torch.nn.Module):
    """``sin`` as a layer: with Gaussian weights, random Fourier features of a stationary
    prior (Neal 1996)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Elementwise ``sin``, any shape."""
        return torch.sin(x)


#: The activations compared: a name of ``bnn_pyro.nn.mlp``'s, or a layer class.
ACTIVATIONS: dict[str, str | type[torch.nn.Module]] = {
    "tanh (the demo's)": "tanh",
    "relu": "relu",
    "gelu": "gelu",
    "silu": "silu",
    "elu": "elu",
    "softplus": "softplus",
    "sin": Sin,
}


def fit_band(
    problem: str, activation: str | type[torch.nn.Module], grid: torch.Tensor, scale: float = 1.0
) -> torch.Tensor:
    """``(S, G)`` draws of ``f`` on ``grid`` ``(G, 1)`` (the problem's units) from the demo's VI
    with ``activation`` (:func:`benchmarks.no_data_contenders._vi`, as its ``vi (the demo's)`` row),
    trained on the problem's standardised rows (``scale``: the share of :data:`STEPS`
    trained)."""
    data = judge.standardize(FUNCTION_PROBLEMS[problem])
    build = _vi(local=False, fan_in_prior=False, steps=STEPS, activation=activation)
    predictor = build(data, scale, 0)  # trains
    with torch.no_grad():
        return predictor(data.inputs(grid)) * data.y_std + data.y_mean


def run(
    quick: bool = False,
    references: Path = judge.RESULTS,
    problems: tuple[str, ...] = tuple(FUNCTION_PROBLEMS),
    activations: tuple[str, ...] = tuple(ACTIVATIONS),
) -> dict[str, dict[str, dict]]:
    """``rows[problem][activation]``: :func:`benchmarks.no_data.score`'s regions and
    ``grid_sd_ok``, plus ``seconds``; problems without a cached reference are skipped. ``quick``
    trains 1% of the steps (its figures mean nothing)."""
    unknown = [a for a in activations if a not in ACTIVATIONS]
    if unknown:
        raise ValueError(f"unknown activations {unknown}; choose from {list(ACTIVATIONS)}")
    rows: dict[str, dict[str, dict]] = {}
    for name in problems:
        path = references / f"{name}.pt"
        if not path.exists():
            continue
        reference = torch.load(path, weights_only=True)
        rows[name] = {}
        for label in activations:
            start = time.process_time()
            draws = fit_band(name, ACTIVATIONS[label], reference["grid"], 0.01 if quick else 1.0)
            rows[name][label] = score(name, draws, reference)
            rows[name][label]["seconds"] = time.process_time() - start
    return rows


def markdown(rows: dict[str, dict[str, dict]]) -> str:
    """One table per problem: an activation per row."""
    lines = [
        "# Does the activation make VI's uncertainty grow away from the data?",
        "",
        f"torch {torch.__version__}, pyro {pyro.__version__}, "
        f"{platform.machine()}, 1 thread; seed 0; command: python "
        "benchmarks/no_data_activations.py",
        "",
        "VI as the demo trains it (1-50-1, i.i.d. N(0, 1) prior, 5,000 full-batch steps), one "
        "activation per row. `cover`: share of the region's grid points whose true f is inside "
        "mean ± 1.96 sd; `sd beyond / sd data`: the band's widening beyond the data; `grid sd "
        "ok`: share of the grid with the sd within 2x the tanh net's NUTS sd.",
    ]
    for name, methods in rows.items():
        lines += [
            "",
            f"## {name}",
            "",
            "| activation | data cover | gap cover | beyond cover | sd beyond / sd data "
            "| grid sd ok | CPU s |",
            "|---|---|---|---|---|---|---|",
        ]
        for label, r in methods.items():
            gap = f"{r['gap']['cover']:.2f}" if "gap" in r else "—"
            widening = r["extrapolation"]["sd"] / r["data"]["sd"]
            lines.append(
                f"| {label} | {r['data']['cover']:.2f} | {gap} | "
                f"{r['extrapolation']['cover']:.2f} | {widening:.1f} | {r['grid_sd_ok']:.2f} "
                f"| {r['seconds']:.0f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1%% of the steps (a smoke run)")
    parser.add_argument("--output", type=Path, default=None, help=f"default: {RESULTS}")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = run(quick=args.quick)
    text = markdown(rows)
    output = args.output or (None if args.quick else RESULTS)
    if output is not None:
        output.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
