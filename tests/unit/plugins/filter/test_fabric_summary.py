# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import json

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.filter.fabric_summary import fabric_facts_files, fabric_summary
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose
from tests.sim import node_facts


# As Ansible gives them: a node's facts under ansible_facts (their top-level copies are deprecated).
HOSTVARS = {'n1': {'ansible_facts': {'gpu_fabric_ib': {'devices': {}}, 'gpu_fabric_gdr': {'gpus': []}}}, 'n2': {}}


def test_facts_files_one_json_per_node_and_none_for_a_node_without_facts():
    files = fabric_facts_files(HOSTVARS, ['n1', 'n2', 'gone'])
    assert sorted(files) == ['gone.json', 'n1.json', 'n2.json']
    assert json.loads(files['n1.json']) == {'ib': {'devices': {}}, 'gdr': {'gpus': []}}
    assert json.loads(files['n2.json']) == {'ib': None, 'gdr': None}
    assert files['n1.json'].endswith('}\n')


def test_facts_files_and_summary_refuse_a_host_string():
    with pytest.raises(AnsibleFilterError, match='list of inventory names'):
        fabric_facts_files(HOSTVARS, 'n1')
    with pytest.raises(AnsibleFilterError, match='list of inventory names'):
        fabric_summary(HOSTVARS, 'n1')


def test_summary_names_a_node_without_facts():
    lines = fabric_summary(HOSTVARS, ['n2'])
    assert lines and 'n2' in lines[0]


def _facts(tmp_path, *faults, **kwargs):
    facts = node_facts.read(tmp_path, kwargs.pop('profile', 'nvidia_h100_8x_ndr'), faults, **kwargs)
    return {'ansible_facts': {'gpu_fabric_ib': facts['ib'], 'gpu_fabric_gdr': facts['gdr']}}


@pytest.mark.parametrize('fault, code', [('port_down', 'IB_PORT_DOWN'), ('rate_degraded_1x', 'IB_RATE_DEGRADED'),
                                         ('error_counters', 'IB_ERROR_COUNTERS')])
def test_a_port_is_judged_by_the_diagnosis_not_a_second_time(tmp_path, fault, code):
    hostvars = {'n1': _facts(tmp_path, fault)}
    found = [f for f in _diagnose.ib_findings('n1', hostvars['n1']['ansible_facts']['gpu_fabric_ib']) if f['code'] == code]
    lines = fabric_summary(hostvars, ['n1'])
    flagged = [line for line in lines[1:] if line.startswith('  ! mlx5_')]
    assert len(found) == 1 and len(flagged) == 1
    assert flagged[0].startswith('  ! %s ' % found[0]['subject']) and '%s %s' % (code, found[0]['cause']) in flagged[0]


def test_a_healthy_node_has_no_port_line(tmp_path):
    assert fabric_summary({'n1': _facts(tmp_path)}, ['n1'])[1:] == []


def test_a_management_port_down_is_said_not_flagged(tmp_path):
    # The diagnosis makes it info (no collective goes through it): '-', where the old own rule said '!'.
    lines = fabric_summary({'n1': _facts(tmp_path, 'port_down', targets=['mlx5_8'])}, ['n1'])
    assert [line.split(':')[0] for line in lines[1:]] == ['  - mlx5_8/1 Ethernet DOWN/Disabled 40 Gb/s 4X']
    assert 'IB_PORT_DOWN' in lines[1] and 'not a compute rail' in lines[1]


def test_hosts_within_keeps_the_first_list_s_order_and_refuses_what_is_no_list():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.hpc.gpu_fabric.plugins.filter.fabric_summary import hosts_within
    hosts = ['gpu10', 'gpu2', 'gpu1', 'localhost']
    # The inventory's order, not the limit's, nor any sort (gpu10 before gpu2 stays so).
    assert hosts_within(hosts, ['localhost', 'gpu1', 'gpu10', 'other']) == ['gpu10', 'gpu1', 'localhost']
    assert hosts_within(hosts, None) == hosts and hosts_within(hosts, []) == [] and hosts_within([], ['a']) == []
    for hosts, among in (('gpu1', None), (hosts, 'gpu1'), (None, None), ({'a': 1}, None), (hosts, 5)):
        with pytest.raises(AnsibleFilterError, match='hosts_within: .* must be a list of inventory names'):
            hosts_within(hosts, among)
