# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""_offline: saved benchmark outputs -> the report's bench and collective structures."""

from __future__ import annotations

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils import _offline

PLANS = {
    'gpu_node_1': {'hcas': ['mlx5_0', 'mlx5_1'], 'rate_gbps': {'mlx5_0': 400.0, 'mlx5_1': 400.0},
                   'gpu_by_hca': {'mlx5_0': {'gpu': 'GPU0', 'index': 0, 'vendor': 'nvidia', 'flag': 'use_cuda', 'distance': 'PIX'}}},
    'gpu_node_2': {'hcas': ['mlx5_0', 'mlx5_1'], 'rate_gbps': {'mlx5_0': 400.0, 'mlx5_1': 200.0},
                   'gpu_by_hca': {'mlx5_0': {'gpu': 'GPU0', 'index': 0, 'vendor': 'nvidia', 'flag': 'use_cuda', 'distance': 'SYS'}}},
}


def parsed(item, bw, device=None, status='ok'):
    return {'item': item, 'status': status, 'failure': None if status == 'ok' else {'kind': 'unparsed', 'message': 'x'},
            'settings': {'device': device} if device else {}, 'tool_warnings': [],
            'results': [{'bytes': 8388608, 'bw_avg_gbps': bw, 'bw_peak_gbps': bw}],
            'summary': {'bytes': 8388608, 'bw_avg_gbps': bw} if status == 'ok' else {}}


def test_classify_names():
    kinds = _offline.classify(['/l/gpu_node_1__gpu_node_2__0__host.txt', '/l/gpu_node_1__gpu_node_2__mlx5_1__gpu.log',
                               '/l/all_reduce.log', '/l/run.json', '/l/a__b__0__nvme.txt', '/l/core.dump'])
    assert [(e['server'], e['client'], e['rail'], e['memory']) for e in kinds['perftest']] == [
        ('gpu_node_1', 'gpu_node_2', '0', 'host'), ('gpu_node_1', 'gpu_node_2', 'mlx5_1', 'gpu')]
    assert kinds['collective'] == ['/l/a__b__0__nvme.txt', '/l/all_reduce.log', '/l/run.json']


def test_bench_from_logs():
    items = _offline.classify(['/l/gpu_node_1__gpu_node_2__0__host.txt', '/l/gpu_node_1__gpu_node_2__0__gpu.txt',
                               '/l/gpu_node_2__gpu_node_1__mlx5_1__host.txt', '/l/gpu_node_1__ghost__0__host.txt'])['perftest']
    by_name = dict((e['path'].rsplit('/', 1)[1], e) for e in items)
    results = [parsed(by_name['gpu_node_1__gpu_node_2__0__host.txt'], 390.0),
               parsed(by_name['gpu_node_1__gpu_node_2__0__gpu.txt'], 200.0),
               parsed(by_name['gpu_node_2__gpu_node_1__mlx5_1__host.txt'], 190.0, device='mlx5_1'),
               dict(item=by_name['gpu_node_1__ghost__0__host.txt'], failed=True, msg='cannot read from_log')]
    report = _offline.bench_report(results, PLANS, {'bw_ratio': 0.9, 'gpu_ratio': 0.9})
    pairs = dict(((p['server'], p['client'], p['rail'], p['memory']), p) for p in report['pairs'])
    assert pairs[('gpu_node_1', 'gpu_node_2', 0, 'host')]['verdict'] == 'ok'
    gpu = pairs[('gpu_node_1', 'gpu_node_2', 0, 'gpu')]
    assert gpu['verdict'] == 'low' and gpu['gpu_vs_host'] == round(200.0 / 390.0, 3) and gpu['gpu_distance'] == 'SYS'
    # A rail given by name: its index in the node's HCAs. The bar is the rail's nominal rate (400 Gb/s: of one 400
    # and one 200 Gb/s port the higher), not the slower port: the 200 Gb/s port is named, the pair is low.
    named = pairs[('gpu_node_2', 'gpu_node_1', 1, 'host')]
    assert (named['server_hca'], named['client_hca'], named['port_rate_gbps'], named['verdict']) == ('mlx5_1', 'mlx5_1', 200.0, 'low')
    assert named['rail_nominal_gbps'] == 400.0
    assert named['degraded_ports'] == [{'host': 'gpu_node_2', 'hca': 'mlx5_1', 'rate_gbps': 200.0}]
    # A log that could not be read is a failed pair, not a lost one.
    assert pairs[('gpu_node_1', 'ghost', 0, 'host')]['failure']['kind'] == 'task_failed'
    assert report['matrix']['host']['0']['gpu_node_1']['gpu_node_2'] == 390.0
    assert [e['status'] for e in report['imported_logs']] == ['failed', 'ok', 'ok', 'ok']


def _nccl(path, hosts, busbw, ranks_per_host=2, status='ok', kind=None):
    ranks = [{'rank': i, 'host': h} for i, h in enumerate(h for h in hosts for _r in range(ranks_per_host))]
    return {'item': path, 'status': status, 'failure': {'kind': kind, 'message': 'm'} if kind else None, 'hosts': hosts,
            'ranks': ranks, 'max_busbw_gbs': busbw, 'avg_busbw_gbs': busbw, 'wrong_total': 0,
            'out_of_bounds': {'count': 0, 'ok': True}, 'benchmark': 'all_reduce_perf', 'changed': False, 'failed': False}


def _ib(rate, ports=2):
    return {'devices': [{'name': 'mlx5_%d' % i, 'ports': [{'state': 'ACTIVE', 'rate_gbps': rate}]} for i in range(ports)]}


def test_collective_from_logs():
    nodes_ib = {'gpu_node_1': _ib(400.0), 'gpu_node_2': _ib(400.0)}
    results = [_nccl('/l/intra.log', ['gpu_node_1'], 300.0, ranks_per_host=8),
               _nccl('/l/fleet.log', ['gpu_node_1', 'gpu_node_2'], 90.0),
               _nccl('/l/notes.txt', [], None, status='failed', kind='unparsed')]
    result = _offline.collective_result(results, nodes_ib)
    # The run over most nodes is the fleet run; 2 x 400 Gb/s per node = 100 GB/s expected.
    assert result['fleet']['log'] == '/l/fleet.log' and result['expected']['gbs'] == 100.0
    assert result['fleet']['verdict']['status'] == 'ok' and result['ranks_per_node'] == 2 and result['search'] is None
    # A run on one node is not judged against the NICs.
    assert result['other_runs'][0]['verdict']['status'] == 'unknown'
    assert [(e['log'], e['recognised']) for e in result['imported_logs']] == [
        ('/l/fleet.log', True), ('/l/intra.log', True), ('/l/notes.txt', False)]
    assert _offline.collective_result([results[2]], nodes_ib) is None
