"""The SG-MCMC sample collector (``sgmcmc/collector.py``): its burn-in and thinning counted by
hand, its reservoir replayed by hand (Vitter's algorithm R on the same seeded generator) and
checked for uniformity, and its storage growing by doubling up to the bound; every case runs
in milliseconds."""

from __future__ import annotations

import pytest
import torch

from bnn_pyro.methods.sgmcmc.collector import SampleCollector


def _run(collector, steps):
    """Offer ``steps`` whose samples are ``[step]``; the offers' answers and the calls made."""
    calls = []

    def sample_of(step):
        def sample():
            calls.append(step)
            return torch.tensor([float(step)])

        return sample

    answers = [collector.offer(step, sample_of(step)) for step in steps]
    return answers, calls


def _algorithm_r(candidates, k, seed):
    """Vitter's algorithm R by hand: the first ``k`` fill the reservoir; the ``i``-th after
    them (1-based ``i > k``) draws ``j`` uniform on ``0, ..., i - 1`` and replaces slot ``j``
    when ``j < k``."""
    gen = torch.Generator().manual_seed(seed)
    reservoir = []
    for i, step in enumerate(candidates, start=1):
        if i <= k:
            reservoir.append(step)
        else:
            j = int(torch.randint(0, i, (1,), generator=gen))
            if j < k:
                reservoir[j] = step
    return sorted(reservoir)


@pytest.mark.parametrize(
    ("burn_in", "thinning", "candidates"),
    [
        (0, 1, list(range(12))),
        (3, 4, [3, 7, 11]),  # 3, then every fourth step
        (2, 3, [2, 5, 8, 11]),
        (0, 5, [0, 5, 10]),
        (11, 2, [11]),
        (12, 1, []),  # all twelve burnt in
    ],
)
def test_the_candidates_are_every_thinning_th_step_from_the_burn_in_on(
    burn_in, thinning, candidates
):
    collector = SampleCollector(100, burn_in=burn_in, thinning=thinning, seed=0)
    assert [s for s in range(12) if collector.is_candidate(s)] == candidates
    answers, calls = _run(collector, range(12))
    assert [s for s, kept in zip(range(12), answers, strict=True) if kept] == candidates
    assert calls == candidates  # a step not kept is never sampled
    assert collector.seen == collector.kept == len(candidates)
    if candidates:
        expected = torch.tensor([[float(s)] for s in candidates])
        torch.testing.assert_close(collector.samples, expected, rtol=0, atol=0)
    else:
        assert collector.samples.shape == (0, 0)


@pytest.mark.parametrize(("k", "n", "seed"), [(3, 20, 0), (1, 9, 1), (5, 40, 2), (4, 5, 3)])
def test_the_kept_samples_are_those_algorithm_r_keeps_in_the_chains_order(k, n, seed):
    """Steps ``0, ..., n - 1`` (burn-in 0, thinning 1) against :func:`_algorithm_r` with the
    collector's seed; the samples come back sorted by step, and only the kept are sampled."""
    collector = SampleCollector(k, seed=seed)
    answers, calls = _run(collector, range(n))
    kept = _algorithm_r(range(n), k, seed)
    assert collector.samples[:, 0].tolist() == [float(s) for s in kept]
    assert collector.seen == n and collector.kept == k == len(collector.samples)
    assert calls == [s for s, answer in zip(range(n), answers, strict=True) if answer]
    assert answers[:k] == [True] * k and sum(answers) >= k


def test_the_reservoir_replays_algorithm_r_on_thinned_candidates():
    collector = SampleCollector(2, burn_in=3, thinning=2, seed=5)
    _run(collector, range(30))
    kept = _algorithm_r(range(3, 30, 2), 2, 5)
    assert collector.samples[:, 0].tolist() == [float(s) for s in kept]
    assert collector.seen == len(range(3, 30, 2))


def test_every_candidate_is_kept_with_the_same_probability():
    """``K = 2`` of ``n = 5`` candidates over 2000 seeds: each is kept with probability
    ``K/n = 0.4``, a frequency with standard deviation ``sqrt(0.4 · 0.6 / 2000) ≈ 0.011``;
    the tolerance 0.05 is 4.5 of them (a biased reservoir, e.g. one whose first slot is never
    replaced, keeps the first candidate with frequency 0.6 or more)."""
    counts = torch.zeros(5)
    for seed in range(1000):
        collector = SampleCollector(2, seed=seed)
        _run(collector, range(5))
        counts[collector.samples[:, 0].long()] += 1
    torch.testing.assert_close(counts / 1000, torch.full((5,), 0.4), rtol=0, atol=0.07)


def test_the_storage_grows_by_doubling_from_16_rows_up_to_the_bound():
    """The first sample makes 16 rows, the 17th 32, the 33rd ``min(40, 64) = 40``; every
    sample survives each growth."""
    collector = SampleCollector(40, seed=0)
    rows = []
    for step in range(40):
        collector.offer(step, lambda step=step: torch.tensor([float(step), -float(step)]))
        rows.append(len(collector.store))
    assert rows == [16] * 16 + [32] * 16 + [40] * 8
    assert collector.steps.dtype == torch.long and collector.steps.tolist() == list(range(40))
    expected = torch.stack([torch.arange(40.0), -torch.arange(40.0)], 1)
    torch.testing.assert_close(collector.samples, expected, rtol=0, atol=0)
    small = SampleCollector(3, seed=0)
    _run(small, range(10))
    assert len(small.store) == 3 and small.kept == 3


def test_the_samples_keep_their_values_dtype_and_are_copies():
    collector = SampleCollector(2, seed=0)
    value = torch.tensor([1.5, 2.5], dtype=torch.float64, requires_grad=True)
    collector.offer(0, lambda: value * 1)
    samples = collector.samples
    assert samples.dtype == torch.float64 and not samples.requires_grad
    assert samples.tolist() == [[1.5, 2.5]]


def test_without_a_seed_the_reservoir_follows_the_global_generator():
    """Two collectors made after the same ``torch.manual_seed`` choose alike; another global
    seed chooses differently (for these fixed seeds: a 1-of-50 reservoir over 50 candidates)."""
    runs = []
    for global_seed in (0, 0, 1):
        torch.manual_seed(global_seed)
        collector = SampleCollector(1)
        _run(collector, range(50))
        runs.append(collector.samples.tolist())
    assert runs[0] == runs[1] and runs[0] != runs[2]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_samples": 0}, r"^max_samples must be an int >= 1, got 0$"),
        ({"max_samples": 1, "burn_in": -1}, r"^burn_in must be an int >= 0, got -1$"),
        ({"max_samples": 1, "thinning": 0}, r"^thinning must be an int >= 1, got 0$"),
    ],
)
def test_a_bound_burn_in_or_thinning_out_of_range_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SampleCollector(**kwargs)


def test_the_smallest_bound_burn_in_and_thinning_are_accepted():
    collector = SampleCollector(1, burn_in=0, thinning=1, seed=0)
    assert (collector.max_samples, collector.burn_in, collector.thinning) == (1, 0, 1)
    assert collector.offer(0, lambda: torch.zeros(1)) and collector.kept == 1


def test_a_new_collector_stores_no_sample_and_no_step():
    collector = SampleCollector(3, seed=0)
    assert collector.store is None and (collector.seen, collector.kept) == (0, 0)
    assert collector.steps.dtype == torch.long and collector.steps.shape == (0,)
    assert collector.samples.shape == (0, 0)


def test_collectors_without_a_seed_draw_distinct_seeds_from_the_global_generator():
    """200 draws from a range of ``2^62`` seeds collide with probability about
    ``200² / 2^63 ≈ 4·10⁻¹⁵``; a range of fewer than 200 seeds would have to repeat one."""
    torch.manual_seed(0)
    seeds = {SampleCollector(1).generator.initial_seed() for _ in range(200)}
    assert len(seeds) == 200


def _offered(collector, steps):
    for s in steps:
        collector.offer(s, lambda s=s: torch.tensor([float(s), -float(s)]))


@pytest.mark.parametrize("bound", [3, 50])
def test_a_rewind_undoes_every_offer_since_the_mark_replaced_rows_included(bound):
    # bound 3: the reservoir replaces rows after the mark (the journal restores them);
    # bound 50: it only appends. Either way the collector is the one that stopped at the mark:
    # the same samples, count and reservoir generator, so that the next offers match too.
    rewound, stopped = SampleCollector(bound, seed=4), SampleCollector(bound, seed=4)
    _offered(rewound, range(10))
    _offered(stopped, range(10))
    point = rewound.mark()
    _offered(rewound, range(10, 40))
    rewound.rewind(point)
    assert rewound.seen == stopped.seen and rewound.kept == stopped.kept
    assert torch.equal(rewound.samples, stopped.samples)
    _offered(rewound, range(40, 70))
    _offered(stopped, range(40, 70))
    assert torch.equal(rewound.samples, stopped.samples)
    assert torch.equal(rewound.steps[: rewound.kept], stopped.steps[: stopped.kept])


def test_a_released_mark_cannot_be_rewound_to_and_a_later_one_still_can():
    collector = SampleCollector(2, seed=0)
    _offered(collector, range(4))
    first = collector.mark()
    _offered(collector, range(4, 8))
    second = collector.mark()
    _offered(collector, range(8, 12))
    collector.release(second)
    with pytest.raises(ValueError, match="released"):
        collector.rewind(first)
    collector.rewind(second)
    stopped = SampleCollector(2, seed=0)
    _offered(stopped, range(8))
    assert collector.seen == 8 and torch.equal(collector.samples, stopped.samples)


def _replacing_offers(collector, steps, rows):
    """Offer ``steps`` until the collector's journal has grown by exactly ``rows`` entries
    (offers that replace a row after a mark); returns the next step."""
    start = len(collector._journal)
    step = steps
    while len(collector._journal) < start + rows:
        _offered(collector, [step])
        step += 1
    return step


def test_nothing_is_journaled_before_a_mark_nor_for_an_appended_row():
    # the journal holds copies of replaced rows: an unguarded run, which never marks, must not
    # keep one per replacement (P numbers each, for the whole run), nor a row that was appended
    collector = SampleCollector(3, seed=0)
    _offered(collector, range(200))  # many replacements, no mark
    assert collector._journal == []
    appending = SampleCollector(50, seed=0)
    _offered(appending, range(5))
    appending.mark()
    _offered(appending, range(5, 40))  # appends only: nothing to restore
    assert appending._journal == []


def test_released_marks_count_from_the_journals_front_across_releases():
    # three marks, two releases (as the guard releases its middle mark at each new one): the
    # latest kept mark still rewinds to exactly where it was taken
    collector = SampleCollector(2, seed=1)
    _offered(collector, range(2))
    marks, step = [], 2
    for _ in range(3):
        marks.append(collector.mark())
        step = _replacing_offers(collector, step, 3)
    collector.release(marks[1])
    collector.release(marks[2])
    rewound_to = marks[2]
    collector.rewind(rewound_to)
    assert collector.seen == rewound_to[0] and collector.kept == rewound_to[1]
    twin = SampleCollector(2, seed=1)
    _offered(twin, range(rewound_to[0]))
    assert torch.equal(collector.samples, twin.samples)
    for point in marks[:2]:
        with pytest.raises(
            ValueError, match="^this mark was released: the collector cannot rewind to it$"
        ):
            collector.rewind(point)


def test_a_mark_one_replacement_before_a_released_one_is_released_too():
    collector = SampleCollector(2, seed=0)
    _offered(collector, range(2))
    first = collector.mark()
    step = _replacing_offers(collector, 2, 1)  # exactly one journal entry between the marks
    second = collector.mark()
    _replacing_offers(collector, step, 2)
    collector.release(second)
    with pytest.raises(ValueError, match="released"):
        collector.rewind(first)
