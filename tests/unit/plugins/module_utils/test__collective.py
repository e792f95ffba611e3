# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

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
