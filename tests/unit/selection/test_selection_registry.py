"""Strategy base class and the name registry."""

import pytest

from verl_ext.selection import (
    Strategy,
    UnknownStrategyError,
    available_strategies,
    build_strategy,
    get_strategy_class,
    register_strategy,
)
from verl_ext.selection import registry


def test_builtins_are_registered():
    assert {"boundary", "uniform"} <= set(available_strategies())
    assert build_strategy("uniform", seed=3).seed == 3
    assert build_strategy("boundary").name == "boundary"


def test_unknown_name_lists_known_names():
    with pytest.raises(UnknownStrategyError, match="known: .*boundary.*uniform"):
        build_strategy("hvie")
    with pytest.raises(KeyError):  # usable as a KeyError too
        get_strategy_class("nope")


def test_bad_kwargs_name_the_strategy():
    with pytest.raises(ValueError, match="'uniform' does not accept"):
        build_strategy("uniform", sedd=1)


def test_the_boundary_options_are_the_pool_configs_frontier_fields_typed_as_there():
    from verl_ext.pool.config import FRONTIER_FIELDS, PoolConfig

    assert get_strategy_class("boundary").pool_fields == FRONTIER_FIELDS
    assert registry.validate_options("boundary", {"boundary": "signal", "max_window_visits": None}) == \
        {"boundary": "signal", "max_window_visits": None}
    with pytest.raises(ValueError, match="x.boundary must be one of"):
        registry.validate_options("boundary", {"boundary": "middle"}, prefix="x")
    with pytest.raises(ValueError, match="x.cold_fraction must be a number"):
        registry.validate_options("boundary", {"cold_fraction": 1.5}, prefix="x")
    assert registry.split_options("boundary", {"boundary": "target"}) == ({}, {"boundary": "target"})
    assert registry.split_options("uniform", {"seed": 1}) == ({"seed": 1}, {})
    defaults = registry.options_model(get_strategy_class("boundary"))()
    assert {name: getattr(defaults, name) for name in FRONTIER_FIELDS} == \
        {name: getattr(PoolConfig(), name) for name in FRONTIER_FIELDS}


def test_register_custom_strategy_and_conflicts(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @register_strategy("first_k")
    class FirstK(Strategy):
        def select(self, pool, k, step):
            return pool.take(pool.ids_at(range(min(k, pool.num_available))), step)

    assert build_strategy("first_k").name == "first_k" and "first_k" in available_strategies()
    with pytest.raises(ValueError, match="already registered"):

        @register_strategy("first_k")
        class Other(Strategy):
            def select(self, pool, k, step):
                return []

    with pytest.raises(TypeError):
        register_strategy("bad")(object)


def test_base_state_checks():
    strat = build_strategy("boundary")
    state = strat.state_dict()
    assert state == {"schema_version": 1, "name": "boundary"}
    strat.load_state_dict(state)
    with pytest.raises(ValueError, match="belongs to 'uniform'"):
        strat.load_state_dict({"schema_version": 1, "name": "uniform"})
    with pytest.raises(ValueError, match="schema_version"):
        strat.load_state_dict({"schema_version": 0, "name": "boundary"})
    with pytest.raises(TypeError):
        Strategy()  # abstract
