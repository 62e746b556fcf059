"""The resume file itself (``bnn_pyro.training.resume``), driven directly as the training loop
drives it: what is written when, what is restored, and each refusal word for word. The whole-run
guarantees (an interrupted fit resumed bit for bit) are in ``tests/reliability/test_resume.py``."""

from __future__ import annotations

import functools
import random
import re
import types

import numpy as np
import pytest
import torch

import bnn_pyro as bp
import bnn_pyro.training.resume as resume_module
from bnn_pyro.checkpoint import read_checkpoint
from bnn_pyro.training.resume import Resume, describe, open_resume


class Counting:
    """A callback with its own ``state_dict``/``load_state_dict`` (not an EarlyStopping)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, method, epoch, history) -> None:
        self.count += 1

    def state_dict(self) -> dict:
        return {"count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.count = state["count"]


class Averager:
    """What ``begin`` reads of an iterate average: its count and running means."""

    def __init__(self, count: int = 0, means=None) -> None:
        self.count, self.means = count, means


class WithExtra(torch.nn.Module):
    """A module whose state dict holds a value that is not a tensor (``_extra_state``)."""

    def get_extra_state(self):
        return {"tag": 1}

    def set_extra_state(self, state) -> None:
        self.tag = state["tag"]


class Batches:
    """The loop's minibatch source: a callable, with the generator of its order (or none)."""

    def __init__(self, generator: torch.Generator | None = None) -> None:
        self.generator = generator

    def __call__(self):
        return []


def _step(owner: torch.nn.Module) -> torch.optim.Optimizer:
    params = list(owner.parameters()) or [torch.zeros(1, requires_grad=True)]
    return torch.optim.SGD(params, lr=0.1)


def run(path, owner, epochs_done, epochs, *, settings=None, stop=False, stages=1, **kw):
    """A run of ``stages`` train() calls of ``epochs`` epochs each, the last stopped after
    ``epochs_done`` epochs (by a callback when ``stop``); returns its :class:`Resume`."""
    averager = kw.pop("averager", None)
    batches = kw.pop("batches", Batches())
    resume = Resume(path, owner, {"epochs": epochs} if settings is None else settings, **kw)
    for stage in range(stages):
        first, history, skip = resume.begin(owner, _step(owner), batches, None, averager, epochs)
        last = epochs_done if stage == stages - 1 else epochs
        for epoch in range(first, last):
            history.append(epoch=epoch, loss=float(10 * stage + epoch))
            resume.end_epoch(epoch, stop and epoch == last - 1)
    return resume


@pytest.fixture
def every_epoch(monkeypatch):
    monkeypatch.setattr(resume_module, "SAVE_SECONDS", 0.0)


@pytest.fixture
def path(tmp_path):
    return tmp_path / "run.pt"


# ---------------------------------------------------------------------- settings as data
def test_describe_turns_each_kind_of_setting_into_plain_data():
    scheduler = functools.partial(torch.optim.lr_scheduler.StepLR, step_size=5)
    assert describe(torch.tensor([1.5, 2.0])) == [1.5, 2.0]
    assert describe(torch.device("cpu")) == "cpu"
    assert describe((1, "a", torch.tensor(2), None)) == [1, "a", 2, None]
    assert describe(scheduler) == ["torch.optim.lr_scheduler.StepLR", [], [("step_size", 5)]]
    assert describe(functools.partial(max, 3)) == ["builtins.max", [3], []]
    assert describe(torch.nn.Tanh()) == "Tanh"  # an object: its type
    assert describe(torch.optim.Adam) == "torch.optim.adam.Adam"


def test_open_resume_allows_more_epochs_only_at_a_constant_rate_without_averaging(path):
    owner = torch.nn.Linear(1, 1)
    allowed = {
        (None, None): True,
        ("constant", None): True,
        ("cosine", None): False,
        (None, 0.75): False,
        ("constant", 0.75): False,
    }
    for (schedule, average), expected in allowed.items():
        settings = {"epochs": 3, "lr_schedule": schedule, "average": average}
        assert open_resume(path, owner, [], settings).extendable is expected
    assert open_resume(path, owner, [], {}, extendable=False).extendable is False
    kept = open_resume(path, owner, [], {"epochs": 3, "lr": 0.1, "other": 1}, keys=["lr"])
    assert kept.settings == {"lr": 0.1}
    assert Resume(path, owner, {}).extendable is False  # the class's own default


# ---------------------------------------------------------------------- when it is written
def test_writes_are_throttled_to_one_per_save_seconds_but_the_last_epoch_always(path, monkeypatch):
    clock = iter(range(0, 10_000, 1))  # one second per reading
    monkeypatch.setattr(
        resume_module, "time", types.SimpleNamespace(perf_counter=lambda: next(clock))
    )
    monkeypatch.setattr(resume_module, "SAVE_SECONDS", 10.0)
    run(path, torch.nn.Linear(1, 1), 4, 5)
    assert read_checkpoint(path)["epoch"] == 1  # the first epoch, then none within 10 s
    run(path.with_name("all.pt"), torch.nn.Linear(1, 1), 5, 5)
    saved = read_checkpoint(path.with_name("all.pt"))
    assert (saved["epoch"], saved["stopped"]) == (5, False)  # the last epoch always
    run(path.with_name("stopped.pt"), torch.nn.Linear(1, 1), 3, 5, stop=True)
    saved = read_checkpoint(path.with_name("stopped.pt"))
    assert (saved["epoch"], saved["stopped"]) == (3, True)  # a stop always


def test_a_write_is_due_once_save_seconds_have_passed(path, monkeypatch):
    # a clock that does not move: with SAVE_SECONDS = 0 the time since the last write (0) is
    # not less than it, so every epoch is written
    monkeypatch.setattr(resume_module, "time", types.SimpleNamespace(perf_counter=lambda: 7.0))
    monkeypatch.setattr(resume_module, "SAVE_SECONDS", 0.0)
    run(path, torch.nn.Linear(1, 1), 3, 5)
    assert read_checkpoint(path)["epoch"] == 3


def test_the_file_holds_the_tensors_of_an_owner_that_is_no_method(path, every_epoch):
    owner = torch.nn.Linear(2, 1)
    run(path, owner, 2, 5)
    saved = read_checkpoint(path)
    assert saved["class"] == "Linear" and set(saved["method"]["state"]) == {"weight", "bias"}
    assert torch.equal(saved["method"]["state"]["weight"], owner.weight)


# ---------------------------------------------------------------------- what is restored
def test_begin_restores_where_the_file_stopped(path, every_epoch):
    run(path, torch.nn.Linear(1, 1), 2, 6)
    resume = Resume(path, torch.nn.Linear(1, 1), {"epochs": 6})
    first, history, skip = resume.begin(resume.owner, _step(resume.owner), Batches(), None, None, 6)
    assert (first, history["loss"], skip) == (2, [0.0, 1.0], False)  # an unfinished run

    run(path.with_name("stopped.pt"), torch.nn.Linear(1, 1), 2, 6, stop=True)
    resume = Resume(path.with_name("stopped.pt"), torch.nn.Linear(1, 1), {"epochs": 6})
    first, history, skip = resume.begin(resume.owner, _step(resume.owner), Batches(), None, None, 6)
    assert (first, history["loss"], skip) == (6, [0.0, 1.0], False)  # stopped: no more epochs


def test_a_stage_the_file_finished_is_skipped_with_its_history(path, every_epoch):
    owner = torch.nn.Linear(1, 1)
    run(path, owner, 1, 3, stages=2)  # the second member stopped after 1 of its 3 epochs
    resume = Resume(path, torch.nn.Linear(1, 1), {"epochs": 3})
    first, history, skip = resume.begin(owner, _step(owner), Batches(), None, None, 3)
    assert (first, history["loss"], skip) == (3, [0.0, 1.0, 2.0], True)
    first, history, skip = resume.begin(owner, _step(owner), Batches(), None, None, 3)
    assert (first, history["loss"], skip) == (1, [10.0], False)
    assert resume.done == [{"epoch": [0, 1, 2], "loss": [0.0, 1.0, 2.0]}]


def test_the_random_streams_go_on_as_if_never_stopped(path, every_epoch):
    random.seed(0), np.random.seed(0), torch.manual_seed(0)
    order = torch.Generator().manual_seed(5)
    run(path, torch.nn.Linear(1, 1), 2, 6, batches=Batches(order))
    expected = (random.random(), np.random.rand(), torch.rand(()), torch.rand((), generator=order))

    random.seed(9), np.random.seed(9), torch.manual_seed(9)  # other streams, then restored
    order = torch.Generator().manual_seed(9)
    resume = Resume(path, torch.nn.Linear(1, 1), {"epochs": 6})
    resume.begin(resume.owner, _step(resume.owner), Batches(order), None, None, 6)
    drawn = (random.random(), np.random.rand(), torch.rand(()), torch.rand((), generator=order))
    assert drawn == expected


def test_a_minibatch_generator_the_file_did_not_save_keeps_its_state(path, every_epoch):
    run(path, torch.nn.Linear(1, 1), 2, 6)  # minibatches without a generator
    order = torch.Generator().manual_seed(3)
    expected = torch.Generator().manual_seed(3).get_state()
    resume = Resume(path, torch.nn.Linear(1, 1), {"epochs": 6})
    resume.begin(resume.owner, _step(resume.owner), Batches(order), None, None, 6)
    assert torch.equal(order.get_state(), expected)


def test_a_parameterless_owner_is_saved_and_restored(path, every_epoch):
    run(path, torch.nn.Identity(), 2, 4)  # its tensors' device: none, so the CPU
    resume = Resume(path, torch.nn.Identity(), {"epochs": 4})
    first, _, _ = resume.begin(resume.owner, _step(resume.owner), Batches(), None, None, 4)
    assert first == 2


def test_callbacks_with_their_own_state_dict_are_restored(path, every_epoch):
    counter = Counting()
    counter.count = 5
    run(path, torch.nn.Linear(1, 1), 2, 4, callbacks=[counter])
    again = Counting()
    resume = Resume(path, torch.nn.Linear(1, 1), {"epochs": 4}, [again, lambda *a: None])
    resume.begin(resume.owner, _step(resume.owner), Batches(), None, None, 4)
    assert again.count == 5


def test_the_iterate_average_is_restored_where_both_runs_have_one(path, every_epoch):
    means = [torch.full((1, 1), 2.0), torch.full((1,), 3.0)]
    run(path, torch.nn.Linear(1, 1), 2, 4, averager=Averager(4, means))
    averager = Averager()
    resume = Resume(path, torch.nn.Linear(1, 1), {"epochs": 4})
    resume.begin(resume.owner, _step(resume.owner), Batches(), None, averager, 4)
    assert averager.count == 4 and all(map(torch.equal, averager.means, means))

    run(path.with_name("none.pt"), torch.nn.Linear(1, 1), 2, 4, averager=Averager(0, None))
    averager = Averager(1, [torch.zeros(1)])
    resume = Resume(path.with_name("none.pt"), torch.nn.Linear(1, 1), {"epochs": 4})
    resume.begin(resume.owner, _step(resume.owner), Batches(), None, averager, 4)
    assert (averager.count, averager.means) == (0, None)  # not started when it was saved

    resume = Resume(path, torch.nn.Linear(1, 1), {"epochs": 4})  # a file with an average,
    first, _, _ = resume.begin(resume.owner, _step(resume.owner), Batches(), None, None, 4)
    assert first == 2  # a loop without one: nothing to restore it into


# ---------------------------------------------------------------------- refusals, word for word
def _refused(exc, message, call):
    with pytest.raises(exc, match="^" + re.escape(message) + "$"):
        call()


def test_a_folder_that_does_not_exist_is_named(tmp_path):
    where = tmp_path / "no" / "run.pt"
    _refused(
        FileNotFoundError,
        f"resume: the folder of {str(where)!r} does not exist; create it first (the resume file "
        "is written there at the end of each epoch)",
        lambda: Resume(where, torch.nn.Linear(1, 1), {}),
    )


def test_files_that_are_no_resume_file_are_refused(path, every_epoch):
    path.write_bytes(b"\x00garbage")
    with pytest.raises(ValueError) as caught:
        Resume(path, torch.nn.Linear(1, 1), {})
    assert str(caught.value).startswith(f"resume: {str(path)!r} cannot be read as a resume file (")
    assert str(caught.value).endswith("); delete it to start the run over")

    model = path.with_name("model.pt")
    bp.MCDropout(bp.nn.mlp(1, [2], 1, dropout=0.1), likelihood="regression").save(model)
    _refused(
        ValueError,
        f"resume: {str(model)!r} is a bnn_pyro checkpoint, not a resume file; pass a new path "
        "to start a resumable run",
        lambda: Resume(model, torch.nn.Linear(1, 1), {}),
    )

    linear = path.with_name("linear.pt")
    run(linear, torch.nn.Linear(1, 1), 1, 3)
    _refused(
        ValueError,
        f"resume: {str(linear)!r} holds a Linear run, not a Identity run; pass another path to "
        "start over",
        lambda: Resume(linear, torch.nn.Identity(), {"epochs": 3}),
    )


def test_other_settings_are_named_with_both_values(path, every_epoch):
    run(path, torch.nn.Linear(1, 1), 1, 3, settings={"epochs": 3, "lr": 0.1})
    tail = "; continuing it would not give the run asked for: pass the same settings, or another path to start over"  # noqa: E501
    _refused(
        ValueError,
        f"resume: {str(path)!r} was written by a run with lr=0.1, this fit has lr=0.5" + tail,
        lambda: Resume(path, torch.nn.Linear(1, 1), {"epochs": 3, "lr": 0.5}),
    )
    _refused(  # a setting only this fit names
        ValueError,
        f"resume: {str(path)!r} was written by a run with seed=None, this fit has seed=3" + tail,
        lambda: Resume(path, torch.nn.Linear(1, 1), {"epochs": 3, "lr": 0.1, "seed": 3}),
    )
    _refused(  # more epochs, where the file's run or this one cannot go on to more
        ValueError,
        f"resume: {str(path)!r} was written by a run with epochs=3, this fit has epochs=5" + tail,
        lambda: Resume(path, torch.nn.Linear(1, 1), {"epochs": 5, "lr": 0.1}, extendable=True),
    )


def test_an_extendable_file_takes_more_epochs_but_not_fewer_than_done(path, every_epoch):
    run(path, torch.nn.Linear(1, 1), 2, 3, extendable=True)
    assert Resume(path, torch.nn.Linear(1, 1), {"epochs": 5}, extendable=True).saved["epoch"] == 2
    _refused(
        ValueError,
        f"resume: {str(path)!r} has 2 epochs done, more than the epochs=1 of this fit",
        lambda: Resume(path, torch.nn.Linear(1, 1), {"epochs": 1}, extendable=True),
    )
    _refused(
        ValueError,
        f"resume: {str(path)!r} was written by a run with epochs=3, this fit has epochs=5; "
        "continuing it would not give the run asked for: pass the same settings, or another "
        "path to start over",
        lambda: Resume(path, torch.nn.Linear(1, 1), {"epochs": 5}),  # this fit cannot extend
    )
    nameless = path.with_name("nameless.pt")  # settings that name no epochs count as 0
    run(nameless, torch.nn.Linear(1, 1), 2, 3, settings={}, extendable=True)
    _refused(
        ValueError,
        f"resume: {str(nameless)!r} has 2 epochs done, more than the epochs=0 of this fit",
        lambda: Resume(nameless, torch.nn.Linear(1, 1), {}, extendable=True),
    )


def _architecture(path, key, there, here):
    return (
        f"resume: {str(path)!r} was written for another architecture: {key!r} is {there} there "
        f"and {here} here; pass the same net, or another path"
    )


def _restored(path, owner):
    resume = Resume(path, owner, {"epochs": 4})
    return lambda: resume.begin(owner, _step(owner), Batches(), None, None, 4)


def test_another_architecture_is_named_with_both_shapes(path, every_epoch):
    small = lambda: torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 1))  # noqa: E731
    large = lambda: torch.nn.Sequential(*small(), torch.nn.Linear(1, 1))  # noqa: E731
    run(path, small(), 1, 4)
    # '0.*' and '1.*' agree: the first tensor that differs is the extra layer's
    _refused(ValueError, _architecture(path, "2.bias", "absent", "of shape (1,)"),
             _restored(path, large()))  # fmt: skip
    other = path.with_name("large.pt")
    run(other, large(), 1, 4)
    _refused(ValueError, _architecture(other, "2.bias", "of shape (1,)", "absent"),
             _restored(other, small()))  # fmt: skip
    wide = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 2))
    _refused(ValueError, _architecture(path, "1.bias", "of shape (1,)", "of shape (2,)"),
             _restored(path, wide))  # fmt: skip


def test_extra_state_is_compared_by_presence_not_shape(path, every_epoch):
    tagged = lambda: torch.nn.Sequential(torch.nn.Linear(1, 1), WithExtra())  # noqa: E731
    run(path, tagged(), 1, 4)
    owner = tagged()
    _restored(path, owner)()  # both hold '1._extra_state': restored
    assert owner[1].tag == 1
    plain = torch.nn.Sequential(torch.nn.Linear(1, 1), torch.nn.Identity())
    _refused(ValueError, _architecture(path, "1._extra_state", "a value", "absent"),
             _restored(path, plain))  # fmt: skip


def test_a_different_number_of_stateful_callbacks_is_refused(path, every_epoch):
    run(path, torch.nn.Linear(1, 1), 1, 4, callbacks=[Counting()])
    _refused(
        ValueError,
        f"resume: {str(path)!r} holds the state of 1 callback(s) (EarlyStopping, ...) and of [], "
        "this fit has 0 and []: pass the same callbacks and settings",
        _restored(path, torch.nn.Linear(1, 1)),
    )
