"""Every method end to end on a CUDA device (skipped without CUDA).

A model moved with ``.to("cuda")`` must train (X/y and a DataLoader, resumable, stacked) and
predict on the GPU, save a device-neutral file, and load it back onto the CPU or the GPU with
``map_location``. The reproducibility contract (README, "On a GPU"):

* the same seed on the same device gives the same numbers, bit for bit;
* the same seed on another device gives the same *distribution*, not the same draws: CPU and
  CUDA random streams are different streams. Predictive means then agree within 4 Monte Carlo
  standard errors of their difference, and a method without random draws in ``predict`` (a
  deep ensemble) agrees to float32 round-off.

The CPU stand-ins for these tests are in ``test_device_guards.py``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import bnn_pyro as bp
from tests.method_tasks import takes

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CUDA = torch.device("cuda")
TASKS = {"regression": (bp.Gaussian(scale="learned"), 1), "classification": (bp.Categorical(), 3)}
DRAWS = 400  # predictive samples for the cross-device comparison


def _data(task: str, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    X = torch.randn(64, 3, generator=g)
    if task == "regression":
        y = X[:, 0] - 0.5 * X[:, 1] + 0.1 * torch.randn(64, generator=g)
    else:
        y = (X[:, 0] > 0).long() + (X[:, 1] > 1).long()
    return X.to(device), y.to(device)


def _method(name: str, task: str) -> bp.BaseBayesianMethod:
    likelihood, out = TASKS[task]
    torch.manual_seed(0)
    return bp.make(name, bp.nn.mlp(3, [8], out, dropout=0.1), likelihood)


def _draws(name: str, num: int) -> int | None:
    return None if name == "ensemble" else num  # an ensemble's samples are its members


def _assert_same_distribution(a: torch.Tensor, b: torch.Tensor, name: str) -> None:
    """``a``, ``b``: ``(S, N, O)`` predictive samples of two devices. Their means agree within 4
    standard errors of the difference of two independent S-sample means (a false alarm about
    once in 16,000 per entry for Gaussian errors; the floor covers float32 round-off)."""
    a, b = a.double().cpu(), b.double().cpu()
    if name == "ensemble":  # no random draws: the same members give the same outputs
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
        return
    se = (a.var(0) / a.shape[0] + b.var(0) / b.shape[0]).sqrt()
    gap = (a.mean(0) - b.mean(0)).abs()
    assert bool((gap <= 4 * se + 1e-5).all()), f"largest gap {float((gap / (se + 1e-12)).max())}"


@pytest.mark.parametrize(
    ("name", "task"), [(n, t) for n in bp.METHODS for t in TASKS if takes(n, t)]
)
def test_fit_predict_save_load_on_cuda(name, task, tmp_path):
    method = _method(name, task).to(CUDA)
    X, y = _data(task, CUDA)
    history = method.fit(X, y, epochs=3, batch_size=16, lr=1e-2, seed=0, progress=False)
    assert all(torch.isfinite(torch.tensor(history["loss"])))
    assert all(p.device.type == "cuda" for p in method.parameters())
    mean, var, samples = method.predict(
        X[:5], num_samples=_draws(name, 10), seed=1, return_samples=True
    )
    assert mean.device.type == var.device.type == samples.device.type == "cuda"
    again, _ = method.predict(X[:5], num_samples=_draws(name, 10), seed=1)
    assert torch.equal(again, mean)  # same seed, same device: bit for bit
    path = tmp_path / "m.pt"
    method.save(path)
    state = torch.load(path, map_location="cpu", weights_only=True)["state"]
    assert all(v.device.type == "cpu" for v in state.values() if isinstance(v, torch.Tensor))
    _, out = TASKS[task]
    on_cuda = bp.load(path, net=bp.nn.mlp(3, [8], out, dropout=0.1), map_location="cuda")
    reloaded, _ = on_cuda.to(CUDA).predict(X[:5], num_samples=_draws(name, 10), seed=1)
    assert reloaded.device.type == "cuda"
    assert torch.equal(reloaded, mean)
    on_cpu = bp.load(path, net=bp.nn.mlp(3, [8], out, dropout=0.1), map_location="cpu")
    many = _draws(name, DRAWS)
    cpu_draws = on_cpu.predict(X[:5].cpu(), num_samples=many, seed=2, return_samples=True)[2]
    gpu_draws = on_cuda.predict(X[:5], num_samples=many, seed=2, return_samples=True)[2]
    assert cpu_draws.device.type == "cpu"
    _assert_same_distribution(cpu_draws, gpu_draws, name)


@pytest.mark.parametrize("name", list(bp.METHODS))
def test_fit_from_a_dataloader_on_cuda(name):
    method = _method(name, "regression").to(CUDA)
    X, y = _data("regression", CUDA)
    loader = DataLoader(TensorDataset(X, y), batch_size=16, shuffle=True)
    if name == "laplace":  # fit(data_loader): the curvature of the net as it is
        method.fit(loader)
    else:
        method.fit(loader, epochs=2, lr=1e-2, seed=0, progress=False)
    assert method.predict(X[:3], num_samples=_draws(name, 5), seed=0)[0].device.type == "cuda"


class _Interrupted(Exception):
    """Raised by :func:`_stop_at` to interrupt a fit, as a kill would."""


def _stop_at(epoch: int):
    """A callback that interrupts a fit at its ``epoch``-th (1-based) call, before that epoch is
    saved (as ``tests/reliability/test_resume.py``'s ``EpochCounter``)."""
    calls = []

    def callback(method, e, history) -> None:
        calls.append(e)
        if len(calls) == epoch:
            raise _Interrupted

    return callback


@pytest.mark.parametrize("name", ["vi", "dropout", "ensemble", "swag"])
def test_a_resumed_run_on_cuda_ends_where_an_unbroken_one_does(name, tmp_path, monkeypatch):
    # interrupted and resumed with the same settings (extending ``epochs`` is refused for
    # ensemble and SWAG, and changes the default cosine schedule of vi): a file every epoch
    from bnn_pyro.training import resume

    monkeypatch.setattr(resume, "SAVE_SECONDS", 0.0)
    X, y = _data("regression", CUDA)
    options = {"epochs": 4, "batch_size": 16, "lr": 1e-2, "seed": 0, "progress": False}
    whole = _method(name, "regression").to(CUDA)
    whole.fit(X, y, **options)
    run = tmp_path / "run.pt"
    with pytest.raises(_Interrupted):
        _method(name, "regression").to(CUDA).fit(
            X, y, callbacks=[_stop_at(3)], resume=run, **options
        )
    torch.manual_seed(99)  # other initial weights: only the file can make the runs agree
    part = bp.make(name, bp.nn.mlp(3, [8], 1, dropout=0.1), TASKS["regression"][0]).to(CUDA)
    part.fit(X, y, resume=run, **options)
    for a, b in zip(whole.state_dict().values(), part.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name", ["vi", "dropout", "sghmc"])
def test_fit_stacked_on_cuda_matches_each_members_own_fit(name):
    X, y = _data("regression", CUDA)
    members = [_method(name, "regression").to(CUDA) for _ in range(3)]
    bp.fit_stacked(members, X, y, epochs=2, batch_size=16, lr=1e-2, seeds=[0, 1, 2], progress=False)
    alone = _method(name, "regression").to(CUDA)
    alone.fit(X, y, epochs=2, batch_size=16, lr=1e-2, seed=1, progress=False)
    for a, b in zip(members[1].state_dict().values(), alone.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)  # float rounding of bmm


def test_the_lightning_module_trains_on_cuda():
    lightning = pytest.importorskip("lightning")
    from bnn_pyro.methods.vi.lightning import BNNLightningModule

    X, y = _data("regression", torch.device("cpu"))
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [8], 1), bp.Gaussian(scale=0.1))
    module = BNNLightningModule(bnn, dataset_size=len(X), example=(X[:2], y[:2]), lr=1e-2)
    trainer = lightning.Trainer(
        max_epochs=2, accelerator="gpu", devices=1, logger=False, enable_checkpointing=False
    )
    trainer.fit(module, DataLoader(TensorDataset(X, y), batch_size=16))
    mean, _ = bnn.to(CUDA).predict(X[:4].to(CUDA), num_samples=5, seed=0)
    assert mean.device.type == "cuda" and bool(torch.isfinite(mean).all())


@pytest.mark.parametrize("name", ["vi", "ensemble", "laplace"])
def test_the_scikit_learn_estimators_run_on_cuda(name):
    pytest.importorskip("sklearn")
    X, y = (t.numpy() for t in _data("regression", torch.device("cpu")))
    reg = bp.BNNRegressor(hidden_sizes=(8,), method=name, epochs=3, num_samples=5, device="cuda")
    mean, std = reg.fit(X, y).predict(X[:4], return_std=True)
    assert reg.model_.module.device.type == "cuda"
    assert isinstance(mean, np.ndarray) and np.isfinite(std).all()
    labels = (X[:, 0] > 0).astype(int)
    clf = bp.BNNClassifier(hidden_sizes=(8,), method=name, epochs=3, num_samples=5, device="cuda")
    assert clf.fit(X, labels).predict_proba(X[:4]).shape == (4, 2)


def test_the_same_posterior_gives_the_same_numbers_on_cpu_and_cuda():
    # deterministic given the parameters and the draws: the closed-form KL (priors and guide
    # moved with the model) and the net on given posterior samples (float32: 1e-5)
    X, y = _data("regression", torch.device("cpu"))
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [8], 1), bp.Gaussian(scale=0.1))
    bnn.fit(X, y, epochs=2, batch_size=32, lr=1e-2, seed=0, progress=False)
    samples = bnn.sample_posterior(20, seed=0)
    kl_cpu = bnn.kl_divergence().detach()
    mean_cpu, var_cpu = bnn.predict(X, posterior_samples=samples)
    bnn = bnn.to(CUDA)
    on_gpu = {k: v.to(CUDA) for k, v in samples.items()}
    torch.testing.assert_close(bnn.kl_divergence().detach().cpu(), kl_cpu, rtol=1e-5, atol=1e-5)
    mean, var = bnn.predict(X.to(CUDA), posterior_samples=on_gpu)
    torch.testing.assert_close(mean.cpu(), mean_cpu, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(var.cpu(), var_cpu, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", list(bp.METHODS))
def test_data_on_the_cpu_is_moved_to_a_model_on_cuda(name):
    method = _method(name, "regression").to(CUDA)
    X, y = _data("regression", torch.device("cpu"))
    method.fit(X, y, epochs=1, batch_size=16, lr=1e-2, seed=0, progress=False)
    assert all(p.device.type == "cuda" for p in method.parameters())
    mean, _ = method.predict(X[:3], num_samples=_draws(name, 4), seed=0)
    assert mean.device.type == "cuda"  # predictions live where the model lives


def test_integer_indices_on_the_cpu_are_moved_to_an_embedding_net_on_cuda():
    """A classic method's ``predict`` moves an embedding net's CPU indices to the GPU as
    integers (left on the CPU they meet the CUDA table and raise)."""
    net = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Flatten(),
                              torch.nn.Dropout(0.5), torch.nn.Linear(8, 2))  # fmt: skip
    method = bp.MCDropout(net, likelihood=bp.Categorical()).to(CUDA)
    mean, _ = method.predict(torch.tensor([[1, 2], [3, 9]]), num_samples=4, seed=0)
    assert mean.device.type == "cuda" and mean.shape == (2, 2)


@pytest.mark.parametrize("elbo", ["trace", "meanfield"])
def test_the_checked_direct_loss_is_taken_on_cuda(elbo, monkeypatch):
    """The plain-torch loss agrees with Pyro's ELBO on the GPU too (else every step takes
    Pyro's slower path): the first step's check accepts it there."""
    from bnn_pyro.methods.vi import svi_model
    from bnn_pyro.methods.vi.fast_loss import DirectLoss

    made, real = [], svi_model.make_elbo
    monkeypatch.setattr(
        svi_model, "make_elbo", lambda *a, **k: made.append(real(*a, **k)) or made[-1]
    )
    X, y = _data("regression", CUDA)
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [8], 1), bp.Gaussian(scale="learned")).to(CUDA)
    bnn.fit(X, y, epochs=2, batch_size=32, progress=False, seed=0, elbo=elbo)
    assert made and isinstance(made[-1]._direct, DirectLoss)
    assert made[-1]._direct.analytic_kl == (elbo == "meanfield")


def test_a_compiled_fit_on_cuda_follows_the_eager_fit():
    """``fit(compile=True)`` on the GPU: no warning, and the compiled loss, drawing in the
    eager order (its warm-up forks the device's generator, so the draws it makes are given
    back), ends where the eager CUDA fit ends, to float32 rounding carried through 4 Adam
    steps (the CPU test's tolerance)."""
    X, y = _data("regression", CUDA)
    fits = []
    for compile in (False, True):
        torch.manual_seed(0)
        bnn = bp.VariationalBNN(bp.nn.mlp(3, [8], 1), bp.Gaussian(scale=0.5)).to(CUDA)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="compile=True")
            bnn.fit(X, y, epochs=2, batch_size=32, progress=False, seed=0, compile=compile)
        fits.append(bnn.state_dict())
    for key, value in fits[0].items():
        torch.testing.assert_close(fits[1][key], value, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["dropout", "vi"])
def test_a_resumed_stacked_fit_on_cuda_ends_where_an_unbroken_one_does(name, tmp_path, monkeypatch):
    """On a GPU each member's dropout masks (and VI's weight noise) come from generators of the
    device, apart from the CPU generators of the minibatch order: the resume file must hold
    both, or the resumed members draw other masks than the unbroken run."""
    from bnn_pyro.training import resume

    monkeypatch.setattr(resume, "SAVE_SECONDS", 0.0)
    X, y = _data("regression", CUDA)
    options = {"epochs": 4, "batch_size": 16, "lr": 1e-2, "seeds": [0, 1], "progress": False}
    whole = [_method(name, "regression").to(CUDA) for _ in range(2)]
    bp.fit_stacked(whole, X, y, callbacks=[lambda *a: None], **options)
    run = tmp_path / "run.pt"
    with pytest.raises(_Interrupted):
        bp.fit_stacked(
            [_method(name, "regression").to(CUDA) for _ in range(2)], X, y,
            callbacks=[_stop_at(3)], resume=run, **options,
        )  # fmt: skip
    part = [_method(name, "regression").to(CUDA) for _ in range(2)]
    bp.fit_stacked(part, X, y, callbacks=[lambda *a: None], resume=run, **options)
    for a, b in zip(whole, part, strict=True):
        for p, q in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
            torch.testing.assert_close(p, q)
