"""What ``print(bnn)`` says about a ``VariationalBNN``: its likelihood, prior, guide, the count
of Bayesian tensors, whether and on how many rows it was fitted, and the options set away
from their defaults."""

import torch

import bnn_pyro as bp


def test_an_unfitted_model_with_the_defaults():
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [3], 1), bp.Gaussian(scale=0.5))
    assert bnn.extra_repr() == (
        "likelihood=Gaussian(scale=0.5), prior=IIDPrior(Normal(loc: 0.0, scale: 1.0)), "
        "guide='meanfield', 4 Bayesian tensors, not fitted"
    )


def test_a_fitted_model_names_its_rows_and_the_options_away_from_their_defaults():
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [3], 1), bp.Gaussian(scale=0.5),
                            local_reparameterization="flipout", elbo="meanfield")  # fmt: skip
    x = torch.randn(8, 2)
    bnn.fit(x, x.sum(-1), epochs=1, progress=False, seed=0)
    assert bnn.extra_repr() == (
        "likelihood=Gaussian(scale=0.5), prior=IIDPrior(Normal(loc: 0.0, scale: 1.0)), "
        "guide='meanfield', 4 Bayesian tensors, fitted on 8 points, "
        "local_reparameterization='flipout', elbo='meanfield'"
    )
    assert repr(bnn).startswith("VariationalBNN(\n  likelihood=Gaussian(scale=0.5)")
