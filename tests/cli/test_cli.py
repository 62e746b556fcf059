"""``bnn-pyro fit`` / ``predict`` / ``benchmark``: files written, files read back, exit codes."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import types

import numpy as np
import pytest
import torch

from bnn_pyro.cli import main
from bnn_pyro.estimators import METHODS, TabularBNN

FAST = ["--epochs", "15", "--lr", "0.1", "--hidden", "8", "--num-samples", "8", "--quiet"]


def _write(path, header, rows):
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = 3 * X[:, 0] - X[:, 1] + 0.1 * rng.normal(size=60)
    labels = np.where(X[:, 0] > 0, "up", "down")
    return types.SimpleNamespace(
        folder=folder,
        reg=_write(folder / "reg.csv", ["x1", "x2", "y"], np.c_[X, y].tolist()),
        clf=_write(
            folder / "clf.csv",
            ["x1", "x2", "label"],
            [[*r, t] for r, t in zip(X, labels, strict=True)],
        ),
        X=X,
    )


def _read(text):
    rows = list(csv.reader(io.StringIO(text)))
    return rows[0], rows[1:]


def test_fit_and_predict_regression(files, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["fit", "--data", files.reg, "--target", "y", "--out", str(out), *FAST]) == 0
    assert "regression with vi on 48 rows" in capsys.readouterr().out
    state = torch.load(out / "model.pt", weights_only=True)
    assert state["metadata"]["feature_names"] == ["x1", "x2"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["task"], metrics["n_train"], metrics["n_validation"]) == ("regression", 48, 12)
    assert set(metrics["validation"]) == {
        "rmse",
        "log_likelihood",
        "crps",
        "calibration_error",
        "mean_std",
    }
    assert (out / "calibration.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # predict: the columns are found by name (any order, extra columns ignored)
    shuffled = _write(tmp_path / "new.csv", ["extra", "x2", "x1"], [[7, b, a] for a, b in files.X])
    assert main(["predict", "--model", str(out / "model.pt"), "--data", shuffled]) == 0
    header, rows = _read(capsys.readouterr().out)
    assert header == ["mean", "std"] and len(rows) == 60
    mean, std = TabularBNN.load(out / "model.pt").predict(files.X)
    np.testing.assert_allclose(np.array(rows, dtype=float), np.c_[mean, std], rtol=1e-9)
    assert (std > 0).all()


def test_fit_and_predict_classification_with_text_labels(files, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["fit", "--data", files.clf, "--target", "label", "--out", str(out), *FAST]
    assert main([*args, "--val-fraction", "0"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["task"] == "classification" and metrics["classes"] == ["down", "up"]
    assert "validation" not in metrics and metrics["train"]["accuracy"] > 0.8
    assert (out / "reliability.png").exists()
    preds = tmp_path / "preds.csv"
    assert (
        main(
            ["predict", "--model", str(out / "model.pt"), "--data", files.clf, "--out", str(preds)]
        )
        == 0
    )
    header, rows = _read(preds.read_text())
    assert header == ["prediction", "p_down", "p_up"]
    probs = np.array([r[1:] for r in rows], dtype=float)
    np.testing.assert_allclose(probs.sum(1), 1.0, rtol=1e-8)
    assert [r[0] for r in rows] == [["down", "up"][i] for i in probs.argmax(1)]


# SGLD has no preconditioner: at --lr 0.1 its chain diverges on this data (the command says
# so and suggests 0.01); it gets the smaller step size a user would be told to take.
STEP_SIZES = {"sgld": ["--lr", "0.01"]}


@pytest.mark.parametrize("method", [m for m in METHODS if m != "vi"])
def test_every_method_round_trips(files, tmp_path, method):
    out = tmp_path / method
    args = ["fit", "--data", files.reg, "--target", "y", "--method", method, "--out", str(out)]
    assert main([*args, *FAST, *STEP_SIZES.get(method, [])]) == 0
    assert TabularBNN.load(out / "model.pt").params["method"] == method


@pytest.mark.parametrize("method", ["sghmc", "sgld", "csghmc"])
def test_sgmcmc_takes_its_measured_step_on_the_whole_data_set(files, tmp_path, method):
    """Without ``--lr`` and ``--batch-size`` an SG-MCMC method gets its own defaults (the step
    measured on the posterior, one step on every training row), not an optimiser's 0.01 and
    128; the others keep those."""
    out = tmp_path / method
    args = ["fit", "--data", files.reg, "--target", "y", "--method", method, "--out", str(out)]
    assert main([*args, "--epochs", "40", "--hidden", "8", "--num-samples", "8", "--quiet"]) == 0
    params = json.loads((out / "metrics.json").read_text())["hyperparameters"]
    assert (params["lr"], params["batch_size"]) == (None, None), params
    vi = tmp_path / "vi"
    vi_args = ["fit", "--data", files.reg, "--target", "y", "--out", str(vi)]
    assert main([*vi_args, "--epochs", "2", "--hidden", "8", "--num-samples", "8", "--quiet"]) == 0
    params = json.loads((vi / "metrics.json").read_text())["hyperparameters"]
    assert (params["lr"], params["batch_size"]) == (0.01, 128), params


def test_lr_none_is_refused_for_a_method_with_no_measured_step():
    with pytest.raises(ValueError, match="lr=None .* is for sghmc, csghmc, sgld; method='vi'"):
        TabularBNN("regression", "vi", lr=None)


def test_method_choices_are_registry_names(files, tmp_path, capsys):
    import bnn_pyro
    from bnn_pyro.cli.fit import method_choices

    assert method_choices() == tuple(m for m in bnn_pyro.METHODS if m in METHODS)
    args = ["fit", "--data", files.reg, "--target", "y", "--out", str(tmp_path)]
    with pytest.raises(SystemExit) as exit_info:
        main([*args, "--method", "magic"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'magic'" in capsys.readouterr().err


def _bad_csv(folder, name, text):
    path = folder / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        (None, [], "no such file"),
        ("", [], "the file is empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", [], "not a UTF-8 text file"),
        ("x1,y\n", [], "no data rows"),
        ("x1,y\n1,2\n3\n", [], "line 3 has 1 cell(s), the header has 2"),
        ("x1,x1,y\n1,2,3\n", [], "column 'x1' twice"),
        ("x1,y\n1,2\n", ["--target", "z"], "no column 'z' (columns: x1, y)"),
        ("x1,y\n1,2\nfoo,3\n", [], "column 'x1' is not numeric (line 3: 'foo')"),
        ("x1,y\n1,2\n,3\n", [], "column 'x1' has a missing value on line 3"),
        ("x1,y\n1,a\n2,b\n", ["--task", "regression"], "use --task classification"),
        ("x1,y\n1,a\n2,a\n", [], "holds one class only"),
        ("x1,y\n1,a\n2,\n3,b\n", [], "column 'y' has a missing value on line 3"),
        ("x1,y\n1,2\n2,3\n", ["--val-fraction", "1.5"], "--val-fraction must be in [0, 1)"),
        ("x1,y\n1,2\n2,3\n", ["--epochs", "0"], "epochs must be an int >= 1"),
        ("x1,y\n1,2\n2,3\n", ["--features", "x1,y"], "must not include the target"),
        ("x1,y\n1,2\n2,3\n", ["--device", "gpu"], "device must be a torch device"),
    ],
)
def test_fit_errors_are_one_line_and_exit_2(tmp_path, capsys, content, args, message):
    data = (
        str(tmp_path / "missing.csv") if content is None else _bad_csv(tmp_path, "d.csv", content)
    )
    argv = ["fit", "--data", data, "--target", "y", "--out", str(tmp_path / "o"), *FAST, *args]
    if "--target" in args:
        argv[4] = args[args.index("--target") + 1]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("bnn-pyro fit: error: ")
    assert message in err


def test_predict_errors(files, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["fit", "--data", files.reg, "--target", "y", "--out", str(out), *FAST]) == 0
    junk = _bad_csv(tmp_path, "junk.pt", "not a model")
    other = _bad_csv(tmp_path, "other.csv", "x1,z\n1,2\n")
    text = _bad_csv(tmp_path, "text.csv", "x1,x2\n1,2\n3,four\n")
    cases = [
        (["--model", str(tmp_path / "none.pt"), "--data", files.reg], "no such model file"),
        (["--model", junk, "--data", files.reg], "is not a bnn_pyro model file"),
        (["--model", str(out / "model.pt"), "--data", other], "needs the column(s) 'x2'"),
        (["--model", str(out / "model.pt"), "--data", text], "'x2' is not numeric (line 3"),
        (["--model", str(out / "model.pt"), "--data", str(tmp_path / "no.csv")], "no such file"),
    ]
    capsys.readouterr()
    for args, message in cases:
        assert main(["predict", *args]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err


def test_bad_arguments_exit_2_with_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--data", "x.csv", "--target", "y", "--out", "o", "--hidden", "50,a"])
    assert exc.value.code == 2
    assert "expected comma-separated layer widths" in capsys.readouterr().err


@pytest.mark.parametrize("command", [[], ["fit"], ["predict"], ["demo"]])
def test_help_everywhere(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([*command, "--help"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("usage: bnn-pyro")


_IMPORTED = (
    "import sys\nfrom bnn_pyro.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n"
    "    pass\nprint(sorted(m for m in ('numpy', 'pyro', 'torch') if m in sys.modules))"
)


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["--version"], ["demo", "--help"], ["predict", "--help"], ["fit", "--help"]],
)
def test_help_and_version_import_neither_torch_nor_numpy(argv):
    # a fresh process: building the parser and printing help (fit's lists every method, read
    # from the method folders' specs) imports no method (torch alone takes over a second to
    # import); a module-level `import torch` in a subcommand or a spec fails this
    code = _IMPORTED.format(argv=argv)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "[]", run.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["fit", "--data", "missing.csv", "--target", "y", "--out", "run"],
        ["fit", "--data", "missing.csv", "--target", "y", "--out", "run", "--epochs", "0"],
        ["predict", "--model", "missing.pt", "--data", "missing.csv"],
    ],
)
def test_a_bad_path_or_option_is_refused_before_torch_is_imported(argv):
    # a typo in a path or an option is told in a tenth of a second, not after torch's import
    # (over a second): the options and the files are checked before the methods are imported
    code = _IMPORTED.format(argv=argv)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "error: --" in run.stderr, run.stderr
    assert "torch" not in run.stdout.splitlines()[-1], run.stdout


def test_fit_help_lists_every_method_and_a_bad_method_names_them(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert f"one of {', '.join(METHODS)} (default: vi)" in out
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--data", "d.csv", "--target", "y", "--out", "o", "--method", "nope"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nope'" in err and "'vi'" in err and "'sgld'" in err


def test_the_installed_command_prints_no_traceback(tmp_path):
    # the real entry point, in a fresh process: a missing file is one line and exit code 2
    argv = ["fit", "--data", str(tmp_path / "nope.csv"), "--target", "y", "--out", str(tmp_path)]
    run = subprocess.run(
        [sys.executable, "-m", "bnn_pyro.cli", *argv], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 2
    assert run.stderr == f"bnn-pyro fit: error: --data: {tmp_path / 'nope.csv'}: no such file\n"


def test_benchmark_is_not_a_subcommand(capsys):
    # the UCI harness lives in the repository (python -m benchmarks.uci), not in the package
    with pytest.raises(SystemExit) as exc:
        main(["benchmark", "uci", "--help"])
    assert exc.value.code == 2
    assert "invalid choice: 'benchmark'" in capsys.readouterr().err


def test_user_errors_are_cli_errors():
    from bnn_pyro.cli.io import read_csv
    from bnn_pyro.exceptions import CLIError

    with pytest.raises(CLIError, match="no such file"):
        read_csv("no-such-file.csv")


def test_a_reader_that_stops_early_ends_predict_quietly(tmp_path):
    """``bnn-pyro predict ... | head -1``: no BrokenPipe traceback, exit code 0."""
    import subprocess
    import sys

    import numpy as np

    from bnn_pyro.cli import main

    rng = np.random.default_rng(0)
    X = rng.normal(size=(5_000, 2))  # 130 KB of output: more than a pipe's 64 KB buffer
    data = tmp_path / "d.csv"
    np.savetxt(data, np.c_[X, X.sum(1)], delimiter=",", header="a,b,y", comments="")
    # 8 samples, not the default 100: the fit's validation scoring took ~8 s of this test here
    # (~1 s with 8); the output is 5,000 rows of "mean,std" (134 KB) whatever the samples
    assert main(["fit", "--data", str(data), "--target", "y", "--epochs", "1",
                 "--num-samples", "8", "--out", str(tmp_path / "run"), "--quiet"]) == 0  # fmt: skip
    code = "import sys; from bnn_pyro.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "predict", "--model", str(tmp_path / "run" / "model.pt"),
         "--data", str(data)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout.readline() == b"mean,std\n"
    proc.stdout.close()  # the reader goes away
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    assert b"Traceback" not in err and b"Broken pipe" not in err
