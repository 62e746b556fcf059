"""``ParamScope``, a model's own Pyro param store, on its own: what entering and leaving do to
Pyro's global store (nested, re-entered, left by an exception), what a copy holds, the two
writers (``register_param``, ``put_param``) and the refusal of Pyro's JIT outside the scope."""

import copy
import pickle

import pyro
import pytest
import torch
from torch.distributions import constraints

from bnn_pyro.nn.param_scope import ParamScope, put_param, refuse_bare_jit, register_param


def _tables():
    """The identities of the global store's three tables now."""
    store = pyro.get_param_store()
    return tuple(map(id, (store._params, store._param_to_name, store._constraints)))


def test_entering_swaps_the_three_tables_in_and_leaving_puts_the_same_ones_back():
    before = _tables()
    scope = ParamScope()
    with scope as entered:
        assert entered is scope and scope.is_active()
        assert _tables() == tuple(map(id, (scope.params, scope.param_to_name, scope.constraints)))
        pyro.param("loc", torch.zeros(2), constraint=constraints.positive)
    assert not scope.is_active()
    assert _tables() == before
    assert "loc" not in pyro.get_param_store()
    assert scope.names() == ["loc"] and scope.constraints["loc"] is constraints.positive


def test_a_scope_entered_again_inside_itself_stays_until_its_outer_exit():
    before = _tables()
    scope = ParamScope()
    with scope:
        with scope:
            pyro.param("a", torch.ones(1))
        assert scope.is_active()  # the inner exit swapped nothing back
        pyro.param("b", torch.ones(1))
    assert _tables() == before
    assert scope.names() == ["a", "b"]


def test_another_scope_inside_one_gives_the_outer_back_on_leaving():
    outer, inner = ParamScope(), ParamScope()
    with outer:
        with inner:
            pyro.param("x", torch.zeros(1))
        assert outer.is_active() and not inner.is_active()
        pyro.param("y", torch.zeros(1))
    assert (outer.names(), inner.names()) == (["y"], ["x"])


def test_an_exception_inside_still_restores_the_global_store():
    before = _tables()
    scope = ParamScope()
    with pytest.raises(KeyError):
        with scope:
            raise KeyError("boom")
    assert _tables() == before and scope._saved == []


def test_clear_empties_all_three_tables():
    scope = ParamScope()
    with scope:
        pyro.param("w", torch.zeros(3))
    scope.clear()
    assert (scope.params, scope.param_to_name, scope.constraints) == ({}, {}, {})


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_copy_starts_with_an_empty_store_of_its_own(how):
    scope = ParamScope()
    with scope:
        pyro.param("w", torch.zeros(3))
    twin = copy.deepcopy(scope) if how == "deepcopy" else pickle.loads(pickle.dumps(scope))
    assert type(twin) is ParamScope and twin is not scope
    assert twin.names() == [] and twin.param_to_name == {} and twin.constraints == {}
    with twin:  # a working scope: its writes stay its own
        pyro.param("v", torch.ones(1))
        assert twin.is_active() and twin._saved != []
    assert (twin.names(), scope.names()) == (["v"], ["w"])


def test_register_param_writes_only_into_a_models_own_store():
    w = torch.nn.Parameter(torch.zeros(2))
    register_param("w", w)
    assert "w" not in pyro.get_param_store()
    scope = ParamScope()
    with scope:
        register_param("w", w)
        assert pyro.param("w") is w
        assert pyro.get_param_store().param_name(w) == "w"
    assert scope.constraints["w"] is constraints.real


def test_register_param_leaves_an_entry_that_already_holds_the_tensor():
    """Registered again (every call of a module does), a tensor already under its name keeps
    the constraint it was put there with; a new tensor under the name replaces it."""
    scope, w, v = ParamScope(), torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    with scope:
        put_param("w", w, constraints.positive)
        register_param("w", w)
        assert scope.constraints["w"] is constraints.positive
        register_param("w", v)
    assert scope.params["w"] is v and scope.constraints["w"] is constraints.real


def test_put_param_replaces_the_old_tensors_reverse_entry():
    scope, old, new = ParamScope(), torch.zeros(2), torch.ones(2)
    with scope:
        put_param("w", old, constraints.real)
        put_param("w", new, constraints.positive)
    assert scope.params["w"] is new and scope.constraints["w"] is constraints.positive
    assert old not in scope.param_to_name and scope.param_to_name[new] == "w"
    with scope:  # the same tensor put again keeps its reverse entry
        put_param("w", new, constraints.positive)
    assert scope.param_to_name == {new: "w"}


def _under_pyro_jit(scope, depth=0):
    """``refuse_bare_jit(scope)`` called from a ``__call__`` of a module named ``pyro.ops.jit``
    (as ``JitTrace_ELBO``'s compiled function calls the model), ``depth`` frames below it."""
    namespace = {"__name__": "pyro.ops.jit"}
    exec(
        "def __call__(inner, depth):\n    return inner(depth)\n",
        namespace,
    )

    def inner(left):
        return inner(left - 1) if left > 0 else refuse_bare_jit(scope)

    return namespace["__call__"](inner, depth)


def test_pyros_jit_outside_the_scope_is_refused_with_the_fix():
    with pytest.raises(RuntimeError) as caught:
        _under_pyro_jit(ParamScope())
    assert str(caught.value) == (
        "Pyro's JIT ELBOs look parameters up by name in the global param store between steps, "
        "and this model keeps its own: run the loop inside `with bnn.param_scope():`, or train "
        "with bnn.fit(X, y, elbo=JitTrace_ELBO())"
    )


def test_the_walk_starts_at_the_caller():
    """A JIT ``__call__`` that calls the check itself (the nearest frame) is found too."""
    namespace = {"__name__": "pyro.ops.jit", "refuse_bare_jit": refuse_bare_jit}
    exec("def __call__(scope):\n    refuse_bare_jit(scope)\n", namespace)
    with pytest.raises(RuntimeError, match="^Pyro's JIT ELBOs"):
        namespace["__call__"](ParamScope())


def test_pyros_jit_inside_the_scope_and_any_other_caller_are_let_through():
    scope = ParamScope()
    with scope:
        _under_pyro_jit(scope)
    refuse_bare_jit(scope)  # a plain call, outside the scope and the JIT
    namespace = {"__name__": "not.pyro"}
    exec("def __call__(f):\n    return f()\n", namespace)
    namespace["__call__"](lambda: refuse_bare_jit(scope))
    namespace = {"__name__": "pyro.ops.jit"}
    exec("def compile(f):\n    return f()\n", namespace)  # another function of the JIT module
    namespace["compile"](lambda: refuse_bare_jit(scope))


def test_the_jit_is_looked_for_among_the_nearest_frames_only():
    """The walk up the stack is bounded (a model deep in a user's code pays for at most 64
    frames): a JIT caller 60 frames up is found, one 100 frames up is not."""
    with pytest.raises(RuntimeError):
        _under_pyro_jit(ParamScope(), depth=60)
    _under_pyro_jit(ParamScope(), depth=100)


def test_pyros_jit_inside_another_models_scope_names_the_reused_elbo():
    """Run by the JIT inside a scope that is not its own (another model's store is the global
    one), the model says why it is there: one JIT ELBO given to two models."""
    with ParamScope(), pytest.raises(RuntimeError) as caught:
        _under_pyro_jit(ParamScope())
    assert str(caught.value) == (
        "Pyro's JIT is running this model inside another model's param scope: a JIT ELBO keeps "
        "the model and guide of its first call, whatever SVI it is then given to; give each "
        "model its own ELBO instance"
    )
