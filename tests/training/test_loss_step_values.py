"""``LossStep`` (``training/loop.py``), the one step of a loss for one model or K stacked
members, value by value: its history row, its divergence messages and its refusals."""

from __future__ import annotations

import pytest
import torch

from bnn_pyro.exceptions import TrainingDivergedError
from bnn_pyro.training import LossStep


def _members():
    """Two members, one weight each, their losses ``(w_k - t_k)**2`` on every row."""
    w = torch.nn.Parameter(torch.tensor([0.0, 1.0]))
    target = torch.tensor([2.0, 5.0])

    def losses(xb, yb):
        return ((w - target) ** 2) * xb.mean(-1)  # xb of ones: (K, B)

    return w, losses


def test_k_members_row_weights_each_minibatch_by_its_rows_without_start_epoch():
    """Called straight away (no ``start_epoch``): the row is each member's mean loss per row,
    each minibatch weighted by its rows (here 3 then 1), and ``loss`` their mean."""
    w, losses = _members()
    step = LossStep(losses, torch.optim.SGD([w], lr=0.0))  # lr 0: the same losses each step
    values = [step(torch.ones(2, rows), None) for rows in (3, 1)]
    per_member = [(0.0 - 2.0) ** 2, (1.0 - 5.0) ** 2]  # 4 and 16 on every row
    row = step.end_epoch(values, [3, 1])
    assert row["member_loss"] == pytest.approx(per_member)
    assert row["loss"] == pytest.approx(sum(per_member) / 2)
    assert values == pytest.approx([10.0, 10.0])  # each step returns the members' mean
    step.start_epoch(1)
    step(torch.ones(2, 5), None)
    assert step.end_epoch([], [5])["member_loss"] == pytest.approx(per_member)


def test_one_model_row_is_the_loops_weighted_mean():
    w = torch.nn.Parameter(torch.tensor(0.0))
    step = LossStep(lambda x, y: (w - 1.0) ** 2 + 0 * x.sum(), torch.optim.SGD([w], lr=0.0))
    values = [step(torch.ones(rows), None) for rows in (3, 1)]
    assert step.end_epoch(values, [3, 1]) == {"loss": pytest.approx(1.0)}


def test_divergence_names_the_run_and_the_members():
    w, losses = _members()
    step = LossStep(lambda x, y: losses(x, y) * torch.tensor([1.0, float("inf")]),
                    torch.optim.SGD([w], lr=0.1), desc="stack")  # fmt: skip
    with pytest.raises(TrainingDivergedError) as caught:
        step(torch.ones(2, 3), None)
    assert str(caught.value) == "stack: the loss of member(s) [2] of 2 is not finite"
    assert w.grad is None and torch.equal(w.detach(), torch.tensor([0.0, 1.0]))  # not moved
    one = torch.nn.Parameter(torch.tensor(0.0))
    for desc, prefix in ((None, ""), ("fit", "fit: ")):
        kwargs = {} if desc == "fit" else {"desc": desc}  # "fit" is the default
        step = LossStep(lambda x, y: one * float("nan"), torch.optim.SGD([one], lr=0.1), **kwargs)
        with pytest.raises(TrainingDivergedError) as caught:
            step(torch.ones(1), None)
        assert str(caught.value) == f"{prefix}the loss is nan"


def test_bad_arguments_are_refused_by_name():
    w = torch.nn.Parameter(torch.tensor(0.0))
    with pytest.raises(TypeError) as caught:
        LossStep(3, torch.optim.SGD([w], lr=0.1))
    assert str(caught.value) == "the loss must be callable, got int"
    with pytest.raises(TypeError) as caught:
        LossStep(lambda x, y: w, [w])
    assert str(caught.value) == "optimizer must be a torch optimizer, got list"
