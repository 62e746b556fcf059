"""The blow-up guard: a fit that leaves its optimum for good keeps its best parameters.

The blow-up is made deterministic: gradient descent on the bounded loss ``1 - exp(-w²)`` first
converges to ``w = 0``, then a learning rate a thousand times larger throws ``w`` onto the far
plateau, where the loss is near 1 (above where training started) and the gradient near 0, so it
stays there without ever being NaN: what a too-large step does to a real fit, without the
randomness.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import bnn_pyro as bp
from bnn_pyro.training import LossStep, train
from bnn_pyro.training.blowup import GIVE_BACK, MIN_EPOCHS, BlowUpGuard, gave_back

JUMP_EPOCH = 30


def _bounded_fit(epochs: int = 60, jump: float = 1000.0) -> tuple[torch.nn.Module, bp.History]:
    module = torch.nn.Module()
    module.w = torch.nn.Parameter(torch.tensor([1.0]))
    opt = torch.optim.SGD([module.w], lr=0.3)
    step = LossStep(lambda x, y: 1 - torch.exp(-(module.w**2)).sum(), opt)
    schedule = lambda progress: 1.0 if progress * epochs < JUMP_EPOCH else jump  # noqa: E731
    history = train(
        module, step, lambda: [(torch.zeros(1), None)], epochs=epochs, progress=False,
        lr_schedule=schedule,
    )  # fmt: skip
    return module, history


def test_a_fit_that_blows_up_and_stays_up_keeps_its_best_parameters():
    with pytest.warns(bp.TrainingInstabilityWarning, match="blew up"):
        module, history = _bounded_fit()
    losses = history["loss"]
    best = min(range(len(losses)), key=losses.__getitem__)
    assert losses[-1] > losses[0]  # it ended above where it started: all progress given back
    assert best < JUMP_EPOCH  # the best epoch comes before the jump
    assert history.blowups == [best]
    # the parameters are those of that epoch: its loss, recomputed, is the best loss
    assert float(1 - torch.exp(-(module.w.detach() ** 2)).sum()) < losses[best] + 1e-6
    assert abs(module.w.item()) < 1e-3


def test_a_fit_without_a_blow_up_is_left_alone():
    with warnings.catch_warnings():
        warnings.simplefilter("error", bp.TrainingInstabilityWarning)
        module, history = _bounded_fit(jump=1.0)
    assert history.blowups == []


def test_a_step_that_does_not_minimise_is_not_judged():
    """The same blow-up from a step that declares ``minimizes = False`` (a sampler, whose loss
    rises to the typical set by design): no warning, nothing put back, no blow-up recorded."""
    module = torch.nn.Module()
    module.w = torch.nn.Parameter(torch.tensor([1.0]))
    opt = torch.optim.SGD([module.w], lr=0.3)
    step = LossStep(lambda x, y: 1 - torch.exp(-(module.w**2)).sum(), opt)
    step.minimizes = False
    schedule = lambda progress: 1.0 if progress * 60 < JUMP_EPOCH else 1000.0  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("error", bp.TrainingInstabilityWarning)
        history = train(module, step, lambda: [(torch.zeros(1), None)], epochs=60,
                        progress=False, lr_schedule=schedule)  # fmt: skip
    assert history["loss"][-1] > history["loss"][0]  # it did blow up
    assert history.blowups == [] and abs(module.w.item()) > 1.0  # and was left there


def test_a_short_run_is_not_judged():
    values = [1.0, 0.1] + [5.0] * (MIN_EPOCHS - 3)  # gave back everything, in too few epochs
    assert gave_back(values) > GIVE_BACK
    module = torch.nn.Linear(1, 1)
    guard = BlowUpGuard(module)
    for v in values:
        guard.after_epoch({"loss": v})
    assert guard.finish() == []


def test_a_stacked_member_that_blew_up_is_put_back_alone():
    """Member 1 blows up, member 0 does not: only member 1's slice of every (K, ...) tensor goes
    back, to its own best epoch; a tensor without a member dimension is left as it is."""
    module = torch.nn.Module()
    module.w = torch.nn.Parameter(torch.zeros(2, 3))
    module.shared = torch.nn.Parameter(torch.zeros(5))
    guard = BlowUpGuard(module)
    for epoch in range(40):
        with torch.no_grad():
            module.w.fill_(epoch)
            module.shared.fill_(epoch)
        calm = 100.0 - epoch
        guard.after_epoch({"member_loss": [calm, calm if epoch < 25 else 900.0]})
    with pytest.warns(bp.TrainingInstabilityWarning, match="member 1 of the stacked fit"):
        assert guard.finish() == [24]
    assert module.w[0].tolist() == [39.0] * 3 and module.w[1].tolist() == [24.0] * 3
    assert module.shared.tolist() == [39.0] * 5


def test_the_guard_compares_the_epochs_of_the_last_kl_weight_only():
    """Under a KL warm-up the loss rises by design while the weight grows; once it is constant
    the epochs are compared. A large constant weight that trades data fit for KL lowers the
    loss: no blow-up either."""
    module = torch.nn.Linear(1, 1)
    warming = BlowUpGuard(module)
    for epoch in range(80):  # rises for 40 epochs of warm-up, then falls
        weight = min(1.0, epoch / 40)
        warming.after_epoch({"loss": 10.0 + 50.0 * weight - 0.1 * epoch, "kl_weight": weight})
    assert warming.finish() == []
    rising = BlowUpGuard(module)  # the same rise at a constant weight: put back
    for epoch in range(80):
        loss = 100.0 - epoch if epoch < 40 else 100.0 + epoch
        rising.after_epoch({"loss": loss, "kl_weight": 1.0})
    with pytest.warns(bp.TrainingInstabilityWarning, match="at epoch 39"):
        assert rising.finish() == [39]
    late = BlowUpGuard(module)  # after a warm-up of 30 epochs, the epochs count from there
    for epoch in range(80):
        weight = min(1.0, epoch / 30)
        loss = 100.0 - epoch if epoch < 50 else 500.0
        late.after_epoch({"loss": loss, "kl_weight": weight})
    with pytest.warns(bp.TrainingInstabilityWarning, match="at epoch 49"):
        assert late.finish() == [49]


@pytest.mark.parametrize("values", [[], [1.0, float("nan"), 0.5], [1.0, "2"]])
def test_gave_back_refuses_what_is_not_a_series_of_epoch_values(values):
    with pytest.raises(ValueError, match="non-empty list of finite numbers"):
        gave_back(values)
