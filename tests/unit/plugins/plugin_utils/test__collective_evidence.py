# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""NCCL's own evidence turned into causes, on the real runs of one 4 x H200 host split in two
(tests/fixtures/real/h200x4-split/, their README says how they were run)."""

from __future__ import annotations

import os

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _collective, _nccl
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis.rules import _collective as collective_rules

HERE = os.path.dirname(os.path.abspath(__file__))
SPLIT = os.path.join(HERE, '..', '..', '..', 'fixtures', 'real', 'h200x4-split')
ENV_A = {'CUDA_VISIBLE_DEVICES': '0,1', 'NCCL_NVLS_ENABLE': '0'}
ENV_B = {'CUDA_VISIBLE_DEVICES': '2,3', 'NCCL_P2P_DISABLE': '1', 'NCCL_SHM_DISABLE': '1', 'NCCL_NVLS_ENABLE': '0'}


def result(name, env):
    with open(os.path.join(SPLIT, name)) as handle:
        parsed = _nccl.parse_any(handle.read())
    status, failure = _nccl.outcome(parsed)
    out = dict((key, parsed[key]) for key in ('benchmark', 'ranks', 'hosts', 'versions', 'results', 'avg_busbw_gbs',
                                              'max_busbw_gbs', 'wrong_total', 'out_of_bounds', 'transport'))
    out.update(status=status, failure=failure, env=env, verdict={'status': 'unknown', 'reasons': []})
    return out


def diagnose(results, expected=None):
    nodes = _collective.judge_nodes(results, expected)
    findings = collective_rules.local_collective_findings(nodes)
    return nodes, dict(((f['code'], f['host']), f) for f in findings)


def test_the_parser_reads_what_ran_between_the_gpus():
    a = result('nodeA.txt', ENV_A)['transport']
    b = result('nodeB.txt', ENV_B)['transport']
    assert a['intra_by_host'] == {'vm': {'P2P': 48, 'via': ['P2P/direct']}} and a['nnodes'] == 1
    # P2P and SHM off: NCCL counts each GPU as a node of its own and loops its socket transport back.
    assert b['intra_by_host'] == {'vm': {'NET': 8, 'via': ['NET/Socket']}} and b['nnodes'] == 2
    assert b['env'] == {'NCCL_P2P_DISABLE': '1', 'NCCL_SHM_DISABLE': '1', 'NCCL_NVLS_ENABLE': '0'}
    for transport in (a, b):   # the hardware NCCL detected, whatever the settings forbid
        assert transport['topology']['vm']['total_bw_gbs'] == 370.8 and 'NVL' in transport['topology']['vm']['links']
    assert a['topology']['vm']['max_bw_gbs'] == 370.8 and b['topology']['vm']['max_bw_gbs'] == 1.2


def test_the_split_host_names_the_transport_and_the_variables_on_node_b_only():
    nodes, found = diagnose({'nodeA': result('nodeA.txt', ENV_A), 'nodeB': result('nodeB.txt', ENV_B)})
    a, b = nodes['hosts']['nodeA'], nodes['hosts']['nodeB']
    # Each node against its own NVLink (NCCL's totalBw) as well as against its peer.
    assert a['verdict']['status'] == 'ok' and a['verdict']['expected_gbs'] == 370.8 and 'NVLink' in a['verdict']['basis']
    assert b['verdict']['status'] == 'low' and b['verdict']['ratio'] < 0.02
    assert nodes['slow'] == ['nodeB']
    root = found[('COLLECTIVE_GPUS_NOT_P2P', 'nodeB')]
    assert 'via NET/Socket' in root['cause'] and 'NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1' in root['cause']
    assert root['evidence']['variables'] == {'NCCL_P2P_DISABLE': '1', 'NCCL_SHM_DISABLE': '1'}
    assert 'NCCL_P2P_DISABLE, NCCL_SHM_DISABLE' in root['remedy'] and root['at'] == [['gpus', 'nodeB']]
    assert 'its GPUs talked via NET/Socket, its peers\' via P2P/direct' in found[('COLLECTIVE_NODE_SLOW', 'nodeB')]['cause']
    assert ['gpus', 'nodeB'] in found[('COLLECTIVE_BUSBW_LOW', 'nodeB')]['path']
    assert not [key for key in found if key[1] == 'nodeA']


def test_one_node_alone_gets_a_verdict_against_its_nvlink():
    nodes, found = diagnose({'solo': result('nodeA.txt', ENV_A)})
    assert nodes['hosts']['solo']['verdict']['status'] == 'ok' and not found
    nodes, found = diagnose({'solo': result('nodeB.txt', ENV_B)})
    assert nodes['hosts']['solo']['verdict']['status'] == 'low'
    assert set(found) == {('COLLECTIVE_GPUS_NOT_P2P', 'solo'), ('COLLECTIVE_BUSBW_LOW', 'solo')}


def test_shared_memory_where_nvlink_joins_the_gpus_is_a_cause_too():
    nodes, found = diagnose({'solo': result('nodeB_shm.txt', {'NCCL_P2P_DISABLE': '1'})})
    root = found[('COLLECTIVE_GPUS_NOT_P2P', 'solo')]
    assert 'via SHM/direct' in root['cause'] and 'NCCL_P2P_DISABLE=1 is set' in root['cause']
    assert nodes['hosts']['solo']['verdict']['status'] == 'low'


def test_without_variables_p2p_was_impossible_and_a_given_expectation_wins():
    plain = result('nodeB.txt', {})
    plain['transport']['env'] = {}
    nodes, found = diagnose({'solo': plain}, expected=50.0)
    root = found[('COLLECTIVE_GPUS_NOT_P2P', 'solo')]
    assert 'nothing in the run\'s environment forbids P2P' in root['cause'] and root['evidence']['variables'] == {}
    assert nodes['hosts']['solo']['verdict']['expected_gbs'] == 50.0


@pytest.mark.parametrize('intra, links, expect', [
    ({'SHM': 8, 'via': ['SHM/direct']}, ['PCI'], False),       # GPUs without NVLink: SHM is NCCL's normal choice
    ({'NET': 8, 'via': ['NET/Socket']}, ['PCI'], True),        # a network between GPUs of one node: never
    ({'P2P': 4, 'SHM': 2, 'via': ['P2P/direct']}, ['NVL'], False),
])
def test_gpus_not_p2p_needs_the_evidence(intra, links, expect):
    transport = {'intra_by_host': {'h': intra}, 'topology': {'h': {'total_bw_gbs': 48.0, 'links': links}}}
    root = collective_rules._gpus_not_p2p('h', _collective.intra_node(transport)['h'], _collective.gpu_interconnect(transport), ({},))
    assert (root is not None) is expect


def test_pcie_only_gpus_are_measured_against_peers_not_the_link():
    res = result('nodeA.txt', ENV_A)
    res['transport']['topology'] = {'vm': {'total_bw_gbs': 24.0, 'max_bw_gbs': 24.0, 'links': ['PCI'], 'nvlink_gbs': None}}
    nodes, _found = diagnose({'solo': res})
    assert nodes['hosts']['solo']['verdict']['status'] == 'measured'
    assert 'PCIe only' in nodes['hosts']['solo']['verdict']['reasons'][0]


def peermem_node(evidence):
    return {'gdr': {'gpus': [{'name': 'GPU0'}], 'gdr_ready': True, 'peer_memory': {'paths': {'nvidia': {
        'detected': True, 'evidence': evidence, 'module_loaded': 'nvidia_peermem'}}}}, 'ib': {'devices': [{'name': 'mlx5_0'}]}}


@pytest.mark.parametrize('version, evidence, expect', [
    ('2.21.5+cuda12.4', '/sys/module/nvidia_peermem/version', True),
    ('2.22.3+cuda12.6', '/sys/module/nvidia_peermem/version', True),
    ('2.23.4+cuda12.6', '/sys/module/nvidia_peermem/version', False),     # accepts the module (NVIDIA/nccl#1676)
    ('2.21.5+cuda12.4', '/sys/kernel/mm/memory_peers/nv_mem/version', False),
])
def test_the_nv_peer_mem_trap_of_old_nccl(version, evidence, expect):
    fleet = {'hosts': ['n1', 'n2'], 'benchmark': 'all_reduce_perf', 'versions': {'library_version': version},
             'verdict': {'status': 'low', 'reasons': ['low']},
             'transport': {'net': 'IB', 'gdr': False, 'hcas': ['mlx5_0:1'], 'evidence': []}}
    nodes = {'n1': peermem_node(evidence), 'n2': peermem_node(evidence)}
    found = dict(((f['code'], f['host']), f) for f in _diagnose.collective_findings({'fleet': fleet}, nodes))
    assert (('COLLECTIVE_NCCL_PEERMEM_NAME', 'n1') in found) is expect
    if expect:
        assert found[('COLLECTIVE_NCCL_PEERMEM_NAME', 'n1')]['at'] == [['node', 'n1']]
        assert ('COLLECTIVE_GDR_NOT_USED', None) in found


def test_socket_across_nodes_says_why_from_the_log():
    fleet = {'hosts': ['n1', 'n2'], 'benchmark': 'all_reduce_perf', 'verdict': {'status': 'low', 'reasons': ['low']},
             'transport': {'net': 'Socket', 'evidence': [], 'ib_unavailable': {
                 'reason': 'libibverbs', 'line': 'n1:1:1 [0] NCCL INFO Failed to open libibverbs.so[.1]'}}}
    nodes = {'n1': peermem_node('x'), 'n2': peermem_node('x')}
    found = dict(((f['code'], f['host']), f) for f in _diagnose.collective_findings({'fleet': fleet}, nodes))
    socket = found[('COLLECTIVE_SOCKET_TRANSPORT', None)]
    assert 'could not load libibverbs' in socket['cause'] and 'libibverbs' in socket['remedy']
    assert socket['at'] == [['node', 'n1'], ['node', 'n2']]


def test_two_nodes_with_dmabuf_and_shm_disabled_have_no_gpus_of_one_node_to_judge():
    """NVIDIA/nccl-tests#293: NCCL_SHM_DISABLE=1 across two one-GPU nodes changes nothing, and the
    GPUDirect RDMA of the run went through dma-buf."""
    path = os.path.join(HERE, '..', '..', '..', 'fixtures', 'public', 'nccl_info', 'nccl_tests_293_dmabuf_gdrdma_two_nodes.txt')
    with open(path) as handle:
        parsed = _nccl.parse_any(handle.read())
    transport = parsed['transport']
    assert transport['dmabuf_available'] is True and transport['gdr'] is True and transport['net'] == 'IB'
    assert transport['intra_by_host'] == {} and transport['nnodes'] == 2
    assert transport['env'] == {'NCCL_SHM_DISABLE': '1', 'NCCL_NET_GDR_LEVEL': 'SYS'}
    fleet = {'hosts': parsed['hosts'], 'benchmark': 'all_reduce_perf', 'versions': parsed['versions'],
             'verdict': {'status': 'ok', 'reasons': []}, 'transport': transport}
    found = [(f['code'], f['evidence']) for f in _diagnose.collective_findings({'fleet': fleet}, {})]
    assert found == [('COLLECTIVE_GDR_PATH', {'gdr_via': 'dma-buf', 'hcas': ['mlx5_0:1']})]


def test_libibverbs_missing_is_read_from_the_log():
    path = os.path.join(HERE, '..', '..', '..', 'fixtures', 'public', 'nccl_tests', 'nccl_tests_82_broadcast_old_root_no_redop.txt')
    with open(path) as handle:
        transport = _nccl.parse_any(handle.read())['transport']
    assert transport['ib_unavailable']['reason'] == 'libibverbs'


def _iommu_root(host):
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings as F
    return F.finding(F.HOST_IOMMU_TRANSLATED, host, 'iommu', {}, 'the IOMMU translates DMA', at=[('node', host)])


def test_the_runs_own_transport_wins_over_a_node_wide_setting():
    """With the variables set, the node's slow run is explained by how its GPUs talked, not by an IOMMU in
    translation mode on the same node (NVLink peer-to-peer does not cross the IOMMU)."""
    nodes = _collective.judge_nodes({'nodeA': result('nodeA.txt', ENV_A), 'nodeB': result('nodeB.txt', ENV_B)})
    findings = collective_rules.local_collective_findings(nodes) + [_iommu_root('nodeB')]
    by = dict(((f['code'], f['host']), f) for f in _diagnose.link_causes(findings))
    for code in ('COLLECTIVE_NODE_SLOW', 'COLLECTIVE_BUSBW_LOW'):
        assert by[(code, 'nodeB')]['explained_by'] == 'COLLECTIVE_GPUS_NOT_P2P@nodeB/all_reduce_perf'
    assert by[('COLLECTIVE_GPUS_NOT_P2P', 'nodeB')]['explained_by'] is None   # the variables, not the IOMMU


def test_without_variables_an_iommu_that_translates_explains_why_p2p_was_impossible():
    plain = result('nodeB.txt', {})
    plain['transport']['env'] = {}
    nodes = _collective.judge_nodes({'solo': plain})
    findings = collective_rules.local_collective_findings(nodes) + [_iommu_root('solo')]
    by = dict(((f['code'], f['host']), f) for f in _diagnose.link_causes(findings))
    assert by[('COLLECTIVE_GPUS_NOT_P2P', 'solo')]['explained_by'] == 'HOST_IOMMU_TRANSLATED@solo/iommu'
    assert by[('COLLECTIVE_BUSBW_LOW', 'solo')]['explained_by'] == 'HOST_IOMMU_TRANSLATED@solo/iommu'


def test_a_run_whose_nodes_gave_no_facts_is_still_judged():
    fleet = {'hosts': ['a', 'b'], 'benchmark': 'all_reduce_perf', 'verdict': {'status': 'low', 'reasons': ['low']},
             'transport': {'net': 'Socket', 'evidence': []}}
    found = dict((f['code'], f) for f in _diagnose.collective_findings({'fleet': fleet}, {}))
    assert found['COLLECTIVE_SOCKET_TRANSPORT']['at'] == [['run']]


@pytest.mark.parametrize('busbw, status', [(330.0, 'ok'), (250.0, 'warning'), (200.0, 'warning'), (150.0, 'low')])
def test_nvlink_verdict_is_an_error_only_far_below(busbw, status):
    res = result('nodeA.txt', ENV_A)
    res['max_busbw_gbs'] = busbw
    nodes = _collective.judge_nodes({'solo': res})
    assert nodes['hosts']['solo']['verdict']['status'] == status


def test_a_node_whose_run_loaded_another_nccl_than_most_is_named_and_only_it():
    def local(**versions):
        return {'hosts': dict((host, {'versions': {'library_version': version} if version else None})
                              for host, version in versions.items())}
    assert collective_rules.version_skew(local(n1='2.21.5+cuda12.4', n2='2.21.5+cuda12.4', n3=None)) == []
    found = collective_rules.version_skew(local(n1='2.21.5+cuda12.4', n2='2.21.5+cuda12.4', n3='2.18.1+cuda12.1'))
    assert [(f['code'], f['host'], f['subject'], f['severity']) for f in found] == [('COLLECTIVE_NCCL_VERSION_SKEW', 'n3', 'nccl', 'warning')]
    assert 'loaded NCCL 2.18.1+cuda12.1, 2 of 3 nodes loaded 2.21.5+cuda12.4' in found[0]['cause']
    # No release held by most nodes: each node is named with what was seen, none is called the fleet's.
    tie = collective_rules.version_skew(local(n1='2.21.5', n2='2.18.1'))
    assert [f['host'] for f in tie] == ['n1', 'n2'] and all('none by most' in f['cause'] for f in tie)
    # Through the engine: the rule is declared and ordered like the others.
    findings = _diagnose.diagnose({}, None, {'nodes': local(n1='2.21.5', n2='2.21.5', n3='2.19.3')})
    assert [(f['code'], f['host']) for f in findings if f['code'] == 'COLLECTIVE_NCCL_VERSION_SKEW'] == [('COLLECTIVE_NCCL_VERSION_SKEW', 'n3')]
