"""``KineticGuard``: an SGHMC chain that turns unstable while it collects goes back and halves its
step, instead of filling its samples with a blow-up.

A fixed step can be stable where the chain burns in and unstable later: on a ReLU network a unit
idle through the burn-in can wake, and the curvature along its weights jump past what the step
allows (``lr² λ_max(M⁻¹H/N) < 4`` for the BAOAB integrator,
:mod:`~bnn_pyro.methods.sgmcmc.samplers`); the chain then leaves the posterior within a few steps,
to infinity or to a far region it never comes back from.

The chain's own kinetic temperature tells. In SGHMC's stationary law each velocity coordinate is
``N(0, T (lr²/N) M⁻¹)``, so ``e = mean_i v_i² / (T (lr²/N) M⁻¹_i)`` is ``χ²_P / P``: about 1 on
an exact chain, a few where the minibatch gradient's noise heats it, and steady. An unstable
direction multiplies its velocity every step, and ``e`` leaves that level by orders of magnitude
within a few steps (as on the Mauna Loa CO2 series of ``benchmarks/co2.py`` at the default
minibatch step, when a ReLU unit wakes). The guard measures the level ``e`` had in
the burn-in's second half (its median, at least 1), and from the burn-in's end on:

* every :data:`WINDOW` steps it marks the chain (its position, its velocity per unit of step,
  the collector's :meth:`~bnn_pyro.methods.sgmcmc.collector.SampleCollector.mark`), keeping the
  last two marks, the first at the burn-in's last step (a chain that trips on its first
  sampling step goes back there);
* a chain whose ``e`` passes :func:`trip_level` of that level, or whose position is no longer
  finite, goes back to the older mark (at least :data:`WINDOW` steps back, before the blow-up
  began), drops the samples collected since, and halves its step; after :data:`MAX_HALVINGS`
  halvings a chain that still trips raises :class:`~bnn_pyro.TrainingDivergedError`.

The same temperature, averaged over the sampling steps a chain keeps (:meth:`KineticGuard.heat`),
says whether its samples are as wide as the posterior: a chain at ``e`` above 1 samples a hotter
law. The minibatch gradient's noise at a fixed step heats a chain more the more rows there are
(its variance grows with ``N²``, the injected noise's does not). Against a Bayesian linear
regression's exact posterior (``benchmarks/sgmcmc_large_data.py``, on the Results page), a hot
chain's samples have about ``e`` times the posterior's variance, or more where the chain has
not converged. A run whose chain sampled at :data:`HOT` or above warns
(:class:`~bnn_pyro.exceptions.HotChainWarning`, from
:meth:`~bnn_pyro.methods.sgmcmc.SGMCMC.keep_run`).

A chain that never trips runs exactly as without the guard. Only SGHMC with a constant schedule
is guarded: a cyclical run's exploration has no noise, so its velocity has no temperature to
compare with; SGLD has no velocity.
"""

from __future__ import annotations

from typing import Any

import torch

from bnn_pyro.exceptions import (
    HotChainWarning,
    TrainingDivergedError,
    TrainingInstabilityWarning,
    warn_user,
)
from bnn_pyro.methods.sgmcmc.collector import SampleCollector
from bnn_pyro.methods.sgmcmc.samplers import SGHMCState

__all__ = [
    "HOT",
    "MAX_HALVINGS",
    "WINDOW",
    "KineticGuard",
    "kinetic_temperature",
    "trip_level",
    "warn_if_hot",
]

#: Steps between two marks: a chain that trips goes back between one and two windows.
WINDOW = 25

#: The halvings of one chain's step before a chain that still trips is called diverged.
MAX_HALVINGS = 6

#: The mean kinetic temperature over the sampling steps from which a chain is called hot: its
#: samples' variance then about twice the posterior's or more (module docstring). An exact
#: chain's mean over S steps of P coordinates has sd about ``sqrt(2 / (S P))`` times its
#: autocorrelation time, far below 1 for any run that keeps samples worth the name.
HOT = 2.0


def kinetic_temperature(state: SGHMCState, temperature: float, dataset_size: int) -> torch.Tensor:
    """``e`` of each chain (module docstring), ``(K,)`` (``(1,)`` for one chain): the mean over
    coordinates of ``v² / (T (lr²/N) M⁻¹)``, 1 in expectation on an exact chain.

    Example:
        >>> state = SGHMCState.start(torch.zeros(3))
        >>> state.lr = 0.1
        >>> _ = state.momentum.fill_((2.0 * 0.1**2 / 50) ** 0.5)  # v² twice T lr²/N, M⁻¹ = 1
        >>> round(float(kinetic_temperature(state, 1.0, 50)), 3)
        2.0
    """
    scale = temperature * state.lr * state.lr / dataset_size
    energy = state.momentum.square() / (scale * state.minv)
    return energy.reshape(-1, energy.shape[-1]).mean(-1)


def trip_level(size: int) -> float:
    """How many times its burn-in level ``e`` may reach before the chain is called unstable,
    for ``size`` coordinates: 10, and more for a few coordinates, where ``χ²_P / P`` alone
    spreads widely (at ``P = 1``, 70: a stationary chain passes it with probability 1e-16).

    Example:
        >>> trip_level(1), trip_level(3), trip_level(10_000)
        (70.0, 30.0, 10.006)
    """
    return 10.0 + 60.0 / size


def warn_if_hot(heat: float | None, what: str = "the chain") -> None:
    """Warn (:class:`~bnn_pyro.exceptions.HotChainWarning`) where a chain's mean kinetic
    temperature over its sampling steps, ``heat`` (``None``: not measured), is :data:`HOT` or
    more; ``what`` names the chain in the message.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     warn_if_hot(1.3); warn_if_hot(None); warn_if_hot(7.4)
        >>> [str(w.message)[:44] for w in caught]
        ['SGHMC: the chain sampled at 7.4 times its te']
    """
    if heat is not None and heat >= HOT:
        warn_user(
            f"SGHMC: {what} sampled at {heat:.3g} times its temperature (its velocity's mean "
            "kinetic temperature over the sampling steps, 1 on an exact chain): the minibatch "
            "gradient's noise or too long a step heats it, and its samples' variance is about "
            "that many times the posterior's or more; take batch_size=None (the whole data set "
            "per step), or a smaller lr (the excess falls with lr²)",
            HotChainWarning,
        )


class KineticGuard:
    """The guard of one SGHMC run of K chains (module docstring); :class:`~bnn_pyro.methods.
    sgmcmc.chain.ChainStep` calls :meth:`record` each burn-in step, :meth:`check` each step
    after it (both through :meth:`after_step`), and multiplies its step size by :attr:`shrink`.

    Args:
        theta: ``(P,)`` or ``(K, P)`` the chains' positions (moved in place by the chain).
        state: their :class:`~bnn_pyro.methods.sgmcmc.samplers.SGHMCState`.
        collectors: one per chain.
        burn_in: the steps of the burn-in.
        temperature: ``T``.
        dataset_size: ``N``.

    Example:
        >>> theta = torch.zeros(4); state = SGHMCState.start(theta); state.lr = 0.1
        >>> guard = KineticGuard(theta, state, [SampleCollector(10)], 2, 1.0, 100)
        >>> for k in range(3):
        ...     _ = state.momentum.normal_(0.0, 0.01)  # e = 1
        ...     went_back = guard.after_step(k)
        >>> _ = state.momentum.fill_(10.0)  # a blow-up: e = 1e6
        >>> import warnings
        >>> with warnings.catch_warnings(record=True):
        ...     guard.after_step(3)
        [True]
        >>> float(guard.shrink), guard.halvings
        (0.5, [1])
    """

    def __init__(
        self,
        theta: torch.Tensor,
        state: SGHMCState,
        collectors: list[SampleCollector],
        burn_in: int,
        temperature: float,
        dataset_size: int,
    ) -> None:
        self.theta, self.state, self.collectors = theta, state, collectors
        self.burn_in, self.temperature, self.dataset_size = burn_in, temperature, dataset_size
        self.chains = 1 if theta.dim() == 1 else theta.shape[0]
        self.limit = trip_level(theta.shape[-1])
        self.halvings = [0] * self.chains
        #: the factor of each chain's step: ``1.0``, or ``(K, 1)`` once a chain has halved
        self.shrink: float | torch.Tensor = 1.0
        self._burn: list[torch.Tensor] = []  # e over the burn-in's second half, (K,) each
        self._level: torch.Tensor | None = None  # the trip level per chain, (K,)
        self._marks: list[dict[str, Any]] = []  # the older mark first
        # e summed over each chain's sampling steps, and their count (K,): what heat() averages,
        # on the CPU with each step's e (read there, as the trip is decided there)
        self._heat = torch.zeros(self.chains, dtype=torch.float64, device="cpu")
        self._heat_steps = torch.zeros(self.chains, dtype=torch.float64, device="cpu")

    def after_step(self, k: int) -> list[bool]:
        """After step ``k``: :meth:`record` it in the burn-in, :meth:`check` it after. Returns
        which of the K chains went back (their position at this step is not a sample)."""
        if k < self.burn_in:
            self.record(k)
            return [False] * self.chains
        return self.check(k)

    def record(self, k: int) -> None:
        """After burn-in step ``k``: keep its ``e`` if it is in the burn-in's second half."""
        if 2 * k >= self.burn_in:
            self._burn.append(self._temperature())
        if k == self.burn_in - 1:  # the first mark: where a trip at the next step goes back
            self._mark()

    def check(self, k: int) -> list[bool]:
        """After step ``k`` (past the burn-in): mark every :data:`WINDOW` steps, and send a
        chain that tripped back to the older mark, its step halved. Returns which of the K
        chains went back.

        Raises:
            TrainingDivergedError: a chain that trips after :data:`MAX_HALVINGS` halvings.
        """
        if self._level is None:
            self._start()
        e = self._temperature()
        finite = torch.isfinite(self.theta).reshape(self.chains, -1).all(-1).cpu()
        tripped = (~finite) | ~(e <= self._level)  # a NaN e trips too
        self._heat += e  # a chain that trips gets its mark's sums back below
        self._heat_steps += 1
        if bool(tripped.any()):
            self._go_back(k, tripped, e)
        elif (k - self.burn_in) % WINDOW == 0:
            self._mark()
        return tripped.tolist()

    def heat(self) -> torch.Tensor:
        """Each chain's mean ``e`` over the sampling steps it kept (a chain that went back
        drops the steps since its mark), ``(K,)`` float64; NaN for a chain with none.

        Example:
            >>> theta = torch.zeros(4); state = SGHMCState.start(theta); state.lr = 0.1
            >>> guard = KineticGuard(theta, state, [SampleCollector(10)], 0, 1.0, 100)
            >>> for k, v in enumerate([0.01, 0.02]):  # e = 1, then 4
            ...     _ = state.momentum.fill_(v)
            ...     _ = guard.after_step(k)
            >>> guard.heat().tolist()
            [2.5]
        """
        return self._heat / self._heat_steps

    def _temperature(self) -> torch.Tensor:
        return kinetic_temperature(self.state, self.temperature, self.dataset_size).cpu()

    def _start(self) -> None:
        now = self._temperature()  # a guard made without a burn-in: its first step's level
        burn = torch.stack(self._burn) if self._burn else now.unsqueeze(0)
        median = burn.to(torch.float64).median(0).values.clamp(min=1.0)
        self._level = self.limit * median
        self._burn = []

    def _mark(self) -> None:
        lr = self.state.lr
        self._marks.append(
            {
                "theta": self.theta.clone(),
                "momentum": self.state.momentum / lr,  # the velocity per unit of step
                "collectors": [c.mark() for c in self.collectors],
                "heat": (self._heat.clone(), self._heat_steps.clone()),
            }
        )
        if len(self._marks) > 2:
            for collector, point in zip(self.collectors, self._marks[1]["collectors"], strict=True):
                collector.release(point)
            del self._marks[0]

    def _go_back(self, k: int, tripped: torch.Tensor, e: torch.Tensor) -> None:
        mark = self._marks[0]
        where = {"dtype": self.theta.dtype, "device": self.theta.device}
        shrink = torch.as_tensor(self.shrink, **where).expand(self.chains, 1).clone()
        for i in tripped.nonzero().flatten().tolist():
            if self.halvings[i] == MAX_HALVINGS:
                raise TrainingDivergedError(
                    f"SGHMC: chain {i} is still unstable at step {k} after its step was halved "
                    f"{MAX_HALVINGS} times; set a smaller lr, or batch_size=None for a step "
                    "measured on the posterior"
                )
            row = slice(None) if self.chains == 1 else i
            momentum = mark["momentum"] * self.state.lr  # at the step it last took
            with torch.no_grad():
                self.theta[row] = mark["theta"][row]
                self.state.momentum[row] = momentum[row]
            self.collectors[i].rewind(mark["collectors"][i])
            self._heat[i], self._heat_steps[i] = mark["heat"][0][i], mark["heat"][1][i]
            self.halvings[i] += 1
            shrink[i] *= 0.5
            warn_user(
                f"SGHMC: chain {i} turned unstable at step {k} (its kinetic temperature "
                f"{float(e[i]):.3g} times its target, {float(self._level[i]):.3g} the most "
                "allowed); it went back to its last stable steps and halved its step size",
                TrainingInstabilityWarning,
            )
        self.shrink = shrink if self.chains > 1 else float(shrink)
        self._marks = [mark]  # the later mark may hold the blow-up's start
