"""Guides: the variational families that hold the learnable means and scales.

:class:`MeanFieldNormalGuide` (``mean_field.py``) is the library's own guide. Any Pyro autoguide
class (``AutoNormal``, ``AutoLowRankMultivariateNormal``, ``AutoDelta``, ...) can be used instead
(``autoguide.py``): :func:`build_guide` (``build.py``) accepts the class, a factory
``model -> guide``, or a name.
"""

from bnn_pyro.guides.autoguide import AutoGuideWrapper
from bnn_pyro.guides.build import GUIDE_NAMES, build_guide
from bnn_pyro.guides.mean_field import MeanFieldNormalGuide, inverse_softplus
from bnn_pyro.poutine.kl_weight import KLWeight

__all__ = [
    "MeanFieldNormalGuide",
    "KLWeight",
    "AutoGuideWrapper",
    "build_guide",
    "GUIDE_NAMES",
    "inverse_softplus",
]
