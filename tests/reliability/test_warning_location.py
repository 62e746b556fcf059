"""A warning that ``fit`` or ``predict`` raises points at the user's line, not inside the
library (``warn_user``), however many library frames (the thread wrapper among them) lie
between."""

from __future__ import annotations

import warnings

import torch

import bnn_pyro as bp


def test_a_fit_warning_points_at_the_callers_line():
    bnn = bp.VariationalBNN(bp.nn.mlp(2, [4], 3), bp.Categorical())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bnn.fit(torch.randn(20, 2), torch.randint(0, 3, (20,)), epochs=1, progress=False)
    collapse = [w for w in caught if issubclass(w.category, bp.PosteriorCollapseWarning)]
    assert collapse, [str(w.message) for w in caught]  # one epoch: the stds cannot move
    assert collapse[0].filename == __file__
