"""benchmarks.uci.variants: a variant's keys reach every vi configuration; the paired change."""

from __future__ import annotations

import json
import os

import pytest
import torch

from benchmarks.uci import variants
from benchmarks.uci.method import DatasetInfo
from benchmarks.uci.variational import OVERRIDES_ENV, kl_weight_spec, vi_checkpoints, vi_grid
from benchmarks.uci.writer import write_uci_folder

#: These tests check the harness's plumbing (records, backends, bundles, factors) on runs kept
#: a few epochs long on purpose: their fits are not meant to converge, and the library rightly
#: warns that they predict their training targets poorly. Here that warning is expected.
pytestmark = pytest.mark.filterwarnings("ignore::bnn_pyro.exceptions.TrainingInstabilityWarning")


def test_overrides_reach_every_configuration_and_bad_ones_are_refused(monkeypatch):
    info = DatasetInfo("toy", 455, 13)
    plain = vi_grid(info)
    monkeypatch.setenv(OVERRIDES_ENV, json.dumps({"kl_weight": 0.2, "init": "map"}))
    changed = vi_grid(info)
    assert [c["kl_weight"] for c in changed] == [0.2] * len(plain)
    assert [{**c, "kl_weight": 1.0, "init": None} for c in changed] == plain
    monkeypatch.setenv(OVERRIDES_ENV, "[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        vi_grid(info)


def test_the_kl_warmup_is_half_of_each_configurations_epochs_and_its_checkpoints_follow_it(
    monkeypatch,
):
    info = DatasetInfo("toy", 455, 13)
    grid = vi_grid(info)
    assert [c["kl_warmup"] for c in grid] == [c["epochs"] // 2 for c in grid] == [400]
    # scored only from the warm-up's end: every candidate ends on the ELBO
    assert vi_checkpoints(grid[0]) == [400, 600, 800]
    schedule = kl_weight_spec(grid[0])
    assert [schedule(e) for e in (0, 200, 399, 400, 799)] == [0.0, 0.5, 399 / 400, 1.0, 1.0]
    # the variant without it: no key at all (a configuration's keys seed its runs)
    monkeypatch.setenv(OVERRIDES_ENV, json.dumps(variants.VARIANTS["warmup0"]))
    plain = vi_grid(info)
    assert all("kl_warmup" not in c for c in plain)
    assert vi_checkpoints(plain[0]) == [200, 400, 600, 800] and kl_weight_spec(plain[0]) == 1.0


def test_vi_train_passes_the_warmup_schedule_to_fit(monkeypatch):
    import bnn_pyro as bp
    from benchmarks.uci.variational import vi_train

    seen = {}
    real_fit = bp.VariationalBNN.fit

    def spy(self, *args, **kwargs):
        seen["kl_weight"] = kwargs["kl_weight"]
        return real_fit(self, *args, **kwargs)

    monkeypatch.setattr(bp.VariationalBNN, "fit", spy)
    config = {**vi_grid(DatasetInfo("toy", 40, 3), quick=True)[0], "epochs": 4, "kl_warmup": 2}
    x, y = torch.randn(40, 3), torch.randn(40, 1)
    vi_train(config, x, y, y_std=1.0, hidden=4, seed=0, checkpoints=[4],
             report=lambda e, p, o: None, num_samples=2)  # fmt: skip
    assert [seen["kl_weight"](e) for e in range(4)] == [0.0, 0.5, 1.0, 1.0]


def _record(split, ll, rmse, **extra):
    return {"dataset": "d", "split": split, "method": "vi", "test_ll": ll, "rmse": rmse, **extra}


def test_paired_change_pairs_splits_and_leaves_out_errors_and_other_methods():
    new = [_record(0, -1.0, 2.0), _record(1, -2.0, 3.0), _record(2, -9.0, 9.0, error="x")]
    new.append({**_record(3, 0.0, 0.0), "method": "lrt"})
    old = [_record(0, -1.5, 2.5), _record(1, -2.1, 3.0), _record(2, -1.0, 1.0)]
    change = variants.paired_change(new, old)["d"]
    assert change["n"] == 2  # split 2 has an error, split 3 is another method
    assert change["test_ll"] == pytest.approx(0.3)  # (0.5 + 0.1) / 2
    assert change["test_ll_se"] == pytest.approx(0.2)  # stdev(0.5, 0.1) / sqrt(2)
    assert change["rmse"] == pytest.approx(-0.25)
    assert change["mean_ll"] == pytest.approx(-1.5) and change["base_ll"] == pytest.approx(-1.8)
    assert variants.paired_change(new, [], "vi") == {}
    with pytest.raises(TypeError, match="method must be a str"):
        variants.paired_change(new, old, method=1)
    with pytest.raises(ValueError, match="unknown variant"):
        variants.paired_markdown("nope", {}, "base", "cmd")


def test_a_variant_runs_vi_with_its_keys_and_prints_the_paired_change(tmp_path, capsys):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(40, 2, generator=g)
    folder = write_uci_folder(tmp_path / "toy", X, X[:, 0] + 0.1 * torch.randn(40, generator=g))
    common = ["--data", str(folder), "--splits", "0-1", "--quick", "--quiet"]
    from benchmarks.uci.cli import main as uci_main

    assert uci_main([*common, "--methods", "vi", "--out", str(tmp_path / "base")]) == 0
    base = str(tmp_path / "base" / "uci.json")
    out = tmp_path / "var"
    assert variants.main(["kl0.2", *common, "--base", base, "--out", str(out)]) == 0
    runs = json.loads((out / "uci.json").read_text())["runs"]
    assert {r["config"]["kl_weight"] for r in runs} == {0.2}
    printed = capsys.readouterr().out
    assert "variant kl0.2" in printed and "toy: test LL" in printed and "(2 splits)" in printed
    table = (out / "paired.md").read_text()
    assert '{"kl_weight": 0.2}' in table and "| toy |" in table and "--base" in table
    assert OVERRIDES_ENV not in os.environ  # the variant leaves no trace
    with pytest.raises(SystemExit):
        variants.main(["kl0.2", *common, "--methods", "lrt", "--base", base, "--out", str(out)])
    with pytest.raises(SystemExit):
        variants.main(["no-such-variant", *common, "--base", base, "--out", str(out)])
