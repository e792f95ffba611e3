# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import math

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import read_ib
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _collective


def test_expected_busbw_from_the_smallest_node(sim_root):
    h100 = {'devices': read_ib(SysRoot(sim_root('nvidia_h100_8x_ndr')[0]))}
    degraded = {'devices': read_ib(SysRoot(sim_root('nvidia_h100_8x_ndr', 'rate_degraded_1x')[0]))}
    # 8 x 400 Gb/s NDR compute ports + a 200 Gb/s storage port, ACTIVE: (3200 + 200) / 8 GB/s.
    assert _collective.node_nic_gbs(h100) == (8 * 400 + 200) / 8.0
    # Seed 004: one 400 Gb/s NDR port is 50 GB/s.
    assert _collective.node_nic_gbs(h100, ['mlx5_0']) == 50.0
    # The bar is the typical node, not the degraded one (which would hide itself).
    expected = _collective.expected_busbw({'a': h100, 'b': degraded, 'c': h100})
    assert expected['gbs'] == 425.0 and expected['below_median'] == ['b']
    assert _collective.expected_busbw({'vm': {'devices': []}})['gbs'] is None


def _result(max_busbw, wrong=0, oob=0, status='ok', gdr=True):
    return {'status': status, 'max_busbw_gbs': max_busbw, 'avg_busbw_gbs': max_busbw / 2 if max_busbw else None,
            'wrong_total': wrong, 'out_of_bounds': {'count': oob, 'ok': oob == 0},
            'transport': {'net': 'IB', 'gdr': gdr}, 'failure': None if status == 'ok' else {'kind': 'timeout', 'message': 'killed'}}


@pytest.mark.parametrize('busbw, status', [(45.0, 'ok'), (40.0, 'ok'), (36.0, 'warning'), (34.9, 'low')])
def test_judge_thresholds_of_the_seeds(busbw, status):
    verdict = _collective.judge(_result(busbw), 50.0)
    assert verdict['status'] == status and verdict['ratio'] == round(busbw / 50.0, 3)


def test_judge_corruption_failure_and_unknown():
    assert _collective.judge(_result(48.0, wrong=3), 50.0)['status'] == 'corrupt'    # fast but wrong is an error
    assert _collective.judge(_result(48.0, oob=1), 50.0)['status'] == 'corrupt'
    failed = _collective.judge(_result(None, status='failed'), 50.0)
    assert failed['status'] == 'failed' and failed['reasons'] == ['timeout: killed']
    assert _collective.judge(_result(48.0), None)['status'] == 'unknown'
    low = _collective.judge(_result(20.0, gdr=False), 50.0)
    assert low['status'] == 'low' and 'GPUDirect RDMA was not used' in low['reasons'][-1]
    assert _collective.judge(_result(48.0), 50.0, metric='avg')['status'] == 'low'   # avg 24 GB/s


def _fleet(culprits):
    def run(hosts):
        return {'status': 'low' if set(hosts) & set(culprits) else 'ok', 'ratio': 0.5}
    return run


@pytest.mark.parametrize('count', [4, 5, 6, 7, 8, 9, 16, 33, 64, 100])
def test_one_culprit_in_at_most_2_log2_n_runs(count):
    nodes = ['n%03d' % i for i in range(count)]
    bound = 2 * int(math.ceil(math.log(count, 2)))
    for culprit in nodes:
        state = _collective.search(nodes, _fleet([culprit]))
        assert state['culprits'] == [culprit] and not state['unresolved'], (culprit, state)
        assert len(state['runs']) <= bound, (culprit, len(state['runs']), bound)


def test_two_culprits_are_both_named():
    nodes = ['n%d' % i for i in range(16)]
    state = _collective.search(nodes, _fleet(['n3', 'n12']))
    assert sorted(state['culprits']) == ['n12', 'n3'] and not state['unresolved']


def test_a_reference_node_resolves_small_fleets():
    assert _collective.search(['a', 'b', 'c'], _fleet(['c']))['culprits'] == ['c']
    # Without any healthy run nothing is known good: the suspects are named, unresolved.
    state = _collective.search(['a', 'b', 'c'], _fleet(['a']))
    assert state['culprits'] == [] and sorted(state['unresolved']) == ['a', 'b', 'c']
    assert _collective.search(['a', 'b'], _fleet(['b']), reference='ref')['culprits'] == ['b']


def test_filters_drive_a_search_as_a_play_would():
    from ansible_collections.hpc.gpu_fabric.plugins.filter.collective import FilterModule
    f = FilterModule().filters()
    ib = {'devices': [{'name': 'mlx5_0', 'ports': [{'state': 'ACTIVE', 'rate_gbps': 400.0}]}]}
    hostvars = dict(('n%d' % i, {'ansible_facts': {'gpu_fabric_ib': ib}}) for i in range(8))
    expected = f['collective_expected'](hostvars, sorted(hostvars))
    assert expected['gbs'] == 50.0
    state = f['culprit_search_start'](sorted(hostvars))
    while not state['done']:
        runs = f['culprit_search_next'](state)
        verdicts = [f['collective_verdict']({'status': 'ok', 'max_busbw_gbs': 20.0 if 'n5' in r['hosts'] else 44.0,
                                             'wrong_total': 0, 'out_of_bounds': {'count': 0, 'ok': True}}, expected['gbs'])
                    for r in runs]
        state = f['culprit_search_update'](state, runs, verdicts)
    assert state['culprits'] == ['n5'] and len(state['runs']) <= 6
    with pytest.raises(Exception, match='metric must be max or avg'):
        f['collective_verdict']({}, 50.0, metric='p99')


def test_culprits_on_both_sides_are_found_through_a_healthy_pair():
    nodes = ['m1', 'm2', 'm3', 'm4', 'm5', 'm6']
    state = _collective.search(nodes, _fleet(['m2', 'm4']))
    assert sorted(state['culprits']) == ['m2', 'm4'] and not state['unresolved']
    assert len(state['runs']) <= 10
    # Everything bad (a fabric-wide problem): no reference, the search stops and says so.
    state = _collective.search(nodes, _fleet(nodes))
    assert state['culprits'] == [] and sorted(state['unresolved']) == nodes and len(state['runs']) <= 8


def test_nodes_the_facts_blame_run_with_a_reference_from_the_others():
    # The demo's fleet: four of six nodes have a lower-layer fault; halving alone finds no
    # healthy group (every half and every pair holds a bad node) and names nobody.
    nodes = ['mx-01', 'mx-02', 'mx-03', 'mx-04', 'mx-05', 'mx-06']
    bad = ['mx-02', 'mx-03', 'mx-04', 'mx-05']
    assert _collective.search(nodes, _fleet(bad))['culprits'] == []
    state = _collective.search(nodes, _fleet(bad), prior=bad)
    assert sorted(state['culprits']) == bad and not state['unresolved']
    assert state['cleared'] == ['mx-01', 'mx-06'] and len(state['runs']) == 1 + len(bad)
    assert state['runs'][0]['hosts'] == ['mx-01', 'mx-06']
    # A blamed node that runs fine is cleared (the facts' finding does not slow collectives).
    state = _collective.search(nodes, _fleet(['mx-04']), prior=bad)
    assert state['culprits'] == ['mx-04'] and sorted(state['cleared']) == ['mx-01', 'mx-02', 'mx-03', 'mx-05', 'mx-06']
    # The unblamed group is bad too: it is halved as usual, the blamed nodes wait for a reference.
    many = ['n%d' % i for i in range(8)]
    state = _collective.search(many, _fleet(['n1', 'n6']), prior=['n6'])
    assert sorted(state['culprits']) == ['n1', 'n6'] and not state['unresolved']
    # Fewer than two unblamed nodes: no trial group, plain halving.
    assert _collective.search_start(['a', 'b', 'c', 'd'], prior=['a', 'b', 'c'])['trial'] is None


def test_judge_nodes_against_peers_and_a_given_expectation():
    def run(busbw, ranks=8, **extra):
        return dict({'status': 'ok', 'max_busbw_gbs': busbw, 'avg_busbw_gbs': busbw / 2, 'ranks': [{}] * ranks,
                     'verdict': {'status': 'unknown'}}, **extra)

    judged = _collective.judge_nodes({'a': run(300.0), 'b': run(310.0), 'c': run(200.0), 'd': run(305.0)})
    assert judged['slow'] == ['c'] and judged['hosts']['c']['peer_median_gbs'] == 305.0
    assert judged['hosts']['c']['peer_ratio'] == 0.656 and judged['hosts']['a']['verdict']['status'] == 'measured'
    # Two nodes: the slower one is below its only peer; with a given expectation, judged against it too.
    judged = _collective.judge_nodes({'a': run(300.0), 'b': run(200.0)}, expected_gbs=280.0)
    assert judged['slow'] == ['b'] and judged['bad'] == ['b'] and judged['hosts']['a']['verdict']['status'] == 'ok'
    # One rank moves nothing between GPUs; a task that failed before the run; corruption.
    judged = _collective.judge_nodes({'one': run(0.0, ranks=1), 'gone': {'failed': True, 'msg': 'all_reduce_perf: not found'},
                                      'bad': run(300.0, wrong_total=3)}, expected_gbs=250.0)
    assert judged['hosts']['one']['verdict']['status'] == 'measured' and 'busbw is 0 by definition' in \
        judged['hosts']['one']['verdict']['reasons'][0]
    assert judged['hosts']['gone']['failure'] == {'kind': 'not_run', 'message': 'all_reduce_perf: not found'}
    assert judged['failed'] == ['bad', 'gone'] and judged['slow'] == []
