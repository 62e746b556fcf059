"""A fit that raises leaves the model as it was before the call, for every method and for
``fit_stacked``: its parameters and buffers bit for bit, its attributes, and its predictions
(the same seeded output, or ``NotFittedError`` again after a failed first fit).

The failure is a NaN in the 4th minibatch: every module's output turns NaN once three steps
have moved the parameters (armed by a callback after the first epoch of three minibatches, or,
for the classic methods' stacked fit, which takes no callbacks, after the optimizer's third
step), so the step raises ``TrainingDivergedError`` with three steps of progress behind it. After a
failed refit, the next fit gives what it gives on a model whose refit never failed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyro
import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

import bnn_pyro as bp
from bnn_pyro.exceptions import NotFittedError
from bnn_pyro.stacking import trains_stacked
from tests.reliability.refusal import assert_same, fingerprint

#: The fits here are cut short by a NaN after three steps on purpose; an SG-MCMC chain or a
#: hidden-layer BNN stopped that early rightly warns that it predicts its targets poorly.
pytestmark = pytest.mark.filterwarnings("ignore::bnn_pyro.exceptions.TrainingInstabilityWarning")

METHODS = list(bp.METHODS)
STACKED = [name for name in METHODS if trains_stacked(bp.registry.method_class(name))]
FIT = dict(epochs=3, batch_size=16, progress=False)  # 48 rows: three minibatches an epoch


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(48, 3, generator=g)
    return x, x.sum(-1, keepdim=True) + 0.1 * torch.randn(48, 1, generator=g)


def _method(name: str, dropout: float = 0.1) -> bp.BaseBayesianMethod:
    torch.manual_seed(0)
    options = {} if bp.registry.method_spec(name).own_samples else {"num_samples": 4}
    return bp.make(name, bp.nn.mlp(3, [8], 1, dropout=dropout), bp.Gaussian(0.3), **options)


def _outcome(method: bp.BaseBayesianMethod) -> Any:
    """The seeded prediction, or ``NotFittedError`` (the class) for an unfitted model."""
    try:
        return method.predict(_data()[0][:5], return_samples=True, seed=0)
    except NotFittedError:
        return NotFittedError


def _assert_same_outcome(before: Any, after: Any) -> None:
    if before is NotFittedError or after is NotFittedError:
        assert after is before, f"predict gave {after!r} after the failed fit, {before!r} before"
        return
    for a, b in zip(before, after, strict=True):
        assert torch.equal(a, b), "the predictions changed"


class NaNInjection:
    """Every module's output is NaN once :meth:`arm` ran: as a callback after epoch 0 (three
    minibatches), or after the ``arm_after_steps``-th step of any torch optimizer. (The global
    forward hook is registered only then: the stacked fits refuse nets with hooks up front.)"""

    def __init__(self, arm_after_steps: int | None = None) -> None:
        self.steps = 0
        self.arm_after_steps = arm_after_steps
        self.hooks: list[Any] = []

    def arm(self, method: Any = None, epoch: int = 0, history: Any = None) -> None:
        if epoch == 0 and len(self.hooks) == 1:
            self.hooks.append(torch.nn.modules.module.register_module_forward_hook(self._nan))

    def _step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.steps += 1
        if self.arm_after_steps is not None and self.steps >= self.arm_after_steps:
            self.arm()

    @staticmethod
    def _nan(module: torch.nn.Module, inputs: Any, output: Any) -> Any:
        if isinstance(output, torch.Tensor) and output.is_floating_point():
            return output * float("nan")
        return None

    @contextmanager
    def active(self) -> Iterator[NaNInjection]:
        self.hooks = [register_optimizer_step_post_hook(self._step)]
        try:
            yield self
        finally:
            for hook in self.hooks:
                hook.remove()


def _fail_fit(method: bp.BaseBayesianMethod) -> None:
    x, y = _data()
    with NaNInjection().active() as nan:
        with pytest.raises(bp.TrainingDivergedError, match="epoch 1, step 0"):
            method.fit(x, y, seed=0, callbacks=[nan.arm], **FIT)


#: the methods whose unfitted model refuses to predict (the others predict from their initial
#: weights, and are compared by their predictions)
NEEDS_FIT = {"vi", "lrt", "bb_alpha", "hidden_layer", "swag", "laplace", "sghmc", "csghmc", "sgld"}


@pytest.mark.parametrize("name", METHODS)
def test_a_failed_first_fit_leaves_the_model_unfitted(name):
    method = _method(name)
    before, predicted = fingerprint(method), _outcome(method)
    assert (predicted is NotFittedError) == (name in NEEDS_FIT)
    _fail_fit(method)
    assert_same(before, fingerprint(method))
    _assert_same_outcome(predicted, _outcome(method))


@pytest.mark.parametrize("name", METHODS)
def test_a_failed_refit_keeps_the_first_fit(name):
    method = _method(name)
    method.fit(*_data(), seed=1, **FIT)
    before, predicted = fingerprint(method), _outcome(method)
    assert predicted is not NotFittedError
    _fail_fit(method)
    assert_same(before, fingerprint(method))
    _assert_same_outcome(predicted, _outcome(method))
    again = _method(name)  # and the model goes on as if the failed fit had never run
    again.fit(*_data(), seed=1, **FIT)
    again.fit(*_data(), seed=2, **FIT)
    method.fit(*_data(), seed=2, **FIT)
    _assert_same_outcome(_outcome(again), _outcome(method))


def _fail_stacked(models: list[Any]) -> None:
    x, y = _data()
    takes_callbacks = not isinstance(models[0], bp.methods.classic.base.ClassicMethod)
    options = dict(FIT)
    # the classic stacked fit takes no callbacks: its third optimizer step arms the NaN
    with NaNInjection(None if takes_callbacks else 3).active() as nan:
        if takes_callbacks:
            options["callbacks"] = [nan.arm]
        with pytest.raises(bp.TrainingDivergedError, match="epoch 1, step 0"):
            bp.fit_stacked(models, x, y, seeds=[0, 1], **options)


@pytest.mark.parametrize("name", STACKED)
def test_a_failed_stacked_fit_leaves_every_model_as_it_was(name):
    models = [_method(name, dropout=0.1 if name == "dropout" else 0.0) for _ in range(2)]
    for fitted in (False, True):  # a first stacked fit, then a refit of fitted models
        if fitted:
            bp.fit_stacked(models, *_data(), seeds=[3, 4], **FIT)
        before = [(fingerprint(m), _outcome(m)) for m in models]
        assert all((p is NotFittedError) == (name in NEEDS_FIT and not fitted) for _, p in before)
        _fail_stacked(models)
        for m, (state, predicted) in zip(models, before, strict=True):
            assert_same(state, fingerprint(m))
            _assert_same_outcome(predicted, _outcome(m))


def test_a_failed_fit_inside_the_models_param_scope_empties_the_scope_it_filled():
    # the store the user sees inside ``with bnn.param_scope():`` is the model's own: a failed
    # first fit takes the guide's parameters out of it again, and the next fit fills it anew
    x, y = _data()
    torch.manual_seed(0)
    bnn = bp.VariationalBNN(bp.nn.mlp(3, [8], 1), bp.Gaussian(0.3), guide="normal")
    with bnn.param_scope():
        _fail_fit(bnn)
        assert list(pyro.get_param_store().keys()) == []
        assert not bnn.is_fitted()
        bnn.fit(x, y, seed=0, **FIT)
        names = sorted(pyro.get_param_store().keys())
        held = {id(p) for p in bnn.parameters()}
        assert names and all(id(pyro.get_param_store()._params[n]) in held for n in names)
