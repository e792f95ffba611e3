# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""fabric_bench_judge, benchmark.yml's judging: every pair judged from the records files into
bench.json, the task's result only the counts, the console lines and the path (never the pairs);
the report reads bench.json back; check and diff mode as fabric_output has them."""

from __future__ import annotations

import json
import os
from unittest import mock

import pytest

from ansible.errors import AnsibleActionFail

from ansible_collections.hpc.gpu_fabric.plugins.action import fabric_bench_judge, fabric_report_write
from ansible_collections.hpc.gpu_fabric.plugins.filter.fabric_bench import bench_report, bench_threshold_errors
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _offline
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _report_stage

PLAN = {'hcas': ['mlx5_0'], 'rate_gbps': {'mlx5_0': 400.0}, 'active_rate_gbps': {'mlx5_0': 400.0}, 'model': {}}


def _record(server, client, side, bw=None, status='ok'):
    record = {'round': 0, 'memory': 'host', 'side': side, 'rail': 0, 'server': server, 'client': client,
              'hca': 'mlx5_0', 'peer_hca': 'mlx5_0', 'status': status, 'counters_delta': {},
              'summary': {'bw_avg_gbps': bw} if bw else None, 'failure': None if status == 'ok' else {'kind': 'timeout', 'message': 'x'}}
    if side == 'client':
        record['results'] = []
    return record


def hostvars_with_files(tmp_path):
    """Three nodes whose records are in files, as perftest_collect leaves them: a-b ok, a-c low, b-c failed."""
    records = {'a': [_record('a', 'b', 'server'), _record('a', 'c', 'server')],
               'b': [_record('a', 'b', 'client', 395.0), _record('b', 'c', 'server')],
               'c': [_record('a', 'c', 'client', 200.0), _record('b', 'c', 'client', status='failed')]}
    fleet = {'nodes': ['a', 'b', 'c'], 'excluded': {'d': 'no RDMA device (HCA) to test on this node'}, 'skipped': None,
             'test': 'ib_write_bw'}
    return dict((host, {'fabric_bench_plan': PLAN, 'fabric_bench_fleet': fleet, 'fabric_bench_records': [],
                        'fabric_bench_records_file': _bench.write_records(str(tmp_path / 'records'), host, kept, 'run-1'),
                        'fabric_bench_records_run': 'run-1'})
                for host, kept in records.items())


def run(module, args, hostvars, check=False, diff=False, **more_vars):
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = check
    task.diff = diff
    action = module.ActionModule(task, mock.MagicMock(), mock.MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    return action.run(task_vars=dict(more_vars, hostvars=hostvars))


def test_bench_json_holds_the_verdicts_and_the_result_only_counts_lines_and_path(tmp_path):
    hostvars = hostvars_with_files(tmp_path)
    dest = tmp_path / 'out'
    result = run(fabric_bench_judge, {'hosts': ['a', 'b', 'c', 'absent'], 'dest': str(dest)}, hostvars)
    assert not result.get('failed'), result.get('msg')
    written = json.loads((dest / 'bench.json').read_text())
    # The same verdicts as the filter's (one code path), read from the records files.
    assert written == json.loads(json.dumps(bench_report(hostvars, ['a', 'b', 'c'])))
    assert written['verdicts'] == {'ok': 1, 'low': 1, 'failed': 1} and written['excluded'] == {'d': 'no RDMA device (HCA) to test on this node'}
    assert (dest / 'bench.json').read_text().startswith('{\n    "counters": [],')   # indented, keys sorted, as to_nice_json was
    assert result['bench_json'] == str(dest / 'bench.json') and result['changed'] is True
    assert result['tests'] == 3 and result['verdicts'] == written['verdicts'] and result['not_run'] is None
    assert not {'pairs', 'matrix', 'counters', 'skipped'} & set(result)
    assert result['lines'] == _bench.console_lines(written, 20, str(dest / 'bench.json'))
    assert result['msg'] == 'ib_write_bw: 3 pair test(s), 1 ok, 1 low, 1 failed'
    assert result['lines'][1] == 'left out d (no RDMA device (HCA) to test on this node)'
    assert [line for line in result['lines'] if line.startswith('b mlx5_0 -> c')][0].endswith('failed (timeout: x)')
    # Written again unchanged: left alone.
    result = run(fabric_bench_judge, {'hosts': ['a', 'b', 'c'], 'dest': str(dest)}, hostvars)
    assert result['changed'] is False and result['bench_json'] == str(dest / 'bench.json')
    # The report reads it back: report.json's bench is bench.json's, pairs included.
    run(fabric_report_write, {'hosts': ['a', 'b', 'c'], 'dest': str(dest), 'exit_policy': '[]'}, hostvars, gpu_fabric_bench=result)
    with open(str(dest / 'report.json')) as handle:
        assert json.load(handle)['bench'] == written


def test_thresholds_from_the_command_line_and_the_console_limit(tmp_path):
    hostvars = hostvars_with_files(tmp_path)
    # -e fabric_bench_bw_ratio=0.4 arrives as a string: 200 of 400 Gb/s is then ok.
    result = run(fabric_bench_judge, {'hosts': ['a', 'b', 'c'], 'dest': str(tmp_path), 'bw_ratio': '0.4', 'gpu_ratio': '',
                                      'lat_max_us': None, 'limit': '1'}, hostvars)
    assert result['verdicts'] == {'ok': 2, 'failed': 1}
    assert json.loads((tmp_path / 'bench.json').read_text())['thresholds'] == {'bw_ratio': 0.4, 'gpu_ratio': 0.9, 'lat_max_us': 5.0}
    assert result['lines'][-1].startswith('b mlx5_0 -> c mlx5_0, host memory, failed')
    result = run(fabric_bench_judge, {'hosts': ['a', 'b', 'c'], 'dest': str(tmp_path), 'limit': 0}, hostvars)
    assert result['lines'][-1] == '... and 2 more not healthy, every pair in %s' % (tmp_path / 'bench.json')


def test_no_node_reached_the_benchmark_is_written_as_not_run(tmp_path):
    result = run(fabric_bench_judge, {'hosts': ['a', 'b'], 'dest': str(tmp_path)}, {'a': {}, 'b': {}})
    assert result['not_run'] == _bench.NOT_REACHED and result['tests'] == 0
    assert result['msg'] == 'pair benchmark not run: %s' % _bench.NOT_REACHED
    assert json.loads((tmp_path / 'bench.json').read_text())['skipped'] == _bench.NOT_REACHED


def test_imported_perftest_outputs_are_judged_against_the_plans(tmp_path):
    items = _offline.classify(['/logs/a__b__0__host.txt', '/logs/b__a__0__host.txt'])['perftest']
    results = [{'item': items[0], 'status': 'ok', 'summary': {'bw_avg_gbps': 390.0}, 'results': []},
               {'item': items[1], 'failed': True, 'msg': 'not parsed'}]
    hostvars = {'a': {'fabric_bench_plan': PLAN}, 'b': {'fabric_bench_plan': PLAN}}
    result = run(fabric_bench_judge, {'hosts': ['a', 'b'], 'dest': str(tmp_path), 'results': results}, hostvars)
    written = json.loads((tmp_path / 'bench.json').read_text())
    assert written == json.loads(json.dumps(_offline.bench_report(results, {'a': PLAN, 'b': PLAN}, {})))
    assert result['verdicts'] == written['verdicts'] == {'ok': 1, 'failed': 1}
    assert [(e['log'], e['status']) for e in written['imported_logs']] == [('/logs/a__b__0__host.txt', 'ok'), ('/logs/b__a__0__host.txt', 'failed')]


def test_check_mode_writes_nothing_and_returns_no_path_diff_mode_shows_the_change(tmp_path):
    hostvars = hostvars_with_files(tmp_path)
    dest = tmp_path / 'new'
    result = run(fabric_bench_judge, {'hosts': ['a', 'b', 'c'], 'dest': str(dest)}, hostvars, check=True)
    assert result['changed'] is True and not dest.exists() and 'bench_json' not in result and result['tests'] == 3
    run(fabric_bench_judge, {'hosts': ['a', 'b', 'c'], 'dest': str(dest)}, hostvars)
    result = run(fabric_bench_judge, {'hosts': ['a', 'b', 'c'], 'dest': str(dest), 'bw_ratio': 0.4}, hostvars, check=True, diff=True)
    assert result['changed'] is True and '"bw_ratio": 0.9' in (dest / 'bench.json').read_text()
    assert '"bw_ratio": 0.4' in result['diff'][0]['after'] and '"bw_ratio": 0.9' in result['diff'][0]['before']


def test_a_destination_that_cannot_be_written_fails_the_task_without_a_path(tmp_path):
    (tmp_path / 'file').write_text('x')
    result = run(fabric_bench_judge, {'hosts': ['a'], 'dest': str(tmp_path / 'file')}, {})
    assert result['failed'] is True and 'exists and is not a directory' in result['msg'] and 'bench_json' not in result
    os.mkfifo(str(tmp_path / 'bench.json'))   # never renamed over, never read
    result = run(fabric_bench_judge, {'hosts': ['a'], 'dest': str(tmp_path)}, {})
    assert result['failed'] is True and result['msg'].startswith('could not write %s' % (tmp_path / 'bench.json'))


def test_bench_json_is_one_line_beyond_the_pair_limit(monkeypatch):
    bench = {'pairs': [{'server': 'a'}, {'server': 'b'}], 'verdicts': {}}
    assert _report_stage.bench_json(bench).count('\n') > 2
    monkeypatch.setattr(_report_stage, 'INDENT_MAX_PAIRS', 1)
    assert _report_stage.bench_json(bench).count('\n') == 1


@pytest.mark.parametrize('args, words', [
    ({'hosts': 'a', 'dest': '/tmp/x'}, 'hosts must be a list'),
    ({'hosts': ['a']}, 'dest'),
    ({'hosts': ['a'], 'dest': '/tmp/x', 'results': 'x'}, 'results must be the list'),
    ({'hosts': ['a'], 'dest': '/tmp/x', 'bw_ratio': 'nan'}, 'bw_ratio must be a positive number'),
    ({'hosts': ['a'], 'dest': '/tmp/x', 'lat_max_us': -1}, 'lat_max_us must be a positive number'),
    ({'hosts': ['a'], 'dest': '/tmp/x', 'gpu_ratio': True}, 'gpu_ratio must be a positive number'),
    ({'hosts': ['a'], 'dest': '/tmp/x', 'limit': 'all'}, 'limit must be a whole number'),
])
def test_bad_arguments_fail_before_anything_is_written(tmp_path, args, words):
    with pytest.raises(AnsibleActionFail, match=words):
        run(fabric_bench_judge, args, {})


@pytest.mark.parametrize('value', [None, '', '0.9', 2, '5', 0, '0', -1, 'nan', 'inf', True, 'x', [0.9]])
def test_the_role_checks_the_thresholds_with_the_judgings_own_check(tmp_path, value):
    """Role fabric_bench asserts on bench_threshold_errors before any pair runs: it refuses exactly
    what the judging would refuse only after the whole mesh ran (-e fabric_bench_bw_ratio=0)."""
    errors = bench_threshold_errors({'fabric_bench_bw_ratio': value, 'fabric_bench_lat_max_us': '5'})
    try:
        run(fabric_bench_judge, {'hosts': ['a'], 'dest': str(tmp_path), 'bw_ratio': value}, {})
    except AnsibleActionFail as exc:
        assert errors == ['fabric_bench_' + str(exc)], (value, errors)
    else:
        assert errors == [], value


def test_a_judging_that_fails_leaves_the_report_written_and_the_run_failed(tmp_path):
    """-e fabric_bench_bw_ratio=0 past the role's check (offline.yml, or the role skipped by tags): the judge
    task fails; benchmark.yml registers it with ignore_errors and the report names the failure."""
    hostvars = hostvars_with_files(tmp_path)
    with pytest.raises(AnsibleActionFail) as failed:
        run(fabric_bench_judge, {'hosts': ['a', 'b', 'c'], 'dest': str(tmp_path), 'bw_ratio': '0'}, hostvars)
    # What Ansible registers for a task whose action raised AnsibleActionFail.
    judged = {'failed': True, 'msg': str(failed.value)}
    result = run(fabric_report_write, {'hosts': ['a', 'b', 'c'], 'dest': str(tmp_path)}, hostvars, gpu_fabric_bench=judged)
    assert result['failed'] is True and "the benchmark judging failed: bw_ratio must be a positive number, got '0'" in result['msg']
    assert not os.path.exists(tmp_path / 'bench.json')
    with open(tmp_path / 'report.json') as handle:
        assert json.load(handle)['bench'] is None


@pytest.mark.parametrize('bad', [{'side': 'client', 'memory': 'host', 'client': 'c', 'rail': 0},
                                 dict(_record('a', 'c', 'client', 390.0), client=None),
                                 dict(_record('a', 'c', 'client', 390.0), memory=None)],
                         ids=['no_server', 'null_client', 'null_memory'])
def test_a_malformed_record_costs_only_itself_and_is_named_on_the_console(tmp_path, bad):
    """One such record made the judging fail with a TypeError: every pair's verdict was lost."""
    hostvars = hostvars_with_files(tmp_path)
    expected = json.loads(json.dumps(bench_report(hostvars_with_files(tmp_path / 'clean'), ['a', 'b', 'c'])))
    path = hostvars['c']['fabric_bench_records_file']
    records = _bench.read_records(path, 'c', 'run-1')
    _bench.write_records(os.path.dirname(path), 'c', records[:1] + [bad] + records[1:], 'run-1')
    dest = tmp_path / 'out'
    result = run(fabric_bench_judge, {'hosts': ['a', 'b', 'c'], 'dest': str(dest)}, hostvars)
    assert not result.get('failed'), result.get('msg')
    written = json.loads((dest / 'bench.json').read_text())
    assert written['pairs'] == expected['pairs'] and written['verdicts'] == {'ok': 1, 'low': 1, 'failed': 1}
    assert written['records_malformed']['c']['dropped'] == 1 and written['records_malformed']['c']['source'] == path
    assert [line for line in result['lines'] if 'malformed' in line] == [
        '1 malformed record(s) of c dropped, not judged (%s: %s)' % (path, written['records_malformed']['c']['records'][0])]
    assert written['records_malformed']['c']['records'][0].startswith('record 1: ')
