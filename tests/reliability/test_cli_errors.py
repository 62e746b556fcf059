"""The ``bnn-pyro`` command refuses bad input in one line: exit code 2, exactly one line on
stderr, the option to change named, and no file or folder half-written.

Each row of the tables is a different class of mistake (a file that is not there, not text, not
a table; a column that is absent, text, incomplete; a setting that is zero, non-finite, out of
range; a fit that diverges or is nonsense; an output that cannot be written). The command runs
in-process (``main([...])``) except for two cases that check the installed entry point.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from bnn_pyro.cli import main

FAST = ["--epochs", "3", "--hidden", "4", "--num-samples", "4", "--quiet"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _snapshot(folder):
    """Every file under ``folder`` with its bytes (``None`` if the folder does not exist)."""
    if not os.path.exists(folder):
        return None
    out = {}
    for dirpath, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as handle:
                out[os.path.relpath(path, folder)] = handle.read()
    return out


def assert_cli_refused(argv, option, capsys, watch=()):
    """``main(argv)`` exits with code 2 after one line on stderr that names ``option``; the
    folders in ``watch`` are exactly as before (a new one does not exist)."""
    before = [_snapshot(w) for w in watch]
    capsys.readouterr()
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's errors
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.endswith("\n"), f"not one line: {err!r}"
    assert err.startswith(f"bnn-pyro {argv[0]}: error: "), err
    assert option in err, f"{option} not named in: {err}"
    assert "Traceback" not in err
    for w, snap in zip(watch, before, strict=True):
        assert _snapshot(w) == snap, f"{w} changed"
    return err


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli-data")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    y = 3 * X[:, 0] - X[:, 1] + 0.1 * rng.normal(size=40)
    files = {
        "reg": "x1,x2,y\n" + "".join(f"{a},{b},{c}\n" for a, b, c in zip(*X.T, y, strict=True)),
        "ids": "x1,x2,y\n" + "".join(f"{a},{b},{i}\n" for i, (a, b) in enumerate(X)),
        "text_y": "x1,x2,y\n" + "".join(f"{a},{b},{'up' if a > 0 else 'down'}\n" for a, b in X),
        "one_class": "x1,x2,y\n1,2,a\n3,4,a\n5,6,a\n",
        "text_x": "x1,x2,y\n1,2,3\n4,five,6\n7,8,9\n",
        "gap_x": "x1,x2,y\n1,2,3\n4,,6\n7,8,9\n",
        "ragged": "x1,x2,y\n1,2,3\n4,5\n",
        "header_only": "x1,x2,y\n",
        "empty": "",
        "y_only": "y\n1\n2\n3\n",
    }
    paths = {}
    for name, text in files.items():
        paths[name] = str(folder / f"{name}.csv")
        with open(paths[name], "w") as handle:
            handle.write(text)
    paths["binary"] = str(folder / "binary.csv")
    with open(paths["binary"], "wb") as handle:
        handle.write(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    paths["folder"] = str(folder)
    paths["missing"] = str(folder / "missing.csv")
    return paths


FIT_CASES = [
    # (id, data file, extra args, option named)
    ("missing file", "missing", [], "--data"),
    ("data is a folder", "folder", [], "--data"),
    ("binary file", "binary", [], "--data"),
    ("empty file", "empty", [], "--data"),
    ("header only", "header_only", [], "--data"),
    ("ragged row", "ragged", [], "--data"),
    ("no feature columns", "y_only", [], "--data"),
    ("unknown target column", "reg", ["--target", "nope"], "--target"),
    ("one class only", "one_class", ["--task", "classification"], "--target"),
    ("text feature column", "text_x", [], "--features"),
    ("missing feature value", "gap_x", [], "--features"),
    ("unknown feature column", "reg", ["--features", "x1,nope"], "--features"),
    ("target among features", "reg", ["--features", "x1,y"], "--features"),
    ("regression on text labels", "text_y", ["--task", "regression"], "--task"),
    ("classification of a continuous y", "reg", ["--task", "classification"], "--task"),
    ("classification of an id column", "ids", ["--task", "classification"], "--task"),
    ("zero learning rate", "reg", ["--lr", "0"], "--lr"),
    ("negative learning rate", "reg", ["--lr", "-1"], "--lr"),
    ("non-finite learning rate", "reg", ["--lr", "nan"], "--lr"),
    ("lr that diverges (NaN loss)", "reg", ["--lr", "1000"], "--lr"),
    ("lr with absurd metrics", "reg", ["--method", "ensemble", "--lr", "1e30"], "--lr"),
    ("zero epochs", "reg", ["--epochs", "0"], "--epochs"),
    ("zero batch size", "reg", ["--batch-size", "0"], "--batch-size"),
    ("zero samples", "reg", ["--num-samples", "0"], "--num-samples"),
    ("zero prior scale", "reg", ["--prior-scale", "0"], "--prior-scale"),
    ("validation fraction of 1", "reg", ["--val-fraction", "1"], "--val-fraction"),
    ("negative seed", "reg", ["--seed", "-3"], "--seed"),
    ("unknown method", "reg", ["--method", "magic"], "--method"),
    ("lr that is not a number", "reg", ["--lr", "fast"], "--lr"),
    ("bad hidden widths", "reg", ["--hidden", "50,a"], "--hidden"),
    ("out is a file", "reg", ["--out", "{data}"], "--out"),
    ("out cannot be created", "reg", ["--out", "/proc/bnn-pyro-run/out"], "--out"),
]


@pytest.mark.parametrize(
    ("data_key", "args", "option"), [c[1:] for c in FIT_CASES], ids=[c[0] for c in FIT_CASES]
)
def test_fit_refuses_in_one_line_and_writes_nothing(data, tmp_path, capsys, data_key, args, option):
    out = tmp_path / "new" / "run"  # a folder (with a parent) that the command would create
    argv = ["fit", "--data", data[data_key], "--target", "y", "--out", str(out), *FAST]
    argv += [a.format(data=data["reg"]) for a in args]
    assert_cli_refused(argv, option, capsys, watch=[str(tmp_path), data["folder"]])
    assert not (tmp_path / "new").exists()


def test_missing_required_option_is_named(capsys, tmp_path):
    assert_cli_refused(["fit", "--data", "d.csv", "--out", str(tmp_path)], "--target", capsys)


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--lr", "1000"], "--lr"),  # diverges mid-fit
        (["--task", "classification"], "--task"),  # refused before any work
    ],
    ids=["diverged", "refused target"],
)
def test_an_existing_output_folder_keeps_its_old_files(data, tmp_path, capsys, args, option):
    out = tmp_path / "run"
    assert main(["fit", "--data", data["reg"], "--target", "y", "--out", str(out), *FAST]) == 0
    (out / "notes.txt").write_text("mine")
    assert_cli_refused(
        ["fit", "--data", data["reg"], "--target", "y", "--out", str(out), *FAST, *args],
        option,
        capsys,
        watch=[str(out)],
    )


def test_ctrl_c_and_bugs_leave_nothing_behind(data, tmp_path, capsys, monkeypatch):
    from bnn_pyro.estimators import TabularBNN

    out = tmp_path / "run"
    argv = ["fit", "--data", data["reg"], "--target", "y", "--out", str(out), *FAST]

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(TabularBNN, "fit", interrupted)
    assert main(argv) == 130
    assert not out.exists()

    def bug(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(TabularBNN, "fit", bug)
    with pytest.raises(RuntimeError, match="a bug"):  # a bug keeps its traceback
        main(argv)
    assert not out.exists() and os.listdir(tmp_path) == []


def test_debug_shows_the_traceback(data, tmp_path):
    argv = ["fit", "--data", data["missing"], "--target", "y", "--out", str(tmp_path / "o")]
    from bnn_pyro.exceptions import CLIError

    with pytest.raises(CLIError, match="--data"):
        main([*argv, "--debug"])


@pytest.fixture(scope="module")
def model(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("cli-model") / "run"
    assert main(["fit", "--data", data["reg"], "--target", "y", "--out", str(out), *FAST]) == 0
    junk = out.parent / "junk.pt"
    junk.write_bytes(b"PK\x03\x04 not a model")
    return {"good": str(out / "model.pt"), "junk": str(junk), "missing": str(out / "none.pt")}


PREDICT_CASES = [
    ("missing model file", "missing", "reg", [], "--model"),
    ("corrupt model file", "junk", "reg", [], "--model"),
    ("model is the csv", "csv", "reg", [], "--model"),
    ("data lacks a feature", "good", "y_only", [], "--data"),
    ("text in a feature", "good", "text_x", [], "--data"),
    ("missing data file", "good", "missing", [], "--data"),
    ("out folder missing", "good", "reg", ["--out", "{tmp}/no/such/p.csv"], "--out"),
    ("out is a folder", "good", "reg", ["--out", "{tmp}"], "--out"),
]


@pytest.mark.parametrize(
    ("model_key", "data_key", "args", "option"),
    [c[1:] for c in PREDICT_CASES],
    ids=[c[0] for c in PREDICT_CASES],
)
def test_predict_refuses_in_one_line(
    model, data, tmp_path, capsys, model_key, data_key, args, option
):
    path = data["reg"] if model_key == "csv" else model[model_key]
    argv = ["predict", "--model", path, "--data", data[data_key]]
    argv += [a.format(tmp=tmp_path) for a in args]
    assert_cli_refused(argv, option, capsys, watch=[str(tmp_path)])


def test_demo_refuses_zero_epochs_before_making_its_folder(tmp_path, capsys):
    out = tmp_path / "demo"
    assert_cli_refused(["demo", "--out", str(out), "--epochs", "0"], "--epochs", capsys)
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "option"),
    [(["--lr", "1000"], "--lr"), (["--method", "magic"], "--method")],
    ids=["diverged fit (issue 13, bug 4)", "argparse error"],
)
def test_the_installed_command_prints_one_line(data, tmp_path, args, option):
    out = tmp_path / "run"
    argv = ["fit", "--data", data["reg"], "--target", "y", "--out", str(out), *FAST, *args]
    run = subprocess.run(
        [sys.executable, "-m", "bnn_pyro.cli", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and option in run.stderr, run.stderr
    assert not out.exists() and os.listdir(tmp_path) == []
