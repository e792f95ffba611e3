# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Causes on the path (issue 22): a symptom is explained only by a root on its own path, a fault
no rule names is said once on its own device, and one fault is one root."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings as F
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose
from tests.bench import diagnosis_accuracy


@pytest.fixture(scope='module')
def h100():
    return diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr')


def pair(server, client, rail, memory, verdict='low', **values):
    """A pair entry as _bench.report() makes it (rail i: mlx5_i and its GPU i on both sides)."""
    entry = {'server': server, 'client': client, 'rail': rail, 'memory': memory, 'status': 'ok', 'verdict': verdict,
             'server_hca': 'mlx5_%d' % rail, 'client_hca': 'mlx5_%d' % rail, 'bw_avg_gbps': 390.0 if verdict == 'ok' else 200.0,
             'port_rate_gbps': 400.0, 'reasons': [] if verdict == 'ok' else ['slow']}
    if memory == 'gpu':
        entry.update(server_gpu='GPU%d' % rail, client_gpu='GPU%d' % rail, gpu_distance='PIX',
                     gpu_vs_host=1.0 if verdict == 'ok' else 0.5)
    entry.update(values)
    return entry


def by_subject(found):
    return dict((f['subject'], f) for f in found if f['code'] in _diagnose.PAIR_SYMPTOMS)


def test_a_rail_2_gpu_symptom_is_not_explained_by_a_rail_0_rate(h100):
    # The demo: BENCH_GPU_MEMORY_LOW mx-02->mx-01 rail 2 gpu was pinned on mx-02's degraded mlx5_0/1 (rail 0).
    degraded = copy.deepcopy(h100)
    degraded['ib']['devices'][0]['ports'][0].update(rate='100 Gb/sec (1X NDR)', rate_gbps=100.0, width='1X')
    nodes = {'mx-01': h100, 'mx-02': degraded, 'mx-03': h100}
    bench = {'pairs': [pair('mx-02', 'mx-01', 2, 'gpu'), pair('mx-02', 'mx-01', 0, 'host')], 'thresholds': {}}
    found = _diagnose.diagnose(nodes, bench)
    rate = [f for f in found if f['code'] == 'IB_RATE_DEGRADED']
    assert [(f['host'], f['subject'], f['at']) for f in rate] == [('mx-02', 'mlx5_0/1', [['hca', 'mx-02', 'mlx5_0']])]
    symptoms = by_subject(found)
    assert symptoms['mx-02->mx-01 rail 0 host']['explained_by'] == rate[0]['id']
    assert symptoms['mx-02->mx-01 rail 2 gpu']['explained_by'] is None
    assert ['hca', 'mx-02', 'mlx5_2'] in symptoms['mx-02->mx-01 rail 2 gpu']['path']


def test_acs_on_one_gpu_nic_path_explains_only_the_tests_through_it(h100):
    acs = diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr', ('acs_enabled',))
    nodes = {'a': h100, 'b': acs, 'c': h100}
    bench = {'pairs': [pair('a', 'b', 0, 'gpu'), pair('a', 'b', 2, 'gpu'), pair('c', 'b', 0, 'host')], 'thresholds': {}}
    found = _diagnose.diagnose(nodes, bench)
    (root,) = [f for f in found if f['code'] == 'GDR_ACS_REDIRECT']
    assert root['subject'] == 'GPU0<->mlx5_0' and ['gpu_nic', 'b', 'GPU0', 'mlx5_0'] in root['at']
    symptoms = by_subject(found)
    assert symptoms['a->b rail 0 gpu']['explained_by'] == root['id']
    # Another GPU's path, and host memory over the same HCA: not ACS's.
    assert symptoms['a->b rail 2 gpu']['explained_by'] != root['id']
    assert symptoms['c->b rail 0 host']['explained_by'] != root['id']


def test_identical_tests_through_two_nodes_are_treated_the_same(h100):
    # The demo: mx-05->mx-06 rail 2 gpu was explained by mx-05's ACS on GPU0<->mlx5_0, the identical
    # mx-01->mx-06 rail 2 gpu was not. Neither goes through GPU0<->mlx5_0: both share mx-06's rail 2.
    acs = diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr', ('acs_enabled',))
    nodes = {'mx-01': h100, 'mx-05': acs, 'mx-06': h100}
    bench = {'pairs': [pair('mx-05', 'mx-06', 2, 'gpu'), pair('mx-01', 'mx-06', 2, 'gpu')], 'thresholds': {}}
    found = _diagnose.diagnose(nodes, bench)
    symptoms = by_subject(found)
    one, other = symptoms['mx-05->mx-06 rail 2 gpu'], symptoms['mx-01->mx-06 rail 2 gpu']
    assert one['explained_by'] is not None and one['explained_by'] == other['explained_by']
    (device,) = [f for f in found if f['code'] == 'BENCH_DEVICE_UNEXPLAINED']
    assert device['id'] == one['explained_by'] and device['at'] == [['hca', 'mx-06', 'mlx5_2']]
    assert device['evidence']['peers'] == ['mx-01', 'mx-05'] and device['explained_by'] is None


def test_a_fault_no_rule_names_is_said_once_on_its_own_device(h100):
    nodes = dict((host, copy.deepcopy(h100)) for host in ('node', 'peer1', 'peer2'))
    bench, causes = diagnosis_accuracy.pair_bench(nodes, {'node': (['slow_rail'], ['mlx5_2'])})
    found = _diagnose.diagnose(nodes, bench)
    (device,) = [f for f in found if f['code'] == 'BENCH_DEVICE_UNEXPLAINED']
    assert (device['host'], device['subject'], device['at'], device['severity']) == ('node', 'mlx5_2', [['hca', 'node', 'mlx5_2']], 'error')
    assert device['evidence']['memories'] == ['gpu', 'host'] and device['evidence']['sides'] == ['client', 'server']
    assert 'mlx5_2 of node (rail 2) is slow or failed in every test it is in' in device['cause']
    assert 'PCIe link of mlx5_2' in device['remedy']
    symptoms = [f for f in found if f['code'] in _diagnose.PAIR_SYMPTOMS]
    assert len(symptoms) == 8 and all(f['explained_by'] == device['id'] for f in symptoms)
    # Nothing on the peers, whose rail 2 passes with each other.
    assert not [f for f in found if f['host'] in ('peer1', 'peer2') and f['severity'] != 'info']
    assert diagnosis_accuracy.link_check(found, causes)['unknown_right'] == 8


def test_a_gpu_path_no_rule_names_is_the_gpu_nic_path_not_the_port(h100):
    nodes = dict((host, copy.deepcopy(h100)) for host in ('node', 'peer1', 'peer2'))
    bench, _causes = diagnosis_accuracy.pair_bench(nodes, {'node': (['slow_gpu_path'], ['mlx5_5'])})
    found = _diagnose.diagnose(nodes, bench)
    assert [(f['subject'], f['at']) for f in found if f['code'] == 'BENCH_DEVICE_UNEXPLAINED'] == [
        ('GPU5<->mlx5_5', [['gpu_nic', 'node', 'GPU5', 'mlx5_5']])]


def test_one_pair_names_no_device(h100):
    # Two nodes: rail 2 slow between them could be either end; said plainly, pinned on neither.
    nodes = {'a': copy.deepcopy(h100), 'b': copy.deepcopy(h100)}
    bench, _causes = diagnosis_accuracy.pair_bench(nodes, {'a': (['slow_rail'], ['mlx5_2'])})
    found = _diagnose.diagnose(nodes, bench)
    assert not [f for f in found if f['code'] == 'BENCH_DEVICE_UNEXPLAINED']
    symptoms = [f for f in found if f['code'] in _diagnose.PAIR_SYMPTOMS]
    assert len(symptoms) == 4 and all(f['explained_by'] is None for f in symptoms)
    assert all('share no device' in f['cause'] and 'rail 2' in f['cause'] for f in symptoms)


def test_a_collective_without_gpudirect_is_the_gdr_chain_not_a_slow_port():
    # m4: kernel without mm_kobj (GPUDirect RDMA off) and a port trained down; NCCL says GDR was not used.
    nodes = {'m1': diagnosis_accuracy.node_facts('metax_c500_cx7'), 'm2': diagnosis_accuracy.node_facts('metax_c500_cx7'),
             'm4': diagnosis_accuracy.node_facts('metax_c500_cx7', ('mm_kobj_not_exported', 'rate_degraded_1x'))}
    collective = {'fleet': {'benchmark': 'all_reduce_perf', 'verdict': {'status': 'low', 'ratio': 0.1, 'reasons': ['10 %']},
                            'transport': {'net': 'IB', 'gdr': False}, 'hosts': ['m1', 'm2', 'm4']},
                  'search': {'culprits': ['m4'], 'unresolved': [], 'runs': [{'group': ['m4'], 'hosts': ['m4'], 'status': 'low'}]}}
    found = _diagnose.diagnose(nodes, None, collective)
    by_code = dict((f['code'], f) for f in found)
    gdr = by_code['GDR_MM_KOBJ_NOT_EXPORTED']
    assert 'IB_RATE_DEGRADED' in by_code
    assert by_code['COLLECTIVE_BUSBW_LOW']['explained_by'] == gdr['id']
    assert by_code['COLLECTIVE_CULPRIT']['explained_by'] == gdr['id']
    # Without the transport's word, the lowest layer on the culprit's path: the port.
    collective['fleet']['transport'] = {'net': 'IB'}
    by_code = dict((f['code'], f) for f in _diagnose.diagnose(nodes, None, collective))
    assert by_code['COLLECTIVE_CULPRIT']['explained_by'] == by_code['IB_RATE_DEGRADED']['id']


def test_a_port_flapping_through_the_benchmark_is_one_root():
    rises = [{'host': 'n1', 'hca': 'mlx5_3', 'round': index, 'memory': 'host', 'pair': 'n1->n%d' % (index + 2), 'rail': 3,
              'increase': {'link_downed': 1, 'symbol_error': 5}, 'verdicts': [{'rule': 'flapping'}]} for index in range(14)]
    rises.append({'host': 'n1', 'hca': 'mlx5_10', 'round': 0, 'memory': 'host', 'pair': 'n1->n2', 'rail': 10,
                  'increase': {'symbol_error': 1}, 'verdicts': []})
    found = [f for f in _diagnose.bench_findings({'pairs': [], 'counters': rises}) if f['code'] == 'IB_ERRORS_UNDER_LOAD']
    # One per HCA, in natural order (mlx5_3 before mlx5_10), the tests in evidence.
    assert [f['subject'] for f in found] == ['mlx5_3', 'mlx5_10']
    assert len(found[0]['evidence']['tests']) == 14 and found[0]['evidence']['increase'] == {'link_downed': 14, 'symbol_error': 70}
    assert found[0]['at'] == [['hca', 'n1', 'mlx5_3']] and 'mlx5_3 on n1' in found[0]['remedy']


def test_a_degraded_host_link_is_one_root(h100):
    nodes = diagnosis_accuracy.fabric_nodes((), h100)
    fabric = nodes[sorted(nodes)[0]]['fabric']['topology']
    (link,) = [l for l in fabric['links'] if 'gpu-03 mlx5_1' in (
        fabric['nodes'].get(l['a'].get('node'), {}).get('desc'), fabric['nodes'].get((l.get('b') or {}).get('node'), {}).get('desc'))]
    link.update(width='1X', lanes=1, gbps=106.25, could_be={'width': '4X', 'lane_gbps': None})
    port = [d for d in nodes['gpu-03']['ib']['devices'] if d['name'] == 'mlx5_1'][0]['ports'][0]
    port.update(rate='100 Gb/sec (1X NDR)', rate_gbps=100.0, width='1X')
    found = _diagnose.diagnose(nodes)
    by_code = dict((f['code'], f) for f in found if f['severity'] != 'info')
    assert by_code['IB_RATE_DEGRADED']['at'] == [['hca', 'gpu-03', 'mlx5_1']]
    assert by_code['FABRIC_LINK_DEGRADED']['explained_by'] == by_code['IB_RATE_DEGRADED']['id']
    assert sorted(f['code'] for f in found if f['explained_by'] is None and f['severity'] != 'info') == ['IB_RATE_DEGRADED']


def test_a_roce_qos_fault_is_one_root():
    nodes = diagnosis_accuracy.fleet('amd_mi300x_roce', ('roce_tos_default',))
    found = _diagnose.diagnose(nodes)
    by_code = dict((f['code'], f) for f in found if f['host'] == 'node')
    assert by_code['FLEET_DIFFERS']['subject'] == 'roce_qos'
    assert by_code['FLEET_DIFFERS']['explained_by'] == by_code['ROCE_TC_NOT_LOSSLESS']['id']
    assert by_code['ROCE_TC_NOT_LOSSLESS']['at'] and all(place[0] == 'hca' for place in by_code['ROCE_TC_NOT_LOSSLESS']['at'])


# ---------------------------------------------------------------------------- places

def test_every_root_says_where_it_sits():
    # A code that explains others and has no scope: its rule must give places, or finding() refuses it.
    with pytest.raises(ValueError, match='at='):
        F.finding(F.IB_PORT_DOWN, 'n1', 'mlx5_0/1', {}, 'down', device='mlx5_0')
    # Node-wide codes sit on their node, SM codes on the subnet, the run on the run (F.SCOPES).
    assert F.finding(F.HOST_MEMLOCK_LIMITED, 'n1', 'memlock', {}, 'x')['at'] == [['node', 'n1']]
    assert F.finding(F.FABRIC_SM_MULTIPLE_MASTERS, None, 'sm', {}, 'x')['at'] == [['fabric']]
    assert F.finding(F.RUN_NOTHING_VALIDATED, None, 'run', {}, 'x')['at'] == [['run']]
    # Every explaining code either has a scope or is refused without places.
    for code, entry in F.REGISTRY.items():
        if entry.explains and not entry.scope:
            with pytest.raises(ValueError, match='at='):
                F.finding(code, 'n1', 's', {}, 'x', **dict(
                    (k, 'v') for k in ('device', 'hca', 'link', 'port', 'peer', 'attribute_remedy', 'test', 'variables')))


def test_a_root_without_places_explains_nothing_and_a_symptom_without_path_is_explained_by_nothing():
    root = F.finding(F.HOST_MEMLOCK_LIMITED, 'n1', 'memlock', {}, 'x')
    symptom = F.finding(F.BENCH_PAIR_FAILED, None, 'n1->n2 rail 0 host', {}, 'x', path=[('node', 'n1'), ('hca', 'n1', 'mlx5_0')])
    assert _diagnose.link_causes([root, symptom])[1]['explained_by'] == root['id']
    root['at'] = None
    assert _diagnose.link_causes([root, symptom])[1]['explained_by'] is None
    root['at'], symptom['path'] = [['node', 'n1']], None
    assert _diagnose.link_causes([root, symptom])[1]['explained_by'] is None


def test_on_path():
    path = [('node', 'a'), ('hca', 'a', 'mlx5_2'), ('gpu_nic', 'a', 'GPU2', 'mlx5_2'), ('link', 'g1/1', 'g2/3')]
    assert F.on_path([('node', 'a')], path) and F.on_path([['hca', 'a', 'mlx5_2']], path)
    assert F.on_path([('link', 'g1/1', 'g2/3')], path) and not F.on_path([('link', 'g1/1', 'g9/3')], path)
    assert not F.on_path([('node', 'b')], path) and not F.on_path([('hca', 'a', 'mlx5_0')], path)
    assert not F.on_path([('gpu_nic', 'a', 'GPU0', 'mlx5_0')], path) and not F.on_path([('hca', 'b', 'mlx5_2')], path)
    assert not F.on_path(None, path) and not F.on_path([('node', 'a')], None)


def test_the_explains_graph_has_no_cycle():
    def reaches(start, goal, seen=()):
        return any(code == goal or (code not in seen and reaches(code, goal, seen + (code,)))
                   for code in F.REGISTRY[start].explains if code in F.REGISTRY)
    assert [code for code in F.REGISTRY if reaches(code, code)] == []


def test_gpu_memory_slower_than_host_memory_is_not_a_slow_port(h100):
    # A slow port slows host and GPU memory of a pair alike: GPU memory below host memory on rail 0
    # is the IOMMU's translation (the same node), not rail 0's degraded rate.
    both = diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr', ('iommu_translated',))
    both['ib']['devices'][0]['ports'][0].update(rate='100 Gb/sec (1X NDR)', rate_gbps=100.0, width='1X')
    nodes = {'a': h100, 'b': both, 'c': h100}
    bench = {'pairs': [pair('a', 'b', 0, 'gpu'), pair('a', 'b', 0, 'host')], 'thresholds': {}}
    found = _diagnose.diagnose(nodes, bench)
    roots = dict((f['code'], f) for f in found if f['host'] == 'b' and f['code'] in ('IB_RATE_DEGRADED', 'HOST_IOMMU_TRANSLATED'))
    assert sorted(roots) == ['HOST_IOMMU_TRANSLATED', 'IB_RATE_DEGRADED']
    symptoms = by_subject(found)
    assert symptoms['a->b rail 0 gpu']['code'] == 'BENCH_GPU_MEMORY_LOW'
    assert symptoms['a->b rail 0 gpu']['explained_by'] == roots['HOST_IOMMU_TRANSLATED']['id']
    assert symptoms['a->b rail 0 host']['explained_by'] == roots['IB_RATE_DEGRADED']['id']


def test_what_costs_gpu_memory_is_one_registry_attribute():
    costs = [code for code, entry in F.REGISTRY.items() if entry.gpu_memory]
    assert 'HOST_IOMMU_TRANSLATED' in costs and 'GDR_PEERMEM_NOT_LOADED' in costs and 'IB_RATE_DEGRADED' not in costs
    assert not hasattr(F, 'GDR_OFF')
    gpu_low = {'code': 'BENCH_GPU_MEMORY_LOW', 'evidence': {}}
    assert F.named('HOST_IOMMU_TRANSLATED', gpu_low) and not F.named('IB_RATE_DEGRADED', gpu_low)
    # A slower port cannot make GPU memory slower than host memory on the same pair.
    for code in ('IB_RATE_DEGRADED', 'FLEET_RAIL_SLOWER'):
        assert 'BENCH_GPU_MEMORY_LOW' not in F.REGISTRY[code].explains, code


def test_no_root_lists_a_node_slow_collective_it_can_never_be_on_the_path_of():
    # COLLECTIVE_NODE_SLOW's path is the node and its GPUs' interconnect; a PCIe link of an HCA or GPU
    # and a RoCE port's QoS sit on HCA, GPU and GPU<->NIC places, never on it.
    for code in ['PCIE_LINK_DEGRADED'] + [code for code in F.REGISTRY if code.startswith('ROCE_')]:
        assert 'COLLECTIVE_NODE_SLOW' not in F.REGISTRY[code].explains, code


def test_the_services_memlock_explains_no_benchmark_failure(h100):
    # DefaultLimitMEMLOCK=8M limits services and their jobs; the benchmark's ib_write_bw runs under the
    # login limit (unlimited here): its mr_failed is not the services' limit, which stays a root of its own.
    services = diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr', ('services_memlock_8m',))
    nodes = {'a': h100, 'b': services, 'c': h100}
    failed = pair('a', 'b', 0, 'host', verdict='failed', status='failed', bw_avg_gbps=None,
                  failure={'kind': 'mr_failed', 'message': "Couldn't allocate MR"})
    found = _diagnose.diagnose(nodes, {'pairs': [failed], 'thresholds': {}})
    (root,) = [f for f in found if f['code'] == 'HOST_MEMLOCK_LIMITED' and f['host'] == 'b']
    assert root['subject'] == 'memlock (services)' and root['explained_by'] is None and root['at'] == [['services', 'b']]
    symptom = by_subject(found)['a->b rail 0 host']
    assert symptom['code'] == 'BENCH_PAIR_FAILED' and symptom['explained_by'] != root['id']


@pytest.mark.parametrize('fault, symptoms', [('pcie_link_degraded', 8), ('pcie_bridge_slow', 8), ('iommu_translated', 32),
                                             ('services_memlock_8m', 0)])
def test_the_accuracy_benchmark_gives_pcie_and_iommu_faults_their_symptoms(fault, symptoms):
    # Every test through the HCA (its own link), host memory through the HCAs below the bridge, GPU memory
    # on the node (IOMMU); the services' memlock touches no benchmark test (it runs under the login limit).
    right, _roots, on_peers, links = diagnosis_accuracy.case('nvidia_h100_8x_ndr', (fault,))
    assert right and on_peers == []
    assert (links['symptoms'], links['explained_right']) == (symptoms, symptoms)
    assert links['misattributed'] == links['off_path'] == links['unexplained_known'] == []
