# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import json

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.filter.fabric_summary import fabric_facts_files, fabric_summary


HOSTVARS = {'n1': {'gpu_fabric_ib': {'devices': {}}, 'gpu_fabric_gdr': {'gpus': []}}, 'n2': {}}


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
