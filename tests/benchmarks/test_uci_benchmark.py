"""The UCI benchmark: option parsing, protocol, test-row isolation, smoke runs of the command."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import bnn_pyro
from benchmarks.uci import (
    BenchmarkSettings,
    DatasetInfo,
    MethodSpec,
    Task,
    available_methods,
    get_method,
    hidden_units,
    load_uci_split,
    main,
    mean_stderr,
    parse_names,
    parse_splits,
    registry,
    run_task,
    select_hyperparameters,
    summarize,
    validation_split,
    write_uci_folder,
)
from benchmarks.uci.bundle import run_bundle
from benchmarks.uci.cli import find_datasets
from benchmarks.uci.method import checkpoint_epochs
from benchmarks.uci.protocol import FINAL_FLAG_RATIO
from benchmarks.uci.results import markdown_report
from benchmarks.uci.variational import vi_train

#: These tests check the harness's plumbing (records, backends, bundles, factors) on runs kept
#: a few epochs long on purpose: their fits are not meant to converge, and the library rightly
#: warns that they predict their training targets poorly. Here that warning is expected.
pytestmark = pytest.mark.filterwarnings("ignore::bnn_pyro.exceptions.TrainingInstabilityWarning")

REPO = Path(__file__).resolve().parents[2]
SHARED = Path("/work/shared/data/uci")
POISON = 1.0e4  # feature value of split 0's test rows in the poisoned folder


@pytest.fixture(scope="module")
def toy_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding one small synthetic data set ``toy`` (2 splits)."""
    root = tmp_path_factory.mktemp("uci")
    g = torch.Generator().manual_seed(0)
    X = torch.randn(80, 3, generator=g)
    y = 10.0 + 5.0 * X[:, 0] - 2.0 * X[:, 1] ** 2 + 0.5 * torch.randn(80, generator=g)
    write_uci_folder(root / "toy", X, y, n_splits=2)
    return root


# ---------------------------------------------------------------------------- option parsing
@pytest.mark.parametrize(
    ("text", "expected"),
    [("0-4", [0, 1, 2, 3, 4]), ("0,3", [0, 3]), (" 3 , 1-2,1 ", [1, 2, 3]), ("all", [0, 1, 2])],
)
def test_parse_splits(text: str, expected: list[int]) -> None:
    assert parse_splits(text, n_splits=20 if text != "all" else 3) == expected


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "must not be empty"),
        ("a", "could not read 'a'"),
        ("1-", "could not read '1-'"),
        ("-1", "could not read '-1'"),
        ("0-2-4", "could not read"),
        ("4-2", "reversed"),
        ("0,20", "must be < n_splits = 20"),
        ("1.5", "could not read"),
    ],
)
def test_parse_splits_rejects_bad_input(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_splits(text, n_splits=20)


def test_parse_splits_types() -> None:
    with pytest.raises(TypeError, match="splits must be a str"):
        parse_splits(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs n_splits"):
        parse_splits("all")


def test_parse_names() -> None:
    assert parse_names("swag,vi,vi", ["vi", "swag"]) == ["swag", "vi"]
    with pytest.raises(ValueError, match=r"methods: unknown name\(s\) \['nope'\]"):
        parse_names("vi,nope", ["vi", "swag"])
    with pytest.raises(ValueError, match="datasets must name at least one"):
        parse_names(" , ", ["a"], "datasets")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--splits", "3-1"], "reversed"),
        (["--splits", "0,x"], "could not read 'x'"),
        (["--splits", "5"], "must be < n_splits = 2"),
        (["--methods", "vi,magic"], "unknown name"),
        (["--datasets", "boston"], "unknown name"),
        (["--jobs", "0"], "--jobs must be >= 1"),
        (["--device", "gpu"], "device must be a torch device"),
        *([] if torch.cuda.is_available() else [(["--device", "cuda"], "device")]),
    ],
)
def test_cli_bad_arguments_exit_2(
    toy_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--data", str(toy_root), "--out", str(tmp_path), *argv])
    assert info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "uci.json").exists()


def test_cli_missing_data_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--data", str(tmp_path / "nowhere"), "--out", str(tmp_path)])
    assert info.value.code == 2
    assert "is not a folder" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="holds no UCI data set"):
        find_datasets(tmp_path)


def test_each_data_set_runs_its_own_splits(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``--splits all`` over sets of 2 and 3 splits runs 2 and 3 (it once ran the fewest, 2, on
    every set: concrete's gap splits 6 and 7 went missing beside yacht's six, silently); a
    split one set lacks is refused naming that set."""
    g = torch.Generator().manual_seed(0)
    for name, n_splits in (("two", 2), ("three", 3)):
        X = torch.randn(40, 2, generator=g)
        (tmp_path / "data").mkdir(exist_ok=True)
        write_uci_folder(tmp_path / "data" / name, X, X[:, 0] + 0.1, n_splits=n_splits)
    argv = ["--data", str(tmp_path / "data"), "--methods", "dropout", "--quick", "--quiet"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0
    records = (tmp_path / "out" / "uci_runs.jsonl").read_text().splitlines()
    done = sorted((r["dataset"], r["split"]) for r in map(json.loads, records))
    assert done == [("three", 0), ("three", 1), ("three", 2), ("two", 0), ("two", 1)]
    with pytest.raises(SystemExit):
        main([*argv, "--splits", "2", "--out", str(tmp_path / "refused")])
    assert "two: splits must be < n_splits = 2" in capsys.readouterr().err


# ---------------------------------------------------------------------------- protocol
def test_mean_stderr_matches_numpy() -> None:
    values = np.random.default_rng(0).normal(size=20)
    mean, stderr = mean_stderr(values.tolist())
    assert mean == pytest.approx(np.mean(values))
    assert stderr == pytest.approx(np.std(values) / np.sqrt(20))
    assert mean_stderr([2.0]) == (2.0, 0.0)
    with pytest.raises(ValueError, match="non-empty"):
        mean_stderr([])
    with pytest.raises(ValueError, match="finite"):
        mean_stderr([1.0, float("nan")])


def test_summarize_stderr_over_splits() -> None:
    lls = [-2.1, -2.5, -2.3, -2.9]
    runs = [
        {"dataset": "d", "method": "m", "split": k, "test_ll": v, "rmse": 1.0 + k}
        for k, v in enumerate(lls)
    ]
    runs.append({"dataset": "d", "method": "m", "split": 9, "error": "boom"})
    rows = {r["metric"]: r for r in summarize(runs)}
    assert rows["test_ll"]["n_splits"] == 4
    assert rows["test_ll"]["stderr"] == pytest.approx(np.std(lls) / 2.0)
    assert rows["rmse"]["mean"] == pytest.approx(2.5)


def test_small_helpers_reject_bad_input() -> None:
    assert hidden_units(10_001) == 100
    with pytest.raises(ValueError, match="n_rows"):
        hidden_units(0)
    with pytest.raises(ValueError, match="count"):
        checkpoint_epochs(10, 0)
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        get_method("nope")
    with pytest.raises(TypeError, match="name must be a str"):
        get_method(1)  # type: ignore[arg-type]
    assert available_methods()[:1] == ["vi"]


def test_harness_names_are_the_library_names() -> None:
    assert set(available_methods()) <= set(bnn_pyro.METHODS)
    assert all(spec.name == name for name, spec in registry.METHODS.items())
    untuned = get_method("vbnn")  # a library method with no tuned row runs untuned
    assert untuned.name == "vbnn" and untuned.label == "vbnn (untuned)"
    with pytest.raises(ValueError, match="unknown method 'magic'"):
        get_method("magic")
    invented = MethodSpec("magic", "Magic", "", lambda info, quick: [], lambda *a, **k: None)
    with pytest.raises(RuntimeError, match=r"\['magic'\] are not in bnn_pyro.METHODS"):
        registry._keyed([get_method("vi"), invented])
    fixed = {"y_std": 1.0, "hidden": 2, "seed": 0, "checkpoints": [1], "num_samples": 1}
    with pytest.raises(ValueError, match="method must be one of"):
        vi_train({}, torch.zeros(2, 1), torch.zeros(2, 1), report=print, method="vbnn", **fixed)


# ---------------------------------------------------------------------------- test-row isolation
def _spy_spec(calls: list[tuple[str, torch.Tensor]]) -> MethodSpec:
    """A method that records every tensor it trains or predicts on."""

    def grid(info: DatasetInfo, quick: bool) -> list[dict]:
        return [{"epochs": 2, "level": level} for level in (0.0, 1.0)]

    def train(config, x, y, *, y_std, hidden, seed, checkpoints, report, num_samples) -> None:
        calls.append(("fit", x.clone()))

        def predictor(x_eval: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            calls.append(("predict", x_eval.clone()))
            locs = torch.full((3, x_eval.shape[0], 1), float(config["level"]))
            return locs, torch.ones(())

        for epoch in checkpoints:
            report(epoch, predictor)

    return MethodSpec("spy", "Spy", "records its inputs", grid, train, lambda c: [1, 2])


@pytest.fixture()
def poisoned(tmp_path: Path) -> Path:
    """A data set whose split-0 test rows carry a huge first feature."""
    g = torch.Generator().manual_seed(1)
    X, y = torch.randn(60, 2, generator=g), torch.randn(60, generator=g)
    folder = write_uci_folder(tmp_path / "poisoned", X, y, n_splits=1)
    test_rows = np.loadtxt(folder / "index_test_0.txt", dtype=int)
    data = np.loadtxt(folder / "data.txt")
    data[test_rows, 0] = POISON
    np.savetxt(folder / "data.txt", data, fmt="%.17g")
    return folder


def test_selection_never_sees_test_rows(poisoned: Path) -> None:
    calls: list[tuple[str, torch.Tensor]] = []
    split = load_uci_split(poisoned, 0)
    assert float(split.X_test[:, 0].min()) == POISON  # the poison is where it should be
    best, records = select_hyperparameters(
        _spy_spec(calls), split, DatasetInfo("poisoned", 54, 2), BenchmarkSettings()
    )
    val = validation_split(split)
    assert [kind for kind, _ in calls] == ["fit", "predict", "predict"] * 2
    for kind, x in calls:
        assert float(x.abs().max()) < 100.0, "a test row entered the search"
        expected = val.X_train if kind == "fit" else val.X_test
        assert torch.allclose(x, val.normalize_x(expected))
    assert {r["config"]["epochs"] for r in records} == {1, 2}
    assert len(records) == 4 and best in [r["config"] for r in records]


def test_run_task_scores_test_rows_only_at_the_end(
    poisoned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, torch.Tensor]] = []
    monkeypatch.setitem(registry.METHODS, "spy", _spy_spec(calls))
    record = run_task(Task("poisoned", str(poisoned), 0, "spy"), BenchmarkSettings())
    poisoned_calls = [i for i, (_, x) in enumerate(calls) if float(x.abs().max()) > 100.0]
    assert poisoned_calls == [len(calls) - 1]  # only the final prediction on the test rows
    assert calls[-3][0] == "fit" and calls[-3][1].shape[0] == 54  # retrained on all 54 rows
    assert calls[-2][1].shape[0] == 54  # its in-sample error, held against the search's
    assert record["n_train"] == 54 and record["n_test"] == 6
    assert record["config"]["epochs"] in (1, 2) and math.isfinite(record["test_ll"])
    assert record["flagged"] is False and record["search_val_rmse"] > 0


def _breaks_when_refit(rows_in_search: int) -> MethodSpec:
    """A method that predicts 0 after training on the search's rows and 50 (five y stds off)
    after training on more: a final fit that went wrong where its search did not."""

    def train(config, x, y, *, y_std, hidden, seed, checkpoints, report, num_samples) -> None:
        level = 0.0 if x.shape[0] == rows_in_search else 50.0
        for epoch in checkpoints:
            report(epoch, lambda x_eval: (torch.full((3, len(x_eval), 1), level), torch.ones(())))

    grid = lambda info, quick: [{"epochs": 1}]  # noqa: E731
    return MethodSpec("breaks", "Breaks", "good in the search only", grid, train, lambda c: [1])


@pytest.mark.parametrize("stacked", [False, True])
def test_a_final_fit_far_worse_than_its_search_is_flagged(
    poisoned: Path, monkeypatch: pytest.MonkeyPatch, stacked: bool
) -> None:
    spec = _breaks_when_refit(43)  # 54 training rows, the last 20% (11) held out in the search
    if stacked:  # the same through the bundle's stacked final fits

        def train_stacked(config, xs, ys, *, reports, **kwargs) -> None:
            for k, report in enumerate(reports):
                spec.train(
                    config,
                    xs[k],
                    ys[k],
                    y_std=1.0,
                    hidden=8,
                    seed=0,
                    checkpoints=kwargs["checkpoints"],
                    report=report,
                    num_samples=3,
                )

        spec = dataclasses.replace(spec, train_stacked=train_stacked)  # fmt: skip
    monkeypatch.setitem(registry.METHODS, "breaks", spec)
    folder = write_uci_folder(poisoned.parent / "plain", torch.randn(60, 2), torch.randn(60))
    tasks = [Task("plain", str(folder), k, "breaks") for k in (0, 1)]
    records = (
        run_bundle(tasks, BenchmarkSettings())
        if stacked
        else [run_task(tasks[0], BenchmarkSettings())]
    )
    record = records[0]
    assert record["flagged"] is True
    assert record["train_rmse"] > FINAL_FLAG_RATIO * record["search_val_rmse"]
    runs = [{**r, "config": {"epochs": 1}} for r in records]
    text = markdown_report({"summary": summarize(runs), "runs": runs, "methods": {"breaks": {}}})
    assert "## Flagged final fits" in text and "plain split 0 breaks" in text


# ---------------------------------------------------------------------------- smoke runs
def _check_outputs(out: Path, datasets: set[str], methods: list[str], splits: list[int]) -> dict:
    payload = json.loads((out / "uci.json").read_text())
    for key in ("command", "arguments", "date", "wall_time_seconds", "versions", "settings"):
        assert key in payload
    assert {"torch", "pyro", "python", "bnn_pyro"} <= set(payload["versions"])
    assert list(payload["methods"]) == methods
    runs = payload["runs"]
    assert len(runs) == len(datasets) * len(methods) * len(splits)
    for run in runs:
        assert "error" not in run, run.get("error")
        assert math.isfinite(run["test_ll"]) and math.isfinite(run["rmse"]) and run["rmse"] > 0
        assert run["split"] in splits and run["config"]["epochs"] >= 1
    summary = payload["summary"]
    assert len(summary) == 2 * len(datasets) * len(methods)
    for row in summary:
        assert {row["dataset"] for row in summary} == datasets
        assert math.isfinite(row["mean"]) and row["n_splits"] == len(splits)
    markdown = (out / "uci.md").read_text()
    assert "## test log-likelihood" in markdown and "## RMSE" in markdown
    assert "MC dropout (2016)" in markdown and "Chosen hyper-parameters" in markdown
    assert (out / "uci_test_ll.png").stat().st_size > 0
    assert (out / "uci_rmse.png").stat().st_size > 0
    return payload


@pytest.fixture(scope="module")
def smoke_run(toy_root: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[list, Path]:
    """Every method on split 1 of the toy, in this process (jobs 1): its argv and folder."""
    out = tmp_path_factory.mktemp("uci-smoke")
    argv = ["--data", str(toy_root), "--splits", "1", "--quick", "--quiet", "--out", str(out)]
    assert main(argv) == 0
    return argv, out


@pytest.fixture(scope="module")
def fresh_process(toy_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documented command in a fresh process, with two loky workers: its output folder.

    One run serves the two tests below (a fresh interpreter each cost ~10 s here): the command
    from the repository root, and worker processes giving the numbers of one process (its
    dropout and ensemble tasks against the same tasks of the in-process smoke run). ``--data``
    names the data set's own folder, which :func:`find_datasets` takes as one data set."""
    out = tmp_path_factory.mktemp("uci-fresh")
    argv = ["--data", str(toy_root / "toy"), "--splits", "1", "--quick", "--quiet"]
    argv += ["--methods", "dropout,ensemble", "--jobs", "2", "--out", str(out)]
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.uci", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    return out


def test_smoke_run_synthetic(toy_root: Path, smoke_run: tuple[list, Path]) -> None:
    argv, tmp_path = smoke_run
    methods = available_methods()
    payload = _check_outputs(tmp_path, {"toy"}, methods, [1])
    # recorded as a reader types them in a clone: the machine's own folders as <dir>/<name>
    shown = {str(toy_root): f"<dir>/{toy_root.name}", str(tmp_path): f"<dir>/{tmp_path.name}"}
    assert payload["arguments"] == [shown.get(a, a) for a in argv]
    # --resume keeps the finished tasks: the same numbers, nothing retrained
    lines = (tmp_path / "uci_runs.jsonl").read_text()
    assert main([*argv, "--resume"]) == 0
    assert (tmp_path / "uci_runs.jsonl").read_text() == lines
    again = json.loads((tmp_path / "uci.json").read_text())
    assert again["summary"] == payload["summary"]
    # --render-only rewrites the markdown and charts from the JSON, running nothing
    (tmp_path / "uci.md").unlink()
    assert main(["--data", str(toy_root), "--out", str(tmp_path), "--render-only", "--quiet"]) == 0
    assert (tmp_path / "uci.md").read_text().startswith("# UCI regression benchmark")


def test_python_m_benchmarks_uci_from_the_repository_root(fresh_process: Path) -> None:
    # the documented command, in a fresh process: python -m benchmarks.uci records itself
    payload = _check_outputs(fresh_process, {"toy"}, ["dropout", "ensemble"], [1])
    assert "-m benchmarks.uci --data" in payload["command"]
    assert "--jobs 2" in payload["command"]


def test_render_only_needs_results(toy_root: Path, tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--data", str(toy_root), "--out", str(tmp_path), "--render-only", "--quiet"])
    assert info.value.code == 2


def test_two_processes_give_the_same_numbers(
    smoke_run: tuple[list, Path], fresh_process: Path
) -> None:
    # the tasks are seeded from (data set, split, method): the same numbers in this process
    # (jobs 1, among every other method) and in the fresh process's two loky workers
    def scores(out: Path) -> dict:
        runs = json.loads((out / "uci.json").read_text())["runs"]
        return {
            (r["method"], r["split"]): (r["test_ll"], r["rmse"])
            for r in runs
            if r["method"] in ("dropout", "ensemble")
        }

    workers = scores(fresh_process)
    assert sorted(workers) == [("dropout", 1), ("ensemble", 1)]
    assert workers == scores(smoke_run[1])


@pytest.mark.skipif(not (SHARED / "yacht").is_dir(), reason="shared UCI data not present")
def test_smoke_run_real_folder(tmp_path: Path) -> None:
    argv = ["--data", str(SHARED), "--datasets", "yacht", "--splits", "0", "--quick"]
    argv += ["--methods", "vi,dropout", "--quiet", "--out", str(tmp_path)]
    assert main(argv) == 0
    payload = _check_outputs(tmp_path, {"yacht"}, ["vi", "dropout"], [0])
    assert all(r["n_train"] == 277 and r["n_test"] == 31 for r in payload["runs"])
    markdown = (tmp_path / "uci.md").read_text()
    assert (
        "## Targets against the published results" in markdown
        and "vi beats VI (PBP paper)" in markdown
    )
    dropout = next(r for r in payload["runs"] if r["method"] == "dropout")
    assert dropout["config"]["dropout"] == 0.005 and dropout["config"]["tau"] == 0.25


def test_predictive_variants_are_scored_from_one_run(
    poisoned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A method may report several predictive variants per run; the final run keeps the chosen."""
    fits: list[dict] = []
    scored_levels: list[float] = []

    def grid(info: DatasetInfo, quick: bool) -> list[dict]:
        return [{"epochs": 1}]

    def train(config, x, y, *, y_std, hidden, seed, checkpoints, report, num_samples) -> None:
        fits.append(dict(config))
        for level in (5.0, 0.0, -5.0):  # y is normalised: level 0 predicts best

            def predictor(x_eval: torch.Tensor, level: float = level) -> tuple:
                scored_levels.append(level)
                return torch.full((2, x_eval.shape[0], 1), level), torch.ones(())

            report(1, predictor, {"level": level})

    monkeypatch.setitem(registry.METHODS, "variants", MethodSpec("variants", "V", "", grid, train))
    record = run_task(Task("poisoned", str(poisoned), 0, "variants"), BenchmarkSettings())
    assert len(fits) == 2 and fits[1]["level"] == 0.0  # one search run, one final run
    assert record["config"] == {"epochs": 1, "level": 0.0}
    # the final run scores only the chosen one: on its training rows (in-sample), then the test
    assert scored_levels == [5.0, 0.0, -5.0, 0.0, 0.0]
    assert [r["config"]["level"] for r in record["records"]] == [5.0, 0.0, -5.0]


def test_runner_arguments_are_checked_before_work(toy_root: Path) -> None:
    from benchmarks.uci.parallel import run_tasks

    with pytest.raises(ValueError, match="validation_fraction must be in"):
        BenchmarkSettings(validation_fraction=1.0)
    with pytest.raises(ValueError, match="test_samples must be an int >= 1"):
        BenchmarkSettings(test_samples=0)
    with pytest.raises(TypeError, match="quick must be a bool"):
        BenchmarkSettings(quick="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="task must be a Task"):
        run_task(("toy", str(toy_root / "toy"), 0, "vi"), BenchmarkSettings())  # type: ignore
    with pytest.raises(TypeError, match="settings must be a BenchmarkSettings"):
        run_task(Task("toy", str(toy_root / "toy"), 0, "vi"), {"quick": True})  # type: ignore
    with pytest.raises(ValueError, match="unknown method 'magic'"):
        run_task(Task("toy", str(toy_root / "toy"), 0, "magic"), BenchmarkSettings())
    with pytest.raises(ValueError, match="jobs must be an int >= 1"):
        run_tasks([], BenchmarkSettings(), jobs=0)
    with pytest.raises(TypeError, match="tasks must hold Task objects"):
        run_tasks(["toy"], BenchmarkSettings(), progress=False)  # type: ignore[list-item]
