# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils import _diagnose
from tests.bench import diagnosis_accuracy


def test_every_catalog_fault_alone_and_in_pairs_is_diagnosed_as_a_root():
    result = diagnosis_accuracy.run()
    assert result['cases'] >= 30 and result['wrong'] == [], result['wrong']
    # Fault-free profiles: nothing above info, except the homelab node's real limits
    # (seed 002: GPU on the other socket, inbox stack without nvidia_peermem).
    healthy = result['healthy_findings_above_info']
    assert all(codes == [] for name, codes in healthy.items() if name != 'homelab_cx4'), healthy
    assert sorted(healthy['homelab_cx4']) == ['GDR_PEERMEM_NOT_LOADED', 'GPU_NIC_FAR']


def test_seed000_chain_shows_the_root_not_the_symptoms():
    nodes = {'m1': diagnosis_accuracy.node_facts('metax_c500_cx7'),
             'm4': diagnosis_accuracy.node_facts('metax_c500_cx7', ('mm_kobj_not_exported',))}
    bench = {'pairs': [{'server': 'm1', 'client': 'm4', 'rail': 0, 'memory': 'gpu', 'status': 'ok', 'verdict': 'low',
                        'bw_avg_gbps': 120.0, 'port_rate_gbps': 400.0, 'gpu_vs_host': 0.31,
                        'reasons': ['GPU memory 120.0 Gb/s is 31 % of host memory 388.0 Gb/s on the same pair']}]}
    collective = {'fleet': {'benchmark': 'all_reduce_perf', 'verdict': {'status': 'low', 'ratio': 0.41, 'reasons': ['41 %']},
                            'transport': {'net': 'IB', 'gdr': False}, 'hosts': ['m1', 'm4']},
                  'search': {'culprits': ['m4'], 'unresolved': [], 'runs': [{'group': ['m4'], 'hosts': ['m4', 'm1'], 'status': 'low'}]}}
    found = _diagnose.diagnose(nodes, bench, collective, unreachable=['m9'])
    by_code = dict((f['code'], f) for f in found)
    root = by_code['GDR_MM_KOBJ_NOT_EXPORTED']
    assert root['host'] == 'm4' and root['explained_by'] is None and root['severity'] == 'error'
    assert 'does not export mm_kobj' in root['cause'] and 'ofed_peermem' in root['remedy']
    # GPU memory low on a pair with m4, the culprit m4, and the fleet-wide low busbw: all point at the root.
    for code in ('BENCH_GPU_MEMORY_LOW', 'COLLECTIVE_CULPRIT', 'COLLECTIVE_BUSBW_LOW'):
        assert by_code[code]['explained_by'] == root['id'], (code, by_code[code])
    assert by_code['HOST_UNREACHABLE']['host'] == 'm9'
    assert [f['layer'] for f in found] == sorted((f['layer'] for f in found), key=_diagnose.LAYERS.index)


def test_fleet_mtu_mismatch_and_port_symptoms():
    def port(mtu, state='ACTIVE', rate=400.0, width='4X'):
        return {'port': 1, 'state': state, 'phys_state': 'LinkUp' if state == 'ACTIVE' else 'Polling', 'rate_gbps': rate,
                'rate': '%g Gb/sec (%s NDR)' % (rate, width), 'width': width, 'link_layer': 'InfiniBand', 'active_mtu': mtu,
                'counters': {}, 'gids': []}
    nodes = {'a': {'ib': {'devices': [{'name': 'mlx5_0', 'ports': [port(4096)]}, {'name': 'mlx5_1', 'ports': [port(4096, rate=100.0, width='1X')]}]}},
             'b': {'ib': {'devices': [{'name': 'mlx5_0', 'ports': [port(4096)]}]}},
             'c': {'ib': {'devices': [{'name': 'mlx5_0', 'ports': [port(2048)]}, {'name': 'mlx5_1', 'ports': [port(None, 'DOWN')]}]}}}
    found = dict(((f['code'], f['host'], f['subject']), f) for f in _diagnose.diagnose(nodes))
    assert ('MTU_MISMATCH', 'c', 'mlx5_0') in found and found[('MTU_MISMATCH', 'c', 'mlx5_0')]['evidence']['most_ports'] == 4096
    assert ('IB_RATE_DEGRADED', 'a', 'mlx5_1/1') in found
    down = found[('IB_PORT_DOWN', 'c', 'mlx5_1/1')]
    assert 'no link partner' in down['cause'] and down['severity'] == 'error'
    assert not any(k[0] == 'MTU_MISMATCH' and k[1] in ('a', 'b') for k in found)
