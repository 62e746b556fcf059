"""``Recorder``: the light messenger that the fast ELBO paths record sample sites with.

It keeps each sample site's message (no ``Trace`` object is built), and with ``replay`` makes the
model's unobserved sites take the guide's values, as ``poutine.replay`` would.
"""

from __future__ import annotations

from pyro.poutine.messenger import Messenger
from pyro.poutine.util import site_is_subsample

__all__ = ["Recorder"]


class Recorder(Messenger):
    """Records sample sites (``sites``: name -> message); with ``replay`` (name -> a guide
    site's message), makes unobserved sites take the guide's values; ``unmatched`` lists the
    model sites that the guide did not draw.

    Example:
        >>> import pyro, pyro.distributions as dist, torch
        >>> with Recorder() as guide:
        ...     _ = pyro.sample("w", dist.Normal(0.0, 1.0))
        >>> with Recorder(replay=guide.sites) as model:
        ...     w = pyro.sample("w", dist.Normal(0.0, 2.0))
        >>> bool(w == guide.sites["w"]["value"]), model.unmatched
        (True, [])
    """

    def __init__(self, replay: dict[str, dict] | None = None) -> None:
        super().__init__()
        self.replay = replay
        self.sites: dict[str, dict] = {}
        self.unmatched: list[str] = []

    def _pyro_sample(self, msg: dict) -> None:
        if self.replay is None or msg["is_observed"] or site_is_subsample(msg):
            return
        guide_msg = self.replay.get(msg["name"])
        if guide_msg is None:
            self.unmatched.append(msg["name"])
            return
        msg["value"] = guide_msg["value"]
        msg["infer"] = guide_msg["infer"]
        msg["done"] = True

    def _pyro_post_sample(self, msg: dict) -> None:
        if not site_is_subsample(msg):
            self.sites[msg["name"]] = msg
