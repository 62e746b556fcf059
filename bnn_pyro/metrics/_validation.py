"""Argument checks shared by the metrics: each raises before any work, naming the argument."""

from __future__ import annotations

import torch

from bnn_pyro._checks import check_finite, check_tensor

_REDUCTIONS = ("mean", "none")
# Rows of a probability matrix may miss 1 by float rounding (a float32 softmax is off by ~1e-7
# per class); anything further off is a user error such as passing logits.
_SUM_TOL = 1e-4


def check_reduction(reduction: str) -> None:
    """Raise ``ValueError`` unless ``reduction`` is ``"mean"`` or ``"none"``."""
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def check_samples(samples: object, name: str) -> torch.Tensor:
    """Check an ``(S, N[, O])`` floating tensor with ``S >= 1`` and ``N >= 1``."""
    samples = check_tensor(name, samples)
    if samples.dim() not in (2, 3):
        raise ValueError(f"{name} must have shape (S, N) or (S, N, O), got {tuple(samples.shape)}")
    if samples.shape[0] < 1 or samples.shape[1] < 1:
        raise ValueError(
            f"{name} needs S >= 1 samples and N >= 1 points, got {tuple(samples.shape)}"
        )
    check_finite(name, samples)
    return samples


def check_target(y: object, expected: torch.Size, name: str = "y") -> torch.Tensor:
    """Check that ``y`` is a finite floating tensor of exactly the ``expected`` shape."""
    y = check_tensor(name, y)
    if y.shape != expected:
        raise ValueError(
            f"{name} must have shape {tuple(expected)} (the prediction shape without the sample "
            f"dimension), got {tuple(y.shape)}; reshape it explicitly, e.g. y.reshape(-1, 1)"
        )
    check_finite(name, y)
    return y


def check_scales(scales: object, locs: torch.Tensor, name: str = "scales") -> torch.Tensor:
    """Return positive ``scales`` as a tensor broadcastable to ``locs.shape``."""
    if isinstance(scales, bool) or not isinstance(scales, (torch.Tensor, float, int)):
        raise TypeError(f"{name} must be a torch.Tensor or a float, got {type(scales).__name__}")
    if isinstance(scales, torch.Tensor) and not scales.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {scales.dtype}")
    scales = torch.as_tensor(scales, dtype=locs.dtype, device=locs.device)
    try:
        shape = torch.broadcast_shapes(scales.shape, locs.shape)
    except RuntimeError:
        shape = None
    if shape != locs.shape:
        raise ValueError(
            f"{name} must be broadcastable to locs shape {tuple(locs.shape)}, "
            f"got {tuple(scales.shape)}"
        )
    if not bool((scales > 0).all()) or not bool(torch.isfinite(scales).all()):
        raise ValueError(f"{name} must be positive and finite, got min {scales.min().item()}")
    return scales


def check_y_scale(y_scale: object, y: torch.Tensor) -> torch.Tensor | None:
    """Return ``y_scale`` as a tensor broadcastable to ``y.shape[1:]`` (or ``None``)."""
    if y_scale is None:
        return None
    if isinstance(y_scale, bool) or not isinstance(y_scale, (torch.Tensor, float, int)):
        raise TypeError(f"y_scale must be a torch.Tensor or a float, got {type(y_scale).__name__}")
    y_scale = torch.as_tensor(y_scale, dtype=torch.float64, device=y.device)
    if y_scale.numel() == 1:
        y_scale = y_scale.reshape(())
    else:
        try:
            ok = torch.broadcast_shapes(y_scale.shape, y.shape[1:]) == y.shape[1:]
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(
                f"y_scale must be a scalar or broadcastable to the output shape "
                f"{tuple(y.shape[1:])}, got {tuple(y_scale.shape)}"
            )
    if not bool((y_scale > 0).all()) or not bool(torch.isfinite(y_scale).all()):
        raise ValueError("y_scale must be positive and finite (a target standard deviation)")
    return y_scale


def check_probs(probs: object, name: str, ndim: int) -> torch.Tensor:
    """Check probabilities over classes in the last dimension: ``ndim`` dims, ``C >= 2``."""
    probs = check_tensor(name, probs)
    layout = "(N, C)" if ndim == 2 else "(S, N, C)"
    if probs.dim() != ndim:
        raise ValueError(
            f"{name} must have shape {layout}, got {tuple(probs.shape)}; for binary "
            "probabilities p of the positive class pass torch.stack([1 - p, p], dim=-1)"
        )
    if probs.shape[-1] < 2 or probs.numel() == 0:
        raise ValueError(
            f"{name} needs C >= 2 classes and at least one point, got {tuple(probs.shape)}"
        )
    if not bool(((probs >= 0) & (probs <= 1)).all()):
        raise ValueError(f"{name} must lie in [0, 1] (probabilities, not logits)")
    total = probs.sum(dim=-1, dtype=torch.float64)
    if not bool(((total - 1).abs() <= _SUM_TOL).all()):
        worst = (total - 1).abs().max().item()
        raise ValueError(
            f"{name} must sum to 1 over the last (class) dimension, off by up to {worst:.3g}"
        )
    return probs


def check_labels(labels: object, n: int, n_classes: int) -> torch.Tensor:
    """Check integer class labels of shape ``(N,)`` with values in ``[0, C)``."""
    if not isinstance(labels, torch.Tensor):
        raise TypeError(f"labels must be a torch.Tensor, got {type(labels).__name__}")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise TypeError(f"labels must be an integer tensor, got dtype {labels.dtype}")
    if labels.shape != (n,):
        raise ValueError(f"labels must have shape ({n},) to match probs, got {tuple(labels.shape)}")
    if bool(((labels < 0) | (labels >= n_classes)).any()):
        raise ValueError(
            f"labels must lie in [0, {n_classes}) for {n_classes} classes, got values in "
            f"[{labels.min().item()}, {labels.max().item()}]"
        )
    return labels


def check_n_bins(n_bins: object) -> int:
    """Check a positive integer number of bins."""
    if isinstance(n_bins, bool) or not isinstance(n_bins, int):
        raise TypeError(f"n_bins must be an int, got {type(n_bins).__name__}")
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    return n_bins
