"""``bnn_pyro.nn.folding``: a net run on weights with sample dims, folded into its batch.
Against each sample's own forward pass: outputs that are tuples, lists and dicts; the three
refusals and the note added to a torch error, word for word; which nets run unfolded; the
plates' sample dims; the pass's state seen from another thread."""

from __future__ import annotations

import threading

import pyro
import pytest
import torch
import torch.nn as nn

from bnn_pyro.nn.folding import (
    SampleFold,
    active_fold,
    folded_call,
    in_pass,
    keeps_sample_dims,
    plate_sample_shape,
)
from bnn_pyro.nn.layers import Linear

S, B = 5, 7


def _sampled(in_features: int, out_features: int, samples: int = S) -> Linear:
    layer = Linear(in_features, out_features)
    g = torch.Generator().manual_seed(samples * 10 + out_features)
    weight = torch.randn(samples, out_features, in_features, generator=g)
    layer.weight = nn.Parameter(weight)
    return layer


class _Outputs(nn.Module):
    """One sampled layer, its output returned as ``kind`` (a tuple, a list or a dict)."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.layer, self.kind = _sampled(3, 2), kind

    def forward(self, x):
        h = self.layer(x).flatten(1)  # a reshape that counts the folded samples as rows
        return {"tuple": (h, 2 * h), "list": [h], "dict": {"a": h}}[self.kind]


@pytest.mark.parametrize("kind", ["tuple", "list", "dict"])
def test_an_output_of_several_tensors_is_unfolded_tensor_by_tensor(kind):
    net = _Outputs(kind)
    x = torch.randn(B, 3)
    out = folded_call(net, x)
    per_sample = torch.stack(
        [x @ w.T + net.layer.bias for w in net.layer.weight.detach()]
    )  # (S, B, 2): each sample's own forward pass
    if kind == "tuple":
        assert isinstance(out, tuple) and len(out) == 2
        torch.testing.assert_close(out[0], per_sample)
        torch.testing.assert_close(out[1], 2 * per_sample)
    elif kind == "list":
        assert isinstance(out, list) and len(out) == 1
        torch.testing.assert_close(out[0], per_sample)
    else:
        assert set(out) == {"a"}
        torch.testing.assert_close(out["a"], per_sample)


# ------------------------------------------------------------------ refusals, word for word
class _Rows(nn.Module):
    """A sampled layer, then ``pick(h)``, then a second sampled layer (or none)."""

    def __init__(self, pick, second: int | None = S) -> None:
        super().__init__()
        self.first = _sampled(3, 4)
        self.second = None if second is None else _sampled(4, 2, second)
        self.pick = pick

    def forward(self, x):
        h = self.pick(self.first(x))
        return h if self.second is None else self.second(h)


def test_a_layer_given_rows_that_are_neither_folded_nor_the_batch_is_refused():
    net = _Rows(lambda h: h[:3])
    with pytest.raises(ValueError) as info:
        folded_call(net, torch.randn(B, 3))
    assert str(info.value) == (
        "a layer with 5 weight samples got an input of shape (3, 4): with the samples folded "
        "into the batch of 7 rows, it takes 35 rows or 7 (shared by every sample)"
    )


def test_a_layer_given_a_scalar_is_refused_by_the_same_check():
    with pytest.raises(ValueError, match=r"^a layer with 3 weight samples got an input of shape"):
        SampleFold(batch=2).unfold(torch.tensor(1.0), torch.Size([3]))


@pytest.mark.parametrize(
    ("pick", "shape"),
    [(lambda h: h[:1], "(1, 4)"), (lambda h: h.sum(), "()")],
    ids=["one row", "a scalar"],
)
def test_an_output_whose_rows_are_not_rows_is_refused(pick, shape):
    net = _Rows(pick, second=None)
    with pytest.raises(ValueError) as info:
        folded_call(net, torch.randn(B, 3))
    assert str(info.value) == (
        f"the net's output has shape {shape}: with 5 weight samples folded into the batch of 7 "
        "rows its rows must stay rows (35 of them)"
    )


def test_folded_input_must_come_out_folded_and_a_batch_sized_output_passes_otherwise():
    """With the input folded (the sample dims known before the pass), an output of the
    batch's 7 rows cannot be right; without, an output that no sampled layer reached keeps
    its 7 rows."""

    class Ignores(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.sampled, self.plain = _sampled(3, 2), nn.Linear(3, 2)

        def forward(self, x):
            self.sampled(x)  # its sample dims recorded, its output unused
            return self.plain(x[:B])

    net = Ignores()
    x = torch.randn(B, 3)
    torch.testing.assert_close(folded_call(net, x), net.plain(x))
    with pytest.raises(ValueError, match=r"^the net's output has shape \(7, 2\): with 5 weight"):
        folded_call(net, x, torch.Size([S]))


def test_layers_with_other_sample_dims_than_the_pass_are_refused():
    with pytest.raises(ValueError) as info:
        folded_call(_Rows(lambda h: h, second=4), torch.randn(B, 3))
    assert str(info.value) == (
        "a layer's weights carry the sample dims (4,), but the net runs on (5,) (the plates "
        "around it, or its other layers)"
    )
    with pytest.raises(ValueError) as info:  # against the sample dims given before the pass
        folded_call(_Rows(lambda h: h), torch.randn(B, 3), torch.Size([4]))
    assert str(info.value).startswith(
        "a layer's weights carry the sample dims (5,), but the net runs on (4,)"
    )


def test_sample_dims_of_size_one_do_not_count():
    """``(5, 1)`` given before the pass and layers of ``(5,)``: the same samples."""
    net = _Rows(lambda h: h)
    x = torch.randn(B, 3)
    torch.testing.assert_close(folded_call(net, x, torch.Size([S, 1])), folded_call(net, x))


class _Mixes(nn.Module):
    def __init__(self, samples: int = S) -> None:
        super().__init__()
        self.layer = _sampled(3, 3, samples)

    def forward(self, x):
        return self.layer(x) + torch.ones(B, 3)  # the batch's rows against folded ones


def test_a_torch_error_in_a_folded_pass_gets_a_note_naming_the_fold():
    x = torch.randn(B, 3)
    with pytest.raises(RuntimeError) as info:
        folded_call(_Mixes(), x)
    assert info.value.__notes__ == [
        "(the net ran with 5 weight samples folded into its batch dim: 35 rows for a batch of 7, "
        "see bnn_pyro.nn.folding; its input x stayed 7 rows, shared by the samples: combining "
        "x with an activation needs the samples' plate around the call (as in "
        "Predictive(parallel=True)) or one sample at a time (Predictive(parallel=False)))"
    ]
    with pytest.raises(RuntimeError) as info:
        folded_call(_Mixes(2), x, torch.Size([2]))
    assert info.value.__notes__ == [
        "(the net ran with 2 weight samples folded into its batch dim: 14 rows for a batch of 7, "
        "see bnn_pyro.nn.folding)"
    ]
    with pytest.raises(RuntimeError) as info:  # one sample: nothing folded, no note
        folded_call(_Mixes(1), torch.randn(B + 1, 3))
    assert not getattr(info.value, "__notes__", [])


# ------------------------------------------------------------------ which nets, which passes
def test_a_linear_or_sequential_with_its_own_forward_is_not_an_mlp():
    class Shifted(nn.Linear):
        def forward(self, x):
            return super().forward(x) + 1

    class Ordered(nn.Sequential):
        def forward(self, x):
            return super().forward(x.flip(-1))

    assert keeps_sample_dims(nn.Sequential(nn.Linear(3, 2), nn.ReLU()))
    assert not keeps_sample_dims(nn.Sequential(Shifted(3, 2)))
    assert not keeps_sample_dims(Ordered(nn.Linear(3, 2)))


def test_a_call_inside_a_pass_is_part_of_it_and_fold_false_runs_unfolded():
    inner = nn.Linear(3, 2)

    def outer(x):
        assert in_pass()
        return folded_call(inner, x)  # a submodule's own call: the outer pass's

    x = torch.randn(B, 3)
    torch.testing.assert_close(folded_call(outer, x), inner(x))
    seen = []
    folded_call(lambda x: seen.append(active_fold()) or x, x, fold=False)
    assert seen == [None]  # a pass, but nothing folded


def test_a_given_sample_shape_unfolds_the_output_of_a_net_without_sampled_weights():
    net = nn.Linear(3, 2)
    x = torch.randn(B, 3)
    out = folded_call(net, x, torch.Size([S]))
    assert out.shape == (S, B, 2)
    torch.testing.assert_close(out, net(x).expand(S, B, 2))


def test_the_plates_sample_dims_drop_only_the_data_placeholder():
    with pyro.plate("outer", 2, dim=-3), pyro.plate("inner", 3, dim=-2):
        assert plate_sample_shape() == torch.Size([2, 3])


def test_another_thread_sees_no_pass():
    seen = []
    thread = threading.Thread(target=lambda: seen.append((in_pass(), active_fold())))
    thread.start()
    thread.join()
    assert seen == [(False, None)]
