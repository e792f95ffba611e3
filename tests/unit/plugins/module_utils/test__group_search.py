# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The culprit search by adaptive group testing (plugins/plugin_utils/bench/_group_search.py), driven
round by round the way the role fabric_collective drives it."""

from __future__ import annotations

import random

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _group_search as G
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._findings import REGISTRY


def _fleet(bad=(), pairs=()):
    bad = set(bad)

    def run(hosts):
        hosts = set(hosts)
        hit = bool(hosts & bad) or any(set(p) <= hosts for p in pairs)
        return {'status': 'low' if hit else 'ok', 'ratio': 0.3 if hit else 0.95}
    return run


def _drive(nodes, run, **kwargs):
    """search(), checking on the way that no node is in two runs of a round and every run has
    two or more nodes (a collective over one node measures its own GPUs, not the fabric)."""
    state = G.search_start(nodes, **kwargs)
    while not state['done']:
        runs = G.search_next(state)
        hosts = [h for r in runs for h in r['hosts']]
        assert len(hosts) == len(set(hosts)), runs
        assert all(len(r['hosts']) >= 2 for r in runs), runs
        state = G.search_update(state, runs, [run(r['hosts']) for r in runs])
    assert state['rounds'] == len(set(r['round'] for r in state['runs']))
    return state


def _nodes(count):
    return ['n%03d' % i for i in range(count)]


@pytest.mark.parametrize('count', [2, 3, 4, 5, 8, 16, 33, 64])
def test_one_bad_node_anywhere_is_named_and_nothing_else(count):
    nodes = _nodes(count)
    runs = []
    for culprit in nodes:
        state = _drive(nodes, _fleet([culprit]))
        if count == 2:
            # Two nodes and no reference: nothing is known good, nothing is named.
            assert state['culprits'] == [] and sorted(state['unresolved']) == nodes
            continue
        if count == 3 and state['unresolved']:
            # Three nodes, no reference, every run bad: never a healthy node named.
            assert state['culprits'] == [] and culprit in state['unresolved']
            continue
        assert state['culprits'] == [culprit] and state['basis'] == {culprit: 'runs'}, (culprit, state['runs'])
        assert state['pairs'] == [] and state['unresolved'] == []
        assert sorted(state['cleared']) == sorted(n for n in nodes if n != culprit)
        runs.append(len(state['runs']))
    if count >= 16:
        # The bound, k x ceil(log2(N / k)) + 2k for k = 1, on average over every placement.
        assert sum(runs) / float(len(runs)) <= G.runs_bound(count, 1), runs


@pytest.mark.parametrize('count, bad', [(16, 2), (32, 3), (64, 5), (100, 5)])
def test_several_bad_nodes_unknown_k_near_the_bound(count, bad):
    nodes = _nodes(count)
    runs, rounds = [], []
    for trial in range(30):
        culprits = set(random.Random(trial).sample(nodes, bad))
        state = _drive(nodes, _fleet(culprits))
        assert set(state['culprits']) == culprits and state['pairs'] == [] and state['unresolved'] == [], state['notes']
        runs.append(len(state['runs']))
        rounds.append(state['rounds'])
    mean = sum(runs) / float(len(runs))
    # Over Hwang's count by the runs that make the search sound: a node named by inference runs
    # once more (about half of them), and the cleared nodes run together once at the end.
    assert mean <= G.runs_bound(count, bad) + (bad + 1) // 2 + 1, (mean, G.runs_bound(count, bad))
    # Rounds, not runs, are the wall time: the runs of a round go at once.
    assert sum(rounds) < sum(runs)


@pytest.mark.parametrize('count, bad', [(64, 5), (232, 5)])
def test_several_bad_nodes_the_pool_runs_beside_the_splits(count, bad):
    """Once the runs show two bad groups, the untested pool runs in the same rounds as the
    splits: the wall time (rounds) stays well under the runs (with the pool waiting for every
    split to end, 232 nodes with 5 bad took 33 rounds for 42 runs on average)."""
    nodes = _nodes(count)
    runs, rounds, beside = [], [], 0
    for trial in range(30):
        culprits = set(random.Random('beside/%d' % trial).sample(nodes, bad))
        state = _drive(nodes, _fleet(culprits))
        assert set(state['culprits']) == culprits and state['unresolved'] == [], state['notes']
        runs.append(len(state['runs']))
        rounds.append(state['rounds'])
        by_round = {}
        for run in state['runs']:
            by_round.setdefault(run['round'], set()).add(run['step'])
        beside += any({'pool', 'split'} <= steps for steps in by_round.values())
    assert beside >= 25, beside
    assert sum(rounds) <= 0.7 * sum(runs), (sum(rounds), sum(runs))
    assert sum(runs) / 30.0 <= G.runs_bound(count, bad) + 3, sum(runs) / 30.0


def test_two_small_bad_groups_do_not_make_the_pool_look_all_bad():
    """Two bad groups of four nodes and nothing cleared yet: 2 bad among 8 searched nodes would take
    the 1,016 pool nodes for a quarter bad and run them in 508 pairs. The density is floored at an
    eighth of the fleet: the pool runs in 32 groups of 32 (the last one shorter)."""
    nodes = _nodes(1024)
    state = G.search_start(nodes)
    state['tasks'] = [{'kind': 'split', 'group': nodes[0:4], 'witness': nodes[0:4]},
                      {'kind': 'split', 'group': nodes[4:8], 'witness': nodes[4:8]}]
    state['pool'] = nodes[8:]
    runs = G.search_next(state)
    pool = [r for r in runs if r['step'] == 'pool']
    assert [r['step'] for r in runs if r['step'] != 'pool'] == ['split', 'split']
    assert len(pool) == 32 and [n for r in pool for n in r['group']] == nodes[8:], len(pool)


def test_halving_is_beaten_and_the_bound_fails_for_a_worse_search():
    """The bound is not vacuous: testing every node with a reference needs N runs."""
    assert G.runs_bound(232, 5) == 40 and G.runs_bound(1024, 10) == 90 and G.runs_bound(16, 0) == 0
    assert G.runs_bound(64, 1) == 8 < 64


def test_a_pair_bad_only_together_is_named_as_a_pair():
    nodes = _nodes(16)
    for pair in (['n003', 'n012'], ['n000', 'n001'], ['n007', 'n015']):
        state = _drive(nodes, _fleet(pairs=[pair]))
        assert state['culprits'] == [] and state['pairs'] == [{'nodes': pair, 'basis': 'runs'}], state['runs']
        assert state['unresolved'] == []
    # Beside a bad node, and a second search step for it.
    state = _drive(nodes, _fleet(['n005'], [['n002', 'n009']]))
    assert state['culprits'] == ['n005'] and [p['nodes'] for p in state['pairs']] == [['n002', 'n009']]


def test_pairs_from_the_pairwise_benchmark_cost_no_search():
    nodes = _nodes(16)
    searched = _drive(nodes, _fleet(pairs=[['n003', 'n012']]))
    report = {'pairs': [{'server': 'n012', 'client': 'n003', 'verdict': 'low'},
                        {'server': 'n001', 'client': 'n002', 'verdict': 'ok'}]}
    assert G.bad_pairs(report) == [['n003', 'n012']] and G.bad_pairs(None) == [] and G.bad_pairs([['a', 'a'], 'x']) == []
    known = _drive(nodes, _fleet(pairs=[['n003', 'n012']]), pairs=G.bad_pairs(report))
    assert known['pairs'] == [{'nodes': ['n003', 'n012'], 'basis': 'pairwise benchmark'}] and known['culprits'] == []
    assert len(known['runs']) < len(searched['runs'])


# Named by the facts, no healthy run, a noisy healthy fleet: tested for both strategies through
# their one interface in tests/unit/plugins/plugin_utils/test__culprit_search.py.


def test_the_loop_bound_stops_a_search_and_says_so():
    state = G.search_start(_nodes(64))
    state['max_rounds'] = 2
    while not state['done']:
        runs = G.search_next(state)
        state = G.search_update(state, runs, [_fleet(['n001', 'n040'])(r['hosts']) for r in runs])
    assert state['rounds'] == 2 and 'stopped after 2 rounds' in state['notes'][-1]
    assert 'n001' in state['unresolved'] and not state['culprits']


def test_the_pair_code_is_registered():
    assert REGISTRY['COLLECTIVE_PAIR_SLOW'].layers == ('collective',)
    assert 'COLLECTIVE_BUSBW_LOW' in REGISTRY['COLLECTIVE_PAIR_SLOW'].explains
