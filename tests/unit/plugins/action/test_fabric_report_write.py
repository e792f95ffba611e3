# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""fabric_report_write, report.yml's one task: the report is written whatever happened to the
nodes, with the filters' own code; the exit policy and a run that validated nothing fail the task
after writing; check and diff mode as fabric_output has them; the baseline read bounded."""

from __future__ import annotations

import json
import os
from unittest import mock

import pytest

from ansible.errors import AnsibleActionFail

from ansible_collections.hpc.gpu_fabric.plugins.action.fabric_report_write import ActionModule
from ansible_collections.hpc.gpu_fabric.plugins.filter.report import fabric_report
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _offline
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _report_stage
from tests.bench import diagnosis_accuracy

FILES = ['gpu_fabric.prom', 'junit.xml', 'report.html', 'report.json', 'report.md']
FACTS = diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr')
GOOD = {'ansible_facts': {'gpu_fabric_ib': FACTS['ib'], 'gpu_fabric_gdr': FACTS['gdr']}, 'gpu_fabric_stages': ['validate']}
BROKEN = {'gpu_fabric_failures': [{'stage': 'validate', 'task': 'Read HCAs', 'msg': 'no /sys', 'unreachable': False}]}
GONE = {'gpu_fabric_failures': [{'stage': 'validate', 'task': 'Stop on a node that does not answer', 'unreachable': True,
                                 'msg': 'Failed to connect to the host via ssh: ssh: connect to host 10.0.0.9 port 22: Connection refused'}]}


def run(args, hostvars, check=False, diff=False, **more_vars):
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = check
    task.diff = diff
    task.action = 'hpc.gpu_fabric.fabric_report_write'
    action = ActionModule(task, mock.MagicMock(), mock.MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    return action.run(task_vars=dict(more_vars, hostvars=hostvars))


def report_of(dest):
    with open(os.path.join(dest, 'report.json')) as handle:
        return json.load(handle)


def test_a_healthy_node_passes_and_every_file_is_written(tmp_path):
    dest = tmp_path / 'out' / 'deeper'
    result = run({'hosts': ['a', 'b'], 'dest': str(dest)}, {'a': GOOD, 'b': GOOD})
    assert not result.get('failed'), result.get('msg')
    assert sorted(os.listdir(dest)) == FILES   # no temporary file left
    assert result['changed'] is True and [f['name'] for f in result['files']] == sorted(FILES, key=_report_stage.FILES.index)
    assert result['summary']['hosts'] == 2 and result['summary']['hosts_ok'] == 2
    assert result['matched'] == [] and result['not_checked'] == []
    report = report_of(dest)
    assert sorted(report['hosts']) == ['a', 'b'] and report['drift'] is None
    # ISO 8601 in UTC, as report.yml wrote it (now(utc=true).isoformat()).
    assert report['generated_at'][:2] == '20' and '+' not in report['generated_at']
    # The same report as the filter's, one code path: only the time differs.
    assert dict(report, generated_at=None) == json.loads(json.dumps(fabric_report({'a': GOOD, 'b': GOOD}, ['a', 'b'])))
    assert result['msg'].startswith('2 host(s): 2 ok, 0 with errors, 0 unreachable; 0 error(s)')
    assert 'Full report: %s' % (dest / 'report.html') in (dest / 'report.md').read_text()
    assert 'gpu_fabric_report_timestamp_seconds ' in (dest / 'gpu_fabric.prom').read_text()
    assert (dest / 'report.json').read_text().startswith('{\n    "bench": null,')   # indented, keys sorted, as to_nice_json


def test_the_exit_policy_fails_the_task_after_writing_and_names_what_matched(tmp_path):
    result = run({'hosts': ['a', 'broken'], 'dest': str(tmp_path)}, {'a': GOOD, 'broken': BROKEN})
    assert result['failed'] is True
    assert result['msg'] == "exit policy (default: any root-cause error) matched: HOST_TASK_FAILED@broken/validate"
    assert result['not_checked'] == ['broken']
    # A failed task's result is printed whole: what the summary lines said already stays out.
    assert not set(result) & {'files', 'summary', 'matched'}
    assert report_of(tmp_path)['hosts']['broken']['status'] == 'error'
    lines = _report_stage.console_lines(report_of(tmp_path), '/x/report.html')
    assert lines[1].startswith('error HOST_TASK_FAILED on broken: task "Read HCAs" failed') and lines[-1] == 'Full report: /x/report.html'
    # A policy of one's own: one that matches nothing passes (the report says what it found).
    result = run({'hosts': ['a', 'broken'], 'dest': str(tmp_path), 'exit_policy': "findings[?code=='NO_SUCH_CODE']"},
                 {'a': GOOD, 'broken': BROKEN})
    assert not result.get('failed') and result['matched'] == [] and result['not_checked'] == ['broken']
    result = run({'hosts': ['a'], 'dest': str(tmp_path), 'exit_policy': "summary.hosts_ok"}, {'a': GOOD})
    assert result['failed'] is True and result['msg'] == 'exit policy summary.hosts_ok matched: 1'


def test_an_exit_policy_that_is_no_jmespath_fails_after_writing(tmp_path):
    result = run({'hosts': ['a'], 'dest': str(tmp_path), 'exit_policy': 'findings[?'}, {'a': GOOD})
    assert result['failed'] is True and 'is not a valid JMESPath expression' in result['msg']
    assert sorted(os.listdir(tmp_path)) == FILES


@pytest.mark.parametrize('hosts, hostvars, words', [
    ([], {}, 'matched no inventory host'),
    (['gone', 'broken'], {'gone': GONE, 'broken': BROKEN}, 'every node was unreachable or failed (broken, gone)'),
    (['never'], {}, 'every node was unreachable or failed (never)'),
])
def test_nothing_validated_writes_the_report_and_fails_whatever_the_policy(tmp_path, hosts, hostvars, words):
    for policy in ('', "findings[?code=='NO_SUCH_CODE']"):
        result = run({'hosts': hosts, 'dest': str(tmp_path / policy[:8]), 'exit_policy': policy}, hostvars)
        assert result['failed'] is True
        if policy:   # the run fails all the same, and says why
            assert words in result['msg'] and result['msg'].startswith('no node returned facts, so nothing was validated')
        else:        # the default policy's match names it (said once)
            assert result['msg'].startswith("exit policy (default: any root-cause error) matched: RUN_NOTHING_VALIDATED@fleet/run")
            assert 'so nothing was validated' not in result['msg']
        report = report_of(tmp_path / policy[:8])
        nothing = [f for f in report['findings'] if f['explained_by'] is None][0]
        assert nothing['code'] == 'RUN_NOTHING_VALIDATED' and words in nothing['cause']
    if 'gone' in hosts:
        assert report['hosts']['gone']['status'] == 'unreachable' and result['not_checked'] == ['broken', 'gone']
        assert 'Connection refused' in (tmp_path / 'findings' / 'junit.xml').read_text()


def test_the_collective_comes_from_the_first_node_holding_it_and_the_bench_from_bench_json(tmp_path):
    collective = _offline.collective_result([{'item': '/l/x.log', 'failed': True, 'msg': 'boom'}], {})
    hostvars = {'a': dict(GOOD, fabric_collective_result=collective), 'b': GOOD}
    run({'hosts': ['absent', 'a', 'b'], 'dest': str(tmp_path)}, hostvars)
    assert report_of(tmp_path)['collective']['imported_logs'] == [{'log': '/l/x.log', 'recognised': False, 'reason': 'boom'}]
    # The first node holding one: a node left out of the benchmark (its facts failed) holds none.
    run({'hosts': ['b', 'a'], 'dest': str(tmp_path)}, hostvars)
    assert report_of(tmp_path)['collective']['imported_logs'][0]['reason'] == 'boom'
    run({'hosts': ['b'], 'dest': str(tmp_path)}, hostvars)
    assert report_of(tmp_path)['collective'] is None
    # The benchmark's verdicts: the bench.json this run's fabric_bench_judge wrote, from the path of its result.
    bench = {'pairs': [], 'skipped': 'one node', 'verdicts': {}}
    (tmp_path / 'judged.json').write_text(json.dumps(bench))
    run({'hosts': ['a'], 'dest': str(tmp_path)}, hostvars, gpu_fabric_bench={'bench_json': str(tmp_path / 'judged.json')})
    assert report_of(tmp_path)['bench'] == bench
    # No judging in this run (skipped, check mode: no path): a bench.json lying there is not read.
    (tmp_path / 'bench.json').write_text(json.dumps(bench))
    for judged in (None, {'skipped': True, 'bench_json': str(tmp_path / 'bench.json')}, {'changed': True}):
        result = run({'hosts': ['a'], 'dest': str(tmp_path)}, hostvars, gpu_fabric_bench=judged)
        assert not result.get('failed') and report_of(tmp_path)['bench'] is None, judged


def test_benchmark_results_that_cannot_be_read_fail_the_task_after_the_report_is_written(tmp_path):
    (tmp_path / 'list.json').write_text('[]')
    (tmp_path / 'bad.json').write_text('{')
    os.mkfifo(str(tmp_path / 'fifo'))   # never read: it would block
    for name, words in (('missing.json', 'cannot be read'), ('list.json', 'holds no benchmark results'),
                        ('bad.json', 'are not JSON'), ('fifo', 'cannot be read')):
        out = tmp_path / ('out-' + name)
        result = run({'hosts': ['a'], 'dest': str(out), 'exit_policy': "findings[?code=='NO_SUCH_CODE']"}, {'a': GOOD},
                     gpu_fabric_bench={'bench_json': str(tmp_path / name)})
        assert result['failed'] is True and words in result['msg'], (name, result['msg'])
        assert report_of(out)['bench'] is None and sorted(os.listdir(out)) == FILES


def test_a_judging_that_failed_is_named_and_fails_the_task_after_the_report_is_written(tmp_path):
    """benchmark.yml and offline.yml let the report run after fabric_bench_judge failed: never read
    as "no benchmark" (fail open), and a bench.json lying there is not read either."""
    (tmp_path / 'bench.json').write_text(json.dumps({'pairs': [], 'skipped': 'one node', 'verdicts': {}}))
    judged = {'failed': True, 'msg': "bw_ratio must be a positive number, got '0'", 'bench_json': str(tmp_path / 'bench.json')}
    result = run({'hosts': ['a'], 'dest': str(tmp_path)}, {'a': GOOD}, gpu_fabric_bench=judged)
    assert result['failed'] is True
    assert result['msg'] == "the benchmark judging failed: bw_ratio must be a positive number, got '0'"
    assert report_of(tmp_path)['bench'] is None and set(FILES) <= set(os.listdir(tmp_path))
    result = run({'hosts': ['a'], 'dest': str(tmp_path)}, {'a': GOOD}, gpu_fabric_bench={'failed': True})
    assert result['failed'] is True and result['msg'] == 'the benchmark judging failed: no reason given'


def test_check_mode_writes_nothing_and_diff_mode_shows_the_change(tmp_path):
    dest = tmp_path / 'new'
    result = run({'hosts': ['a'], 'dest': str(dest)}, {'a': GOOD}, check=True)
    assert result['changed'] is True and not dest.exists() and not result.get('failed')
    run({'hosts': ['a'], 'dest': str(tmp_path)}, {'a': GOOD})
    before = (tmp_path / 'report.md').read_text()
    result = run({'hosts': ['a', 'b'], 'dest': str(tmp_path)}, {'a': GOOD, 'b': GOOD}, check=True, diff=True)
    assert (tmp_path / 'report.md').read_text() == before
    md = [d for d in result['diff'] if d['after_header'].endswith('report.md')][0]
    assert '| b | ok |' in md['after'] and '| b | ok |' not in md['before']
    # Without diff mode, no diff.
    assert 'diff' not in run({'hosts': ['a'], 'dest': str(tmp_path)}, {'a': GOOD})


def test_drift_against_a_baseline_and_a_baseline_that_cannot_be_used(tmp_path):
    old, new = tmp_path / 'old', tmp_path / 'new'
    run({'hosts': ['a'], 'dest': str(old)}, {'a': GOOD})
    result = run({'hosts': ['a', 'broken'], 'dest': str(new), 'baseline': str(old / 'report.json'), 'regression_pct': '5',
                  'exit_policy': "findings[?code=='NO_SUCH_CODE']"}, {'a': GOOD, 'broken': BROKEN})
    assert not result.get('failed'), result['msg']
    drift = report_of(new)['drift']
    assert drift['new_findings'] == ['HOST_TASK_FAILED@broken/validate'] and drift['regression_pct'] == 5.0
    assert '## Drift since' in (new / 'report.md').read_text()
    # Missing, not JSON, no report, not a regular file: the report is written without drift, the task fails.
    (tmp_path / 'bad.json').write_text('{')
    (tmp_path / 'list.json').write_text('[]')
    (tmp_path / 'other.json').write_text('{"schema": "other"}')
    os.mkfifo(str(tmp_path / 'fifo'))   # a FIFO would block a plain read forever
    for name, words in (('missing.json', 'cannot be read'), ('bad.json', 'is not JSON'), ('list.json', 'is not a report.json'),
                        ('other.json', 'is not a hpc.gpu_fabric/report report'), ('fifo', 'cannot be read')):
        out = tmp_path / ('out-' + name)
        result = run({'hosts': ['a'], 'dest': str(out), 'baseline': str(tmp_path / name)}, {'a': GOOD})
        assert result['failed'] is True and words in result['msg'], (name, result['msg'])
        assert report_of(out)['drift'] is None and sorted(os.listdir(out)) == FILES


def test_a_baseline_larger_than_the_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(_report_stage, 'BASELINE_LIMIT', 10)
    (tmp_path / 'big.json').write_text('{"schema": "hpc.gpu_fabric/report"}')
    result = run({'hosts': ['a'], 'dest': str(tmp_path / 'out'), 'baseline': str(tmp_path / 'big.json')}, {'a': GOOD})
    assert result['failed'] is True and 'is larger than 10 bytes' in result['msg']


@pytest.mark.parametrize('args, words', [
    ({'hosts': 'a', 'dest': '/tmp/x'}, 'hosts must be a list'),
    ({'hosts': ['a']}, 'dest'),
    ({'hosts': ['a'], 'dest': '/tmp/x', 'regression_pct': 'nan'}, 'regression_pct must be a number from 0 to 100'),
    ({'hosts': ['a'], 'dest': '/tmp/x', 'regression_pct': 101}, 'regression_pct must be a number from 0 to 100'),
    ({'hosts': ['a'], 'dest': '/tmp/x', 'regression_pct': True}, 'regression_pct must be a number from 0 to 100'),
    ({'hosts': ['a'], 'dest': '/tmp/x', 'exit_policy': ['x']}, r"exit_policy must be a string, got list \(\['x'\]: ansible-core before 2.19"),
    ({'hosts': ['a'], 'dest': '/tmp/x', 'exit_policy': 5}, 'exit_policy must be a string, got int$'),
])
def test_bad_arguments_fail_before_anything_is_written(tmp_path, args, words):
    with pytest.raises(AnsibleActionFail, match=words):
        run(args, {'a': GOOD})


def test_an_unusable_destination_fails_the_task(tmp_path):
    (tmp_path / 'file').write_text('x')
    result = run({'hosts': ['a'], 'dest': str(tmp_path / 'file')}, {'a': GOOD})
    assert result['failed'] is True and 'exists and is not a directory' in result['msg']
    os.mkfifo(str(tmp_path / 'report.md'))   # never renamed over, never read
    result = run({'hosts': ['a'], 'dest': str(tmp_path)}, {'a': GOOD})
    assert result['failed'] is True and result['msg'].startswith('could not write 1 of 5 file(s): %s' % (tmp_path / 'report.md'))
    assert os.path.isfile(tmp_path / 'report.json')   # the others are written


def test_report_json_is_one_line_beyond_the_pair_limit(monkeypatch):
    report = {'bench': {'pairs': [{'server': 'a'}, {'server': 'b'}]}, 'schema': 'x'}
    assert _report_stage.report_json(report).count('\n') > 2
    monkeypatch.setattr(_report_stage, 'INDENT_MAX_PAIRS', 1)
    text = _report_stage.report_json(report)
    assert text.count('\n') == 1 and text.endswith('}\n') and json.loads(text) == report


def test_a_long_list_of_matches_is_cut_in_the_message():
    report = {'findings': [{'id': 'X@n%d/node' % i, 'code': 'X', 'severity': 'error', 'explained_by': None} for i in range(25)]}
    matched, reasons = _report_stage.verdict(report)
    shown = ', '.join('X@n%d/node' % i for i in range(20))
    assert len(matched) == 25 and reasons[0].endswith(': %s and 5 more (report.md lists them)' % shown)


def _local_run(gbs, env):
    """A lone node's collective (launcher local) as fabric_collective_result holds it: judge_nodes of its result."""
    from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _collective
    result = {'status': 'ok', 'failure': None, 'benchmark': 'all_reduce_perf', 'max_busbw_gbs': gbs, 'avg_busbw_gbs': gbs,
              'ranks': [{'rank': 0, 'host': 'a'}, {'rank': 1, 'host': 'a'}], 'env': {}, 'verdict': {'status': 'unknown', 'reasons': []},
              'versions': {'library_version': '2.28.9+cuda13.0'}, 'wrong_total': 0,
              'transport': {'env': env, 'intra_by_host': {'a': {'P2P': 4, 'via': ['P2P/CUMEM']}}}}
    return {'nodes': _collective.judge_nodes({'a': result})}


def test_a_lone_node_against_its_baseline_through_the_task(tmp_path):
    old, new, bad = tmp_path / 'old', tmp_path / 'new', tmp_path / 'bad'
    healthy = {'a': dict(GOOD, fabric_collective_result=_local_run(300.0, {'NCCL_NVLS_ENABLE': '0'}))}
    assert not run({'hosts': ['a'], 'dest': str(old)}, healthy).get('failed')
    profile = report_of(old)['hosts']['a']['profile']
    assert profile['values']['run/-/NCCL_NVLS_ENABLE'] == '0' and 'gpu' in profile['not_read']
    slow = {'a': dict(GOOD, fabric_collective_result=_local_run(20.0, {'NCCL_NVLS_ENABLE': '0', 'NCCL_MAX_NCHANNELS': '1'}))}
    run({'hosts': ['a'], 'dest': str(new), 'baseline': str(old / 'report.json')}, slow)
    found = dict((f['id'].split('/')[0], f) for f in report_of(new)['findings'])
    assert found['COLLECTIVE_NODE_SLOW@a']['evidence']['basis'] == 'baseline'
    # A documented tuning variable its baseline run did not have: its own root (rules/_nccl_settings.py), with what it does.
    root = found['COLLECTIVE_NCCL_TUNING@a']
    assert found['COLLECTIVE_NODE_SLOW@a']['explained_by'] == root['id'] and root['id'] in report_of(new)['hosts']['a']['roots']
    assert root['evidence']['variables']['NCCL_MAX_NCHANNELS']['value'] == '1' and 'its baseline run: not set' in root['cause']
    # A baseline that cannot be read: said in the report (and the task fails, as for the drift).
    (tmp_path / 'garbled.json').write_bytes(b'\x00{"schema": [')
    result = run({'hosts': ['a'], 'dest': str(bad), 'baseline': str(tmp_path / 'garbled.json')}, slow)
    assert result['failed'] is True and 'is not JSON' in result['msg']
    refused = [f for f in report_of(bad)['findings'] if f['code'] == 'BASELINE_NOT_USED']
    assert len(refused) == 1 and 'garbled.json is not JSON' in refused[0]['cause']
