"""Every method end to end on a CUDA device: fit, predict, save, load (skipped without CUDA).

A model moved with ``.to("cuda")`` must train and predict on the GPU (priors, guide,
likelihood, noise scale, random draws), save a device-neutral file, and load it back onto the
CPU or the GPU with ``map_location`` giving the same predictions. The same posterior gives the same
KL and predictions on both devices up to float32 round-off.
"""

from __future__ import annotations

import pytest
import torch

import bnn_pyro as bp

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CUDA = torch.device("cuda")
TASKS = {"regression": (bp.Gaussian(scale="learned"), 1), "classification": (bp.Categorical(), 3)}


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


@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("name", list(bp.METHODS))
def test_fit_predict_save_load_on_cuda(name, task, tmp_path):
    method = _method(name, task).to(CUDA)
    X, y = _data(task, CUDA)
    history = method.fit(X, y, epochs=3, batch_size=16, lr=1e-2, seed=0, progress=False)
    assert all(torch.isfinite(torch.tensor(history["loss"])))
    assert all(p.device.type == "cuda" for p in method.parameters())
    draws = None if name == "ensemble" else 10  # an ensemble's samples are its members
    mean, var = method.predict(X[:5], num_samples=draws, seed=1)
    assert mean.device.type == "cuda" and var.device.type == "cuda"
    path = tmp_path / "m.pt"
    method.save(path)
    state = torch.load(path, map_location="cpu", weights_only=True)["state"]
    assert all(v.device.type == "cpu" for v in state.values() if isinstance(v, torch.Tensor))
    _, out = TASKS[task]
    for where in ("cpu", "cuda"):
        torch.manual_seed(0)
        loaded = bp.load(path, net=bp.nn.mlp(3, [8], out, dropout=0.1), map_location=where)
        loaded = loaded.to(where)
        again, _ = loaded.predict(X[:5].to(where), num_samples=draws, seed=1)
        assert again.device.type == where
        torch.testing.assert_close(again.cpu(), mean.cpu(), rtol=1e-4, atol=1e-5)


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


def test_data_on_the_cpu_with_a_model_on_cuda_is_refused_or_moved():
    method = _method("vi", "regression").to(CUDA)
    X, y = _data("regression", torch.device("cpu"))
    try:
        method.fit(X, y, epochs=1, progress=False)
    except (ValueError, RuntimeError) as err:  # a clear refusal names the input
        assert "X" in str(err) or "device" in str(err)
    else:
        assert all(p.device.type == "cuda" for p in method.parameters())
