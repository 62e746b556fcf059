"""Copy the benchmark tables from ``benchmarks/results/`` into the README and the Results page.

Each results block in ``README.md`` and ``docs/results.md`` (:data:`PAGES`) sits between
``<!-- results:NAME -->`` and ``<!-- /results:NAME -->`` and is rewritten from
``benchmarks/results/NAME.md`` (for the UCI benchmark, ``benchmarks/results/uci/uci.md``: its
header lines, the two tables and the targets table; the chosen hyper-parameters stay in the
linked file). The pages therefore show exactly
what the scripts printed, and their prose quotes no measured figure of its own: it points at
these blocks. ``tests/test_readme.py`` checks both.

The blocks: ``step_time``, ``pyro_path`` (a model only Pyro's machinery covers, through
``fit`` and in plain Pyro, ``benchmarks/pyro_path.py``), ``gpu`` (the same jobs on a GPU,
``benchmarks/gpu.py --device cuda``; in the README too), ``local_reparam``, ``methods`` (the
timing benchmarks),
``laplace_kron`` (KFAC Laplace beside laplace-torch, ``benchmarks/laplace_kron.py``),
``sgmcmc_defaults`` (each sampler at its defaults on a family of exact posteriors,
``benchmarks/sgmcmc_defaults.py``), ``sgmcmc_peers`` (SG-MCMC beside posteriors and
torch-uncertainty on an exact posterior, ``benchmarks/sgmcmc_peers.py``),
``sgmcmc_large_data`` (SGHMC's samples against the exact posterior as the rows grow,
``benchmarks/sgmcmc_large_data.py``), ``memory``
(peak memory of a large ``predict``, ``benchmarks/memory.py``), ``distributed`` (1 and 2
processes, ``benchmarks/distributed.py``), ``stacked`` (an ensemble's members trained stacked
and one by one, ``benchmarks/stacked.py``), ``stacked_chains`` (SG-MCMC chains stacked against
one chain, ``benchmarks/stacked_chains.py``), ``threads`` (the thread policy on an idle and a busy
machine, ``benchmarks/threads.py``), ``ood`` (out-of-distribution detection, every classifier
beside a plain network and laplace-torch, ``benchmarks/ood.py``), ``rotated_digits`` (every
classifier on test digits rotated further and further from the upright training images,
``benchmarks/rotated_digits.py``), ``no_data`` (every method's
band in gaps and beyond the data against NUTS, ``benchmarks/no_data.py``),
``last_layer_cost`` (what VBLL and SNGP cost over the plain net, beside the ``vbll`` package's
own layer, and DKL against the exact GP, ``benchmarks/last_layer_cost.py``),
``no_data_activations`` (the demo's VI with other activations, same judge,
``benchmarks/no_data_activations.py``), ``co2`` (every regression method forecasting the Mauna
Loa CO2 series a decade past its data, beside an exact GP, ``benchmarks/co2.py``), ``uci_gap``
(the UCI gap and tail splits, ``python -m benchmarks.uci.gap_report``), ``uci_dev`` (rows run
after the committed UCI table, beside its best row, ``python -m benchmarks.uci.dev_report``),
``uci_laplace`` (the Laplace row's posteriors on the UCI splits beside laplace-torch, ``python -m
benchmarks.uci.laplace_peer``, ``results/uci/laplace_peer.md``), ``uci`` (the
UCI harness, ``python -m benchmarks.uci``), ``suite_time`` (how long ``make test`` and ``make
test-quick`` take, ``benchmarks/suite_time.py``; in the README) and ``demo`` (the table ``make
demo`` prints, written
by ``benchmarks/demo.py``; ``tests/cli/test_demo_cli.py`` checks the demo still prints it).

Run: ``python benchmarks/update_readme.py [--check]`` after a benchmark run.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
#: The pages whose results blocks this script rewrites: the README (the demo's table) and the
#: documentation's Results page (every benchmark).
PAGES = (README, os.path.join(ROOT, "docs", "results.md"))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
BLOCK = re.compile(
    r"(<!-- results:(?P<name>[a-z_][a-z0-9_]*) -->\n)(?P<body>.*?)(<!-- /results:(?P=name) -->)",
    re.S,
)
UCI_SECTIONS = ("test log-likelihood", "RMSE", "Targets")
#: Blocks whose results file is not ``results/NAME.md``: the path below ``results/``.
ELSEWHERE = {"uci_laplace": ("uci", "laplace_peer.md")}


def _strip_title(text: str) -> str:
    """Drop a leading ``# title`` line (the README has its own heading)."""
    lines = text.strip().splitlines()
    if lines and lines[0].startswith("# "):
        lines = lines[1:]
    return "\n".join(lines).strip()


def _demote(text: str) -> str:
    """``## x`` headings become bold lines so they sit under the README's ``###`` heading."""
    return re.sub(r"^## (.+)$", r"**\1**", text, flags=re.M)


def uci_block(markdown: str) -> str:
    """The header lines and the chosen sections of ``uci.md``, with links to the full file."""
    parts = re.split(r"^## ", _strip_title(markdown), flags=re.M)
    keep = [parts[0].strip()]
    keep += ["## " + p.strip() for p in parts[1:] if p.startswith(UCI_SECTIONS)]
    keep.append(
        "Charts: [test log-likelihood](benchmarks/results/uci/uci_test_ll.png), "
        "[RMSE](benchmarks/results/uci/uci_rmse.png); the hyper-parameters chosen per split: "
        "[uci.md](benchmarks/results/uci/uci.md); every split's numbers: "
        "[uci.json](benchmarks/results/uci/uci.json)."
    )
    return _demote("\n\n".join(keep))


def block_text(name: str) -> str:
    """The README body for results block ``name``, read from ``benchmarks/results/``."""
    if name == "uci":
        with open(os.path.join(RESULTS, "uci", "uci.md"), encoding="utf-8") as handle:
            return uci_block(handle.read())
    path = os.path.join(RESULTS, *ELSEWHERE.get(name, (f"{name}.md",)))
    if not os.path.exists(path):
        raise FileNotFoundError(f"no results file {path}: run benchmarks/{name}.py first")
    with open(path, encoding="utf-8") as handle:
        return _demote(_strip_title(handle.read()))


def render(readme: str) -> str:
    """``readme`` with every results block rewritten from its results file."""
    names = [m.group("name") for m in BLOCK.finditer(readme)]
    if not names:
        raise ValueError("README.md has no <!-- results:NAME --> blocks")
    return BLOCK.sub(lambda m: m.group(1) + block_text(m.group("name")) + "\n" + m.group(4), readme)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a page is stale")
    args = parser.parse_args(argv)
    stale = []
    for page in PAGES:
        with open(page, encoding="utf-8") as handle:
            current = handle.read()
        updated = render(current)
        if updated == current:
            continue
        stale.append(os.path.relpath(page, ROOT))
        if not args.check:
            with open(page, "w", encoding="utf-8") as handle:
                handle.write(updated)
    if args.check and stale:
        print(f"{', '.join(stale)}: results are stale: run python benchmarks/update_readme.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
