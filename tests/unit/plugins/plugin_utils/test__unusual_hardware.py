# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Healthy but unusual hardware is not called broken: every rule takes a device's role from
module_utils/_rails.py (compute rail, storage, management) and its order from its position.
The nodes are tests/sim profiles read with the facts modules' readers (tests/sim/node_facts.py)."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _rails
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _group_search, _schedule
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose, _fleet, _nccl_env, _roce_rules
from tests.sim import node_facts


@pytest.fixture(scope='module')
def sim(tmp_path_factory):
    cache = {}

    def facts(profile, *faults, **kwargs):
        key = (profile, faults, tuple(kwargs.get('targets') or ()))
        if key not in cache:
            cache[key] = node_facts.read(tmp_path_factory.mktemp('unusual'), profile, faults, targets=kwargs.get('targets'))
        return copy.deepcopy(cache[key])
    return facts


def above_info(found):
    return sorted((f['code'], f['host'], f['subject']) for f in found if f['severity'] != 'info')


def port(rate, width, layer='Ethernet', state='ACTIVE'):
    return {'port': 1, 'state': state, 'phys_state': 'LinkUp', 'rate_gbps': rate, 'width': width, 'link_layer': layer,
            'rate': '%g Gb/sec (%s)' % (rate, width), 'counters': {}, 'gids': [{'index': 3, 'type': 'RoCE v2', 'ipv4': '10.0.0.1'}]}


def device(name, hca_type, *ports):
    return {'name': name, 'hca_type': hca_type, 'board_id': 'MT_%s' % hca_type, 'ports': list(ports)}


# ---------------------------------------------------------------------------- IB_RATE_DEGRADED

def test_rate_compared_only_within_model_and_role():
    ib = {'devices': [device('mlx5_0', 'MT4129', port(400.0, '4X', 'InfiniBand')),
                      device('mlx5_8', 'MT41692', port(200.0, '2X')),
                      device('mlx5_9', 'MT4125', port(100.0, '4X')), device('mlx5_10', 'MT4125', port(100.0, '4X')),
                      device('mlx5_11', 'MT4127', port(25.0, '1X'))]}
    # A 100 GbE storage card next to a 200 GbE one of another model, a 25 GbE (1X on Ethernet) port: healthy.
    assert _diagnose.ib_findings('n', ib) == []
    # The same model trained apart: the slower port of the pair is degraded, named on its HCA.
    ib['devices'][3]['ports'][0].update(rate_gbps=50.0, width='2X')
    found = _diagnose.ib_findings('n', ib)
    assert [(f['code'], f['subject']) for f in found] == [('IB_RATE_DEGRADED', 'mlx5_10/1')]
    assert found[0]['at'] == [['hca', 'n', 'mlx5_10']] and found[0]['evidence']['others_gbps'] == 100.0
    assert 'of its model and role (compute, 100.0 Gb/s)' in found[0]['cause']


def test_1x_infiniband_is_a_fault_in_any_role():
    ib = {'devices': [device('mlx5_0', 'MT4129', port(400.0, '4X', 'InfiniBand')),
                      device('mlx5_9', 'MT4123', port(25.0, '1X', 'InfiniBand'))]}
    found = _diagnose.ib_findings('n', ib, {'mlx5_0': {'role': 'compute'}, 'mlx5_9': {'role': 'storage'}})
    assert [(f['code'], f['subject'], f['severity']) for f in found] == [('IB_RATE_DEGRADED', 'mlx5_9/1', 'error')]
    assert found[0]['cause'].startswith('the link trained at 25 Gb/sec (1X), on a single lane: ')


def test_a_degraded_link_names_its_width_once():
    # sysfs's rate string names the width and speed already (tests/fixtures/public/sysfs_ib/procfs_mlx5_0_1x_edr_hwcounters.txt: "25 Gb/sec (1X EDR)").
    slow = port(100.0, '1X', 'InfiniBand')
    slow['rate'] = '100 Gb/sec (1X NDR)'
    ib = {'devices': [device('mlx5_0', 'MT4129', port(400.0, '4X', 'InfiniBand')), device('mlx5_1', 'MT4129', slow)]}
    found = _diagnose.ib_findings('n', ib, {'mlx5_0': {'role': 'compute'}, 'mlx5_1': {'role': 'compute'}})
    assert [f['code'] for f in found] == ['IB_RATE_DEGRADED']
    assert found[0]['cause'].startswith('the link trained at 100 Gb/sec (1X NDR), below the node')
    assert found[0]['cause'].count('1X') == 1
    # A rate string without the width (a hand-made snapshot) still gets it.
    slow['rate'] = '100 Gb/sec'
    found = _diagnose.ib_findings('n', ib, {'mlx5_0': {'role': 'compute'}, 'mlx5_1': {'role': 'compute'}})
    assert found[0]['cause'].startswith('the link trained at 100 Gb/sec (1X), below the node')


def test_roce_without_v2_gid_on_a_storage_port_is_info():
    ib = {'devices': [device('mlx5_9', 'MT4125', dict(port(100.0, '4X'), gids=[{'index': 0, 'type': 'IB/RoCE v1'}]))]}
    found = _diagnose.ib_findings('n', ib, {'mlx5_9': {'role': 'storage', 'why': 'near no GPU'}})
    assert [(f['code'], f['severity']) for f in found] == [('ROCE_NO_V2_GID', 'info')]
    assert _diagnose.ib_findings('n', ib)[0]['severity'] == 'error'     # a compute rail: still an error


# ---------------------------------------------------------------------------- the profiles

@pytest.mark.parametrize('profile', ['nvidia_h100_8x_ndr_storage', 'nvidia_h100_8x_ndr_12hca', 'nvidia_h200_8x_ndr',
                                     'amd_mi300x_roce_mgmt'])
def test_unusual_node_alone_has_nothing_above_info(sim, profile):
    assert above_info(_diagnose.diagnose({'n': sim(profile)})) == []


def test_extra_storage_card_on_one_node_is_info(sim):
    nodes = {'h1': sim('nvidia_h100_8x_ndr'), 'h2': sim('nvidia_h100_8x_ndr'), 'h3': sim('nvidia_h100_8x_ndr_storage')}
    found = _diagnose.diagnose(nodes)
    assert above_info(found) == []
    other = [f for f in found if f['code'] == 'FLEET_DIFFERS']
    assert [(f['host'], f['subject'], f['severity']) for f in other] == [('h3', 'other_hcas', 'info')]
    assert 'did not enumerate' not in other[0]['remedy']
    # Two nodes only: no split is reported for a card one of them has more.
    assert above_info(f for f in _diagnose.diagnose({'h1': nodes['h1'], 'h3': nodes['h3']}) if f['code'].startswith('FLEET_')) == []
    # The culprit search does not name it from its facts.
    assert _group_search.blamed(found) == []


def test_a_missing_rail_beside_an_extra_storage_card_is_still_missing(sim):
    nodes = {'h1': sim('nvidia_h100_8x_ndr'), 'h2': sim('nvidia_h100_8x_ndr'),
             'h3': sim('nvidia_h100_8x_ndr_storage', 'hca_missing', targets=['mlx5_2'])}
    found = above_info(_diagnose.diagnose(nodes))
    assert found == [('FLEET_HW_MISSING', 'h3', 'hca_count')]


def test_twelve_hcas_and_two_gpu_models_in_one_fleet(sim):
    nodes = {'t1': sim('nvidia_h100_8x_ndr_12hca'), 'p1': sim('nvidia_h100_8x_ndr'), 'p2': sim('nvidia_h100_8x_ndr'),
             'g1': sim('nvidia_h200_8x_ndr'), 'g2': sim('nvidia_h200_8x_ndr')}
    assert above_info(_diagnose.diagnose(nodes)) == []
    kinds = set(_fleet.node_kind(node) for node in nodes.values())
    assert kinds == set(['GPU nvidia 0x2330', 'GPU nvidia 0x2335'])


def test_management_port_lossless_checks_and_nccl(sim):
    node = sim('amd_mi300x_roce_mgmt')
    role_of = _rails.node_roles(node)
    found = _roce_rules.roce_findings('n', node['roce'], role_of)
    # Its DCB could not be read: said as info, on its HCA; no PFC/ECN finding for it.
    assert [(f['code'], f['severity'], f['subject']) for f in found] == [('ROCE_QOS_UNKNOWN', 'info', 'eno8303')]
    assert found[0]['at'] == [['hca', 'n', 'mlx5_8']] and 'not a compute rail' in found[0]['cause']
    # Judged as a compute port (no roles), the same port is a warning: the role is what changed.
    assert 'ROCE_QOS_UNKNOWN' in [f['code'] for f in _roce_rules.roce_findings('n', node['roce']) if f['severity'] == 'warning']
    settings = _nccl_env.recommend(node['ib'], node['gdr'], node['roce'])
    assert settings['settings']['NCCL_IB_HCA'] == '=' + ','.join('mlx5_%d:1' % i for i in range(8))
    assert settings['settings']['NCCL_IB_TC'] == 106      # the compute rails' lossless ToS
    nodes = {'node': node, 'peer1': sim('amd_mi300x_roce'), 'peer2': sim('amd_mi300x_roce')}
    assert above_info(_diagnose.diagnose(nodes)) == []


def test_nccl_ib_hca_of_the_node_decides_the_roles(sim):
    node = sim('amd_mi300x_roce_mgmt')
    node['nccl_ib_hca'] = '=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1,mlx5_8:1'
    # The user sends collectives over the management port too: then it is a compute port, and its
    # unread DCB and missing PFC are what they are.
    found = _diagnose.diagnose({'n': node})
    assert ('ROCE_QOS_UNKNOWN', 'n', 'eno8303') in above_info(found)


# ---------------------------------------------------------------------------- benchmark rails

def test_rail_i_is_the_same_slot_on_every_node_with_twelve_hcas(sim):
    twelve, plain, storage = sim('nvidia_h100_8x_ndr_12hca'), sim('nvidia_h100_8x_ndr'), sim('nvidia_h100_8x_ndr_storage')
    plans = dict((host, _bench.node_plan(facts['ib'], facts['gdr']))
                 for host, facts in (('t', twelve), ('p', plain), ('s', storage)))
    assert plans['t']['hcas'] == ['mlx5_%d' % i for i in range(2, 10)]
    assert plans['p']['hcas'] == plans['s']['hcas'] == ['mlx5_%d' % i for i in range(8)]
    table = _schedule.rail_table(['p', 's', 't'], dict((host, plan['hcas']) for host, plan in plans.items()))
    pci = dict((host, dict((d['name'], d['pci_address']) for d in facts['ib']['devices']))
               for host, facts in (('t', twelve), ('p', plain), ('s', storage)))
    assert len(table) == 8
    for rail in table:
        # Rail i is one PCI slot (and one GPU) on every node, whatever the names.
        assert len(set(pci[host][hca] for host, hca in rail['hcas'].items())) == 1, rail
        assert len(set(plans[host]['gpu_by_hca'][hca]['gpu'] for host, hca in rail['hcas'].items())) == 1, rail
        assert rail['missing'] == []
    # Text order would have paired mlx5_10 (a BlueField-3 port) with rail 2.
    assert 'mlx5_10' not in plans['t']['hcas'] and 'mlx5_0' not in plans['t']['hcas']


def test_fabric_bench_hcas_keeps_the_users_order(sim):
    twelve = sim('nvidia_h100_8x_ndr_12hca')
    assert _bench.node_plan(twelve['ib'], twelve['gdr'], ['mlx5_9', 'mlx5_10', 'mlx5_2'])['hcas'] == ['mlx5_9', 'mlx5_10', 'mlx5_2']
    assert _bench.node_plan(twelve['ib'], twelve['gdr'], 'mlx5_11, mlx5_3')['hcas'] == ['mlx5_11', 'mlx5_3']


def test_fabric_report_reads_the_nodes_nccl_ib_hca(sim):
    from ansible_collections.hpc.gpu_fabric.plugins.filter.report import fabric_report
    node = sim('amd_mi300x_roce_mgmt')
    facts = {'gpu_fabric_ib': node['ib'], 'gpu_fabric_gdr': node['gdr'], 'gpu_fabric_roce': node['roce']}

    def warnings(**hv):
        report = fabric_report({'n': dict(hv, ansible_facts=facts)}, ['n'])
        return sorted((f['code'], f['subject']) for f in report['findings'] if f['severity'] != 'info')
    assert warnings() == []
    # The job's environment sends NCCL over every port, the management port included: now it is judged.
    assert ('ROCE_QOS_UNKNOWN', 'eno8303') in warnings(fabric_collective_env={'NCCL_IB_HCA': 'mlx5'})
    assert ('ROCE_QOS_UNKNOWN', 'eno8303') in warnings(nccl_conf_overrides={'NCCL_IB_HCA': '^mlx5_0'})
    assert warnings(nccl_conf_overrides={'NCCL_IB_HCA': '=mlx5_0:1,mlx5_1:1'}) == []
