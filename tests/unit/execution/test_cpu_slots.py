"""Engine slots on CPU nodes: core lists, disjoint chunks, and leases per host."""

from __future__ import annotations

import threading

import pytest

from specbench.execution.executors.cpu_slots import (
    CoreSlots,
    NodeCores,
    binding_env,
    format_cpu_list,
    parse_cpu_list,
    split_cores,
)


def node(node_id: str, cores: list[int], slots: int, host: str = "h1") -> NodeCores:
    return NodeCores(node_id=node_id, name=f"{host}/{node_id}", host=host, cores=cores, engine_slots=slots)


def test_cpu_lists_round_trip():
    assert parse_cpu_list("0-2,5") == [0, 1, 2, 5]
    assert parse_cpu_list("3, 1,1") == [1, 3]
    assert format_cpu_list([5, 0, 2, 1]) == "0-2,5"
    assert format_cpu_list([7]) == "7"
    assert parse_cpu_list(format_cpu_list([0, 2, 3, 4, 9])) == [0, 2, 3, 4, 9]
    with pytest.raises(ValueError):
        parse_cpu_list("4-2")


def test_split_cores_is_disjoint_and_never_more_slots_than_cores():
    assert split_cores([0, 1, 2, 3], 2) == [[0, 1], [2, 3]]
    assert split_cores([0, 1, 2, 3, 4], 2) == [[0, 1, 2], [3, 4]]
    assert split_cores([4, 6], 5) == [[4], [6]]
    assert split_cores([0, 1], 0) == [] and split_cores([], 3) == []
    chunks = split_cores(list(range(7)), 3)
    flat = [c for ch in chunks for c in ch]
    assert sorted(flat) == list(range(7)) and len(flat) == len(set(flat))


def test_binding_env_sets_threads_and_vllm_bind():
    assert binding_env([2, 3]) == {"OMP_NUM_THREADS": "2", "VLLM_CPU_OMP_THREADS_BIND": "2-3"}


def test_leases_spread_over_nodes_and_never_share_a_core_on_a_host():
    # One machine, three raylets: head on core 0, w1 on core 1, w2 on both cores with two slots.
    slots = CoreSlots([node("head", [0], 1), node("w1", [1], 1), node("w2", [0, 1], 2)])
    assert slots.capacity == 2
    a, b = slots.try_take(), slots.try_take()
    assert a is not None and b is not None
    assert {a.node_id, b.node_id} == {"head", "w1"} and set(a.cpu_ids).isdisjoint(b.cpu_ids)
    assert slots.try_take() is None  # both cores of the host are taken
    slots.give_back(a)
    c = slots.try_take()
    assert c is not None and c.node_id == "w2" and c.cpu_ids == a.cpu_ids  # the node that ran nothing yet
    assert slots.try_take() is None


def test_hosts_are_independent_and_a_lost_node_offers_nothing():
    slots = CoreSlots([node("a", [0, 1, 2, 3], 2, host="m1"), node("b", [0, 1, 2, 3], 2, host="m2")])
    assert slots.capacity == 4
    leases = [slots.try_take() for _ in range(4)]
    assert all(lease is not None for lease in leases) and slots.try_take() is None
    assert sorted(len(lease.cpu_ids) for lease in leases) == [2, 2, 2, 2]
    slots.node_lost("b")
    assert slots.capacity == 2
    for lease in leases:
        slots.give_back(lease)
    got = [slots.try_take(), slots.try_take(), slots.try_take()]
    assert [g.node_id for g in got[:2]] == ["a", "a"] and got[2] is None


def test_take_waits_for_a_slot_and_gives_up_when_no_node_is_left():
    slots = CoreSlots([node("a", [0], 1)])
    first = slots.try_take()
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(slots.take(timeout=10)))
    waiter.start()
    slots.give_back(first)
    waiter.join(10)
    assert got and got[0] is not None and got[0].cpu_ids == [0]
    slots.node_lost("a")
    assert slots.take(timeout=10) is None  # no live node: no waiting
