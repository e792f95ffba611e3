# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The culprit search in the fewest rounds (plugins/plugin_utils/bench/_culprit_search.py), driven round
by round as the culprit_search action drives it; strategy 'runs' through the same interface."""

from __future__ import annotations

import math
import random

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _collective
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _group_search
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _culprit_search as C


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
    state = C.start(nodes, **kwargs)
    while not state['done']:
        runs = C.next_round(state)
        hosts = [h for r in runs for h in r['hosts']]
        assert len(hosts) == len(set(hosts)), runs
        assert all(len(r['hosts']) >= 2 for r in runs), runs
        state = C.update(state, runs, [run(r['hosts']) for r in runs], seconds=2.5)
    assert state['rounds'] == len(set(r['round'] for r in state['runs']))
    assert state['seconds'] == pytest.approx(2.5 * state['rounds'])
    return state


def _nodes(count):
    return ['n%04d' % i for i in range(count)]


def _placements(count, bad, pairs, trials, seed='t'):
    for trial in range(trials):
        rng = random.Random('%s/%d/%d/%d/%d' % (seed, count, bad, pairs, trial))
        picked = rng.sample(_nodes(count), bad + 2 * pairs)
        rest = picked[bad:]
        yield sorted(picked[:bad]), [sorted(rest[i:i + 2]) for i in range(0, len(rest), 2)]


@pytest.mark.parametrize('count', [3, 4, 5, 9, 16, 17, 40])
def test_one_bad_node_anywhere_is_named_and_nothing_else(count):
    nodes = _nodes(count)
    for culprit in nodes:
        state = _drive(nodes, _fleet([culprit]))
        if count == 3 and state['unresolved']:
            # Three nodes, no reference, every run bad: never a healthy node named.
            assert state['culprits'] == [] and culprit in state['unresolved']
            continue
        assert state['culprits'] == [culprit] and state['basis'] == {culprit: 'runs'}, (culprit, state['runs'])
        assert state['pairs'] == [] and state['unresolved'] == [] and culprit in state['confirmed']


@pytest.mark.parametrize('count,bad,pairs', [(64, 2, 0), (64, 5, 0), (232, 5, 0), (232, 10, 0), (64, 0, 1), (64, 2, 1),
                                             (232, 1, 1), (128, 0, 2)])
def test_every_fault_named_no_healthy_node_blamed_runs_within_the_bound(count, bad, pairs):
    limit = 3 * _group_search.runs_bound(count, bad + 2 * pairs)
    used = []
    for culprits, bad_pairs in _placements(count, bad, pairs, 15):
        state = _drive(_nodes(count), _fleet(culprits, bad_pairs))
        assert sorted(state['culprits']) == culprits and sorted(p['nodes'] for p in state['pairs']) == sorted(bad_pairs), \
            (culprits, bad_pairs, state['runs'])
        assert state['unresolved'] == [] and state['notes'] == []
        used.append(len(state['runs']))
    assert sum(used) / float(len(used)) <= limit, (used, limit)


def test_the_rounds_a_user_waits():
    """The targets the search is built for (mean rounds after the fleet run): 5 bad among 232 in
    5, 10 among 1,024 in 6 at most; one bad node among N in ceil(log_8(N / 16)) split rounds
    (parts of two while no node is known healthy), the singles' round, and the two final ones
    (confirmation, every healthy node together)."""
    for count, bad, most in ((232, 5, 5), (1024, 10, 6), (1024, 1, 5), (64, 1, 4), (16, 1, 4)):
        rounds = [_drive(_nodes(count), _fleet(c, p))['rounds'] for c, p in _placements(count, bad, 0, 10)]
        assert sum(rounds) / float(len(rounds)) <= most, (count, bad, rounds)
        if bad == 1:
            assert max(rounds) == max(1, int(math.ceil(math.log(count / 16.0, 8)))) + 1 + 2, (count, rounds)
    # The frugal strategy spends fewer runs in many more rounds (what the option is for).
    culprits, _pairs = next(_placements(232, 5, 0, 1))
    fast = C.search(_nodes(232), _fleet(culprits))
    frugal = C.search(_nodes(232), _fleet(culprits), strategy='runs')
    assert sorted(frugal['culprits']) == sorted(fast['culprits']) == culprits
    assert len(frugal['runs']) < len(fast['runs']) and frugal['rounds'] > 2 * fast['rounds']
    assert frugal['strategy'] == 'runs' and fast['strategy'] == 'rounds'


def test_a_pair_search_halves_both_sides_in_about_log2_rounds():
    nodes = _nodes(256)
    for _culprits, bad_pairs in _placements(256, 0, 1, 10):
        state = _drive(nodes, _fleet(pairs=bad_pairs))
        assert [p['nodes'] for p in state['pairs']] == bad_pairs and state['culprits'] == []
        # The eight-way split, the halves, log2(128) halvings of the sides, a candidate pair alone, the final run.
        assert state['rounds'] <= 8 + 4, state['runs']
        assert all(r['step'] in ('split', 'verify_early', 'halves', 'cross', 'confirm_pair', 'verify') for r in state['runs'])


def test_a_node_bad_only_beside_its_first_reference_is_a_pair_not_a_culprit():
    """n0012 runs bad beside n0000 (the first healthy node) because the two are bad together; n0013
    is bad alone. The second reference clears n0012 and names the pair."""
    nodes = _nodes(16)
    state = _drive(nodes, _fleet(['n0013'], [['n0000', 'n0012']]))
    assert state['culprits'] == ['n0013'] and [p['nodes'] for p in state['pairs']] == [['n0000', 'n0012']]
    steps = [(r['step'], r['group'], r['status']) for r in state['runs']]
    assert ('single', ['n0012'], 'low') in steps and ('confirm', ['n0012'], 'ok') in steps, steps
    # Every healthy node ran together at the end, the pair's nodes left out.
    last = state['runs'][-1]
    assert last['step'] == 'verify' and last['status'] == 'ok' and set(last['hosts']) == set(nodes) - {'n0013', 'n0000', 'n0012'}


def test_pairs_from_the_pairwise_benchmark_cost_no_pair_search():
    nodes = _nodes(64)
    searched = _drive(nodes, _fleet(pairs=[['n0003', 'n0040']]))
    known = _drive(nodes, _fleet(pairs=[['n0003', 'n0040']]), pairs=[['n0003', 'n0040']])
    assert known['pairs'] == [{'nodes': ['n0003', 'n0040'], 'basis': 'pairwise benchmark'}] and known['culprits'] == []
    assert known['rounds'] < searched['rounds'] and not any(r['step'] in ('halves', 'cross') for r in known['runs'])


# The behaviour both strategies share is tested here for both (strategy 'runs' is _group_search's
# generalized binary splitting; its own mechanics are in tests/unit/plugins/module_utils/test__group_search.py).
BOTH = pytest.mark.parametrize('strategy', C.STRATEGIES)


@BOTH
def test_nodes_the_facts_blame_are_named_without_a_run_of_their_own(strategy):
    nodes = ['mx-01', 'mx-02', 'mx-03', 'mx-04', 'mx-05', 'mx-06']
    bad = ['mx-02', 'mx-03', 'mx-04', 'mx-05']
    findings = [{'host': h, 'severity': 'error', 'layer': 'ib_gpu'} for h in bad] + \
        [{'host': 'mx-01', 'severity': 'warning', 'layer': 'ib'}, {'host': 'mx-06', 'severity': 'error', 'layer': 'benchmark'}]
    assert _group_search.blamed(findings) == bad
    state = _drive(nodes, _fleet(bad), prior=findings, strategy=strategy)
    assert sorted(state['culprits']) == bad and set(state['basis'].values()) == {'facts'}
    assert [r['hosts'] for r in state['runs']] == [['mx-01', 'mx-06']] and state['cleared'] == ['mx-01', 'mx-06']
    # The unblamed nodes run bad too: they are searched, the blamed ones keep their name.
    many = _nodes(40)
    state = _drive(many, _fleet(['n0001', 'n0006']), prior=['n0006'], strategy=strategy)
    assert sorted(state['culprits']) == ['n0001', 'n0006'] and state['basis'] == {'n0006': 'facts', 'n0001': 'runs'}
    assert not any('n0006' in r['hosts'] for r in state['runs'])
    # One unblamed node cannot run alone: without a reference it is unresolved, with one it runs.
    state = _drive(['a', 'b', 'c'], _fleet(['a', 'b']), prior=['a', 'b'], strategy=strategy)
    assert state['unresolved'] == ['c'] and state['runs'] == [] and state['notes']
    state = _drive(['a', 'b', 'c'], _fleet(['a', 'b']), prior=['a', 'b'], reference='ref', strategy=strategy)
    assert state['cleared'] == ['c'] and state['runs'][0]['hosts'] == ['c', 'ref']


@BOTH
def test_without_any_healthy_run_nothing_is_named(strategy):
    nodes = _nodes(6)
    state = _drive(nodes, _fleet(nodes), strategy=strategy)
    assert state['culprits'] == [] and sorted(state['unresolved']) == nodes and state['notes']
    # A reference node resolves what runs among the suspects alone cannot.
    state = _drive(['a', 'b'], _fleet(['b']), reference='ref', strategy=strategy)
    assert state['culprits'] == ['b'] and state['cleared'] == ['a']


@BOTH
def test_a_noisy_healthy_fleet_is_never_misjudged(strategy):
    """Verdicts through _collective.judge: healthy runs anywhere between HEALTHY_RATIO and 100 %
    of the expectation, bad nodes at 30 %: only the bad nodes are named."""
    expected = 50.0
    rng = random.Random(7)
    bad = {'n0004', 'n0017', 'n0029'}

    def run(hosts):
        ratio = 0.3 if set(hosts) & bad else rng.uniform(_collective.HEALTHY_RATIO, 1.0)
        result = {'status': 'ok', 'max_busbw_gbs': ratio * expected, 'wrong_total': 0, 'out_of_bounds': {'count': 0, 'ok': True}}
        return _collective.judge(result, expected)
    state = _drive(_nodes(32), run, strategy=strategy)
    assert sorted(state['culprits']) == sorted(bad) and state['pairs'] == []


def test_a_run_that_did_not_finish_is_bad_never_cleared():
    assert C.verdict_of({'failed': True, 'msg': 'the run could not start: no mpirun'})['status'] == 'failed'
    assert C.verdict_of({'ansible_job_id': 'j1', 'finished': 0})['status'] == 'failed'
    assert C.verdict_of(None)['status'] == 'failed'
    assert C.verdict_of({'skipped': True})['status'] == 'failed'
    assert C.verdict_of({'status': 'ok', 'verdict': {'status': 'ok', 'ratio': 0.9}})['status'] == 'ok'
    # Every run of the fleet failing: nothing named, everything unresolved, and the loop ends.
    state = _drive(_nodes(20), lambda hosts: C.verdict_of({'failed': True, 'msg': 'x'}))
    assert state['culprits'] == [] and sorted(state['unresolved']) == _nodes(20)


def test_the_loop_bound_stops_a_search_and_says_so():
    state = C.start(_nodes(64))
    state['max_rounds'] = 1
    while not state['done']:
        runs = C.next_round(state)
        state = C.update(state, runs, [_fleet(['n0001', 'n0040'])(r['hosts']) for r in runs])
    assert state['rounds'] == 1 and 'stopped after 1 rounds' in state['notes'][-1]
    assert 'n0001' in state['unresolved'] and not state['culprits']


def test_what_people_read():
    state = C.start(_nodes(40))
    lines = []
    while not state['done']:
        runs = C.next_round(state)
        state = C.update(state, runs, [_fleet(['n0007'])(r['hosts']) for r in runs], seconds=61)
        lines.append(C.round_line(state))
    assert lines[0] == 'round 1: 8 run(s) over 40 node(s) (8 part(s) of bad groups), 1 bad; named so far: none'
    assert lines[-1].endswith('done after %d run(s)' % len(state['runs'])) and len(lines) == state['rounds']
    line = C.report_line(C.summary(state))
    assert line.startswith('Culprit search (strategy rounds): %d round(s), %d run(s), %d min' % (state['rounds'], len(state['runs']),
                                                                                                 61 * state['rounds'] // 60))
    assert 'Named: n0007; pairs bad only together: none; unresolved: none.' in line
    assert C.report_line(None) is None and C.report_line({'runs': 'x'}) is None
    with pytest.raises(ValueError):
        C.start(_nodes(4), strategy='fastest')
    # A bad value of seconds adds nothing rather than failing the search.
    assert C.update(C.start(_nodes(4)), [], [], seconds='nan')['seconds'] == 0.0


def test_a_reference_node_among_the_nodes_is_never_a_suspect():
    """-e fabric_collective_reference=n0003 with n0003 in the play: it runs beside suspects only."""
    nodes = _nodes(24)
    state = _drive(nodes, _fleet(['n0010']), reference='n0003')
    assert state['culprits'] == ['n0010'] and 'n0003' not in state['nodes']
    assert not any(r['group'] and 'n0003' in r['group'] for r in state['runs'])


def _candidates(run_hosts, blocks):
    hosts = set(run_hosts)
    return set((a, b) for x, y in blocks for a in x for b in y if a in hosts and b in hosts)


def test_a_pair_search_runs_the_diagonals_of_every_cross_at_once():
    """Every run of a pair search holds only the candidates of the diagonals it was given (the two
    diagonals of one cross never share a run), at most PAIR_RUNS runs a round; one pair among
    1,024 in about log2(N) + 2 rounds, above the floor no search can beat."""
    nodes = _nodes(1024)
    rounds = []
    for _culprits, bad_pairs in _placements(1024, 0, 1, 12, seed='diagonals'):
        state, run = C.start(nodes), _fleet(pairs=bad_pairs)
        while not state['done']:
            runs = C.next_round(state)
            crosses = [r for r in runs if r['step'] == 'cross']
            assert len(crosses) <= C.PAIR_RUNS
            for r in crosses:
                item = state['items'][r['task']]
                diagonals = set((a, b) for x, y in r['blocks'] for a in x for b in y)
                assert _candidates(r['hosts'], item['blocks']) == diagonals, r
            state = C.update(state, runs, [run(r['hosts']) for r in runs])
        assert [p['nodes'] for p in state['pairs']] == bad_pairs and state['culprits'] == [] and state['notes'] == []
        rounds.append(state['rounds'])
    assert C.pair_rounds_floor(1024) == pytest.approx(9.9986, abs=1e-4)
    assert C.pair_rounds_floor(1024) < sum(rounds) / float(len(rounds)) <= 12.5, rounds


def test_a_pair_named_by_elimination_runs_alone_beside_the_final_run():
    """Both diagonals of the last cross ran healthy: the one candidate left is named and runs alone
    in the round of the final run of every healthy node; healthy alone, it is named no more."""
    nodes = _nodes(24)
    eliminated = None
    for a in range(24):
        for b in range(a + 1, 24):
            pair = [nodes[a], nodes[b]]
            state = _drive(nodes, _fleet(pairs=[pair]))
            checks = [r for r in state['runs'] if r['step'] == 'confirm_pair']
            if checks:
                eliminated = pair
                assert checks[0]['group'] == pair and checks[0]['status'] == 'low'
                assert any(r['step'] == 'verify' and r['round'] == checks[0]['round'] for r in state['runs']), state['runs']
                assert [p['nodes'] for p in state['pairs']] == [pair]
                break
        if eliminated:
            break
    assert eliminated, 'no placement among 24 nodes ends by elimination'

    def flaky(hosts):
        # Bad only with a third node present: the last candidate, alone, runs healthy.
        hit = set(eliminated) <= set(hosts) and len(hosts) > 2
        return {'status': 'low' if hit else 'ok', 'ratio': 0.3 if hit else 0.95}
    state = _drive(nodes, flaky)
    assert state['pairs'] == [] and any('ran healthy alone' in n for n in state['notes']), state['notes']


def test_named_nodes_are_confirmed_while_the_search_goes_on():
    """Two bad nodes and a pair among 1,024: each named node runs beside its second reference in a
    round the pair search runs anyway, not in a round of its own at the end (the pair is between
    two parts of the first split that ran healthy: the run of the healthy nodes finds it early)."""
    culprits, bad_pairs = ['n0005', 'n0200'], [['n0400', 'n0700']]
    state = _drive(_nodes(1024), _fleet(culprits, bad_pairs))
    assert sorted(state['culprits']) == culprits and [p['nodes'] for p in state['pairs']] == bad_pairs
    confirms = [r for r in state['runs'] if r['step'] == 'confirm']
    assert sorted(r['group'][0] for r in confirms) == culprits
    busy = set(r['round'] for r in state['runs'] if r['step'] in ('halves', 'cross'))
    assert all(r['round'] in busy for r in confirms), [(r['step'], r['round']) for r in state['runs']]


@pytest.mark.parametrize('count', [5, 6, 7, 9, 12])
def test_every_pair_of_a_small_fleet_is_named_and_no_node_runs_twice_in_a_round(count):
    """_drive checks that no node is in two runs of a round: a pair among the nodes a bad group's
    healthy parts cleared shows both in the group's search and in the run of the free healthy
    nodes; it is searched once."""
    nodes = _nodes(count)
    for a in range(count):
        for b in range(a + 1, count):
            state = _drive(nodes, _fleet(pairs=[[nodes[a], nodes[b]]]))
            assert [p['nodes'] for p in state['pairs']] == [[nodes[a], nodes[b]]] and state['culprits'] == [], (a, b, state['runs'])
