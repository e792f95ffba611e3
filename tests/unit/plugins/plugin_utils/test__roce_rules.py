# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""RoCE lossless rules (plugin_utils/diagnosis/_roce_rules.py), the fleet attribute and NCCL_IB_TC."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings as F
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose, _nccl_env, _roce_rules
from tests.sim import node_facts


@pytest.fixture(scope='module')
def healthy(tmp_path_factory):
    return node_facts.read(str(tmp_path_factory.mktemp('ok') / 'n'), 'amd_mi300x_roce')


def facts(tmp_path, *names):
    return node_facts.read(str(tmp_path / 'n'), 'amd_mi300x_roce', names)


def codes(found):
    return sorted(f['code'] for f in found)


def test_healthy_has_no_finding(healthy):
    assert _roce_rules.roce_findings('n', healthy['roce']) == []
    assert _roce_rules.roce_findings('n', None) == []


@pytest.mark.parametrize('fault, code', [
    ('roce_trust_pcp', 'ROCE_TRUST_PCP'), ('roce_pfc_off', 'ROCE_PFC_OFF'), ('roce_ecn_off', 'ROCE_ECN_OFF'),
    ('roce_cnp_lossy', 'ROCE_CNP_LOSSY'), ('roce_tos_default', 'ROCE_TC_NOT_LOSSLESS'),
    ('roce_mtu_low', 'ROCE_MTU_MISMATCH'), ('roce_congestion', 'ROCE_CONGESTION'),
])
def test_each_fault_its_finding(tmp_path, fault, code):
    found = _roce_rules.roce_findings('n', facts(tmp_path, fault)['roce'])
    assert codes(found) == [code]
    node_wide = fault not in ('roce_mtu_low', 'roce_congestion')
    assert (found[0]['subject'] == 'all RoCE ports') == node_wide
    assert found[0]['remedy'] and found[0]['evidence']['ports']


def test_trust_pcp_severity_follows_the_tos(tmp_path):
    roce = facts(tmp_path, 'roce_trust_pcp')['roce']
    assert _roce_rules.roce_findings('n', roce)[0]['severity'] == 'error'
    for port in roce['ports']:
        port['roce_tos'] = 0
    assert _roce_rules.roce_findings('n', roce)[0]['severity'] == 'warning'


def test_unread_port_is_unknown_not_ok(healthy):
    roce = copy.deepcopy(healthy['roce'])
    for port in roce['ports']:
        port.update(source=None, source_reason='mlnx_qos not installed; dcb (iproute2) not installed', pfc=None, trust=None)
    assert codes(_roce_rules.roce_findings('n', roce)) == ['ROCE_QOS_UNKNOWN']


def test_port_down_is_left_to_ib_rules(tmp_path):
    roce = facts(tmp_path, 'roce_pfc_off')['roce']
    for port in roce['ports']:
        port['state'] = 'DOWN'
    assert _roce_rules.roce_findings('n', roce) == []


def test_ecn_only_mode_checks_the_rdma_priority(healthy):
    roce = copy.deepcopy(healthy['roce'])
    for port in roce['ports']:
        port['pfc'] = []
    found = dict((f['code'], f) for f in _roce_rules.roce_findings('n', roce))
    assert 'ROCE_ECN_OFF' not in found and 'ROCE_PFC_OFF' in found      # ECN on priority 3 where DSCP 26 lands


def test_fleet_names_the_odd_node(tmp_path, healthy):
    nodes = {'a': copy.deepcopy(healthy), 'b': copy.deepcopy(healthy), 'c': facts(tmp_path, 'roce_pfc_prio4')}
    found = [f for f in _diagnose.diagnose(nodes) if f['code'].startswith(('FLEET', 'ROCE'))]
    assert [(f['code'], f['host'], f['subject']) for f in found] == [('FLEET_DIFFERS', 'c', 'roce_qos')]


def test_fleet_leaves_out_what_a_finding_names(tmp_path):
    roce = facts(tmp_path, 'roce_trust_pcp')['roce']
    signature = _roce_rules.qos_signature(roce)
    assert signature and all(name != 'trust' for port in signature for name, _value in port)
    assert 'trust' in [name for port in _roce_rules.qos_signature(facts(tmp_path / 'ok', 'roce_pfc_prio4')['roce']) for name, _v in port]


def test_nccl_ib_tc(tmp_path, healthy):
    settings = _nccl_env.recommend(healthy['ib'], healthy['gdr'], healthy['roce'])
    assert settings['settings']['NCCL_IB_TC'] == 106 and 'priority 3' in settings['reasons']['NCCL_IB_TC']
    assert 'NCCL_IB_TC' not in _nccl_env.recommend(healthy['ib'], healthy['gdr'])['settings']
    bad = facts(tmp_path, 'roce_pfc_off')
    result = _nccl_env.recommend(bad['ib'], bad['gdr'], bad['roce'])
    assert 'NCCL_IB_TC' not in result['settings']
    assert any(note.startswith('NCCL_IB_TC not set') for note in result['notes'])


def test_a_roce_finding_explains_only_the_qos_parts_it_leaves_out():
    # A node whose ECN finding leaves 'ecn' out, but whose PFC is on 3,4 where the peers' is on 3:
    # the fleet difference is PFC, its own, not the ECN finding's (one part 'pfc 3,4', not 'pfc 3' and '4').
    ecn_off = F.REGISTRY['ROCE_ECN_OFF']
    node = (('trust', 'dscp'), ('pfc', '3,4'), ('tos', '106'), ('cnp prio', '6'))
    peers = (('trust', 'dscp'), ('pfc', '3'), ('tos', '106'), ('cnp prio', '6'), ('ecn', '3,4'))

    def differs(value, ref):
        symptom = {'code': 'FLEET_DIFFERS', 'subject': 'roce_qos', 'evidence': {'value': [list(map(list, value))],
                                                                                'most_nodes': [list(map(list, ref))]}}
        return F.explains('ROCE_ECN_OFF', symptom)
    assert 'FLEET_DIFFERS' in ecn_off.explains
    assert not differs(node, peers)
    assert differs(node[:1] + (('pfc', '3'),) + node[2:], peers)
    # The fleet's text keeps each port's parts together.
    assert _roce_rules.qos_text((node, peers[:2])) == 'trust dscp, pfc 3,4, tos 106, cnp prio 6; trust dscp, pfc 3'


def test_qos_signature_is_parts(tmp_path):
    roce = facts(tmp_path, 'roce_trust_pcp')['roce']
    signature = _roce_rules.qos_signature(roce)
    assert signature and all(isinstance(part, tuple) and len(part) == 2 for port in signature for part in port)
