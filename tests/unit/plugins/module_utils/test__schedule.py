# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import gc
import itertools
import random
from collections import Counter

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _schedule
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench._schedule import ScheduleError, schedule, summary

RAILS = ['mlx5_%d' % index for index in range(8)]
LARGE = [255, 256, 999, 1000]


def names(count):
    return ['gpu%04d' % index for index in range(count)]


def pairs_of(entry):
    return list(zip(entry['servers'], entry['clients']))


def check_rounds(nodes, result, every_node_each_round=True):
    """Properties every pairwise round has; returns the Counter of unordered pairs."""
    known = set(nodes)
    covered = Counter()
    for number, entry in enumerate(result['rounds'], 1):
        assert entry['round'] == number
        assert len(entry['servers']) == len(entry['clients'])
        busy = entry['servers'] + entry['clients']
        assert len(set(busy)) == len(busy), 'a node is in two pairs of round %d' % number
        assert not set(busy) & set(entry['idle'])
        assert set(busy) | set(entry['idle']) <= known
        if every_node_each_round:
            assert len(busy) + len(entry['idle']) == len(nodes)
        for server, client in pairs_of(entry):
            assert server != client
            covered[frozenset((server, client))] += 1
    assert result['summary']['rounds'] == len(result['rounds'])
    assert result['summary']['pairs_per_round'] == [len(entry['servers']) for entry in result['rounds']]
    assert result['summary']['pairs'] == sum(covered.values())
    return covered


@pytest.mark.parametrize('count', list(range(1, 41)) + LARGE)
def test_full_covers_every_pair_exactly_once(count):
    nodes = names(count)
    result = schedule(nodes)
    covered = check_rounds(nodes, result)
    expected_rounds = 0 if count == 1 else (count if count % 2 else count - 1)
    assert len(result['rounds']) == expected_rounds
    assert len(covered) == count * (count - 1) // 2
    assert set(covered.values()) <= {1}
    idle = Counter(node for entry in result['rounds'] for node in entry['idle'])
    if count % 2 and count > 1:
        # One bye per round, each node idle exactly once.
        assert all(len(entry['idle']) == 1 for entry in result['rounds'])
        assert idle == Counter(nodes)
    else:
        assert not idle
    assert result['summary']['pairs_covered'] == result['summary']['pairs_possible'] == len(covered)


@pytest.mark.parametrize('count', range(2, 41))
def test_full_orientation_balanced_and_alternating(count):
    result = schedule(names(count))
    for node in names(count):
        roles = ''.join('S' if node in entry['servers'] else 'C' for entry in result['rounds'] if node not in entry['idle'])
        assert roles.count('S') in ((count - 1) // 2, count // 2), (node, roles)
        longest = max(len(list(group)) for _role, group in itertools.groupby(roles))
        assert longest <= (1 if count % 2 else 2), (node, roles)


def test_full_four_nodes_exact():
    result = schedule(['a', 'b', 'c', 'd'], ['mlx5_0', 'mlx5_1'])
    assert [(entry['servers'], entry['clients'], entry['idle']) for entry in result['rounds']] == [
        (['b', 'a'], ['c', 'd'], []),
        (['c', 'd'], ['a', 'b'], []),
        (['a', 'c'], ['b', 'd'], []),
    ]
    assert result['rails'] == [
        {'rail': 0, 'hca': 'mlx5_0', 'hcas': dict.fromkeys('abcd', 'mlx5_0'), 'missing': []},
        {'rail': 1, 'hca': 'mlx5_1', 'hcas': dict.fromkeys('abcd', 'mlx5_1'), 'missing': []},
    ]
    assert result['summary']['tests_per_round'] == [4, 4, 4]
    assert result['summary']['tests'] == 12


@pytest.mark.parametrize('count, mode', [(count, mode) for count in (1, 2, 3, 7, 8, 33) for mode in ('full', 'ring', 'loopback')]
                         + [(count, 'random') for count in (2, 3, 7, 8, 33)])
def test_one_round_is_the_same_as_in_the_whole_schedule(count, mode):
    whole = schedule(names(count), RAILS, mode=mode, k=3, seed=5, direction='both')
    for entry in whole['rounds']:
        alone = schedule(names(count), RAILS, mode=mode, k=3, seed=5, direction='both', round_number=entry['round'])
        assert alone['rounds'] == [entry]
        assert alone['summary'] == whole['summary']


@pytest.mark.parametrize('count', [2, 3, 4, 9, 16, 255])
def test_direction_both_tests_each_ordered_pair_once(count):
    nodes = names(count)
    once = schedule(nodes)
    both = schedule(nodes, direction='both')
    assert len(both['rounds']) == 2 * len(once['rounds'])
    assert both['rounds'][:len(once['rounds'])] == once['rounds']
    check_rounds(nodes, both)
    ordered = Counter(pair for entry in both['rounds'] for pair in pairs_of(entry))
    assert len(ordered) == count * (count - 1) and set(ordered.values()) == {1}
    assert both['summary']['pairs_covered'] == count * (count - 1) // 2
    assert both['summary']['pairs'] == count * (count - 1)


@pytest.mark.parametrize('count', range(1, 41))
def test_ring_neighbours_in_two_rounds_or_three_when_odd(count):
    nodes = names(count)
    result = schedule(nodes, mode='ring')
    covered = check_rounds(nodes, result)
    expected = {1: 0, 2: 1}.get(count, 3 if count % 2 else 2)
    assert len(result['rounds']) == expected
    neighbours = set(frozenset((nodes[index], nodes[(index + 1) % count])) for index in range(count) if count > 1)
    assert set(covered) == neighbours and set(covered.values()) <= {1}
    if count > 2:
        # Each node serves its next neighbour, once.
        assert Counter(server for entry in result['rounds'] for server in entry['servers']) == Counter(nodes)
        assert all((nodes.index(client) - nodes.index(server)) % count == 1
                   for entry in result['rounds'] for server, client in pairs_of(entry))
    assert bool(result['summary']['notes']) == (count % 2 == 1)


@pytest.mark.parametrize('count', range(2, 41))
@pytest.mark.parametrize('k', [1, 3, 8])
def test_random_perfect_matchings_without_repeats(count, k):
    nodes = names(count)
    result = schedule(nodes, mode='random', k=k, seed=count)
    covered = check_rounds(nodes, result)
    full_rounds = count if count % 2 else count - 1
    assert len(result['rounds']) == min(k, full_rounds)
    for entry in result['rounds']:
        assert len(entry['idle']) == count % 2
    assert set(covered.values()) == {1}, 'a pair repeats across matchings'
    assert bool(result['summary']['notes']) == (k > full_rounds)
    assert result['summary']['seed'] == count


def test_random_is_deterministic_given_the_seed():
    nodes = names(64)
    first = schedule(nodes, mode='random', k=4, seed=7)
    assert schedule(list(nodes), mode='random', k=4, seed=7) == first
    # `-e fabric_bench_seed=7` is the string '7': the same seed as 7. Other text is a seed of its own.
    assert schedule(nodes, mode='random', k=4, seed='7') == first and schedule(nodes, mode='random', k='4', seed=' 7 ') == first
    assert schedule(nodes, mode='random', k=4, seed='rack7') != first
    assert schedule(nodes, mode='random', k=4, seed='rack7') == schedule(nodes, mode='random', k=4, seed='rack7')
    assert schedule(nodes, mode='random', k=4, seed=8)['rounds'] != first['rounds']


def test_random_pinned():
    # Pins the draw (random.Random shuffle and sample): a controller with another Python must plan the same rounds.
    result = schedule(['a', 'b', 'c', 'd', 'e', 'f'], mode='random', k=2, seed=42)
    # shuffle -> d b c e a f (f fixed, the circle d b c e a); sample -> circle rounds 1 and 4.
    assert [pairs_of(entry) for entry in result['rounds']] == [
        [('c', 'd'), ('a', 'e'), ('f', 'b')],
        [('d', 'e'), ('c', 'b'), ('a', 'f')],
    ]


def test_random_matchings_look_uniform():
    # Over many seeds, the partner of a node in a one-round schedule is spread over all the others.
    nodes = names(6)
    partners = Counter()
    for seed in range(3000):
        entry = schedule(nodes, mode='random', seed=seed)['rounds'][0]
        for server, client in pairs_of(entry):
            if nodes[0] in (server, client):
                partners[client if server == nodes[0] else server] += 1
    assert set(partners) == set(nodes[1:])
    assert min(partners.values()) > 500  # 600 expected each


@pytest.mark.parametrize('count', [1, 2, 5])
def test_loopback_one_round_each_node_with_itself(count):
    nodes = names(count)
    result = schedule(nodes, RAILS[:2], mode='loopback', direction='both', expand=True)
    assert len(result['rounds']) == 1
    entry = result['rounds'][0]
    assert entry['servers'] == entry['clients'] == nodes and entry['idle'] == []
    assert [(test['server'], test['client'], test['rail'], test['server_hca'], test['client_hca']) for test in entry['tests']] == [
        (node, node, rail, 'mlx5_%d' % rail, 'mlx5_%d' % rail) for node in nodes for rail in (0, 1)]
    assert entry['tests'][0]['pair_id'] == '%s<>%s' % (nodes[0], nodes[0])
    assert result['summary']['pairs_covered'] == result['summary']['pairs_possible'] == count
    assert result['summary']['tests'] == 2 * count


def test_expand_one_test_per_pair_and_rail():
    nodes = names(8)
    result = schedule(nodes, RAILS, expand=True)
    for entry in result['rounds']:
        assert len(entry['tests']) == 4 * 8 and entry['skipped'] == []
        assert [(test['server'], test['client']) for test in entry['tests'][::8]] == pairs_of(entry)
        assert [test['rail'] for test in entry['tests'][:8]] == list(range(8))
        # A node runs one server or client per HCA: once per rail in the round.
        for rail in range(8):
            busy = [node for test in entry['tests'] if test['rail'] == rail for node in (test['server'], test['client'])]
            assert sorted(busy) == nodes
    ids = set(test['pair_id'] for entry in result['rounds'] for test in entry['tests'])
    assert ids == set('%s<>%s' % pair for pair in itertools.combinations(nodes, 2))


def test_pair_id_does_not_depend_on_the_direction():
    both = schedule(['b', 'a', 'c'], direction='both', expand=True)
    ids = Counter(test['pair_id'] for entry in both['rounds'] for test in entry['tests'])
    assert ids == {'b<>a': 2, 'b<>c': 2, 'a<>c': 2}


HETERO = {
    'n0': ['mlx5_0', 'mlx5_1', 'mlx5_2'],
    'n1': ['mlx5_0'],
    'n2': ['mlx5_0', 'mlx5_1', 'mlx5_2'],
    'n3': ['mlx5_0', 'mlx5_4'],
    'n4': [],
}


def test_heterogeneous_rails_table():
    table = _schedule.rail_table(['n0', 'n1', 'n2', 'n3', 'n4', 'n5'], HETERO)
    assert table == [
        {'rail': 0, 'hca': 'mlx5_0', 'hcas': {'n0': 'mlx5_0', 'n1': 'mlx5_0', 'n2': 'mlx5_0', 'n3': 'mlx5_0'},
         'missing': ['n4', 'n5']},
        {'rail': 1, 'hca': None, 'hcas': {'n0': 'mlx5_1', 'n2': 'mlx5_1', 'n3': 'mlx5_4'}, 'missing': ['n1', 'n4', 'n5']},
        {'rail': 2, 'hca': 'mlx5_2', 'hcas': {'n0': 'mlx5_2', 'n2': 'mlx5_2'}, 'missing': ['n1', 'n3', 'n4', 'n5']},
    ]


def test_heterogeneous_rails_expand_and_say_so():
    nodes = ['n0', 'n1', 'n2', 'n3', 'n4', 'n5']
    result = schedule(nodes, HETERO, expand=True)
    tests = [test for entry in result['rounds'] for test in entry['tests']]
    skipped = [test for entry in result['rounds'] for test in entry['skipped']]
    for test in tests:
        assert test['server_hca'] == result['rails'][test['rail']]['hcas'][test['server']]
        assert test['client_hca'] == result['rails'][test['rail']]['hcas'][test['client']]
    # rail 0: 4 nodes, 6 pairs; rail 1: 3 nodes, 3 pairs; rail 2: 2 nodes, 1 pair.
    assert Counter(test['rail'] for test in tests) == {0: 6, 1: 3, 2: 1}
    assert len(tests) + len(skipped) == 15 * 3
    assert result['summary']['tests'] == 10 and result['summary']['tests_skipped'] == 35
    pair_n3_n2 = [test for test in skipped if {test['server'], test['client']} == {'n2', 'n3'}]
    assert [(test['rail'], test['missing']) for test in pair_n3_n2] == [(2, ['n3'])]
    notes = '\n'.join(result['summary']['notes'])
    assert 'rail 1 (HCA names differ): 3 node(s) without it sit out its tests: n1, n4, n5' in notes
    assert '1 node(s) have no entry in rails and sit out every rail: n5' in notes


@pytest.mark.parametrize('count', list(range(1, 31)) + [101])
@pytest.mark.parametrize('mode', ['full', 'random', 'ring', 'loopback'])
def test_tests_per_round_counts_match_the_expanded_rounds(count, mode):
    # The summary counts per round without building the rounds (big-integer convolution for the
    # circle modes): compare with the tests actually expanded, for random sets of HCAs.
    rng = random.Random(count)
    nodes = names(count)
    rails = dict((node, RAILS[:rng.choice((0, 1, 2, 3, 3, 3))]) for node in nodes)
    if not any(rails.values()):
        rails[nodes[0]] = RAILS[:1]
    for direction in ('alternate', 'both'):
        result = schedule(nodes, rails, mode=mode, k=5, seed=count, direction=direction, expand=True)
        assert result['summary']['tests_per_round'] == [len(entry['tests']) for entry in result['rounds']]
        assert result['summary']['tests_skipped'] == sum(len(entry['skipped']) for entry in result['rounds'])
        assert summary(nodes, rails, mode=mode, k=5, seed=count, direction=direction) == result['summary']


def test_counts_of_the_large_schedule():
    counts = summary(names(4096), RAILS)
    assert counts['rounds'] == 4095
    assert counts['pairs_per_round'] == [2048] * 4095
    assert counts['tests'] == 4095 * 2048 * 8 == 67092480
    hetero = dict((node, RAILS if index % 2 else RAILS[:4]) for index, node in enumerate(names(4096)))
    # Rails 4..7 are on 2,048 nodes: C(2048, 2) pairs each, and rails 0..3 on all.
    assert summary(names(4096), hetero)['tests'] == 4 * 4096 * 4095 // 2 + 4 * 2048 * 2047 // 2


@pytest.mark.parametrize('kwargs, message', [
    ({'nodes': []}, 'nodes is empty'),
    ({'nodes': 'gpu01'}, 'nodes must be a list of inventory hostnames, got str'),
    ({'nodes': ['a', 'b', 'a', 'c', 'b']}, 'duplicate node names: a, b'),
    ({'nodes': ['a', '']}, 'node names must be non-empty strings'),
    ({'nodes': ['a', 3]}, 'node names must be non-empty strings, got 3'),
    ({'mode': 'mesh'}, "unknown mode 'mesh': choose one of full, ring, random, loopback"),
    ({'direction': 'reverse'}, "unknown direction 'reverse'"),
    ({'mode': 'random', 'k': 0}, 'k must be at least 1'),
    ({'mode': 'random', 'k': -2}, 'k must be at least 1'),
    ({'mode': 'random', 'k': 'three'}, "k must be an integer (the number of random matchings), got 'three'"),
    ({'mode': 'random', 'k': 2.5}, 'k must be an integer'),
    ({'mode': 'random', 'k': True}, 'k must be an integer'),
    ({'mode': 'random', 'seed': [1]}, 'seed must be an integer or a string'),
    ({'rails': 'mlx5_0'}, 'rails must be a list of HCA names or a dict node -> list of HCA names, got str'),
    ({'rails': []}, 'rails is empty'),
    ({'rails': ['mlx5_0', 'mlx5_0']}, 'rails names an HCA twice (mlx5_0, mlx5_0)'),
    ({'rails': ['mlx5_0', None]}, 'rails: HCA names must be non-empty strings, got None'),
    ({'rails': {'a': 'mlx5_0'}}, 'rails[a] must be a list of HCA names, got str'),
    ({'rails': {'a': [], 'b': []}}, 'rails names no HCA for any of the 3 node(s)'),
    ({'round_number': 0}, 'round 0 does not exist: this schedule has 3 round(s), numbered from 1'),
    ({'round_number': 4}, 'round 4 does not exist'),
    ({'round_number': 'last'}, 'round must be an integer'),
])
def test_bad_input(kwargs, message):
    args = {'nodes': ['a', 'b', 'c']}
    args.update(kwargs)
    with pytest.raises(ScheduleError) as error:
        schedule(**args)
    assert message in str(error.value)


def test_strings_from_ini_inventories():
    assert len(schedule(names(9), mode='random', k='3')['rounds']) == 3
    assert schedule(names(9), round_number='2')['rounds'][0]['round'] == 2


def test_expand_limit(monkeypatch):
    monkeypatch.setattr(_schedule, 'EXPAND_LIMIT', 100)
    with pytest.raises(ScheduleError) as error:
        schedule(names(16), RAILS, expand=True)
    assert 'expand would build 960 test entries (more than 100): expand one round at a time (round=1..15)' in str(error.value)
    assert len(schedule(names(16), RAILS, expand=True, round_number=15)['rounds'][0]['tests']) == 64
    assert len(schedule(names(16), RAILS, expand=True, node='gpu0003')['rounds']) == 15


@pytest.mark.parametrize('count, mode', [(count, mode) for count in (1, 2, 7, 8) for mode in ('full', 'ring', 'random', 'loopback')])
def test_one_node_view_is_its_part_of_each_round(count, mode):
    nodes = names(count)
    whole = schedule(nodes, RAILS[:2], mode=mode, k=3, direction='both', expand=True)
    for node in nodes:
        mine = schedule(nodes, RAILS[:2], mode=mode, k=3, direction='both', expand=True, node=node)
        assert mine['summary'] == whole['summary']
        assert len(mine['rounds']) == len(whole['rounds'])
        for entry, own in zip(whole['rounds'], mine['rounds']):
            pairs = [pair for pair in pairs_of(entry) if node in pair]
            assert pairs_of(own) == pairs and len(pairs) <= 1
            assert own['idle'] == ([node] if node in entry['idle'] else [])
            assert own['tests'] == [test for test in entry['tests'] if node in (test['server'], test['client'])]
        if whole['rounds']:
            last = schedule(nodes, RAILS[:2], mode=mode, k=3, direction='both', node=node, round_number=len(whole['rounds']))
            assert last['rounds'] == [dict((key, mine['rounds'][-1][key]) for key in ('round', 'servers', 'clients', 'idle'))]


def test_node_must_be_scheduled():
    with pytest.raises(ScheduleError) as error:
        schedule(names(4), node='gpu9999')
    assert "node 'gpu9999' is not one of the 4 nodes scheduled" in str(error.value)


def test_single_node_has_no_pairs():
    for mode in ('full', 'ring', 'random'):
        result = schedule(['solo'], mode=mode)
        assert result['rounds'] == [] and result['summary']['rounds'] == 0
        assert 'a single node has no peer' in result['summary']['notes'][0]


@pytest.mark.parametrize('enabled', [True, False])
def test_collector_state_is_restored(enabled):
    (gc.enable if enabled else gc.disable)()
    try:
        schedule(names(10))
        assert gc.isenabled() is enabled
    finally:
        gc.enable()


@pytest.mark.parametrize('count', list(range(1, 20)) + [32, 65])
@pytest.mark.parametrize('mode, k, direction', [('full', 1, 'alternate'), ('full', 1, 'both'), ('random', 3, 'alternate'),
                                                ('random', 50, 'both'), ('ring', 1, 'alternate'), ('loopback', 1, 'alternate')])
def test_one_nodes_rounds_are_its_part_of_the_whole_schedule(count, mode, k, direction):
    # node= takes the O(1)-per-round path (_Circle.node_round); it must give exactly the
    # node's pair of each round of the whole schedule, roles included.
    nodes = ['n%02d' % i for i in range(count)]
    whole = _schedule.schedule(nodes, ['mlx5_0', 'mlx5_1'], mode=mode, k=k, seed=7, direction=direction, expand=True)
    for node in nodes:
        mine = _schedule.schedule(nodes, ['mlx5_0', 'mlx5_1'], mode=mode, k=k, seed=7, direction=direction, expand=True,
                                  node=node)
        assert len(mine['rounds']) == len(whole['rounds'])
        for own, full in zip(mine['rounds'], whole['rounds']):
            expected = [t for t in full['tests'] if node in (t['server'], t['client'])]
            assert own['tests'] == expected, (node, own['round'])
            assert own['idle'] == ([node] if node in full['idle'] else [])


def test_text_of_non_ascii_digits_is_no_number():
    # '\u00b2'.isdigit() is true and int('\u00b2') fails: text of such digits is a seed of its own, and no k.
    assert _schedule._seed('\u00b2') == '\u00b2' and _schedule._seed(' 7 ') == 7
    with pytest.raises(ScheduleError, match='k must be an integer'):
        _schedule._check_options(_schedule.MODES[0], '\u00b2', None, _schedule.DIRECTIONS[0])
