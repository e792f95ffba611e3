# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Thresholds live next to the rule that uses them; the roles leave them to it (null)."""

from __future__ import annotations

import os

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.filter.collective import collective_local_verdict, collective_thresholds, collective_verdict
from ansible_collections.hpc.gpu_fabric.plugins.filter.offline_bench import offline_collective
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _collective
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLE_THRESHOLDS = {'fabric_bench': ('fabric_bench_bw_ratio', 'fabric_bench_gpu_ratio', 'fabric_bench_lat_max_us'),
                   'fabric_collective': ('fabric_collective_healthy_ratio', 'fabric_collective_warn_ratio')}


def _yaml(*parts):
    with open(os.path.join(REPO, *parts), encoding='utf-8') as handle:
        return yaml.safe_load(handle)


def test_roles_leave_the_thresholds_to_the_rules():
    for role, names in ROLE_THRESHOLDS.items():
        defaults = _yaml('roles', role, 'defaults', 'main.yml')
        options = _yaml('roles', role, 'meta', 'argument_specs.yml')['argument_specs']['main']['options']
        for name in names:
            assert defaults[name] is None and options[name]['default'] is None, name


def test_left_out_or_null_is_the_rule_default():
    assert _bench.thresholds({'bw_ratio': None}) == {'bw_ratio': _bench.BW_RATIO, 'gpu_ratio': _bench.GPU_RATIO,
                                                     'lat_max_us': _bench.LAT_MAX_US}
    assert _bench.report({}, {})['thresholds'] == {'bw_ratio': _bench.BW_RATIO, 'gpu_ratio': _bench.GPU_RATIO,
                                                   'lat_max_us': _bench.LAT_MAX_US}
    verdict = collective_verdict({'status': 'ok', 'max_busbw_gbs': 40.0}, 50.0, None, None)
    assert (verdict['healthy_ratio'], verdict['warn_ratio']) == (_collective.HEALTHY_RATIO, _collective.WARN_RATIO)


def _mesh_hostvars(tmp_path, nodes, thresholds):
    """hostvars as role fabric_bench leaves them: each node's records file, and the fleet plan with the
    thresholds the role checked (filter bench_fleet_plan). n2-n3 runs at 85 % of the rail's 400 Gb/s."""
    from ansible_collections.hpc.gpu_fabric.plugins.filter.fabric_bench import bench_fleet_plan
    plan = {'hcas': ['mlx5_0'], 'rate_gbps': {'mlx5_0': 400.0}, 'active_rate_gbps': {'mlx5_0': 400.0}, 'model': {}}
    tool = {'status': 'skipped'}
    records = dict((n, []) for n in nodes)
    for index in range(0, len(nodes), 2):
        server, client = nodes[index], nodes[index + 1]
        base = {'round': 0, 'memory': 'host', 'rail': 0, 'server': server, 'client': client, 'hca': 'mlx5_0', 'peer_hca': 'mlx5_0',
                'status': 'ok', 'counters_delta': {}, 'failure': None}
        records[server].append(dict(base, side='server', summary=None))
        records[client].append(dict(base, side='client', results=[], summary={'bw_avg_gbps': 340.0 if server == 'n2' else 392.0}))
    hostvars = dict((n, {'fabric_bench_plan': plan, '__fabric_bench_tool': tool}) for n in nodes)
    fleet = bench_fleet_plan(hostvars, nodes, thresholds=thresholds)
    for node in nodes:
        hostvars[node].update(fabric_bench_fleet=fleet, fabric_bench_records=[], fabric_bench_records_run='r1',
                              fabric_bench_records_file=_bench.write_records(str(tmp_path), node, records[node], 'r1'))
    return hostvars


@pytest.mark.parametrize('thresholds, bad', [
    ({'bw_ratio': '0.8'}, []),                                  # -e fabric_bench_bw_ratio=0.8: 85 % is ok
    ({'bw_ratio': None, 'gpu_ratio': None}, [['n2', 'n3']]),    # the default 90 %: 85 % is low
    ({'bw_ratio': 0.99}, [['n0', 'n1'], ['n2', 'n3']]),         # 98 % is low too
])
def test_the_culprit_search_names_the_pairs_bench_json_names(tmp_path, thresholds, bad):
    """The judging (bench.json) and the culprit search read the pairs with the thresholds the role checked
    and kept in its fleet plan: a pair ok in bench.json is never named bad by the search, and back."""
    from unittest import mock
    from ansible_collections.hpc.gpu_fabric.plugins.action import fabric_bench_judge
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _fleet_model
    from ansible_collections.hpc.gpu_fabric.tests.unit.plugins.action.test_culprit_search import Fleet, run
    nodes = ['n0', 'n1', 'n2', 'n3']
    hostvars = _mesh_hostvars(tmp_path, nodes, thresholds)
    # The judging as playbooks/benchmark.yml runs it where the threshold variables are not set (omitted).
    bench = fabric_bench_judge.judge(_fleet_model.read(hostvars, nodes, ('bench',)), dict.fromkeys(_bench.THRESHOLDS))
    named = sorted(sorted((p['server'], p['client'])) for p in bench['pairs'] if p['verdict'] in ('low', 'failed'))
    assert named == bad
    assert bench['thresholds']['bw_ratio'] == float(thresholds['bw_ratio'] or _bench.BW_RATIO)
    with mock.patch('ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report._report_stage.from_model',
                    return_value={'findings': []}):
        result, _lines = run({'nodes': nodes, 'bench_pairs': True}, Fleet(slow=['n0']), hostvars=hostvars)
    assert result['search']['known_pairs'] == named


def test_a_threshold_refused_by_the_plan_stops_the_role():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.hpc.gpu_fabric.plugins.filter.fabric_bench import bench_fleet_plan
    with pytest.raises(AnsibleFilterError, match="bw_ratio must be a positive number, got 'abc'"):
        bench_fleet_plan({}, [], thresholds={'bw_ratio': 'abc'})


def test_the_judging_arguments_win_over_the_plan():
    fleet = {'thresholds': {'bw_ratio': 0.8, 'gpu_ratio': 0.7, 'lat_max_us': 9.0}}
    assert _bench.judged_with(fleet, {'bw_ratio': 0.95, 'gpu_ratio': None}) == {'bw_ratio': 0.95, 'gpu_ratio': 0.7, 'lat_max_us': 9.0}
    assert _bench.judged_with(None, None) == _bench.thresholds({})


COLLECTIVE_READERS = {
    'module_utils': _collective.thresholds,
    'collective_thresholds': collective_thresholds,
    'collective_verdict': lambda h, w: collective_verdict({'status': 'ok', 'max_busbw_gbs': 40.0}, 50.0, h, w),
    'collective_local_verdict': lambda h, w: collective_local_verdict({}, [], None, h, w),
    'offline_collective': lambda h, w: offline_collective([], {}, [], h, w),
}


@pytest.mark.parametrize('reader', sorted(COLLECTIVE_READERS))
@pytest.mark.parametrize('healthy, warn, error', [
    (0.6, 0.7, r'need 0 < warn_ratio <= healthy_ratio \(got 0.7 and 0.6\)'),
    (0, None, r'need 0 < warn_ratio <= healthy_ratio \(got 0.7 and 0.0\)'),
    ('abc', None, "healthy_ratio must be a number, got 'abc'"),
    (None, 'nan', "warn_ratio must be a number, got 'nan'"),
])
def test_the_collective_thresholds_are_checked_one_way_everywhere(reader, healthy, warn, error):
    with pytest.raises((ValueError, AnsibleFilterError), match=error):
        COLLECTIVE_READERS[reader](healthy, warn)


def test_the_collective_thresholds_given_as_strings_are_the_numbers():
    assert collective_thresholds('0.9', '0.5') == {'healthy_ratio': 0.9, 'warn_ratio': 0.5}
    assert collective_thresholds(None, '') == {'healthy_ratio': _collective.HEALTHY_RATIO, 'warn_ratio': _collective.WARN_RATIO}


def test_role_fabric_collective_reads_its_thresholds_once():
    """The variables are read by one task (filter collective_thresholds); every other reader takes its result."""
    for name in ('main.yml', 'local.yml'):
        with open(os.path.join(REPO, 'roles', 'fabric_collective', 'tasks', name), encoding='utf-8') as handle:
            text = handle.read()
        readers = [line for line in text.splitlines()
                   if ('fabric_collective_healthy_ratio' in line or 'fabric_collective_warn_ratio' in line) and not line.lstrip().startswith('#')]
        assert readers == (['      {{ fabric_collective_healthy_ratio | hpc.gpu_fabric.collective_thresholds(fabric_collective_warn_ratio) }}']
                           if name == 'main.yml' else []), readers
