"""The metrics' shared argument checks: whole refusal messages and the accepted boundaries."""

from __future__ import annotations

import re

import pytest
import torch

from bnn_pyro.metrics._validation import (
    check_labels,
    check_n_bins,
    check_probs,
    check_reduction,
    check_samples,
    check_scales,
    check_target,
    check_y_scale,
)


def test_check_reduction_accepts_mean_and_none_and_names_both_otherwise():
    """Only the two documented reductions pass; the message lists them and echoes the input."""
    check_reduction("mean")
    check_reduction("none")
    with pytest.raises(
        ValueError, match=r"^reduction must be one of \('mean', 'none'\), got 'sum'$"
    ):
        check_reduction("sum")


def test_check_samples_accepts_one_sample_of_one_point_in_two_and_three_dims():
    """``S = N = 1`` is the smallest legal size, in both the (S, N) and (S, N, O) layouts."""
    two = torch.zeros(1, 1)
    three = torch.zeros(1, 1, 2)
    assert check_samples(two, "locs") is two
    assert check_samples(three, "locs") is three


@pytest.mark.parametrize("shape", [(3,), (1, 2, 3, 4)])
def test_check_samples_refuses_other_ranks_with_the_shape(shape):
    """A 1-D or 4-D tensor is refused, naming the argument and the received shape."""
    msg = re.escape(f"locs must have shape (S, N) or (S, N, O), got {shape}")
    with pytest.raises(ValueError, match=f"^{msg}$"):
        check_samples(torch.zeros(shape), "locs")


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0, 2, 1)])
def test_check_samples_refuses_no_samples_or_no_points(shape):
    """``S = 0`` or ``N = 0`` is refused with the whole message."""
    msg = re.escape(f"samples needs S >= 1 samples and N >= 1 points, got {shape}")
    with pytest.raises(ValueError, match=f"^{msg}$"):
        check_samples(torch.zeros(shape), "samples")


def test_check_samples_refuses_non_finite_values_by_name():
    """A NaN is reported under the argument's own name."""
    with pytest.raises(ValueError, match=r"^locs must be finite, got 1 NaN"):
        check_samples(torch.tensor([[0.0, float("nan")]]), "locs")


def test_check_samples_refuses_a_non_tensor_by_name():
    """A list is refused before its shape is looked at, naming the argument."""
    with pytest.raises(TypeError, match=r"^samples must be a torch.Tensor, got list"):
        check_samples([[0.0]], "samples")


def test_check_target_accepts_the_exact_shape_and_refuses_another():
    """``y`` must match the prediction shape exactly; the message gives both shapes and a fix."""
    y = torch.zeros(3)
    assert check_target(y, torch.Size([3])) is y
    msg = re.escape(
        "y must have shape (3, 1) (the prediction shape without the sample dimension), got (3,); "
        "reshape it explicitly, e.g. y.reshape(-1, 1)"
    )
    with pytest.raises(ValueError, match=f"^{msg}$"):
        check_target(y, torch.Size([3, 1]))


def test_check_target_names_the_argument_in_its_type_and_finite_checks():
    """The default name is ``y``; a non-tensor and an infinite value are reported under it."""
    with pytest.raises(TypeError, match=r"^y must be a torch.Tensor, got float"):
        check_target(1.0, torch.Size([]))
    with pytest.raises(ValueError, match=r"^target must be finite, got 1 NaN or infinite"):
        check_target(torch.tensor([float("inf")]), torch.Size([1]), name="target")


def test_check_scales_turns_a_float_into_a_tensor_of_the_locs_dtype():
    """A Python float becomes a 0-d tensor of the locs' dtype, broadcastable to them."""
    locs = torch.zeros(2, 3, dtype=torch.float64)
    out = check_scales(0.5, locs)
    assert out.dtype == torch.float64
    assert out.shape == ()
    assert out.item() == 0.5
    assert check_scales(2, locs).item() == 2.0


@pytest.mark.parametrize("bad", [True, "1.0", None])
def test_check_scales_refuses_bools_and_non_numbers_with_the_type_name(bad):
    """A bool is an int in Python but not a scale; the message names the received type."""
    msg = f"scales must be a torch.Tensor or a float, got {type(bad).__name__}"
    with pytest.raises(TypeError, match=f"^{msg}$"):
        check_scales(bad, torch.zeros(1, 1))


def test_check_scales_refuses_an_integer_tensor_with_its_dtype():
    """An integer tensor is refused, naming the dtype (and a custom argument name)."""
    msg = re.escape("sigma must be a floating-point tensor, got dtype torch.int64")
    with pytest.raises(TypeError, match=f"^{msg}$"):
        check_scales(torch.ones(2, dtype=torch.long), torch.zeros(1, 2), name="sigma")


@pytest.mark.parametrize("shape", [(3,), (2, 1, 3), (1, 4, 3)])
def test_check_scales_refuses_shapes_that_do_not_broadcast_to_the_locs(shape):
    """Unbroadcastable (3 vs 4) or bigger-than-locs shapes are refused with both shapes."""
    locs = torch.zeros(1, 4)
    got = torch.ones(shape)
    msg = re.escape(f"scales must be broadcastable to locs shape (1, 4), got {shape}")
    with pytest.raises(ValueError, match=f"^{msg}$"):
        check_scales(got, locs)


def test_check_scales_accepts_a_shape_that_broadcasts_to_the_locs():
    """A per-point ``(N,)`` scale broadcasts against ``(S, N)`` locs and is returned as given."""
    scales = torch.tensor([1.0, 2.0])
    assert torch.equal(check_scales(scales, torch.zeros(3, 2)), scales)


@pytest.mark.parametrize(
    ("values", "minimum"),
    [([1.0, 0.0], "0.0"), ([1.0, -2.0], "-2.0"), ([1.0, float("inf")], "1.0")],
)
def test_check_scales_refuses_zero_negative_and_infinite_scales(values, minimum):
    """Zero is not positive (the boundary), and infinity is not finite; min is reported."""
    msg = re.escape(f"scales must be positive and finite, got min {minimum}")
    with pytest.raises(ValueError, match=f"^{msg}$"):
        check_scales(torch.tensor(values), torch.zeros(1, 2))


def test_check_scales_accepts_a_tiny_positive_scale():
    """The smallest positive float32 is still positive, so it passes."""
    tiny = torch.tensor([torch.finfo(torch.float32).tiny])
    assert check_scales(tiny, torch.zeros(1, 1)).item() > 0


def test_check_y_scale_passes_none_through_and_makes_a_float64_scalar():
    """``None`` means no scaling; a number, or a one-element tensor, becomes a 0-d float64."""
    y = torch.zeros(4, 2)
    assert check_y_scale(None, y) is None
    out = check_y_scale(3, y)
    assert out.dtype == torch.float64 and out.shape == () and out.item() == 3.0
    one = check_y_scale(torch.tensor([[2.0]]), y)
    assert one.shape == () and one.item() == 2.0


def test_check_y_scale_accepts_a_per_output_scale():
    """A ``(O,)`` scale broadcasts to the output shape ``y.shape[1:]``."""
    out = check_y_scale(torch.tensor([1.0, 2.0]), torch.zeros(4, 2))
    assert out.shape == (2,) and out.tolist() == [1.0, 2.0]


@pytest.mark.parametrize("bad", [False, "2"])
def test_check_y_scale_refuses_bools_and_strings_with_the_type_name(bad):
    """The message names the received type."""
    msg = f"y_scale must be a torch.Tensor or a float, got {type(bad).__name__}"
    with pytest.raises(TypeError, match=f"^{msg}$"):
        check_y_scale(bad, torch.zeros(2))


@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_check_y_scale_refuses_shapes_other_than_the_outputs(shape):
    """For ``y`` of shape (4, 2): a (3,) scale does not broadcast, a (2, 2) one is too big."""
    msg = re.escape(
        f"y_scale must be a scalar or broadcastable to the output shape (2,), got {shape}"
    )
    with pytest.raises(ValueError, match=f"^{msg}$"):
        check_y_scale(torch.ones(shape), torch.zeros(4, 2))


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), [1.0, 0.0]])
def test_check_y_scale_refuses_non_positive_or_infinite_values(bad):
    """Zero (the boundary), negatives and infinity are refused with the whole message."""
    msg = r"^y_scale must be positive and finite \(a target standard deviation\)$"
    with pytest.raises(ValueError, match=msg):
        check_y_scale(torch.tensor(bad), torch.zeros(4, 2))


def test_check_probs_accepts_two_classes_and_one_point_in_both_layouts():
    """``C = 2`` and ``N = 1`` are the smallest legal sizes; 0 and 1 are legal probabilities."""
    p = torch.tensor([[0.0, 1.0]])
    assert check_probs(p, "probs", ndim=2) is p
    assert check_probs(p.unsqueeze(0), "probs", ndim=3).shape == (1, 1, 2)


def test_check_probs_refuses_the_wrong_rank_with_the_layout_and_a_hint():
    """A 1-D vector of positive-class probabilities gets the stacking hint, per layout."""
    hint = "; for binary probabilities p of the positive class pass torch.stack([1 - p, p], dim=-1)"
    msg2 = re.escape("probs must have shape (N, C), got (3,)" + hint)
    with pytest.raises(ValueError, match=f"^{msg2}$"):
        check_probs(torch.full((3,), 0.5), "probs", ndim=2)
    msg3 = re.escape("p must have shape (S, N, C), got (2, 2)" + hint)
    with pytest.raises(ValueError, match=f"^{msg3}$"):
        check_probs(torch.full((2, 2), 0.5), "p", ndim=3)


@pytest.mark.parametrize("shape", [(3, 1), (0, 2)])
def test_check_probs_refuses_one_class_or_no_points(shape):
    """``C = 1`` or ``N = 0`` is refused with the whole message."""
    msg = re.escape(f"probs needs C >= 2 classes and at least one point, got {shape}")
    with pytest.raises(ValueError, match=f"^{msg}$"):
        check_probs(torch.ones(shape), "probs", ndim=2)


@pytest.mark.parametrize("row", [[-0.1, 1.1], [1.5, -0.5]])
def test_check_probs_refuses_values_outside_the_unit_interval(row):
    """Rows that sum to 1 but leave [0, 1] (logit-like) are refused on the range check."""
    msg = r"^probs must lie in \[0, 1\] \(probabilities, not logits\)$"
    with pytest.raises(ValueError, match=msg):
        check_probs(torch.tensor([row]), "probs", ndim=2)


def test_check_probs_tolerates_rounding_but_not_more():
    """A row off by 5e-5 (within the 1e-4 tolerance) passes; one off by 0.1 is reported.

    The sum is taken in float64, so 0.45 + 0.45 = 0.9 is off by 0.1, printed as ``0.1``.
    """
    check_probs(torch.tensor([[0.5, 0.49995]], dtype=torch.float64), "probs", ndim=2)
    check_probs(torch.tensor([[0.5, 0.50005]], dtype=torch.float64), "probs", ndim=2)
    bad = torch.tensor([[0.5, 0.5], [0.45, 0.45]], dtype=torch.float64)
    msg = r"^probs must sum to 1 over the last \(class\) dimension, off by up to 0\.1$"
    with pytest.raises(ValueError, match=msg):
        check_probs(bad, "probs", ndim=2)


def test_check_probs_refuses_a_sum_just_past_the_tolerance():
    """Off by 2e-4 (twice the tolerance) on either side is refused."""
    for second in (0.4998, 0.5002):
        with pytest.raises(ValueError, match=r"^probs must sum to 1"):
            check_probs(torch.tensor([[0.5, second]], dtype=torch.float64), "probs", ndim=2)


def test_check_labels_accepts_the_first_and_last_class():
    """Labels 0 and ``C - 1`` are the boundary values of ``[0, C)``."""
    labels = torch.tensor([0, 2])
    assert check_labels(labels, 2, 3) is labels


def test_check_labels_refuses_non_tensors_and_non_integer_dtypes():
    """A list, a float tensor and a bool tensor are refused, naming the type or dtype."""
    with pytest.raises(TypeError, match=r"^labels must be a torch.Tensor, got list$"):
        check_labels([0, 1], 2, 2)
    for dtype in (torch.float32, torch.bool, torch.complex64):
        msg = re.escape(f"labels must be an integer tensor, got dtype {dtype}")
        with pytest.raises(TypeError, match=f"^{msg}$"):
            check_labels(torch.zeros(2, dtype=dtype), 2, 2)


def test_check_labels_refuses_the_wrong_shape():
    """Labels must be ``(N,)``; a column vector is refused with both shapes."""
    msg = re.escape("labels must have shape (2,) to match probs, got (2, 1)")
    with pytest.raises(ValueError, match=f"^{msg}$"):
        check_labels(torch.zeros(2, 1, dtype=torch.long), 2, 2)


@pytest.mark.parametrize(("values", "lo", "hi"), [([0, 3], 0, 3), ([-1, 2], -1, 2)])
def test_check_labels_refuses_values_outside_the_classes(values, lo, hi):
    """Label ``C`` (3 of 3 classes) and -1 are out of range; the message gives the range seen."""
    msg = re.escape(f"labels must lie in [0, 3) for 3 classes, got values in [{lo}, {hi}]")
    with pytest.raises(ValueError, match=f"^{msg}$"):
        check_labels(torch.tensor(values), 2, 3)


def test_check_n_bins_accepts_one_and_refuses_zero_bools_and_floats():
    """One bin is the smallest legal count; 0, ``True`` and ``2.0`` are refused in full."""
    assert check_n_bins(1) == 1
    with pytest.raises(ValueError, match=r"^n_bins must be >= 1, got 0$"):
        check_n_bins(0)
    with pytest.raises(TypeError, match=r"^n_bins must be an int, got bool$"):
        check_n_bins(True)
    with pytest.raises(TypeError, match=r"^n_bins must be an int, got float$"):
        check_n_bins(2.0)


def test_check_probs_refuses_a_value_above_one_on_the_range_check():
    """``[1.5, 0]`` is caught as out of [0, 1], before the (also failing) sum check."""
    msg = r"^probs must lie in \[0, 1\] \(probabilities, not logits\)$"
    with pytest.raises(ValueError, match=msg):
        check_probs(torch.tensor([[1.5, 0.0]]), "probs", ndim=2)


def test_check_probs_sums_half_precision_rows_in_float64():
    """In float16, 0.4998 rounds to 0.5 - 2**-12, so the row sums to 1 - 2**-12 (off by 2.4e-4,
    over the 1e-4 tolerance). That sum is halfway between the float16 neighbours 1 - 2**-11 and
    1, and rounds to 1 in float16: only a float64 sum sees the row is off.
    """
    probs = torch.tensor([[0.5, 0.4998]], dtype=torch.float16)
    assert probs.sum().item() == 1.0  # the float16 sum hides the error
    msg = r"^probs must sum to 1 over the last \(class\) dimension, off by up to 0\.000244$"
    with pytest.raises(ValueError, match=msg):
        check_probs(probs, "probs", ndim=2)


def test_check_y_scale_broadcasts_against_the_whole_output_shape():
    """For ``y`` of shape (4, 3, 2) a per-output ``(2,)`` scale broadcasts to ``(3, 2)``: it is
    accepted and returned with its own shape."""
    out = check_y_scale(torch.tensor([1.0, 2.0]), torch.zeros(4, 3, 2))
    assert out.shape == (2,) and out.tolist() == [1.0, 2.0]
