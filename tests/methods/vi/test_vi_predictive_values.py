"""Values and argument checks of ``SVIPredictive`` (``bnn_pyro/methods/vi/predictive.py``):
``predict``, ``predictive_gaussian``, ``log_predictive_density`` and ``sample_posterior`` of a
``VariationalBNN``, checked against hand-worked draws on a no-hidden-layer net
``f = x @ w.T + b``, whose per-draw outputs are exact in float32 for small integers.
"""

from __future__ import annotations

import math

import pytest
import torch

import bnn_pyro as bp


def _linear(scale: float | str = "learned") -> bp.VariationalBNN:
    return bp.VariationalBNN(bp.nn.mlp(1, [], 1), bp.Gaussian(scale=scale))


def _draws() -> dict[str, torch.Tensor]:
    """Three draws ``w = 1, 2, 3``, ``b = 0``, noise scales ``0.5, 1, 2``."""
    return {
        "net.0.weight": torch.tensor([1.0, 2.0, 3.0]).reshape(3, 1, 1),
        "net.0.bias": torch.zeros(3, 1),
        "likelihood.scale": torch.tensor([0.5, 1.0, 2.0]).reshape(3, 1),
    }


@pytest.mark.parametrize("chunk_size", [0, -1])
def test_predictive_gaussian_refuses_a_chunk_size_below_one_naming_it(chunk_size: int) -> None:
    """``chunk_size`` must be ``>= 1``, as ``predict`` demands, refused before any work."""
    with pytest.raises(ValueError, match=rf"^chunk_size must be an int >= 1, got {chunk_size}$"):
        _linear().predictive_gaussian(
            torch.ones(2, 1), posterior_samples=_draws(), chunk_size=chunk_size
        )


def test_predictive_gaussian_accepts_a_chunk_size_of_one_and_gives_the_per_draw_outputs() -> None:
    """With ``chunk_size=1`` (the smallest legal value), ``locs[s, n] = w_s x_n`` and the scales are
    the draws' noise scales: x = (1, 2) gives locs ``[[1, 2], [2, 4], [3, 6]]``."""
    locs, scales = _linear().predictive_gaussian(
        torch.tensor([[1.0], [2.0]]), posterior_samples=_draws(), chunk_size=1
    )
    assert torch.equal(locs.squeeze(-1), torch.tensor([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]]))
    assert torch.equal(scales.flatten(), torch.tensor([0.5, 1.0, 2.0]))


def test_predict_gives_the_mean_and_population_variance_of_the_draws() -> None:
    """At x = (1, 2) the draws' outputs are ``(1, 2, 3)`` and ``(2, 4, 6)``: means 2 and 4,
    epistemic variances (mean of squared deviations) 2/3 and 8/3; ``include_noise`` adds the mean
    of the noise variances, ``(0.25 + 1 + 4) / 3 = 1.75``."""
    x = torch.tensor([[1.0], [2.0]])
    mean, var, samples = _linear().predict(x, True, posterior_samples=_draws())
    assert torch.allclose(mean.squeeze(-1), torch.tensor([2.0, 4.0]))
    assert torch.allclose(var.squeeze(-1), torch.tensor([2 / 3, 8 / 3]))
    assert torch.equal(samples.squeeze(-1), torch.tensor([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]]))
    _, noisy = _linear().predict(x, posterior_samples=_draws(), include_noise=True, chunk_size=1)
    assert torch.allclose(noisy.squeeze(-1), torch.tensor([2 / 3 + 1.75, 8 / 3 + 1.75]))


def test_log_predictive_density_is_the_log_of_the_mean_density_over_draws() -> None:
    """Fixed unit noise, draws ``w = 0, 1`` at x = 1, y = 1: densities ``phi(1)`` and
    ``phi(0)``, so the value is ``log((exp(-1/2) + 1) / 2) - log(2 pi) / 2`` (not the mean of the
    logs, nor the log of their sum)."""
    draws = {
        "net.0.weight": torch.tensor([0.0, 1.0]).reshape(2, 1, 1),
        "net.0.bias": torch.zeros(2, 1),
    }
    got = _linear(1.0).log_predictive_density(
        torch.ones(1, 1), torch.ones(1), posterior_samples=draws
    )
    want = math.log((math.exp(-0.5) + 1) / 2) - 0.5 * math.log(2 * math.pi)
    assert got == pytest.approx(want, abs=1e-6)


def test_a_num_samples_other_than_the_given_draws_count_is_refused() -> None:
    with pytest.raises(
        ValueError,
        match=r"^num_samples=2 but posterior_samples holds S = 3 draws: leave num_samples out "
        r"\(every given draw is used\)$",
    ):
        _linear().predict(torch.ones(1, 1), num_samples=2, posterior_samples=_draws())
    mean, _ = _linear().predict(torch.ones(1, 1), num_samples=3, posterior_samples=_draws())
    assert mean.item() == pytest.approx(2.0)


def test_the_gaussian_only_calls_refuse_a_categorical_likelihood_by_name() -> None:
    bnn = bp.VariationalBNN(bp.nn.mlp(1, [], 2), bp.Categorical())
    draws = {"net.0.weight": torch.zeros(2, 2, 1), "net.0.bias": torch.zeros(2, 2)}
    with pytest.raises(
        ValueError, match=r"^predictive_gaussian needs a Gaussian likelihood, not Categorical"
    ):
        bnn.predictive_gaussian(torch.ones(1, 1), posterior_samples=draws)
    with pytest.raises(
        ValueError, match=r"^include_noise=True needs a Gaussian likelihood, not Categorical"
    ):
        bnn.predict(torch.ones(1, 1), posterior_samples=draws, include_noise=True)


def test_sampling_an_unfitted_model_is_refused_and_empty_inputs_are_refused() -> None:
    with pytest.raises(
        bp.exceptions.NotFittedError,
        match=r"^this VariationalBNN is not fitted yet: call fit\(X, y\)$",
    ):
        _linear().sample_posterior(2)
    with pytest.raises(ValueError, match=r"^x must have at least one row, got shape \(0, 1\)$"):
        _linear().predict(torch.zeros(0, 1), posterior_samples=_draws())


def test_targets_with_another_row_count_are_refused() -> None:
    draws = {k: v for k, v in _draws().items() if k != "likelihood.scale"}
    with pytest.raises(
        ValueError, match=r"^X and y must have the same number of rows, got 2 and 3$"
    ):
        _linear(1.0).log_predictive_density(
            torch.ones(2, 1), torch.ones(3), posterior_samples=draws
        )


def _fitted() -> bp.VariationalBNN:
    bnn = _linear(1.0)
    bnn.fit(torch.ones(4, 1), torch.ones(4), epochs=1, progress=False, seed=0)
    return bnn


def test_sample_posterior_draws_num_samples_reproducibly_per_seed() -> None:
    """The same seed gives the same draws, another seed other draws; seed 0 (the smallest legal)
    is accepted and -1 refused."""
    bnn = _fitted()
    a, b, c = (bnn.sample_posterior(5, seed=s) for s in (0, 0, 1))
    assert a["net.0.weight"].shape == (5, 1, 1)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["net.0.weight"], c["net.0.weight"])
    with pytest.raises(ValueError, match=r"^seed must be an int >= 0, got -1$"):
        bnn.sample_posterior(2, seed=-1)


def test_log_predictive_density_of_a_fitted_model_draws_100_by_default(monkeypatch) -> None:
    """Without samples or ``num_samples`` the guide is drawn ``S = 100`` times (the docstring)."""
    bnn = _fitted()
    seen: list[int] = []
    draw = bnn.sample_posterior

    def spy(num_samples: int, *args, **kwargs):
        seen.append(num_samples)
        return draw(num_samples, *args, **kwargs)

    monkeypatch.setattr(bnn, "sample_posterior", spy)
    bnn.log_predictive_density(torch.ones(2, 1), torch.ones(2))
    assert seen == [100]


def test_log_predictive_density_draws_100_even_when_the_model_default_differs(monkeypatch) -> None:
    """The documented default ``S = 100`` is the method's own, not ``self.num_samples``."""
    bnn = _fitted()
    bnn.num_samples = 7
    seen: list[int] = []
    draw = bnn.sample_posterior
    monkeypatch.setattr(bnn, "sample_posterior", lambda n, **kw: seen.append(n) or draw(n, **kw))
    bnn.log_predictive_density(torch.ones(2, 1), torch.ones(2))
    assert seen == [100]


def test_log_predictive_density_with_a_seed_ignores_the_global_rng() -> None:
    """Two calls with ``seed=3`` after different global seeds draw the same guide samples."""
    bnn = _fitted()
    torch.manual_seed(1)
    a = bnn.log_predictive_density(torch.ones(2, 1), torch.ones(2), num_samples=5, seed=3)
    torch.manual_seed(2)
    b = bnn.log_predictive_density(torch.ones(2, 1), torch.ones(2), num_samples=5, seed=3)
    assert a == b


def test_sample_posterior_without_a_seed_draws() -> None:
    """``seed=None`` is legal and still gives ``num_samples`` draws."""
    assert _fitted().sample_posterior(3)["net.0.weight"].shape == (3, 1, 1)


@pytest.mark.parametrize("call", ["sample_posterior", "predictive_gaussian", "lpd"])
def test_a_num_samples_of_zero_is_refused_naming_it(call: str) -> None:
    bnn = _fitted()
    with pytest.raises(ValueError, match=r"^num_samples must be an int >= 1, got 0$"):
        if call == "sample_posterior":
            bnn.sample_posterior(0)
        elif call == "predictive_gaussian":
            _linear().predictive_gaussian(torch.ones(1, 1), 0, posterior_samples=_draws())
        else:
            bnn.log_predictive_density(torch.ones(1, 1), torch.ones(1), num_samples=0)


def test_log_predictive_density_checks_its_inputs_by_the_names_x_and_y() -> None:
    """Empty inputs are named ``x``, non-numeric targets ``y``; a given ``num_samples`` equal to
    the draws' ``S`` is accepted and all draws (w = 1, 2, 3 at x = 1, y = 1) are used."""
    draws = {k: v for k, v in _draws().items() if k != "likelihood.scale"}
    bnn = _linear(1.0)
    with pytest.raises(ValueError, match=r"^x must have at least one row, got shape \(0, 1\)$"):
        bnn.log_predictive_density(torch.zeros(0, 1), torch.zeros(0), posterior_samples=draws)
    with pytest.raises(TypeError, match=r"^y must be numeric"):
        bnn.log_predictive_density(torch.ones(1, 1), ["a"], posterior_samples=draws)
    value = bnn.log_predictive_density(torch.ones(1, 1), torch.ones(1), 3, posterior_samples=draws)
    # residuals 0, 1, 2 under unit noise: log of the mean of phi(0), phi(1), phi(2)
    want = math.log((1 + math.exp(-0.5) + math.exp(-2)) / 3) - 0.5 * math.log(2 * math.pi)
    assert value == pytest.approx(want, abs=1e-6)


def test_batch_targets_checks_labels_against_the_net_width_on_every_batch() -> None:
    """A 3-output ``Categorical`` net takes labels 0..2 in every batch (the width is found on
    the first and kept), refuses 3, and names the batch's targets in a row-count error."""
    bnn = bp.VariationalBNN(bp.nn.mlp(1, [], 3), bp.Categorical())
    targets = bnn.batch_targets()
    assert torch.equal(targets(torch.tensor([0, 2]), torch.ones(2, 1), "yb"), torch.tensor([0, 2]))
    assert torch.equal(targets(torch.tensor([1]), torch.ones(1, 1), "yb"), torch.tensor([1]))
    with pytest.raises(ValueError, match=r"^y labels must be in \[0, 2\] for a net with 3 outputs"):
        targets(torch.tensor([0, 3]), torch.ones(2, 1), "yb")
    with pytest.raises(
        ValueError, match=r"^X and yb must have the same number of rows, got 2 and 1$"
    ):
        targets(torch.tensor([0]), torch.ones(2, 1), "yb")


def test_calling_the_model_gives_the_predictive_mean() -> None:
    """``bnn(x)`` is ``predict(x)[0]``: the same draws (the same global seed) give the same mean."""
    bnn = _fitted()
    torch.manual_seed(5)
    want = bnn.predict(torch.ones(2, 1))[0]
    torch.manual_seed(5)
    assert torch.equal(bnn(torch.ones(2, 1)), want)


def test_batch_targets_finds_the_net_width_once(monkeypatch) -> None:
    """The width is read from the net on the first batch only (the docstring's promise): two
    batches, one ``_output_dim`` call."""
    bnn = bp.VariationalBNN(bp.nn.mlp(1, [], 3), bp.Categorical())
    calls: list[int] = []
    width = bnn._output_dim
    monkeypatch.setattr(bnn, "_output_dim", lambda x: calls.append(1) or width(x))
    targets = bnn.batch_targets()
    targets(torch.tensor([0, 2]), torch.ones(2, 1), "yb")
    targets(torch.tensor([1]), torch.ones(1, 1), "yb")
    assert len(calls) == 1
