# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""ROCE_DCBX_MISMATCH (plugin_utils/diagnosis/_roce_rules.py dcbx_findings) on simulated nodes:
the port's DCBX mode (mlnx_qos, dcb dcbx, lldptool) against who is meant to manage it."""

from __future__ import annotations

import copy

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose, _roce_rules
from tests.sim import node_facts


@pytest.fixture(scope='module')
def healthy(tmp_path_factory):
    return node_facts.read(str(tmp_path_factory.mktemp('ok') / 'n'), 'amd_mi300x_roce')


def facts(tmp_path, *names):
    return node_facts.read(str(tmp_path / 'n'), 'amd_mi300x_roce', names)


def test_healthy_host_managed_node_has_no_finding(healthy):
    assert healthy['roce']['dcbx_expected'] == 'host'
    assert all(p['dcbx']['manager'] == 'host' for p in healthy['roce']['ports'])
    assert _roce_rules.dcbx_findings('n', healthy['roce']) == []
    assert _roce_rules.dcbx_findings('n', None) == []


@pytest.mark.parametrize('fault, words', [
    ('dcbx_willing_host', 'willing PFC/ETS'),
    ('dcbx_firmware', 'Firmware controlled'),
])
def test_host_meant_to_manage_but_the_switch_does(tmp_path, fault, words):
    found = _roce_rules.dcbx_findings('n', facts(tmp_path, fault)['roce'])
    assert [f['code'] for f in found] == ['ROCE_DCBX_MISMATCH'] and found[0]['severity'] == 'error'
    assert found[0]['subject'] == 'all RoCE ports' and words in found[0]['cause']
    assert 'overwrites' in found[0]['cause']        # the risk, said
    assert found[0]['evidence']['expected'] == 'host'
    assert set(p['manager'] for p in found[0]['evidence']['ports'].values()) == {'switch'}


def test_switch_meant_to_manage_but_the_host_does(healthy):
    roce = dict(healthy['roce'], dcbx_expected='switch')
    found = _roce_rules.dcbx_findings('n', roce)
    assert [f['severity'] for f in found] == ['error'] and 'does not take its settings' in found[0]['cause']


def test_switch_meant_and_switch_manages(tmp_path):
    roce = dict(facts(tmp_path, 'dcbx_firmware')['roce'], dcbx_expected='switch')
    assert _roce_rules.dcbx_findings('n', roce) == []


def test_nothing_meant_nothing_judged(tmp_path):
    roce = facts(tmp_path, 'dcbx_willing_host')['roce']
    for expected in (None, 'none', 'anything', 5):
        assert _roce_rules.dcbx_findings('n', dict(roce, dcbx_expected=expected)) == []


def test_unread_dcbx_is_info_never_ok(healthy):
    roce = copy.deepcopy(healthy['roce'])
    for port in roce['ports']:
        port['dcbx'] = {'mode': None, 'dcb_dcbx': None, 'lldp_willing': None, 'reason': 'dcb (iproute2) not installed'}
    found = _roce_rules.dcbx_findings('n', roce)
    assert [f['severity'] for f in found] == ['info'] and 'not checked' in found[0]['cause']


def test_hostile_dcbx_facts_do_not_raise(healthy):
    roce = copy.deepcopy(healthy['roce'])
    for value in ('x', 5, ['host'], {'mode': ['firmware'], 'dcb_dcbx': {'host': 1}, 'lldp_willing': 'yes', 'reason': ['a']},
                  {'reason': 'x' * 100000}):
        for port in roce['ports']:
            port['dcbx'] = value
        assert [f['severity'] for f in _roce_rules.dcbx_findings('n', roce)] == ['info']


def test_diagnose_reports_it_as_a_root(tmp_path):
    found = [f for f in _diagnose.diagnose({'n': facts(tmp_path, 'dcbx_willing_host')}) if f['code'] == 'ROCE_DCBX_MISMATCH']
    assert len(found) == 1 and found[0].get('explained_by') is None
