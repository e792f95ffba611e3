# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""_offline: saved benchmark outputs -> the report's bench and collective structures."""

from __future__ import annotations

import json
import os

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.filter.offline_bench import offline_logs
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _offline

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


# ------------------------------------------------------------------- the logs directory, searched

def _make(base, name, data=b'x'):
    path = os.path.join(os.fsencode(str(base)), name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'wb') as handle:
        handle.write(data)
    return path


# Names that are not UTF-8 (ansible.builtin.find returned them, and ansible-core 2.19 failed the task
# on its result, losing every log): in the file name, in a directory above it, a lone byte, an
# overlong encoding, a UTF-16 surrogate encoded in UTF-8, Latin-1.
BAD_NAMES = [b'run\xff.log', b'sub\xfe/run.log', b'\xc0\xafetc.txt', b'\xed\xa0\x80half.json', b'caf\xe9__b__0__host.txt']


@pytest.mark.parametrize('bad', BAD_NAMES, ids=['lone_byte', 'in_directory', 'overlong', 'surrogate', 'latin1_pair'])
def test_a_log_whose_name_is_not_utf8_is_named_as_not_read_and_costs_only_itself(tmp_path, bad):
    _make(tmp_path, b'good.log')
    _make(tmp_path, b'a__b__0__host.txt')
    _make(tmp_path, bad)
    kinds = offline_logs(str(tmp_path))
    assert kinds['collective'] == [str(tmp_path / 'good.log')]
    assert [entry['path'] for entry in kinds['perftest']] == [str(tmp_path / 'a__b__0__host.txt')]
    assert len(kinds['refused']) == 1, kinds['refused']
    refused = kinds['refused'][0]
    assert refused['recognised'] is False and 'not UTF-8' in refused['reason']
    # Named with its bytes escaped: text any task, report or console can carry.
    shown = os.fsdecode(os.path.join(os.fsencode(str(tmp_path)), bad))
    assert refused['log'] == _offline.printable(shown) and refused['log'].encode('utf-8')
    assert '\\udc' in refused['log']
    assert kinds['labels'][refused['log']] == _offline.printable(os.path.basename(shown))
    # Everything the filter returns is text Ansible can return (no lone surrogate anywhere).
    json.dumps(kinds, ensure_ascii=False).encode('utf-8')


def test_the_search_is_as_find_searched(tmp_path):
    _make(tmp_path, b'deep/er/nccl.log')
    _make(tmp_path, b'.hidden.log')
    _make(tmp_path, b'readme.md')
    _make(tmp_path, b'data.json', b'{}' * 10)
    os.symlink('/etc/passwd', str(tmp_path / 'link.txt'))
    os.mkdir(str(tmp_path / 'dir.log'))
    files, refused = _offline.find_logs(str(tmp_path))
    assert files == [{'path': str(tmp_path / 'data.json'), 'size': 20}, {'path': str(tmp_path / 'deep' / 'er' / 'nccl.log'), 'size': 1}]
    assert refused == []


def test_a_log_named_with_controls_is_read_and_labelled_escaped(tmp_path):
    _make(tmp_path, '\x1b]0;owned\x07\u202erun.log'.encode('utf-8'))
    kinds = offline_logs(str(tmp_path))
    assert kinds['collective'] == [str(tmp_path / '\x1b]0;owned\x07\u202erun.log')] and kinds['refused'] == []
    assert list(kinds['labels'].values()) == ['\\x1b]0;owned\\x07\\u202erun.log']


def test_offline_logs_refuses_what_is_no_directory(tmp_path):
    with pytest.raises(AnsibleFilterError, match='is not a directory'):
        offline_logs(str(tmp_path / 'missing'))


def test_a_tree_deeper_than_any_ticket_is_named_not_searched(tmp_path):
    deep = os.path.join(str(tmp_path), *(['d'] * (_offline.LOGS_MAX_DEPTH + 5)))
    os.makedirs(deep)
    _make(tmp_path, b'good.log')
    _make(deep.encode(), b'lost.log')
    files, refused = _offline.find_logs(str(tmp_path))
    assert files == [{'path': str(tmp_path / 'good.log'), 'size': 1}]
    assert len(refused) == 1 and 'more than %d levels deep' % _offline.LOGS_MAX_DEPTH in refused[0]['reason']
