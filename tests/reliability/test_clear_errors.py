"""Bad input that once reached torch or math as a raw error now gets a clear one, naming the
argument, with the model left as it was."""

from __future__ import annotations

import numpy as np
import pyro.distributions as dist
import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.cli import main

X = torch.randn(40, 2, generator=torch.Generator().manual_seed(0))
Y = X.sum(-1, keepdim=True)


def _vi():
    model = bp.VariationalBNN(bp.nn.mlp(2, [8], 1), bp.Gaussian(0.1))
    model.fit(X, Y, epochs=1, progress=False, seed=0)
    return model


def test_posterior_samples_of_the_wrong_shape_are_named():
    model = _vi()
    good = model.sample_posterior(5, seed=0)
    assert model.predict(X, posterior_samples=good)[0].shape == (40, 1)
    narrow = {k: v[..., :1] if v.dim() > 2 else v for k, v in good.items()}
    with pytest.raises(ValueError, match=r"posterior_samples\['net.0.weight'\] must have shape"):
        model.predict(X, posterior_samples=narrow)
    ragged = {**good, "net.0.bias": good["net.0.bias"][:3]}
    with pytest.raises(ValueError, match="one S for all sites"):
        model.predict(X, posterior_samples=ragged)


@pytest.mark.parametrize("scale", [0.0, -1.0])
def test_a_prior_scale_outside_its_support_is_refused_at_construction(scale):
    normal = dist.Normal(0.0, scale, validate_args=False)  # Pyro does not check it
    with pytest.raises(ValueError, match="outside their support.*'scale'"):
        bp.IIDPrior(normal)


def test_a_hand_set_num_samples_is_checked_by_name():
    mc = bp.MCDropout(bp.nn.mlp(2, [8], 1, dropout=0.1), likelihood=bp.Gaussian(0.1))
    mc.num_samples = 0
    with pytest.raises(ValueError, match=r"num_samples \(the method's default\) must be"):
        mc.predict(X)


@pytest.mark.parametrize("method", ["vi", "bb_alpha", "hidden_layer"])
def test_a_bad_kl_weight_schedule_leaves_the_model_unfitted(method):
    model = bp.make(method, bp.nn.mlp(2, [8], 1), bp.Gaussian(0.1))
    with pytest.raises(ValueError, match="kl_weight must be a finite float >= 0, got -1.0"):
        model.fit(X, Y, epochs=2, progress=False, kl_weight=lambda epoch: -1.0)
    with pytest.raises(bp.NotFittedError):
        model.predict(X)


def test_the_cli_calls_a_constant_target_constant(tmp_path, capsys):
    rng = np.random.default_rng(0)
    rows = np.c_[rng.normal(size=50), 1.0 + 1e-12 * rng.normal(size=50)]
    data = tmp_path / "flat.csv"
    np.savetxt(data, rows, delimiter=",", header="x,y", comments="")
    argv = ["fit", "--data", str(data), "--target", "y", "--out", str(tmp_path / "o")]
    assert main([*argv, "--epochs", "2", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "column 'y' is constant" in err and "--lr" not in err


def test_an_unfitted_model_still_predicts_from_given_samples():
    """NUTS on ``bnn.model`` leaves the guide unfitted: its samples must still predict (the
    shape check needs a fitted guide and stands aside)."""
    samples = _vi().sample_posterior(4, seed=0)
    fresh = bp.VariationalBNN(bp.nn.mlp(2, [8], 1), bp.Gaussian(0.1))
    assert fresh.predict(X[:3], posterior_samples=samples)[0].shape == (3, 1)
