# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Runs of digits of any length in what nodes and files send: no sort key and no number reader
calls int() on a run past Python's limit on integer-string conversion (4,300 digits by default,
sys.get_int_max_str_digits(): ValueError). A snapshot whose hca_type held 5,000 digits once
stopped the report task, for every node."""

from __future__ import annotations

import copy
import json
import sys

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.filter.report import fabric_report
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _gdr, _ib, _nccl, _rails, _roce, _sysroot
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _roce_rules
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _report_stage
from tests.sim import node_facts

LENGTHS = (5000, 100000)


def test_the_limit_is_below_the_lengths():
    # What the tests below are about: int() refuses these runs on this Python.
    limit = getattr(sys, 'get_int_max_str_digits', lambda: 0)()
    if not limit:
        pytest.skip('no int() digit limit on this Python')
    assert limit < min(LENGTHS)
    with pytest.raises(ValueError):
        int('7' * min(LENGTHS))


@pytest.mark.parametrize('key', [_gdr.natural_key, _rails.natural_key, lambda name: _rails.position_key(name, None, None),
                                 lambda name: _gdr.nic_rank('PIX', [], name)],
                         ids=['gdr.natural_key', 'rails.natural_key', 'rails.position_key', 'gdr.nic_rank'])
@pytest.mark.parametrize('length', LENGTHS)
def test_sort_keys_order_runs_of_any_length(key, length):
    long_run, longer = '9' * length, '1' * (length + 1)
    names = ['mlx5_10', 'mlx5_' + longer, 'mlx5_2', 'mlx5_' + long_run, 'mlx5_0' + long_run, 'mlx5_02', None, 'mlx5_1x' + long_run]
    ordered = sorted(names, key=key)
    # Numbers, not text: 2 before 10, a run of n digits before one of n + 1, leading zeros count for nothing.
    assert ordered.index('mlx5_2') < ordered.index('mlx5_10') < ordered.index('mlx5_' + long_run) < ordered.index('mlx5_' + longer)
    assert ordered.index('mlx5_02') < ordered.index('mlx5_10')
    assert key('mlx5_0' + long_run) == key('mlx5_' + long_run)


@pytest.mark.parametrize('length', LENGTHS)
def test_number_readers_refuse_long_runs(length):
    run = '7' * length
    assert _sysroot.parse_int(run) is None and _sysroot.parse_hex(run) is None and _sysroot.parse_numa(run) is None
    assert _nccl.parse_size(run) is None and _nccl.parse_size(run + 'M') is None
    assert _ib.parse_state(run + ': ACTIVE') == (None, run + ': ACTIVE')
    assert _ib.parse_rate(run + ' Gb/sec (4X NDR)') == (None, None, None)
    qos = _roce.parse_mlnx_qos('tc: 0 ratelimit: unlimited, tsa: ets, bw: %s%%\n priority:  %s\n' % (run, run))
    assert qos['tc_bw'] is None and qos['prio_tc'] is None
    json.dumps(qos)


@pytest.mark.parametrize('length', LENGTHS)
def test_qos_keys_of_a_snapshot_of_any_length(length):
    """The DSCP and priority keys of a port's facts (JSON object keys: text) as a snapshot holds them."""
    run = '7' * length
    port = {'netdev': 'eth0', 'hca': 'mlx5_0', 'port': 1, 'source': 'mlnx_qos', 'trust': 'dscp', 'roce_tos': 106,
            'pfc': [3], 'dscp2prio': {'26': 3, run: 5, 'x': 1}, 'dscp_conflicts': {run: [1, 2]},
            'ecn_np': {'3': True, run: True}, 'ecn_rp': {run: True}}
    assert _roce.rdma_priority(port) == 3
    found = _roce_rules.port_checks(port)
    json.dumps(found, default=str)


@pytest.fixture(scope='module')
def twelve(tmp_path_factory):
    return node_facts.read(tmp_path_factory.mktemp('digits'), 'nvidia_h100_8x_ndr_12hca')


@pytest.mark.parametrize('field', ['hca_type', 'fw_ver', 'board_id', 'name'])
@pytest.mark.parametrize('length', LENGTHS)
def test_report_of_a_snapshot_with_a_long_run(twelve, field, length):
    """The report path (filter fabric_report, then every file rendered) with a field of a node's
    HCA of ``length`` digits: it returns, the healthy node is judged, and the HCA types are in
    natural order (CX7_2 before CX7_10, a run of 5,000 digits before one of 100,000)."""
    facts = {'gpu_fabric_ib': copy.deepcopy(twelve['ib']), 'gpu_fabric_gdr': twelve['gdr'], 'gpu_fabric_roce': twelve['roce']}
    devices = facts['gpu_fabric_ib']['devices']    # mlx5_0 and mlx5_1: the profile's storage and management HCAs
    long_run, longer = 'CX7_' + '9' * length, 'CX7_' + '1' * (length + 1)
    if field == 'hca_type':
        for device, hca_type in zip(devices[2:], ('CX7_10', longer, 'CX7_2', long_run)):
            device['hca_type'] = hca_type
    else:
        devices[2][field] = '7' * length
    healthy = {'gpu_fabric_ib': twelve['ib'], 'gpu_fabric_gdr': twelve['gdr'], 'gpu_fabric_roce': twelve['roce']}
    report = fabric_report({'a': {'ansible_facts': facts}, 'b': {'ansible_facts': healthy}}, ['a', 'b'])
    assert set(report['hosts']) == {'a', 'b'}
    assert report['hosts']['b']['ports'] == report['hosts']['a']['ports'] > 0
    files = dict(_report_stage.render(report))
    assert json.loads(files['report.json'].decode('utf-8'))['summary']['hosts'] == 2
    if field == 'hca_type':
        split = [f for f in report['findings'] if f['code'] == 'FLEET_SPLIT' and f['evidence']['attribute'] == 'hca_model']
        assert split, [f['code'] for f in report['findings']]
        models = [entry['value'] for entry in split[0]['evidence']['values'] if 'CX7_2' in (entry['value'] or [])][0]
        assert models == ['CX7_2', 'CX7_10', long_run, longer, 'MT4129']


@pytest.mark.parametrize('length', LENGTHS)
def test_schedule_arguments_of_a_long_run_are_refused_with_a_reason(length):
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _schedule
    nodes = ['a', 'b', 'c', 'd']
    with pytest.raises(_schedule.ScheduleError, match='k must be an integer'):
        _schedule.summary(nodes, mode='random', k='7' * length)
    with pytest.raises(_schedule.ScheduleError, match='round must be an integer'):
        _schedule.schedule(nodes, round_number='7' * length)
