"""Placement (common/placement.py) without a cluster: the config checks' boundaries, which nodes
count, what the refusals say, and the ledger. The config fields, the jobs' demands and a real
three-node cluster: tests/test_cluster.py."""

from __future__ import annotations

import re

import pytest

from common.placement import (
    CapacityError,
    Demand,
    NodeLedger,
    actor_options,
    check_capacity,
    check_placement,
    custom_resources,
)


def node(i: int, cpus: float, alive: bool = True, key: str = "Alive", **custom: float) -> dict:
    return {"NodeID": f"n{i}", key: alive, "Resources": {"CPU": cpus, f"node:10.0.0.{i}": 1.0, **custom}}


def test_placement_checks_take_rays_strategies_and_positive_custom_amounts():
    for strategy in ("DEFAULT", "SPREAD"):
        check_placement("sampler", strategy, {"gpu_node": 1, "half": 0.5})
    with pytest.raises(ValueError, match=r"^sampler.resources.w1=0 must be a number > 0$"):
        check_placement("sampler", "DEFAULT", {"w1": 0})
    with pytest.raises(ValueError, match=r"^sampler.resources.w1=-1 must be a number > 0$"):
        check_placement("sampler", "DEFAULT", {"w1": -1})
    with pytest.raises(ValueError, match=r"^sampler.resources.w1='1' must be a number > 0$"):
        check_placement("sampler", "DEFAULT", {"w1": "1"})
    for builtin in ("CPU", "GPU", "memory", "object_store_memory"):
        with pytest.raises(ValueError, match=rf"^verifier.resources.{builtin}: {builtin} has its own field"):
            check_placement("verifier", "DEFAULT", {builtin: 1})


def test_actor_options_carry_resources_only_when_there_are_some():
    assert actor_options(strategy="DEFAULT", resources={}) == {"scheduling_strategy": "DEFAULT"}
    given = {"w1": 1}
    options = actor_options(strategy="SPREAD", resources=given)
    options["resources"]["w2"] = 1  # Ray's options are the pool's own copy: the config is not changed
    assert given == {"w1": 1}


def test_only_alive_nodes_count_and_a_cluster_of_none_is_not_refused():
    dead_big = node(9, 64.0, alive=False)
    check_capacity([], [Demand("sampler.num_actors", 99, {"CPU": 1.0})])  # no node listed: nothing to check
    check_capacity([dead_big], [Demand("sampler.num_actors", 99, {"CPU": 1.0})])
    with pytest.raises(CapacityError, match="cluster's 1 alive node"):  # the dead node's 64 CPUs do not count
        check_capacity([node(1, 2.0), dead_big], [Demand("sampler.num_actors", 3, {"CPU": 1.0})])
    with pytest.raises(CapacityError, match="cluster's 1 alive node"):  # ray.nodes() in older Ray: "alive"
        check_capacity([node(1, 2.0, key="alive"), {"NodeID": "n2", "Resources": {"CPU": 8.0}}],
                       [Demand("sampler.num_actors", 3, {"CPU": 1.0})])


def test_a_demand_that_exactly_fills_the_cluster_fits():
    nodes = [node(1, 2.0), node(2, 2.0, gpu_node=1)]
    check_capacity(nodes, [Demand("sampler.num_actors", 4, {"CPU": 1.0})])
    check_capacity(nodes, [Demand("sampler.num_actors", 1, {"CPU": 2.0, "gpu_node": 1.0})])  # one node has both
    # 1.1 + 1.3 + 0.7 + 0.9 adds up to 4.000000000000001 in floats: still a fit
    check_capacity(nodes, [Demand(f, 1, {"CPU": v}) for f, v in (("a", 1.1), ("b", 1.3), ("c", 0.7), ("d", 0.9))])
    check_capacity(nodes, [Demand("learn.num_gpus", 1, {"CPU": 1.0, "GPU": 0})])  # asking 0 of a resource asks nothing
    with pytest.raises(CapacityError, match=re.escape("the job asks for CPU: 4.5 at once (sampler.num_actors: 3 x CPU: 1.5)"
                                                      " but the cluster's 2 alive node(s) have CPU: 4")):
        check_capacity(nodes, [Demand("sampler.num_actors", 3, {"CPU": 1.5})])


def test_a_refusal_names_every_demand_that_runs_together_and_what_each_node_has():
    nodes = [node(1, 2.0), node(2, 1.0, gpu_node=1)]
    with pytest.raises(CapacityError, match=re.escape(
            "sampler.num_actors: each one needs CPU: 2, gpu_node: 1, which no alive node has (nodes: CPU: 2, "
            "gpu_node: 0; CPU: 1, gpu_node: 1); lower it, or start nodes with those resources")):
        check_capacity(nodes, [Demand("sampler.num_actors", 1, {"CPU": 2.0, "gpu_node": 1.0})])
    with pytest.raises(CapacityError, match=re.escape(
            "the job asks for CPU: 4, gpu_node: 2 at once (a: 2 x CPU: 1, gpu_node: 1; c: 2 x CPU: 1) but the "
            "cluster's 2 alive node(s) have CPU: 3, gpu_node: 1; lower those fields or add nodes")):
        check_capacity(nodes, [Demand("a", 2, {"CPU": 1.0, "gpu_node": 1.0}), Demand("b", 0, {"CPU": 1.0}),
                               Demand("c", 2, {"CPU": 1.0})])


def test_phases_take_turns_beside_what_is_always_up():
    nodes = [node(1, 4.0)]
    up = Demand("sampler.num_actors", 2, {"CPU": 1.0})
    # 2 always + at most 2 in one phase: fits, though all of it together (2 + 2 + 2) would not
    check_capacity(nodes, [up, Demand("learn", 1, {"CPU": 2.0}, "learn"), Demand("mix", 2, {"CPU": 1.0}, "mix")])
    with pytest.raises(CapacityError, match=r"\(sampler.num_actors: 2 x CPU: 1; mix: 3 x CPU: 1\)"):
        check_capacity(nodes, [up, Demand("learn", 1, {"CPU": 2.0}, "learn"), Demand("mix", 3, {"CPU": 1.0}, "mix")])
    with pytest.raises(CapacityError, match=r"\(sampler.num_actors: 2 x CPU: 1; learn: 1 x CPU: 3\)"):
        check_capacity(nodes, [up, Demand("learn", 1, {"CPU": 3.0}, "learn"), Demand("mix", 1, {"CPU": 1.0}, "mix")])
    with pytest.raises(CapacityError, match=r"\(learn: 5 x CPU: 1\)"):  # one phase alone, nothing always up
        check_capacity(nodes, [Demand("learn", 5, {"CPU": 1.0}, "learn")])


def test_custom_resources_are_the_names_a_cluster_gives_its_nodes():
    assert custom_resources(node(1, 2.0, w2=1, gpu_node=4) | {"Resources": {
        "CPU": 2.0, "GPU": 1.0, "memory": 1e9, "object_store_memory": 1e8, "node:10.0.0.1": 1.0,
        "w2": 1.0, "gpu_node": 4.0}}) == ["gpu_node", "w2"]
    assert custom_resources({}) == []


def test_the_ledger_counts_requests_and_items_per_role_and_node_and_clears():
    ledger = NodeLedger()
    ledger.add("sampler", "n1", 3)
    ledger.add("sampler", "n1", 2)
    ledger.add("sampler", "n2", 1)
    ledger.add("verifier", "n1", 7)
    assert ledger.served == {"sampler": {"n1": {"requests": 2, "items": 5}, "n2": {"requests": 1, "items": 1}},
                             "verifier": {"n1": {"requests": 1, "items": 7}}}
    assert ledger.names == {"n1": [], "n2": []}  # outside Ray: no node entry to read names from
    ledger.names["n2"] = ["w2"]  # noted while it served; Ray lists it without resources once it is dead
    report = ledger.report([node(1, 2.0, w1=1), {"NodeID": "n2", "Alive": False, "Resources": {}}])
    assert report == {"n1": {"alive": True, "resources": ["w1"], "sampler": {"requests": 2, "items": 5},
                             "verifier": {"requests": 1, "items": 7}},
                      "n2": {"alive": False, "resources": ["w2"], "sampler": {"requests": 1, "items": 1}}}
    ledger.clear()
    assert ledger.served == {} and ledger.names == {} and ledger.report([]) == {}


def test_refusals_leave_out_resources_a_demand_does_not_use():
    with pytest.raises(CapacityError, match=re.escape("(a: 3 x CPU: 1) but")):
        check_capacity([node(1, 2.0)], [Demand("a", 3, {"CPU": 1.0, "GPU": 0.0})])


def test_the_ledger_notes_no_names_for_an_unknown_node_and_reports_a_node_ray_forgot_as_dead():
    ledger = NodeLedger()
    ledger.add("sampler", None, 2)  # the actor could not say where it ran
    assert ledger.served == {"sampler": {"unknown": {"requests": 1, "items": 2}}} and ledger.names == {}
    ledger.add("sampler", "gone", 1)
    assert ledger.report([])["gone"]["alive"] is False  # not among the nodes Ray lists now
