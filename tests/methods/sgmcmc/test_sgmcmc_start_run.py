"""``SGMCMC.start_run``: the first step of a run carries the method's own plan options, the data
of a measured run, and seeds drawn from the global RNG in the order ``fit`` documents (the
model traced on two rows with their targets, then the collector's seed, then the noise's).

The oracle for the plan is :func:`~bnn_pyro.methods.sgmcmc.chain.plan_run` called with the
method's options; for the seeds, the same draws made by hand from the same global state.
"""

from __future__ import annotations

import torch

import bnn_pyro as bp
from bnn_pyro.methods.sgmcmc.chain import plan_run
from bnn_pyro.methods.sgmcmc.potential import PyroPotential


def _data(rows: int = 16):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(rows, 2, generator=g)
    return X, (X[:, 0] - X[:, 1]).unsqueeze(-1) + 0.1 * torch.randn(rows, 1, generator=g)


def _method(name: str = "csghmc", **options):
    torch.manual_seed(0)
    return bp.make(name, bp.nn.mlp(2, [3], 1), bp.Gaussian(0.1), **options)


def test_the_plan_is_the_methods_own_options():
    """csghmc's cyclical schedule, a burn-in and a sample bound set at make(): the step's plan
    and collector are plan_run's for those options, not its defaults (a constant schedule,
    a quarter of the run's burn-in, 1,000 samples)."""
    X, y = _data()
    m = _method(cycles=2, burn_in=10, max_samples=5)
    step = m.start_run(X, y, steps=40, lr=0.01)
    plan, thinning = plan_run(
        40, 0.01, m.schedule, m.cycles, m.explore, m.burn_in, m.thinning, m.max_samples
    )
    assert step.plan == plan
    assert (plan.schedule, plan.burn_in) == ("cyclical", 10)
    assert step.collector.max_samples == 5
    assert step.collector.thinning == thinning


def test_the_default_thinning_spreads_the_methods_sample_bound():
    """sghmc with 10 of 40 steps burned in and at most 5 samples: the 30 sampling steps are
    thinned by 6 (by 1 under the default bound of 1,000), in the plan's collector."""
    X, y = _data()
    step = _method("sghmc", burn_in=10, max_samples=5).start_run(X, y, steps=40, lr=0.01)
    assert step.collector.thinning == 6


def test_a_measured_run_keeps_the_whole_data_for_its_control_variate():
    """lr=None (the step measured on the posterior): the step holds the data set (X, y) it
    was started on; with an lr given it holds none (the plain minibatch gradient)."""
    X, y = _data()
    measured = _method("sghmc").start_run(X, y, steps=8, lr=None)
    assert measured.data is not None
    assert measured.data[0] is X and measured.data[1] is y
    assert _method("sghmc").start_run(X, y, steps=8, lr=0.01).data is None


def test_the_seeds_come_from_the_global_rng_in_fits_order():
    """From one global state: the potential built on the first two rows *with their targets*
    (its trace of the model draws the weights; an unobserved target would be drawn too,
    shifting every later draw), then the collector's seed, then the noise generator's; the
    run leaves the RNG where those draws end."""
    X, y = _data()
    m = _method("sghmc")
    m.start_run(X, y, steps=8, lr=0.01)  # sets the guide up: its draws are not the run's
    torch.manual_seed(123)
    step = m.start_run(X, y, steps=8, lr=0.01)
    after = torch.randint(0, 2**62, (1,))
    torch.manual_seed(123)
    PyroPotential(m.bnn.model, X[:2], y[:2], m.likelihood.name)  # fit's potential
    collector_seed = int(torch.randint(0, 2**62, (1,)))
    noise_seed = int(torch.randint(0, 2**62, (1,)))
    assert step.collector.generator.initial_seed() == collector_seed
    assert step.generator.initial_seed() == noise_seed
    assert torch.equal(after, torch.randint(0, 2**62, (1,)))
