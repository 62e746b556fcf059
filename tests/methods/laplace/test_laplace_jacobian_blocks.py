"""The GGN and the GLM variance go through Jacobian blocks of bounded size (rows x outputs x P
numbers under JACOBIAN_BLOCK_BYTES): the same numbers whatever the block, and no block over it."""

import pytest
import torch
from test_laplace import _data, _loop_ggn, _net
from torch.utils.data import DataLoader, TensorDataset

from bnn_pyro.methods import LaplaceApproximation
from bnn_pyro.methods.laplace import curvature

CASES = [("classification", 3, None), ("regression", 2, 0.7)]


def _fit(structure, likelihood, d_out, sigma):
    x, y = _data(30, d_out, likelihood)
    la = LaplaceApproximation(_net(d_out), likelihood, hessian="ggn", hessian_structure=structure,
                              noise_scale=sigma)  # fmt: skip
    la.fit(DataLoader(TensorDataset(x, y), batch_size=10))
    return la, x


@pytest.mark.parametrize("likelihood, d_out, sigma", CASES)
@pytest.mark.parametrize("structure", ["diag", "full"])
def test_one_row_and_one_output_at_a_time_gives_the_same_posterior(
    monkeypatch, structure, likelihood, d_out, sigma
):
    whole, x = _fit(structure, likelihood, d_out, sigma)
    monkeypatch.setattr(curvature, "JACOBIAN_BLOCK_BYTES", 1)  # blocks of 1 row x 1 output
    blocked, _ = _fit(structure, likelihood, d_out, sigma)
    ref = _loop_ggn(_net(d_out), x, likelihood, sigma)  # one example at a time, by autograd
    expected = torch.diagonal(ref) if structure == "diag" else ref
    torch.testing.assert_close(blocked._hessian, expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(blocked.glm_variance(x[:7]), whole.glm_variance(x[:7]))


def test_no_jacobian_block_is_larger_than_the_bound(monkeypatch):
    sizes = []
    real = curvature.output_jacobians

    def spy(*args, **kwargs):
        jac, out = real(*args, **kwargs)
        sizes.append(jac.numel() * jac.element_size())
        return jac, out

    la, x = _fit("diag", "classification", 3, None)
    per_output = sum(p.numel() for p in la.model.parameters()) * 8  # float64, one row
    bound = 2 * per_output  # room for two of the three outputs of one row
    monkeypatch.setattr(curvature, "JACOBIAN_BLOCK_BYTES", bound)
    # the full Jacobians' blocks: a diagonal of linear layers goes per layer where it may (its
    # own bound: test_laplace_glm_speed_paths.py)
    monkeypatch.setattr(curvature, "PER_LAYER", False)
    monkeypatch.setattr(curvature, "output_jacobians", spy)
    import bnn_pyro.methods.laplace.predictive as predictive

    monkeypatch.setattr(predictive, "output_jacobians", spy)
    blocked, _ = _fit("diag", "classification", 3, None)
    blocked.glm_variance(x)
    assert sizes and max(sizes) <= bound
    assert len(sizes) == 2 * 2 * 30  # fit and predict: 30 rows, outputs in blocks of 2 and 1
    torch.testing.assert_close(blocked._hessian, la._hessian, rtol=1e-12, atol=1e-12)


def test_the_block_sizes_fit_the_bound_and_refuse_nothing():
    bound = curvature.JACOBIAN_BLOCK_BYTES
    for rows, outputs, size in [(1000, 10, 10**3), (100, 1000, 10**6), (5, 2, 10**9)]:
        r, o = curvature.jacobian_blocks(rows, outputs, size, 4)
        assert 1 <= r <= rows and 1 <= o <= outputs
        assert r * o * size * 4 <= bound or (r, o) == (1, 1)  # one number-row at the least
