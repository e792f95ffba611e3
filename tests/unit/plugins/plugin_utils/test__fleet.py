# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _rails
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import roce_active_mtu
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose, _fleet, _rule
from tests.sim import node_facts


# ---------------------------------------------------------------------------- simulated nodes

@pytest.fixture(scope='module')
def sim(tmp_path_factory):
    """facts(profile, *faults, targets=None): facts of a simulated node, rendered once per combination."""
    cache = {}

    def facts(profile, *faults, **kwargs):
        key = (profile, faults, tuple(kwargs.get('targets') or ()))
        if key not in cache:
            cache[key] = node_facts.read(tmp_path_factory.mktemp('fleet'), profile, faults, targets=kwargs.get('targets'))
        return copy.deepcopy(cache[key])
    return facts


def fleet(nodes, **kwargs):
    """_fleet.fleet_findings as _diagnose.diagnose calls it: given the findings so far (of the rules
    whose findings it reads: ib_findings, gdr_findings, mtu_findings)."""
    roles = dict((host, _rails.node_roles(node)) for host, node in nodes.items())
    so_far = [f for host in sorted(nodes) for f in _diagnose.ib_findings(host, nodes[host].get('ib'), roles[host])
              + _diagnose.gdr_findings(host, nodes[host].get('gdr'), nodes[host].get('ib'), roles[host])]
    return _fleet.fleet_findings(nodes, so_far + _diagnose.mtu_findings(nodes, roles), **kwargs)


def fleet_codes(nodes, **kwargs):
    return sorted((f['code'], f['host'], f['subject'], f['severity']) for f in fleet(nodes, **kwargs))


def test_a_node_with_an_hca_that_did_not_enumerate_is_no_longer_ok(sim):
    nodes = {'h1': sim('nvidia_h100_8x_ndr'), 'h2': sim('nvidia_h100_8x_ndr'), 'h3': sim('nvidia_h100_8x_ndr', 'hca_missing')}
    # Alone, h3 is checked against itself only: 8 GPUs and 7 compute rails, one GPU without a NIC of its own
    # (plugin_utils/diagnosis/_inventory.py); beside its peers the comparison names the missing HCA instead.
    assert [(f['code'], f['subject']) for f in _diagnose.diagnose({'h3': nodes['h3']}) if f['severity'] != 'info'] == \
        [('INVENTORY_GPU_WITHOUT_RAIL', 'node')]
    found = [f for f in _diagnose.diagnose(nodes) if f['severity'] != 'info']
    assert [(f['code'], f['host'], f['subject'], f['severity'], f['layer']) for f in found] == \
        [('FLEET_HW_MISSING', 'h3', 'hca_count', 'error', 'ib')]
    missing = found[0]
    assert missing['explained_by'] is None
    # The compute rails are counted (the BlueField-3 beside them is other_hcas').
    assert missing['evidence'] == {'value': 7, 'most_nodes': 8, 'nodes_with_most': 2, 'nodes_compared': 3,
                                   'kind': 'GPU nvidia 0x2330'}
    assert missing['cause'] == ('RDMA devices of the compute rails (/sys/class/infiniband): 7 here, 8 on 2 of the 3 nodes of its '
                                'kind (GPU nvidia 0x2330)')
    assert 'lspci' in missing['remedy']


def test_missing_storage_nic_is_one_finding_not_one_per_attribute_it_takes_along(sim):
    # mlx5_8 is the only BlueField-3 (MT41692) and the only RoCE port: the models, firmware,
    # board ids, rails and RoCE MTU of the node all lose it, and all of that is the missing card.
    # No compute rail is missing: the card is a storage/management one (other_hcas), a warning.
    nodes = {'h1': sim('nvidia_h100_8x_ndr'), 'h2': sim('nvidia_h100_8x_ndr'),
             'h3': sim('nvidia_h100_8x_ndr', 'hca_missing', targets=['mlx5_8'])}
    assert fleet_codes(nodes) == [('FLEET_DIFFERS', 'h3', 'other_hcas', 'warning')]
    found = fleet(nodes)
    assert found[0]['evidence']['value'] == [] and found[0]['evidence']['most_nodes'] == ['management MT41692 Ethernet 200 Gb/s']
    assert 'did not enumerate' not in found[0]['remedy'] and 'lspci' in found[0]['remedy']


def test_older_firmware_against_the_peers(sim):
    nodes = dict(('h%d' % i, sim('nvidia_h100_8x_ndr')) for i in range(1, 4))
    nodes['h4'] = sim('nvidia_h100_8x_ndr', 'fw_mismatch')
    found = fleet(nodes)
    assert [(f['code'], f['host'], f['subject'], f['severity']) for f in found] == [('FLEET_DIFFERS', 'h4', 'firmware', 'warning')]
    assert found[0]['evidence']['value'] == ['MT4129 28.39.1000', 'MT41692/management 32.38.3056']
    assert found[0]['evidence']['most_nodes'] == ['MT4129 28.41.1000', 'MT41692/management 32.38.3056']
    assert 'mlxfwmanager' in found[0]['remedy']


def test_two_nodes_that_differ_name_both_values_and_no_culprit(sim):
    nodes = {'h1': sim('nvidia_h100_8x_ndr'), 'h2': sim('nvidia_h100_8x_ndr', 'fw_mismatch')}
    found = fleet(nodes)
    assert [(f['code'], f['host'], f['subject'], f['severity']) for f in found] == \
        [('FLEET_SPLIT', None, 'firmware (GPU nvidia 0x2330)', 'warning')]
    assert found[0]['evidence']['values'] == [
        {'value': ['MT4129 28.39.1000', 'MT41692/management 32.38.3056'], 'hosts': ['h2']},
        {'value': ['MT4129 28.41.1000', 'MT41692/management 32.38.3056'], 'hosts': ['h1']}]
    assert 'two nodes, so neither is the odd one' in found[0]['cause']
    # The report blames neither node for it (a fleet-wide finding, no 'hosts').
    assert 'hosts' not in found[0]


def test_different_kinds_are_not_compared(sim):
    nodes = {'h100': sim('nvidia_h100_8x_ndr', 'hca_missing'), 'metax': sim('metax_c500_cx7'),
             'amd': sim('amd_mi300x_roce'), 'vm': sim('no_rdma_vm')}
    assert fleet(nodes) == []
    assert _fleet.node_kind(nodes['metax']) == 'GPU metax 0x4001'
    assert _fleet.node_kind(nodes['vm']) == 'no GPU, no HCA'
    # Three nodes of one kind beside them: only that kind is judged.
    nodes.update(('h%d' % i, sim('nvidia_h100_8x_ndr')) for i in range(1, 3))
    assert fleet_codes(nodes) == [('FLEET_HW_MISSING', 'h100', 'hca_count', 'error')]


@pytest.mark.parametrize('profile', ['nvidia_h100_8x_ndr', 'metax_c500_cx7', 'amd_mi300x_roce', 'homelab_cx4',
                                     'no_rdma_vm', 'h200x2_no_rdma'])
def test_identical_nodes_have_nothing_to_report(sim, profile):
    assert fleet(dict(('n%d' % i, sim(profile)) for i in range(3))) == []


@pytest.mark.parametrize('fault', ['port_down', 'port_polling', 'rate_degraded_1x', 'roce_no_v2_gid', 'peermem_not_loaded',
                                   'cross_numa', 'acs_enabled', 'error_counters'])
def test_what_another_rule_reports_is_not_reported_again(sim, fault):
    profile = 'amd_mi300x_roce' if fault == 'roce_no_v2_gid' else 'nvidia_h100_8x_ndr'
    nodes = {'h1': sim(profile), 'h2': sim(profile), 'h3': sim(profile, fault)}
    assert fleet(nodes) == []
    # Nor as a split between two nodes.
    assert fleet({'h1': nodes['h1'], 'h3': nodes['h3']}) == []


# ---------------------------------------------------------------------------- hand-made nodes

def port(rate=400.0, layer='InfiniBand', state='ACTIVE', mtu=None, gid=3, width='4X'):
    gids = []
    if layer == 'Ethernet':
        gids = [{'index': i, 'type': 'IB/RoCE v1', 'ipv4': None} for i in range(gid)]
        gids.append({'index': gid, 'type': 'RoCE v2', 'ipv4': '10.0.0.1'})
    return {'port': 1, 'state': state, 'phys_state': 'LinkUp' if state == 'ACTIVE' else 'Disabled', 'rate_gbps': rate,
            'rate': '%g Gb/sec (%s NDR)' % (rate, width), 'width': width, 'link_layer': layer,
            'active_mtu': roce_active_mtu(mtu or 9000) if layer == 'Ethernet' else 4096,
            'netdev_mtu': mtu or (9000 if layer == 'Ethernet' else 4092), 'counters': {}, 'gids': gids}


def node(gpus=8, hcas=8, gpu_model=('nvidia', '0x2330'), model='MT4129', fw='28.41.1000', board='MT_0000000838',
         kernel='5.15.0-119-generic', ofed='MLNX_OFED_LINUX-24.10-1.1.4.0', modules=('nvidia_peermem',), ports=None):
    ports = ports or [port() for _i in range(hcas)]
    devices = [{'name': 'mlx5_%d' % i, 'hca_type': model, 'fw_ver': fw, 'board_id': board, 'ports': [p]}
               for i, p in enumerate(ports)]
    gdr = {'gpus': [{'name': 'GPU%d' % i, 'vendor': gpu_model[0], 'device_id': gpu_model[1]} for i in range(gpus)],
           'nics': [{'name': d['name']} for d in devices], 'topology': [], 'gdr_ready': True,
           'peer_memory': {'paths': {'nvidia': {'detected': True}}, 'modules_loaded': list(modules),
                           'clients': {'nv_mem': '570.124.06'}},
           'kernel': {'release': kernel}, 'ofed': {'version': ofed}, 'dmabuf': {'possible': True}}
    return {'ib': {'devices': devices}, 'gdr': gdr}


def three(odd, **kwargs):
    return fleet_codes({'a': node(), 'b': node(), 'c': odd}, **kwargs)


@pytest.mark.parametrize('odd, expected', [
    (node(gpus=7), ('FLEET_HW_MISSING', 'c', 'gpu_count', 'error')),
    (node(gpus=9), ('FLEET_DIFFERS', 'c', 'gpu_count', 'warning')),
    (node(hcas=7), ('FLEET_HW_MISSING', 'c', 'hca_count', 'error')),
    (node(hcas=9), ('FLEET_DIFFERS', 'c', 'hca_count', 'warning')),
    # Every rail trained at HDR: the node agrees with itself (no IB_RATE_DEGRADED), not with its peers.
    (node(ports=[port(200.0) for _i in range(8)]), ('FLEET_RAIL_SLOWER', 'c', 'rails', 'error')),
    (node(ports=[port(400.0, 'Ethernet') for _i in range(8)]), ('FLEET_RAIL_SLOWER', 'c', 'rails', 'error')),
    (node(ports=[port(800.0) for _i in range(8)]), ('FLEET_DIFFERS', 'c', 'rails', 'warning')),
    (node(model='MT4125'), ('FLEET_DIFFERS', 'c', 'hca_model', 'warning')),
    (node(fw='28.39.1000'), ('FLEET_DIFFERS', 'c', 'firmware', 'warning')),
    (node(board='DEL0000000036'), ('FLEET_DIFFERS', 'c', 'board_id', 'warning')),
    (node(kernel='5.14.0-570.12.1.el9_6.x86_64'), ('FLEET_DIFFERS', 'c', 'kernel', 'warning')),
    (node(ofed='MLNX_OFED_LINUX-23.10-2.1.3.1'), ('FLEET_DIFFERS', 'c', 'ofed', 'warning')),
    (node(ofed=None), ('FLEET_DIFFERS', 'c', 'ofed', 'warning')),
    (node(modules=('nv_peer_mem',)), ('FLEET_DIFFERS', 'c', 'peer_memory', 'warning')),
])
def test_each_attribute(odd, expected):
    assert three(odd) == [expected]


def test_a_gpu_node_without_any_rdma_device_is_said_once():
    found = [(f['code'], f['subject']) for f in _diagnose.diagnose({'a': node(), 'b': node(), 'c': node(hcas=0)})
             if f['host'] == 'c']
    # Either a per-node rule says it (_fleet.NO_RDMA_CODES) or the comparison does, not both,
    # and the ports, models and firmware it lacks are not findings of their own.
    said = [code for code, _subject in found if code in _fleet.NO_RDMA_CODES + ('FLEET_HW_MISSING',)]
    assert len(said) == 1, found
    assert not [subject for code, subject in found if code.startswith('FLEET_') and subject != 'hca_count'], found


def test_roce_netdev_mtu_and_gid_index():
    def roce(**kw):
        return node(ports=[port(400.0, 'Ethernet', **kw) for _i in range(8)])

    nodes = {'a': roce(), 'b': roce(), 'c': roce(mtu=4200), 'd': roce(gid=1)}
    # 4200 still carries a 4096-byte RDMA MTU: MTU_MISMATCH cannot see it, the comparison does.
    assert fleet_codes(nodes) == [('FLEET_DIFFERS', 'c', 'roce_mtu', 'warning'), ('FLEET_DIFFERS', 'd', 'gid_index', 'warning')]
    found = dict((f['subject'], f) for f in fleet(nodes))
    assert found['roce_mtu']['evidence']['value'] == [4200] and found['roce_mtu']['evidence']['most_nodes'] == [9000]
    assert found['gid_index']['evidence']['value'] == ['1'] and found['gid_index']['evidence']['most_nodes'] == ['3']
    # 1500 allows only a 1024-byte RDMA MTU: that is MTU_MISMATCH's, not reported twice.
    nodes['c'] = roce(mtu=1500)
    diagnosed = [(f['code'], f['host']) for f in _diagnose.diagnose(nodes) if f['host'] == 'c']
    assert ('FLEET_DIFFERS', 'c') not in diagnosed and ('MTU_MISMATCH', 'c') in diagnosed


def test_nccl_settings_are_compared_where_nothing_else_explains_them():
    nodes = {'a': node(), 'b': node(), 'c': node()}
    settings = dict((host, {'settings': {'NCCL_IB_HCA': '=mlx5_0:1,mlx5_1:1', 'NCCL_NET_GDR_LEVEL': 'PIX'}}) for host in nodes)
    assert fleet_codes(nodes, nccl=settings) == []
    settings['c']['settings']['NCCL_NET_GDR_LEVEL'] = 'SYS'
    found = fleet(nodes, nccl=settings)
    assert [(f['code'], f['host'], f['subject']) for f in found] == [('FLEET_DIFFERS', 'c', 'nccl')]
    assert found[0]['evidence']['value'] == ['NCCL_IB_HCA 2 port(s)', 'NCCL_IB_GID_INDEX not set', 'NCCL_NET_GDR_LEVEL SYS']
    # A node with one HCA fewer gets one port fewer in NCCL_IB_HCA: that is the missing HCA, said once.
    nodes['c'] = node(hcas=7)
    assert fleet_codes(nodes) == [('FLEET_HW_MISSING', 'c', 'hca_count', 'error')]


def test_majority_must_be_strict_and_a_tie_blames_no_one():
    nodes = {'a': node(), 'b': node(), 'c': node(fw='28.39.1000'), 'd': node(fw='28.39.1000')}
    found = fleet(nodes)
    assert [(f['code'], f['host'], f['subject']) for f in found] == [('FLEET_SPLIT', None, 'firmware (GPU nvidia 0x2330)')]
    assert found[0]['evidence']['values'] == [{'value': ['MT4129 28.39.1000'], 'hosts': ['c', 'd']},
                                              {'value': ['MT4129 28.41.1000'], 'hosts': ['a', 'b']}]
    assert 'no value is held by more than half of the 4 nodes' in found[0]['cause']
    # Three values among four nodes: still no majority.
    nodes['d'] = node(fw='28.43.1000')
    assert [len(v['hosts']) for v in fleet(nodes)[0]['evidence']['values']] == [2, 1, 1]
    # Three against two: a majority, each of the two is named.
    nodes.update(d=node(), e=node(fw='28.43.1000'))
    assert fleet_codes(nodes) == [('FLEET_DIFFERS', 'c', 'firmware', 'warning'), ('FLEET_DIFFERS', 'e', 'firmware', 'warning')]


def test_a_down_or_degraded_port_is_not_a_missing_hca_nor_a_slower_rail():
    down = node(ports=[port()] * 7 + [port(40.0, state='DOWN')])
    degraded = node(ports=[port()] * 7 + [port(100.0, width='1X')])
    assert three(down) == [] and three(degraded) == []
    # Even where the nodes with the owned ports are the majority, the healthy one is not blamed.
    assert fleet_codes({'a': down, 'b': copy.deepcopy(down), 'c': node()}) == []
    found = set((f['code'], f['host']) for f in _diagnose.diagnose({'a': node(), 'b': node(), 'c': down}))
    assert ('IB_PORT_DOWN', 'c') in found and not any(code.startswith('FLEET_') for code, _host in found)


def test_nodes_without_gpus_are_grouped_by_hca_model_and_without_gdr_facts_apart():
    storage = dict((name, node(gpus=0)) for name in 'abc')
    storage['c'] = node(gpus=0, hcas=7)
    assert _fleet.node_kind(storage['a']) == 'no GPU, HCA MT4129'
    assert fleet_codes(storage) == [('FLEET_HW_MISSING', 'c', 'hca_count', 'error')]
    # Without gdr facts the GPU model is unknown: such nodes meet only each other, on what ib shows.
    bare = dict((name, {'ib': node()['ib'], 'gdr': None}) for name in 'xyz')
    bare['z']['ib']['devices'].pop()
    assert _fleet.node_kind(bare['x']) == 'GPU unknown (no gdr facts), HCA MT4129'
    assert fleet_codes(dict(storage, **bare)) == [('FLEET_HW_MISSING', 'c', 'hca_count', 'error'),
                                                  ('FLEET_HW_MISSING', 'z', 'hca_count', 'error')]
    assert fleet({'only': node()}) == [] and fleet({}) == []


def test_missing_hca_explains_the_failed_pair_and_the_culprit():
    nodes = {'a': node(), 'b': node(), 'c': node(hcas=7)}
    bench = {'pairs': [{'server': 'a', 'client': 'c', 'rail': 7, 'memory': 'host', 'status': 'failed', 'verdict': 'failed',
                        'reasons': ['no device mlx5_7 on c'], 'failure': {'kind': 'no_device'}}]}
    collective = {'search': {'culprits': ['c'], 'unresolved': [], 'runs': [{'group': ['c'], 'status': 'low'}]}}
    found = dict((f['code'], f) for f in _diagnose.diagnose(nodes, bench, collective))
    root = found['FLEET_HW_MISSING']
    assert root['explained_by'] is None
    assert found['BENCH_PAIR_FAILED']['explained_by'] == root['id']
    assert found['COLLECTIVE_CULPRIT']['explained_by'] == root['id']


def test_no_circular_import():
    # Each module imports on its own, in a fresh interpreter, whichever comes first.
    for module in ('diagnosis._fleet', 'diagnosis._diagnose'):
        subprocess.run([sys.executable, '-c', 'import ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.%s' % module],
                       check=True)


def test_the_fleet_reads_the_findings_so_far_and_runs_no_rule():
    # A port down is IB_PORT_DOWN's (ib_findings): given as a finding so far, the comparison leaves
    # the node's NCCL settings (which leave the port out) to it; not given, they are a difference.
    down = node()
    down['ib']['devices'][0]['ports'][0].update(state='DOWN', phys_state='Polling')
    nodes = {'a': node(), 'b': node(), 'c': down}
    assert [(f['code'], f['host'], f['subject']) for f in _fleet.fleet_findings(nodes)] == [('FLEET_DIFFERS', 'c', 'nccl')]
    assert fleet_codes(nodes) == []
    # Every code those rules can give (their declarations, which the engine enforces) is one the fleet reads
    # (PORT_CODES, GDR_CODES, MTU_CODES), and the fleet rule declares that it reads them.
    rules = dict((item.name, item) for item in _rule.RULES)
    for name, codes in (('_node.port_states', _fleet.PORT_CODES), ('_node.fleet_mtu', _fleet.MTU_CODES),
                        ('_node.gpudirect', _fleet.GDR_CODES)):
        assert rules[name].produces and set(rules[name].produces) <= set(codes), name
        assert set(codes) <= set(rules['_fleet.consistency'].reads)
