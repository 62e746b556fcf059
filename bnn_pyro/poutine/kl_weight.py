"""``KLWeight``: the KL term's weight (beta) as an effect handler."""

from __future__ import annotations

from pyro.poutine.messenger import Messenger

__all__ = ["KLWeight"]


class KLWeight(Messenger):
    """Multiply the log-density of every *latent* sample site by ``weight`` (beta).

    Like ``poutine.scale`` restricted to unobserved sites, and allowing ``weight = 0`` (the
    start of a KL warm-up). Applied to both model and guide it turns the ELBO into
    ``E_q[log p(y | w)] - beta * KL(q || p)``.

    Example:
        >>> import pyro, pyro.distributions as dist, pyro.poutine as poutine
        >>> def model():
        ...     pyro.sample("w", dist.Normal(0.0, 1.0))
        >>> with KLWeight(0.5):
        ...     trace = poutine.trace(model).get_trace()
        >>> trace.nodes["w"]["scale"]
        0.5
    """

    def __init__(self, weight: float) -> None:
        super().__init__()
        if not (isinstance(weight, (int, float)) and weight >= 0):
            raise ValueError(f"kl_weight must be a float >= 0, got {weight!r}")
        self.weight = float(weight)

    def _process_message(self, msg: dict) -> None:
        if msg["type"] == "sample" and not msg["is_observed"]:
            msg["scale"] = self.weight * msg["scale"]
