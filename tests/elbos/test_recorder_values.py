"""``Recorder`` against Pyro's own handlers: what it records (the sample sites, without the
plates' subsample sites) and, with ``replay``, that the model's unobserved sites take the guide's
value and ``infer`` and are done, as ``poutine.replay`` makes them, while observed and subsample
sites keep their own values and sites the guide did not draw are listed in ``unmatched``."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pyro.poutine as poutine
import torch

from bnn_pyro.elbos.recorder import Recorder


def _guide() -> None:
    pyro.sample("w", dist.Normal(0.0, 1.0), infer={"tag": "guide"})


def test_records_every_sample_site_message_by_name():
    """Without ``replay``, each sample site's message is kept under its name: the same values
    and distributions that ``poutine.trace`` records for the same draws."""
    pyro.set_rng_seed(0)
    with Recorder() as rec:
        _guide()
        pyro.sample("y", dist.Normal(0.0, 1.0), obs=torch.tensor(0.5))
    pyro.set_rng_seed(0)
    trace = poutine.trace(
        lambda: (_guide(), pyro.sample("y", dist.Normal(0.0, 1.0), obs=torch.tensor(0.5)))
    ).get_trace()
    assert list(rec.sites) == ["w", "y"]
    for name in ("w", "y"):
        assert rec.sites[name]["name"] == name
        assert torch.equal(rec.sites[name]["value"], trace.nodes[name]["value"])
    assert rec.sites["y"]["is_observed"] and float(rec.sites["y"]["value"]) == 0.5
    assert rec.replay is None and rec.unmatched == []


def test_replay_takes_the_guide_value_and_infer():
    """A replayed site takes the guide's value (the very tensor, as ``poutine.replay`` gives)
    and the guide's ``infer`` dict; the model's own distribution is still the one recorded."""
    pyro.set_rng_seed(0)
    with Recorder() as guide:
        _guide()
    with Recorder(replay=guide.sites) as model:
        w = pyro.sample("w", dist.Normal(3.0, 2.0), infer={"tag": "model"})
    assert w is guide.sites["w"]["value"]
    assert model.sites["w"]["value"] is w
    assert model.sites["w"]["infer"] == {"tag": "guide"}
    assert float(model.sites["w"]["fn"].loc) == 3.0  # the model's prior, not the guide's
    assert model.sites["w"]["done"] is True
    assert model.unmatched == []


def test_replayed_site_is_done_for_outer_handlers():
    """The replayed site is marked done, so a handler outside the recorder that acts only on
    undone sites (a plate broadcasting the distribution) leaves it alone, exactly as it does
    for ``poutine.replay``: the distribution keeps batch shape ``()``, not the plate's ``(4,)``
    (an undone site would be broadcast to ``(4,)``, as the unreplayed reference shows)."""
    pyro.set_rng_seed(0)
    with Recorder() as guide:
        _guide()
    guide_trace = poutine.trace(_guide).get_trace()

    with pyro.plate("outer", 4, dim=-1):
        with Recorder(replay=guide.sites) as model:
            pyro.sample("w", dist.Normal(0.0, 1.0))
        with poutine.trace() as tr, poutine.replay(trace=guide_trace):
            pyro.sample("w", dist.Normal(0.0, 1.0))
        with Recorder() as unreplayed:
            pyro.sample("w", dist.Normal(0.0, 1.0))
    assert tr.trace.nodes["w"]["fn"].batch_shape == torch.Size([])
    assert model.sites["w"]["fn"].batch_shape == torch.Size([])
    assert unreplayed.sites["w"]["fn"].batch_shape == torch.Size([4])


def test_unmatched_lists_model_sites_the_guide_did_not_draw():
    """A model site absent from the guide keeps its own draw (the draw of the same seed without
    a recorder) and its name goes to ``unmatched``, in model order; observed sites are never
    replayed nor listed, even when the guide has a site of that name."""
    pyro.set_rng_seed(0)
    with Recorder() as guide:
        _guide()
        pyro.sample("y", dist.Normal(0.0, 1.0))  # a latent in the guide, observed in the model
    pyro.set_rng_seed(1)
    expected = dist.Normal(0.0, 1.0).sample()
    pyro.set_rng_seed(1)
    with Recorder(replay=guide.sites) as model:
        z = pyro.sample("z", dist.Normal(0.0, 1.0))
        pyro.sample("w", dist.Normal(0.0, 1.0))
        y = pyro.sample("y", dist.Normal(0.0, 1.0), obs=torch.tensor(2.0))
        pyro.sample("v", dist.Normal(0.0, 1.0))
    assert torch.equal(z, expected)
    assert float(y) == 2.0 and model.sites["y"]["value"] is y
    assert model.unmatched == ["z", "v"]


def test_subsample_sites_are_neither_replayed_nor_recorded():
    """A plate's subsample site keeps the model's own indices even when ``replay`` holds a site of
    that name (a ``poutine.trace`` of the guide has one; the guide picked indices 0, 1, 2), is not
    listed as unmatched, and is not recorded; its indices are the draw ``torch.randperm`` makes
    under the same seed, as in Pyro's ``_Subsample``."""

    def guide():
        with pyro.plate("data", 10, subsample=torch.tensor([0, 1, 2])):
            pyro.sample("w", dist.Normal(0.0, 1.0))

    guide_trace = poutine.trace(guide).get_trace()
    assert torch.equal(guide_trace.nodes["data"]["value"], torch.tensor([0, 1, 2]))
    torch.manual_seed(3)
    expected = torch.randperm(10)[:3]
    torch.manual_seed(3)
    with Recorder(replay=guide_trace.nodes) as model:
        with pyro.plate("data", 10, subsample_size=3) as idx:
            pyro.sample("w", dist.Normal(0.0, 1.0))
    assert torch.equal(idx, expected) and not torch.equal(idx, torch.tensor([0, 1, 2]))
    assert list(model.sites) == ["w"] and model.unmatched == []
    with Recorder() as rec:
        with pyro.plate("data", 10, subsample_size=3):
            pyro.sample("w", dist.Normal(0.0, 1.0))
    assert list(rec.sites) == ["w"]
