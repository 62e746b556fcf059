"""The discrete likelihoods pinned value by value: the densities against torch's, the means,
the null model's log-likelihood in closed form, and every refusal of bad targets in full."""

from __future__ import annotations

import math

import pytest
import torch

import bnn_pyro as bp

F = torch.tensor([[0.5, -1.0, 2.0], [0.0, 0.0, 0.0]])  # logits of two rows, three classes


def test_the_categorical_density_and_mean_are_the_softmax_s():
    """log p(y) is the log-softmax at the label; the mean is the softmax of each row."""
    d = bp.Categorical().distribution(F, {})
    y = torch.tensor([2, 0])
    assert torch.allclose(d.log_prob(y), torch.log_softmax(F, -1)[[0, 1], [2, 0]])
    assert torch.allclose(bp.Categorical().mean(F), torch.softmax(F, -1))
    assert bp.Categorical().mean(F)[1].tolist() == pytest.approx([1 / 3] * 3)
    stacked = torch.stack([F, 2 * F])  # (S, N, C) = (2, 2, 3): the classes stay the last axis
    assert torch.allclose(bp.Categorical().mean(stacked), torch.softmax(stacked, -1))


def test_the_bernoulli_density_sums_its_columns_and_its_mean_is_the_sigmoid():
    """Two columns are one event: log p = Σ_j [y_j log σ(f_j) + (1 - y_j) log(1 - σ(f_j))]."""
    f = torch.tensor([[0.3, -2.0]])
    y = torch.tensor([[1.0, 0.0]])
    d = bp.Bernoulli().distribution(f, {})
    expected = math.log(1 / (1 + math.exp(-0.3))) + math.log(1 - 1 / (1 + math.exp(2.0)))
    assert d.log_prob(y).shape == (1,) and d.log_prob(y).item() == pytest.approx(expected)
    assert torch.allclose(bp.Bernoulli().mean(f), torch.sigmoid(f))


@pytest.mark.parametrize("likelihood", [bp.Categorical(), bp.Bernoulli()], ids=repr)
def test_a_nan_logit_gives_a_nan_density_not_a_constraint_error(likelihood):
    """The densities do not validate their arguments (a fit's NaN check names the step)."""
    f = torch.full((2, 3), math.nan)
    y = (
        torch.zeros(2, dtype=torch.long)
        if isinstance(likelihood, bp.Categorical)
        else torch.zeros(2, 3)
    )
    assert torch.isnan(likelihood.distribution(f, {}).log_prob(y)).all()


def test_the_bernoulli_null_nll_is_each_column_s_frequency_in_closed_form():
    """Column 0 holds 1, 1, 1, 0 (p = 3/4), column 1 all ones (p = 1, clamped to 1 - 1e-12:
    each row costs -log(1 - 1e-12) ≈ 1e-12): the NLL is -(3 log 3/4 + log 1/4) + 4e-12."""
    y = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [0.0, 1.0]])
    expected = -(3 * math.log(0.75) + math.log(0.25)) + 4e-12
    assert bp.Bernoulli().null_nll(y) == pytest.approx(expected, rel=1e-12)
    # a column of zeros is clamped at 1e-12 from below: finite, about 4e-12
    assert bp.Bernoulli().null_nll(torch.zeros(4, 1)) == pytest.approx(4e-12, rel=1e-6)


def test_categorical_labels_are_checked_with_their_whole_message():
    lik = bp.Categorical()
    assert lik.check_targets(torch.tensor([[2], [0]]), 3).tolist() == [2, 0]  # (N, 1) read
    assert lik.check_targets(torch.tensor([2.0, 1.0]), 3).dtype == torch.long
    with pytest.raises(
        ValueError, match=r"^y must be a vector of class labels \(N,\), got shape \(2, 2\)$"
    ):
        lik.check_targets(torch.zeros(2, 2, dtype=torch.long), 3)
    with pytest.raises(TypeError, match=r"^y must hold integer class labels, got a bool tensor$"):
        lik.check_targets(torch.tensor([True, False]), 3)
    with pytest.raises(
        ValueError, match=r"^y must hold integer class labels, got non-integer values$"
    ):
        lik.check_targets(torch.tensor([1.0, 0.5]), 3)
    message = r"^y labels must be in \[0, 2\] for a net with 3 outputs, got labels in \[{}, {}\]$"
    with pytest.raises(ValueError, match=message.format(0, 3)):
        lik.check_targets(torch.tensor([0, 3]), 3)
    with pytest.raises(ValueError, match=message.format(-1, 1)):
        lik.check_targets(torch.tensor([-1, 1]), 3)


def test_bernoulli_targets_are_checked_with_their_whole_message():
    lik = bp.Bernoulli()
    with pytest.raises(
        ValueError, match=r"^y must hold binary targets in \{0, 1\} for a Bernoulli likelihood$"
    ):
        lik.check_targets(torch.tensor([0.0, 2.0]), 1)
    with pytest.raises(
        ValueError,
        match=r"^y must have shape \(N, 2\) for a Bernoulli likelihood "
        r"with 2 output\(s\), got \(3, 3\)$",
    ):
        lik.check_targets(torch.zeros(3, 3), 2)
