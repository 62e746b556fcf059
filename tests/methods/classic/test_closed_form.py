"""``ClosedFormPredictive`` on its own terms: ``predict`` is the subclass's ``_moments`` block by
block (no draws), the samples ride beside it only when asked for, a classifier's probabilities
are the closed softmax where the method has one (SNGP) and sampled where not (VBLL), and
``predictive_gaussian`` adds the noise variance, exactly. Small unfitted VBLL and SNGP models
(their priors) are the subclasses."""

from __future__ import annotations

import pytest
import torch

import bnn_pyro as bp


def _regressor(outputs: int = 1) -> bp.VBLL:
    torch.manual_seed(0)
    return bp.VBLL(bp.nn.mlp(2, [4], outputs), bp.Gaussian(scale=0.5))


def _x(n: int = 7) -> torch.Tensor:
    return torch.randn(n, 2, generator=torch.Generator().manual_seed(1))


def test_predict_is_the_moments_in_blocks_of_rows():
    m = _regressor(outputs=2)
    x = _x()
    expected = m._moments(m._check_x(x))
    m._closed_rows = 3  # three blocks: 3 + 3 + 1 rows, put back in order
    mean, var = m.predict(x)
    assert torch.equal(mean, expected[0]) and torch.equal(var, expected[1])
    assert [t.shape for t in m.output_moments(x)] == [(7, 2), (7, 2)]
    assert torch.equal(m.output_moments(x)[0], expected[0])


def test_samples_are_drawn_only_when_asked_for_and_leave_the_closed_form_alone():
    m = _regressor()
    x = _x()
    calls = []
    sample_outputs = m._sample_outputs
    m._sample_outputs = lambda *a, **k: calls.append(a) or sample_outputs(*a, **k)
    closed = m.predict(x)
    assert len(closed) == 2 and not calls
    mean, var, samples = m.predict(x, return_samples=True, num_samples=5, seed=3)
    assert calls and samples.shape == (5, 7, 1)
    assert torch.equal(mean, closed[0]) and torch.equal(var, closed[1])
    again = m.predict(x, return_samples=True, num_samples=5, seed=3)[2]
    assert torch.equal(samples, again)  # seeded


def test_a_classifier_with_a_closed_softmax_uses_it():
    torch.manual_seed(0)
    m = bp.SNGP(bp.nn.mlp(2, [4], 3), bp.Categorical(), num_features=16)
    x = _x()
    logits = m._moments(m._check_x(x))
    mean, var = m.predict(x)
    expected = m._softmax_moments(*logits)
    assert torch.equal(mean, expected[0]) and torch.equal(var, expected[1])
    raw = m.predict(x, normalize_output=False)  # the logits' own moments
    assert torch.equal(raw[0], logits[0]) and torch.equal(raw[1], logits[1])


def test_a_classifier_without_one_samples_its_probabilities():
    torch.manual_seed(0)
    m = bp.VBLL(bp.nn.mlp(2, [4], 3), bp.Categorical(), num_samples=4000)
    x = _x()
    mean, var = m.predict(x, seed=0)
    logits = m._moments(m._check_x(x))[0]
    assert torch.allclose(mean.sum(-1), torch.ones(7))
    assert not torch.allclose(mean, torch.softmax(logits, -1), atol=1e-6)  # not the plug-in
    draws = m.predict(x, return_samples=True, seed=0)[2]
    assert torch.allclose(mean, draws.mean(0), atol=1e-6)  # the draws' mean, the same draws


def test_one_column_outputs_are_not_softmaxed():
    m = _regressor()
    x = _x()
    mean, _ = m.predict(x, normalize_output=True)
    assert torch.equal(mean, m._moments(m._check_x(x))[0])


def test_unknown_options_are_refused_by_name():
    m = _regressor()
    with pytest.raises(TypeError, match=r"^VBLL.predict got unknown options \['temperature'\]$"):
        m.predict(_x(), temperature=2.0)


def test_predictive_gaussian_adds_the_noise_variance_exactly():
    m = _regressor(outputs=2)
    x = _x()
    mean, var = m.predict(x)
    locs, scales = m.predictive_gaussian(x)
    assert locs.shape == scales.shape == (1, 7, 2)
    assert torch.equal(locs[0], mean)
    assert torch.equal(scales[0], (var + 0.5**2).sqrt())


def test_predictive_gaussian_keeps_a_float64_model_s_precision_and_passes_its_options_on():
    """0.1 is not a float32 number: the noise squared in float32 would miss the float64 sum by
    about 1e-9, which torch.equal sees."""
    torch.manual_seed(0)
    m = bp.VBLL(bp.nn.mlp(2, [4], 1), bp.Gaussian(scale=0.1)).double()
    x = _x().double()
    _, var = m.predict(x)
    scales = m.predictive_gaussian(x)[1]
    assert scales.dtype == torch.float64
    assert torch.equal(scales[0], (var + 0.1**2).sqrt())
    with pytest.raises(TypeError, match="unknown options"):
        m.predictive_gaussian(x, temperature=2.0)


def test_predictive_gaussian_refuses_a_classifier():
    m = bp.SNGP(bp.nn.mlp(2, [4], 3), bp.Categorical(), num_features=16)
    with pytest.raises(NotImplementedError, match="this SNGP classifies: use predict$"):
        m.predictive_gaussian(_x())


def test_output_moments_checks_its_inputs():
    with pytest.raises(ValueError, match="x"):
        _regressor().output_moments(torch.randn(4, 3))
