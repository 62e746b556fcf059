"""The one contract, for every method in the registry, regression and classification.

``bp.make(name, net, likelihood)`` → ``fit`` returns a History → ``predict`` with the
constructor's ``num_samples`` or a call's, reproducible under ``seed`` → ``save`` → ``bp.load``
in a *new process* gives the same predictions under the same seed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import bnn_pyro as bp
from tests.method_tasks import takes

ROOT = Path(__file__).resolve().parents[1]
D_IN, HIDDEN, CLASSES = 3, [8], 3
TASKS = {
    "regression": (bp.Gaussian(scale="learned"), 1),
    "classification": (bp.Categorical(), CLASSES),
}
CASES = [(name, task) for name in bp.METHODS for task in TASKS if takes(name, task)]
REGRESSION_ONLY = [name for name in bp.METHODS if not bp.registry.method_spec(name).classifies]


def _net(out: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return bp.nn.mlp(D_IN, HIDDEN, out, dropout=0.1)


def _data(task: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    X = torch.randn(48, D_IN, generator=g)
    if task == "regression":
        return X, X[:, 0] - 0.5 * X[:, 1] + 0.1 * torch.randn(48, generator=g)
    return X, (X[:, 0] > 0).long() + (X[:, 1] > 1).long()


def _fitted(name: str, task: str) -> bp.BaseBayesianMethod:
    likelihood, out = TASKS[task]
    method = bp.make(name, _net(out), likelihood)
    X, y = _data(task)
    seen = []
    history = method.fit(
        X,
        y,
        epochs=3,
        batch_size=16,
        lr=1e-2,
        seed=0,
        progress=False,
        validation_data=(X, y),
        callbacks=[lambda m, epoch, h: seen.append(m)],
    )
    assert seen and all(m is method for m in seen)  # callbacks see the method itself
    assert isinstance(history, bp.History)
    assert len(history["loss"]) == 3 and len(history["epoch"]) == 3
    assert any(key.startswith("val_") for key in history)  # validation_data is scored
    return method


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, tuple[bp.BaseBayesianMethod, Path]]:
    folder = tmp_path_factory.mktemp("contract")
    out = {}
    for name, task in CASES:
        method = _fitted(name, task)
        path = folder / f"{name}-{task}.pt"
        method.save(path)
        out[f"{name}-{task}"] = (method, path)
    return out


@pytest.mark.parametrize(("name", "task"), CASES)
def test_predict_answers_the_contract(saved, name, task):
    method, _ = saved[f"{name}-{task}"]
    X = _data(task)[0][:5]
    width = 1 if task == "regression" else CLASSES
    mean, var = method.predict(X, seed=3)
    assert mean.shape == var.shape == (5, width)
    assert bool((var >= 0).all())
    with pytest.raises(ValueError, match="seed or generator, not both"):
        method.predict(X, seed=3, generator=torch.Generator().manual_seed(3))
    mean_s, var_s, samples = method.predict(X, return_samples=True, seed=3)
    assert torch.equal(mean_s, mean) and torch.equal(var_s, var)  # same seed, same numbers
    assert samples.shape == (method.num_samples, 5, width)
    if task == "classification":  # samples are class probabilities
        torch.testing.assert_close(samples.sum(-1), torch.ones(samples.shape[:2]))
    if name != "ensemble":  # an ensemble's samples are its members
        assert method.predict(X, return_samples=True, num_samples=7)[2].shape[0] == 7
        other = method.predict(X, return_samples=True, seed=4)[2]
        assert not torch.equal(other, samples)  # the seed matters: the samples are random


@pytest.mark.parametrize("name", REGRESSION_ONLY)
def test_a_regression_method_refuses_a_classifier_when_built(name):
    """A method whose spec says it does not classify refuses a classifier's likelihood in its
    constructor, with one line naming the methods that do."""
    refusal = r"takes a Gaussian likelihood.*use 'sngp' or 'vbll'"
    with pytest.raises(ValueError, match=refusal):
        bp.make(name, _net(CLASSES), bp.Categorical())
    with pytest.raises(ValueError, match=refusal):
        bp.registry.method_class(name)(_net(CLASSES), likelihood="classification")
    with pytest.raises(ValueError, match=r"Gaussian.*got Bernoulli"):
        bp.make(name, _net(1), bp.Bernoulli())


@pytest.mark.parametrize("name", list(bp.METHODS))
def test_fit_takes_a_dataloader(name):
    """``fit(loader)`` is ``fit(X, y)`` on the loader's rows (the same numbers, same seed)."""
    from torch.utils.data import DataLoader, TensorDataset

    X, y = _data("regression")
    by_tensors = bp.make(name, _net(1), bp.Gaussian(scale=0.3))
    by_loader = bp.make(name, _net(1), bp.Gaussian(scale=0.3))
    kwargs = dict(epochs=2, batch_size=16, seed=0, progress=False)
    by_tensors.fit(X, y, **kwargs)
    loader = DataLoader(TensorDataset(X, y), batch_size=10)  # the loader's own batch size
    if name == "laplace":  # a loader means the seed's fit(loader): no MAP phase
        by_tensors = bp.make(name, _net(1), bp.Gaussian(scale=0.3))
        by_tensors.fit(X, y, epochs=0, progress=False)
        by_loader.fit(loader)
    elif name in ("vi", "lrt", "bb_alpha", "hidden_layer"):  # the SVI loop runs its batches
        history = by_loader.fit(loader, **kwargs)
        assert len(history["loss"]) == 2
        return
    else:
        by_loader.fit(loader, **kwargs)
    torch.testing.assert_close(
        by_loader.predict(X, seed=1)[0], by_tensors.predict(X, seed=1)[0], rtol=1e-5, atol=1e-6
    )


def test_every_method_takes_the_seed_likelihood_names_too():
    X, y = _data("regression")
    for cls in (bp.MCDropout, bp.SWAG, bp.LaplaceApproximation):
        by_name = cls(_net(1), likelihood="regression")
        by_object = cls(_net(1), likelihood=bp.Gaussian(scale="learned"))
        assert repr(by_name.likelihood) == repr(by_object.likelihood)
        for method in (by_name, by_object):
            method.fit(X, y, epochs=2, progress=False, seed=0)
        torch.testing.assert_close(by_name.predict(X, seed=0)[0], by_object.predict(X, seed=0)[0])


def test_a_fixed_gaussian_noise_is_the_methods_noise():
    method = bp.make("dropout", _net(1), bp.Gaussian(scale=0.3))
    method.fit(*_data("regression"), epochs=2, progress=False, seed=0)
    assert method.noise_scale == 0.3  # the user's noise is kept, not re-estimated
    with pytest.raises(ValueError, match="disagree"):
        bp.MCDropout(_net(1), likelihood=bp.Gaussian(scale=0.3), noise_scale=0.5)


def test_unknown_names_and_unsupported_likelihoods_are_refused():
    with pytest.raises(ValueError, match="method must be one of"):
        bp.make("nope", _net(1), bp.Gaussian())
    with pytest.raises(TypeError, match="Likelihood"):
        bp.make("swag", _net(1), "regression")
    with pytest.raises(ValueError, match="supports a Gaussian or Categorical"):
        bp.make("swag", _net(1), bp.Bernoulli())
    with pytest.raises(ValueError, match="MLP"):
        bp.make("hidden_layer", torch.nn.Sequential(torch.nn.Conv1d(1, 2, 3)), bp.Gaussian())


def test_save_then_load_in_a_new_process_gives_the_same_predictions(saved, tmp_path):
    """Every method reloads in a fresh interpreter (nothing but the file and a fresh net)."""
    expected = {}
    jobs = []
    for key, (method, path) in saved.items():
        name, task = key.split("-")
        X = _data(task)[0][:6]
        expected[key] = method.predict(X, seed=11)[0]
        jobs.append({"key": key, "path": str(path), "task": task})
    script = f"""
import json, sys, torch
sys.path.insert(0, {str(ROOT / "tests")!r})
import bnn_pyro as bp
from test_contract import TASKS, _data, _net

out = {{}}
for job in json.loads(sys.argv[1]):
    m = bp.load(job["path"], net=_net(TASKS[job["task"]][1]))
    out[job["key"]] = m.predict(_data(job["task"])[0][:6], seed=11)[0].tolist()
print(json.dumps(out))
"""
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(jobs)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=ROOT,
    )
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(got) == sorted(expected)
    for key, values in got.items():
        # Same weights, same seed: the same draws. Only float32 rounding may differ (a GEMM
        # in another process can pick another kernel for the tail rows: a few ulps, ~1e-7
        # relative), far below the ~1e-2 a wrong weight or another seed moves a prediction.
        torch.testing.assert_close(
            torch.tensor(values, dtype=expected[key].dtype), expected[key], rtol=1e-5, atol=1e-6
        )


def test_a_users_own_likelihood_and_prior_reload(tmp_path):
    """Subclasses of Likelihood and Prior register by name when defined, so they reload."""

    class HalfGaussian(bp.Gaussian):  # a user's likelihood: nothing new but its name
        pass

    class WideNormal(bp.IIDPrior):
        def __init__(self, **selection):
            super().__init__(bp.dist.Normal(0.0, 3.0), **selection)

        def _own_config(self):
            return {}

        @classmethod
        def _from_config(cls, own, selection):
            return cls(**selection)

    bnn = bp.VariationalBNN(_net(1), HalfGaussian(scale=0.2), prior=WideNormal())
    X, y = _data("regression")
    bnn.fit(X, y, epochs=2, progress=False, seed=0)
    path = tmp_path / "m.pt"
    bnn.save(path)
    loaded = bp.load(path, net=_net(1))
    assert type(loaded.likelihood) is HalfGaussian and type(loaded.prior) is WideNormal
    # equal up to float32 rounding (see the new-process test for the tolerance)
    torch.testing.assert_close(
        loaded.predict(X, seed=1)[0], bnn.predict(X, seed=1)[0], rtol=1e-5, atol=1e-6
    )


def test_the_seed_calls_keep_working():
    """Seed 001's positional constructors and calls, unchanged."""
    from torch.utils.data import DataLoader, TensorDataset

    X, y = _data("classification")
    net = bp.nn.mlp(D_IN, HIDDEN, CLASSES)
    laplace = bp.LaplaceApproximation(net, "classification", 1.0, 20)  # (model, lik, λ, S)
    assert laplace.fit(DataLoader(TensorDataset(X, y), batch_size=16), "cpu") == {}
    assert laplace.predict(X)[0].shape == (len(X), CLASSES)
    mc = bp.MCDropout(_net(CLASSES), 10, 0.2)  # (model, num_samples, dropout_rate)
    assert mc.predict(X, return_samples=True)[2].shape == (10, len(X), CLASSES)
    swag = bp.SWAG(net, 5)  # (model, num_samples)
    swag.collect_model(net)
    assert swag.predict(X)[0].shape == (len(X), CLASSES)
    ensemble = bp.DeepEnsemble(lambda: bp.nn.mlp(D_IN, HIDDEN, CLASSES), 2)
    opt = torch.optim.SGD(ensemble.models[0].parameters(), lr=0.1)
    losses = ensemble.train_member(
        0, DataLoader(TensorDataset(X, y), batch_size=16), opt, torch.nn.CrossEntropyLoss(), 2
    )
    assert len(losses) == 2
