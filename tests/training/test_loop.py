"""``bnn_pyro.training.loop.train``, the one loop behind every gradient fit, driven directly by
scripted steps: which errors count as a divergence and what each leaves behind, the snapshot's
age, the history's clock (a fresh run and a resumed one), the blow-up guard over a resumed
run's earlier epochs, the progress bar, and the refusals."""

from __future__ import annotations

import types
import warnings

import pytest
import torch

from bnn_pyro.exceptions import TrainingDivergedError, TrainingInstabilityWarning
from bnn_pyro.training import loop
from bnn_pyro.training.callbacks import History
from bnn_pyro.training.loop import TrainingStep, train

ADVICE = (
    "training stopped (a method's fit leaves the model as it was before the call). A lower "
    "learning rate (a smaller lr), a smaller init_scale or standardised inputs and targets "
    "usually help."
)


class Scripted(TrainingStep):
    """A step that sets the module's one weight to the number of steps taken, returns
    ``losses[epoch]`` (or the epoch number), and at ``(fail_epoch, n)`` runs ``fail(module)``.
    ``tick`` advances the fake clock by that much per step."""

    def __init__(self, module, losses=None, fail_epoch=None, fail=None, clock=None, tick=0.0):
        self.module, self.losses, self.fail_epoch, self.fail = module, losses, fail_epoch, fail
        self.clock, self.tick, self.steps, self.epoch = clock, tick, 0, 0

    def start_epoch(self, epoch):
        self.epoch = epoch

    def __call__(self, xb, yb):
        if self.clock is not None:
            self.clock["t"] += self.tick
        if self.epoch == self.fail_epoch:
            self.fail(self.module)
        self.steps += 1
        with torch.no_grad():
            self.module.weight.fill_(float(self.steps))
        return float(self.epoch if self.losses is None else self.losses[self.epoch])


def _module():
    return torch.nn.Linear(1, 1, bias=False)


def _one_batch():
    return [(torch.ones(2, 1), torch.ones(2, 1))]


def _fake_clock(monkeypatch, start):
    clock = {"t": start}
    monkeypatch.setattr(loop, "time", types.SimpleNamespace(perf_counter=lambda: clock["t"]))
    return clock


def _nan(module):
    with torch.no_grad():
        module.weight.fill_(float("nan"))


# ------------------------------------------------------------------ what counts as a divergence
def test_a_distribution_refusing_a_nan_is_a_divergence():
    """Pyro's and torch's validation refusing a NaN parameter ("found invalid values: ...
    nan"), the parameters still finite: a ``TrainingDivergedError`` naming the cause."""

    def refuse(module):
        torch.distributions.Normal(torch.tensor([float("nan")]), 1.0, validate_args=True)

    module = _module()
    step = Scripted(module, fail_epoch=1, fail=refuse)
    with pytest.raises(TrainingDivergedError) as info:
        train(module, step, _one_batch, epochs=3, progress=False)
    assert str(info.value) == (
        "a distribution was given a NaN or infinite value (the parameters overflowed) at epoch "
        f"1, step 0: {ADVICE}"
    )


@pytest.mark.parametrize(
    "message",
    [
        # invalid values, but no NaN or inf among them: a bad value, not a divergence
        "Expected parameter scale to satisfy the constraint GreaterThan(0), but found invalid "
        "values:\ntensor([-1.])",
        # a NaN named, but not a distribution's refusal
        "the targets hold a nan",
    ],
    ids=["invalid but finite", "nan but not refused"],
)
def test_other_errors_with_finite_parameters_propagate_and_restore_the_start(message):
    def fail(module):
        raise ValueError(message)

    module = _module()
    start = module.weight.detach().clone()
    step = Scripted(module, fail_epoch=2, fail=fail)
    with pytest.raises(ValueError) as info:
        train(module, step, _one_batch, epochs=3, progress=False)
    assert str(info.value) == message and type(info.value) is ValueError
    assert torch.equal(module.weight.detach(), start)  # as before train, not as at epoch 2


def test_any_error_once_the_parameters_are_non_finite_is_a_divergence():
    """The weights go NaN, then a plain ``RuntimeError``: a divergence named by the error's
    type, and the last finite snapshot (taken at the start, within the second) put back."""

    def blow(module):
        _nan(module)
        raise RuntimeError("some op failed")

    module = _module()
    start = module.weight.detach().clone()
    with pytest.raises(TrainingDivergedError) as info:
        train(module, Scripted(module, fail_epoch=2, fail=blow), _one_batch, epochs=3,
              progress=False)  # fmt: skip
    assert str(info.value) == (
        f"RuntimeError once the parameters were non-finite at epoch 2, step 0: {ADVICE}"
    )
    assert torch.equal(module.weight.detach(), start)


def test_a_steps_own_divergence_error_is_passed_on_with_where_it_happened():
    def diverge(module):
        raise TrainingDivergedError("fit: the loss is nan")

    module = _module()
    with pytest.raises(TrainingDivergedError) as info:
        train(module, Scripted(module, fail_epoch=0, fail=diverge), _one_batch, epochs=2,
              progress=False)  # fmt: skip
    assert str(info.value) == f"fit: the loss is nan at epoch 0, step 0: {ADVICE}"


@pytest.mark.parametrize("finite", [True, False], ids=["finite", "non-finite"])
def test_an_interrupt_keeps_the_progress_unless_it_is_non_finite(finite):
    def interrupt(module):
        if not finite:
            _nan(module)
        raise KeyboardInterrupt

    module = _module()
    start = module.weight.detach().clone()
    with pytest.raises(KeyboardInterrupt):
        train(module, Scripted(module, fail_epoch=2, fail=interrupt), _one_batch, epochs=3,
              progress=False)  # fmt: skip
    if finite:  # two steps taken: the weight the second step set
        assert module.weight.item() == 2.0
    else:  # the snapshot of the start (under a second old)
        assert torch.equal(module.weight.detach(), start)


def test_the_snapshot_is_refreshed_at_an_epoch_start_more_than_a_second_after_the_last(
    monkeypatch,
):
    """A fake clock that moves 0.5 s a step (one step an epoch): snapshots at epoch 0's start
    (t = 0), then at the first epoch start more than 1 s later: epoch 3 (t = 1.5; epoch 2's
    1.0 s is not more). The weights go NaN in epoch 4, whose start (0.5 s after epoch 3's) took
    none: the snapshot put back is epoch 3's, the weight its three steps set."""
    clock = _fake_clock(monkeypatch, 0.0)

    def blow(module):
        _nan(module)
        raise RuntimeError("overflow")

    module = _module()
    step = Scripted(module, fail_epoch=4, fail=blow, clock=clock, tick=0.5)
    with pytest.raises(TrainingDivergedError):
        train(module, step, _one_batch, epochs=6, progress=False)
    assert module.weight.item() == 3.0


# ------------------------------------------------------------------ the history
def test_a_fresh_runs_rows_count_epochs_and_seconds_from_its_start(monkeypatch):
    clock = _fake_clock(monkeypatch, 1000.0)
    module = _module()
    history = train(module, Scripted(module, clock=clock, tick=2.0), _one_batch, epochs=3,
                    progress=False)  # fmt: skip
    assert history["epoch"] == [0, 1, 2]
    assert history["loss"] == [0.0, 1.0, 2.0]
    assert history["seconds"] == [2.0, 4.0, 6.0]


def test_no_minibatch_is_refused():
    module = _module()
    with pytest.raises(ValueError, match=r"^the training data yielded no minibatch$"):
        train(module, Scripted(module), lambda: [], epochs=1, progress=False)


def test_a_step_without_an_optimizer_has_no_state():
    step = TrainingStep()
    assert step.state_dict() == {}
    step.load_state_dict({})  # nothing to restore, nothing raised


class _Resume:
    """A resumed run as ``train`` sees it: its earlier rows, and the epochs it is told of."""

    def __init__(self, rows, skip=False):
        self.history = History()
        for row in rows:
            self.history.append(**row)
        self.skip, self.ended = skip, []

    def begin(self, module, step, batches, set_epoch, averager, epochs):
        return len(self.history["loss"]), self.history, self.skip

    def end_epoch(self, epoch, stop):
        self.ended.append((epoch, stop))


def test_a_resumed_runs_clock_goes_on_from_its_last_row(monkeypatch):
    clock = _fake_clock(monkeypatch, 1000.0)
    rows = [{"epoch": e, "loss": 10.0 - e, "seconds": float(e + 1)} for e in range(3)]
    resume = _Resume(rows)
    module = _module()

    def stop_at_4(module, epoch, history):
        return epoch == 4

    history = train(module, Scripted(module, clock=clock, tick=1.0), _one_batch, epochs=8,
                    callbacks=[stop_at_4], progress=False, resume=resume)  # fmt: skip
    assert history["epoch"] == [0, 1, 2, 3, 4]
    assert history["seconds"] == [1.0, 2.0, 3.0, 4.0, 5.0]  # 3 s saved, then 1 s a step
    assert resume.ended == [(3, False), (4, True)]


def test_a_resumed_run_that_is_done_returns_its_history_untouched():
    resume = _Resume([{"epoch": 0, "loss": 1.0, "seconds": 1.0}], skip=True)
    module = _module()
    step = Scripted(module)
    history = train(module, step, _one_batch, epochs=1, progress=False, resume=resume)
    assert history is resume.history and step.steps == 0


@pytest.mark.parametrize(
    ("earlier", "new", "blowups", "weight"),
    [
        # the earlier epochs fall 100 -> 91, the new ones on to 81 (epoch 19), then blow up: put
        # back to epoch 19, its best over the whole run (without the earlier epochs: 9)
        ([100.0 - e for e in range(10)], [90.0 - e for e in range(10)] + [500.0] * 20, [19], 10.0),
        # the best is an earlier epoch's, whose parameters this run never held: nothing put
        # back (not the resumed start passed off as that epoch's)
        ([100.0 - e for e in range(20)], [500.0] * 20, [], 20.0),
    ],
    ids=["best in this run", "best in the earlier run"],
)
def test_the_blow_up_guard_reads_a_resumed_runs_earlier_epochs(earlier, new, blowups, weight):
    """``weight``: the step count the module's weight ends at (put back, or the last)."""
    # a column the earlier rows did not all have (one entry short): read where it exists
    rows = [{"epoch": e, "loss": v, "seconds": 1.0} for e, v in enumerate(earlier)]
    rows = [{**row, "extra": 1.0} if e else row for e, row in enumerate(rows)]
    resume = _Resume(rows)
    module = _module()
    losses = dict(enumerate(earlier + new))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = train(module, Scripted(module, losses=losses), _one_batch,
                        epochs=len(earlier) + len(new), progress=False, resume=resume)  # fmt: skip
    assert history.blowups == blowups
    assert len([w for w in caught if w.category is TrainingInstabilityWarning]) == len(blowups)
    assert module.weight.item() == weight


# ------------------------------------------------------------------ the bar
class _WithKL(Scripted):
    def end_epoch(self, losses, sizes):
        return {"loss": 3.25, "kl": 0.5}


def test_the_bar_is_on_by_default_labelled_fit_in_epochs_and_cleared_at_the_end(capsys):
    module = _module()
    train(module, Scripted(module), _one_batch, epochs=2)
    shown = capsys.readouterr().err
    assert "fit:" in shown and "epoch/s" in shown
    assert shown.rstrip("\r").split("\r")[-1].strip() == ""  # nothing left on the line


def test_the_bar_shows_the_loss_and_kl_and_is_not_redrawn_every_epoch(capsys):
    """A slow epoch (0.12 s, above tqdm's 0.1 s between redraws) shows the last row's loss and
    KL; 200 fast epochs redraw the bar a few times, not once each."""
    import time

    class Slow(_WithKL):
        def __call__(self, xb, yb):
            time.sleep(0.12)
            return super().__call__(xb, yb)

    module = _module()
    train(module, Slow(module), _one_batch, epochs=3)
    assert "loss=3.25, kl=0.5" in capsys.readouterr().err
    train(module, _WithKL(module), _one_batch, epochs=200)
    assert capsys.readouterr().err.count("\r") < 40


# ------------------------------------------------------------------ under torch.distributed
def test_under_torch_distributed_resume_is_refused_and_rank_0_is_broadcast(monkeypatch):
    broadcast = []
    fake = types.SimpleNamespace(
        active=lambda: True,
        broadcast_module=broadcast.append,
        rank_noise_seed=lambda: None,
        rank=lambda: 0,
        mean_row=lambda row: row,
    )
    monkeypatch.setattr(loop, "distributed", fake)
    module = _module()
    with pytest.raises(ValueError) as info:
        train(module, Scripted(module), _one_batch, epochs=1, progress=False,
              resume=_Resume([]))  # fmt: skip
    assert str(info.value) == (
        "resume is not supported under torch.distributed yet: pass resume=None (use the "
        "Checkpoint callback, which writes from rank 0)"
    )
    assert broadcast == []  # refused before any work
    train(module, Scripted(module), _one_batch, epochs=1, progress=False)
    assert broadcast == [module]
