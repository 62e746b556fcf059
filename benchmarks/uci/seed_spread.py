"""One split's final fit, run again under other seeds: how far its test RMSE moves by seed alone.

A per-split comparison of two rows (for example "vi within 2x of bb_alpha on every split") is
only as fine as each row's own spread from one seed to the next. This script takes the
configuration a harness run chose for a split (from its ``uci_runs.jsonl``), trains K finals of
it at once with :func:`~benchmarks.uci.variational.vi_train_stacked` under seeds ``100..100+K-1``
(each member as its own fit would train), and prints their test RMSEs in the target's units::

    python -m benchmarks.uci.seed_spread RUNS/uci_runs.jsonl --data DATA \\
        --dataset collinear_plant --split 0 --seeds 4 --out spread_vi.json

``benchmarks/uci/collinear_report.py --seed-spread spread_vi.json spread_bba.json`` keeps them
beside the report. Rows trained by :mod:`benchmarks.uci.variational` (``vi``, ``lrt``,
``bb_alpha``) only.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.uci.compare import read_runs  # noqa: E402
from benchmarks.uci.data import load_uci_split  # noqa: E402
from benchmarks.uci.protocol import prepare  # noqa: E402
from benchmarks.uci.variational import vi_train_stacked  # noqa: E402

__all__ = ["FIRST_SEED", "chosen_config", "main", "seeded_finals"]

FIRST_SEED = 100  #: the seeds are FIRST_SEED, FIRST_SEED + 1, ...: none a harness final uses


def chosen_config(runs: Sequence[Mapping[str, Any]], dataset: str, split: int) -> dict:
    """The record of ``split`` of ``dataset`` in a harness run: its method and the configuration
    its search chose (the one noise factor it chose, as a one-element ``noise_factors``).

    Example:
        >>> record = {"dataset": "d", "split": 0, "method": "vi",
        ...           "config": {"epochs": 4, "noise_factors": [0.5, 1.0], "noise_factor": 0.5}}
        >>> chosen_config([record], "d", 0)
        {'method': 'vi', 'config': {'epochs': 4, 'noise_factors': [0.5]}}
    """
    found = [r for r in runs if r["dataset"] == dataset and int(r["split"]) == split]
    if len(found) != 1:
        raise ValueError(f"expected one record of {dataset} split {split}, found {len(found)}")
    config = dict(found[0]["config"])
    config["noise_factors"] = [config.pop("noise_factor")]
    return {"method": found[0]["method"], "config": config}


def seeded_finals(
    folder: str, split: int, method: str, config: Mapping[str, Any], seeds: int
) -> list[float]:
    """Test RMSE (the target's units) of ``seeds`` finals of ``config`` on ``split``, one per
    seed, all trained at once; 1,000 weight draws per prediction, as the harness's finals.

    Example:
        >>> from benchmarks.uci.method import DatasetInfo
        >>> from benchmarks.uci.variational import vi_grid
        >>> config = dict(vi_grid(DatasetInfo("toy", 40, 3), quick=True)[0], noise_factors=[1.0])
        >>> folder = str(ROOT / "benchmarks" / "uci" / "data" / "yacht")
        >>> rmse = seeded_finals(folder, 0, "vi", config, 2)
        >>> len(rmse), rmse[0] != rmse[1]
        (2, True)
    """
    if not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"seeds must be an int >= 1, got {seeds!r}")
    data = prepare(load_uci_split(folder, split))
    found: list[float] = [float("nan")] * seeds

    def report(k: int):
        def record(epoch: int, predictor: Any, options: Any) -> None:
            locs, _ = predictor(data.x_eval)
            found[k] = float(((locs.mean(0) - data.y_eval) * data.y_std).pow(2).mean().sqrt())

        return record

    vi_train_stacked(
        config,
        data.x.expand(seeds, *data.x.shape),
        data.y.expand(seeds, *data.y.shape),
        y_stds=[data.y_std] * seeds,
        hidden=data.hidden,
        seeds=list(range(FIRST_SEED, FIRST_SEED + seeds)),
        checkpoints=[int(config["epochs"])],
        reports=[report(k) for k in range(seeds)],
        num_samples=1000,
        method=method,
    )
    return found


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", help="a harness run's uci_runs.jsonl")
    parser.add_argument("--data", required=True, help="the folder of UCI-layout data sets")
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--split", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--out", type=Path, help="JSON file for the figures (default: print)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    chosen = chosen_config(read_runs(args.runs), args.dataset, args.split)
    folder = str(Path(args.data) / args.dataset)
    rmse = seeded_finals(folder, args.split, chosen["method"], chosen["config"], args.seeds)
    record = {"dataset": args.dataset, "split": args.split, **chosen, "seeds": args.seeds}
    record["rmse"] = rmse
    text = json.dumps(record, indent=1)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
