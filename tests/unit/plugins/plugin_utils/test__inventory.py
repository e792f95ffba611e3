# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""plugin_utils/diagnosis/_inventory.py and rules/_node.py peer_build_findings: the expected inventory's shape
(and -e's strings), GPUs without a rail of their own, RDMA functions without a device, the peer-memory build."""

from __future__ import annotations

import copy
import json

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.filter.role_variables import role_variable_errors
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _rails
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose, _inventory
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis.rules import _node
from tests.bench import _accuracy_peermem_inventory as accuracy

GOOD = {'gpus': 8, 'gpus_per_rail': 1, 'hcas': {'compute': {'count': 8, 'rate_gbps': 400}, 'management': {'count': 1}}}


@pytest.fixture(scope='module')
def h100():
    return accuracy.facts(accuracy.BASE)


@pytest.mark.parametrize('value, spec', [
    (GOOD, {'gpus': 8, 'gpus_per_rail': 1, 'hcas': {'compute': {'count': 8, 'rate_gbps': 400}, 'management': {'count': 1}}}),
    (json.dumps(GOOD), {'gpus': 8, 'gpus_per_rail': 1, 'hcas': {'compute': {'count': 8, 'rate_gbps': 400}, 'management': {'count': 1}}}),
    ({'gpus': '8', 'hcas': {'compute': '4'}}, {'gpus': 8, 'gpus_per_rail': None, 'hcas': {'compute': {'count': 4}}}),
    ({'hcas': {'storage': {'rate_gbps': 200.0}}}, {'gpus': None, 'gpus_per_rail': None, 'hcas': {'storage': {'rate_gbps': 200.0}}}),
    (None, None), ('', None), ({}, None),
])
def test_parse_expected_accepts(value, spec):
    assert _inventory.parse_expected(value) == (spec, [])


@pytest.mark.parametrize('value, words', [
    ('gpus=8', 'is a string that is not a JSON object'),
    ('[1, 2]', 'is a list, not a mapping'),
    (8, 'is a int, not a mapping'),
    ({'gpu': 8}, "has 'gpu', which is not one of gpus, gpus_per_rail, hcas"),
    ({'gpus': True}, 'gpus=True is not a whole number'),
    ({'gpus': -1}, 'gpus=-1 is not a whole number of at least 0'),
    ({'gpus': 8.5}, 'gpus=8.5 is not a whole number'),
    ({'gpus_per_rail': 0}, 'gpus_per_rail=0 is not a whole number of at least 1'),
    ({'hcas': [1]}, 'hcas is not a mapping of roles'),
    ({'hcas': {'rail': 8}}, "role 'rail', which is not one of compute, storage, management"),
    ({'hcas': {'compute': {'count': 8, 'speed': 400}}}, "hcas.compute has 'speed'"),
    ({'hcas': {'compute': {'rate_gbps': 0}}}, 'rate_gbps=0 is not a rate in Gb/s above 0'),
    ({'hcas': {'compute': {'rate_gbps': 'fast'}}}, "rate_gbps='fast' is not a rate"),
    ('{"gpus": ' * 40000, 'longer than 65536 characters'),
])
def test_parse_expected_refuses(value, words):
    spec, errors = _inventory.parse_expected(value)
    assert spec is None and any(words in error for error in errors), errors


def test_role_variable_errors_checks_the_expected_inventory():
    # Every -e value is a string: a JSON object is taken, anything else refused in one line without ': '.
    assert role_variable_errors({'gpu_fabric_expected': json.dumps(GOOD)}) == []
    errors = role_variable_errors({'gpu_fabric_expected': 'gpus=8'})
    assert len(errors) == 1 and errors[0].startswith('gpu_fabric_expected is a string') and ': ' not in errors[0]
    assert role_variable_errors({'gpu_fabric_expected': {'gpus': 'eight'}}) == [
        "gpu_fabric_expected.gpus='eight' is not a whole number of at least 0"]


def _codes(found, code):
    return [(f['host'], f['subject'], f['severity'], f['explained_by']) for f in found if f['code'] == code]


def test_expected_inventory_matches_a_healthy_node(h100):
    node = dict(copy.deepcopy(h100), expected=GOOD)
    assert _codes(_diagnose.diagnose({'n': node}), 'INVENTORY_EXPECTED_MISMATCH') == []


def test_expected_inventory_counts_and_rates(h100):
    node = copy.deepcopy(h100)
    node['expected'] = {'gpus': 4, 'hcas': {'compute': {'count': 10, 'rate_gbps': 200}, 'storage': {'count': 1}}}
    found = _codes(_diagnose.diagnose({'n': node}), 'INVENTORY_EXPECTED_MISMATCH')
    assert ('n', 'gpus', 'warning', None) in found                       # 8 GPUs where 4 expected: more
    assert ('n', 'hcas.compute', 'error', None) in found                 # 8 rails where 10 expected
    assert ('n', 'hcas.storage', 'error', None) in found                 # the BlueField-3 is management (default route)
    assert ('n', 'mlx5_0/1', 'warning', None) in found                   # 400 where 200 expected
    slow = copy.deepcopy(h100)
    slow['ib']['devices'][2]['ports'][0]['rate_gbps'] = 200
    slow['expected'] = GOOD
    assert ('n', 'mlx5_2/1', 'error', None) in _codes(_diagnose.diagnose({'n': slow}), 'INVENTORY_EXPECTED_MISMATCH')


def _rail_node(h100, remove):
    node = copy.deepcopy(h100)
    node['ib']['devices'] = [d for d in node['ib']['devices'] if d['name'] not in remove]
    node['gdr']['nics'] = [n for n in node['gdr']['nics'] if n['name'] not in remove]
    node['gdr']['topology'] = [p for p in node['gdr']['topology'] if p['nic'] not in remove]
    return node


def test_gpus_outnumber_rails_unevenly_is_an_error(h100):
    node = _rail_node(h100, ('mlx5_3',))
    found = [f for f in _diagnose.diagnose({'a': node, 'b': copy.deepcopy(node)}) if f['code'] == 'INVENTORY_GPU_WITHOUT_RAIL']
    assert [(f['host'], f['severity'], f['explained_by']) for f in found] == [('a', 'error', None), ('b', 'error', None)]
    assert found[0]['evidence']['without_own_rail'] == ['GPU3'] and found[0]['at'] == [['gpu', 'a', 'GPU3']]


def test_an_even_share_is_info_unless_the_inventory_allows_fewer(h100):
    node = _rail_node(h100, ('mlx5_1', 'mlx5_3', 'mlx5_5', 'mlx5_7'))
    found = _inventory.gpu_rail_findings('n', node, _rails_of(node))
    assert [f['severity'] for f in found] == ['info'] and found[0]['evidence']['even'] is True
    node['expected'] = {'gpus_per_rail': 1}
    assert [f['severity'] for f in _inventory.gpu_rail_findings('n', node, _rails_of(node))] == ['warning']
    node['expected'] = {'gpus_per_rail': 2}
    assert [f['severity'] for f in _inventory.gpu_rail_findings('n', node, _rails_of(node))] == ['info']


def _rails_of(node):
    return _rails.node_roles(node)


def test_one_rail_or_enough_rails_says_nothing(h100):
    assert _inventory.gpu_rail_findings('n', h100, _rails_of(h100)) == []
    single = _rail_node(h100, tuple('mlx5_%d' % i for i in range(1, 9)))
    assert _inventory.gpu_rail_findings('n', single, _rails_of(single)) == []


def test_unbound_function_explains_the_missing_rail():
    node = accuracy.facts(accuracy.BASE, ('rdma_unbound',))
    found = _diagnose.diagnose({'n': node})
    root, = [f for f in found if f['code'] == 'RDMA_DEVICE_UNBOUND']
    assert (root['subject'], root['severity'], root['explained_by']) == ('0000:1b:00.0', 'error', None)
    assert 'mlx5_core: probe of 0000:1b:00.0 failed with error -22' in root['cause']
    rail, = [f for f in found if f['code'] == 'INVENTORY_GPU_WITHOUT_RAIL']
    assert rail['explained_by'] == root['id']


def test_unbound_plain_ethernet_is_info_on_no_path():
    gdr = {'rdma_unbound': [{'bdf': '0000:06:00.0', 'vendor': '0x14e4', 'class': '0x020000', 'driver': 'bnxt_en', 'strict': False,
                             'why': 'bnxt_en is bound but bnxt_re is not loaded', 'log': [], 'log_state': 'read'}, 'junk', {}]}
    found, = _inventory.unbound_findings('n', gdr)
    assert found['severity'] == 'info' and found['at'] == [['pci', 'n', '0000:06:00.0']]
    assert 'names it nowhere' in found['cause']


def _build(state, loaded=True):
    return {'module': 'nvidia_peermem', 'loaded': loaded, 'loaded_version': '570.124.06' if loaded else None,
            'driver_version': '570.133.20', 'driver_source': '/proc/driver/nvidia/version', 'file': '/lib/x.ko',
            'file_state': 'read', 'file_version': '570.133.20', 'state': state, 'why': 'why'}


@pytest.mark.parametrize('entry, dmabuf, severity, at', [
    (_build('mismatch'), True, 'error', [['node', 'n']]),                       # loaded: dma-buf does not stand in for it
    (_build('mismatch', loaded=False), False, 'error', [['node', 'n']]),
    (_build('mismatch', loaded=False), True, 'warning', [['peer_memory', 'n']]),
    (_build('unknown'), False, 'info', [['peer_memory', 'n']]),
])
def test_peer_build_findings(h100, entry, dmabuf, severity, at):
    gdr = copy.deepcopy(h100['gdr'])
    gdr['peer_memory_build'] = [entry, _build('match'), 'junk']
    gdr['dmabuf'] = {'possible': dmabuf}
    found, = _node.peer_build_findings('n', gdr)
    assert (found['code'], found['severity'], found['at']) == ('GDR_PEERMEM_DRIVER_MISMATCH', severity, at)


def test_mismatch_explains_the_module_not_loading(h100):
    node = copy.deepcopy(h100)
    node['gdr']['peer_memory_build'] = [_build('mismatch', loaded=False)]
    node['gdr']['dmabuf'] = {'possible': False}
    node['gdr']['peer_memory']['paths']['nvidia'].update(module_loaded=None, detected=False)
    found = _diagnose.diagnose({'n': node})
    root, = [f for f in found if f['code'] == 'GDR_PEERMEM_DRIVER_MISMATCH']
    loaded, = [f for f in found if f['code'] == 'GDR_PEERMEM_NOT_LOADED']
    assert root['explained_by'] is None and loaded['explained_by'] == root['id']


def test_accuracy_of_the_classes_on_the_simulator():
    result = accuracy.run()
    assert (result['right'], result['false_positives'], result['misattributed']) == (result['total'], 0, 0), result
