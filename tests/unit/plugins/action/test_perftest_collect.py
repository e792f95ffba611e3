# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

from unittest import mock

import pytest

from ansible.errors import AnsibleActionFail, AnsibleConnectionFailure

from ansible_collections.hpc.gpu_fabric.plugins.action import perftest_collect
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench

STEPS = [{'step': 1, 'round': 1, 'memory': 'host', 'tests': [
    {'side': 'client', 'server': 'a', 'client': 'b', 'rail': 0, 'server_hca': 'mlx5_0', 'client_hca': 'mlx5_0',
     'memory': 'host', 'round': 1, 'peer': '10.0.0.1'},
    {'side': 'server', 'server': 'b', 'client': 'a', 'rail': 1, 'server_hca': 'mlx5_1', 'client_hca': 'mlx5_1',
     'memory': 'host', 'round': 1, 'peer': '10.0.0.1'}]}]


def _done():
    """A finished job as async_status returns it: the raw result, perftest's banner and all."""
    tests = [dict(STEPS[0]['tests'][0], status='ok', summary={'bytes': 8388608, 'bw_avg_gbps': 391.5},
                  results=[{'bytes': 8388608, 'bw_avg_gbps': 391.5}], settings={'device': 'mlx5_0', 'qps': 1},
                  cmd=['ib_write_bw', '-d', 'mlx5_0', '10.0.0.1'], elapsed_s=3.1),
             dict(STEPS[0]['tests'][1], status='failed', failure={'kind': 'port_busy', 'message': 'Couldn\'t listen'})]
    return {'started': 1, 'finished': 1, 'ansible_job_id': 'j1', 'steps': [{'step': 1, 'tests': tests}], 'changed': False}


def run(args, answers, check=False, host='b', cleanup_fails=False):
    """The action with async_status answered from ``answers`` (a result, or an exception to raise)."""
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = check
    task.action = 'hpc.gpu_fabric.perftest_collect'
    action = perftest_collect.ActionModule(task, mock.MagicMock(), mock.MagicMock(), loader=None, templar=None,
                                           shared_loader_obj=None)
    calls = []

    def execute(module_name=None, task_vars=None, module_args=None):
        calls.append((module_name, dict(module_args)))
        if module_args['mode'] == 'cleanup':
            if cleanup_fails:
                raise AnsibleConnectionFailure('gone after the read')
            return {'erased': '/root/.ansible_async/j1'}
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer
    action._execute_module = execute
    action._remote_expand_user = lambda path, sudoable=True: path.replace('~', '/root')
    action.get_shell_option = lambda name, default=None: default
    action._remove_tmp_path = mock.MagicMock()
    with mock.patch.object(perftest_collect.time, 'sleep'):
        return action.run(task_vars={'inventory_hostname': host}), calls


def test_waits_for_the_job_returns_its_records_and_removes_the_job_file():
    running = {'started': 1, 'finished': 0, 'ansible_job_id': 'j1'}
    result, calls = run({'job': {'ansible_job_id': 'j1', 'started': 1}, 'steps': STEPS, 'timeout': 60},
                        [running, running, _done()])
    assert [(name, args['mode']) for name, args in calls] == [('ansible.legacy.async_status', 'status')] * 3 + [
        ('ansible.legacy.async_status', 'cleanup')]
    assert calls[0][1] == {'jid': 'j1', 'mode': 'status', '_async_dir': '/root/.ansible_async'}
    assert (result['tests'], result['not_ok'], result['finished'], result['polls']) == (2, 1, True, 3)
    assert result['records_file'] is None and not result.get('failed')
    assert [(r['side'], r['status']) for r in result['records']] == [('client', 'ok'), ('server', 'failed')]
    assert result['records'][0]['summary']['bw_avg_gbps'] == 391.5
    # Records only: neither the raw steps nor perftest's banner or command go back to the controller.
    assert 'steps' not in result and 'settings' not in result['records'][0] and 'cmd' not in result['records'][0]


def test_records_go_into_a_file_on_the_controller(tmp_path):
    result, _calls = run({'job': {'ansible_job_id': 'j1'}, 'steps': STEPS, 'timeout': 60,
                          'dest': str(tmp_path / 'out' / 'bench-records'), 'run_id': 'gf-7-1'}, [_done()], host='gpu/01')
    assert result['records_file'] == str(tmp_path / 'out' / 'bench-records' / 'gpu%2F01.records.json.gz')
    assert 'records' not in result and result['tests'] == 2
    records = _bench.read_records(result['records_file'], 'gpu/01', 'gf-7-1')
    assert [r['status'] for r in records] == ['ok', 'failed']


def test_a_directory_that_cannot_be_written_keeps_the_records_in_memory_and_says_so(tmp_path):
    blocker = tmp_path / 'file'
    blocker.write_text('not a directory')
    result, _calls = run({'job': {'ansible_job_id': 'j1'}, 'steps': STEPS, 'timeout': 60, 'dest': str(blocker / 'sub')},
                         [_done()])
    assert result['records_file'] is None and len(result['records']) == 2
    assert 'could not be written into' in result['warnings'][0] and 'kept in memory' in result['warnings'][0]


def test_a_job_still_running_after_the_budget_fails_every_test_with_the_reason():
    running = {'started': 1, 'finished': 0, 'ansible_job_id': 'j1'}
    with mock.patch.object(perftest_collect.time, 'monotonic', side_effect=[0.0, 0.5, 1.2, 2.5]):
        result, calls = run({'job': {'ansible_job_id': 'j1'}, 'steps': STEPS, 'timeout': 2}, [running] * 3)
    assert result['finished'] is False and result['not_ok'] == 2 and len(calls) == 3   # no cleanup: the job still runs
    assert {r['failure']['kind'] for r in result['records']} == {'task_failed'}
    assert 'still running on b after 2 s' in result['records'][0]['failure']['message']


def test_a_connection_that_drops_once_is_retried_three_times_in_a_row_is_unreachable():
    result, calls = run({'job': {'ansible_job_id': 'j1'}, 'steps': STEPS, 'timeout': 60},
                        [AnsibleConnectionFailure('reset'), _done()])
    assert result['tests'] == 2 and result['not_ok'] == 1 and result['polls'] == 1
    with pytest.raises(AnsibleConnectionFailure):
        run({'job': {'ansible_job_id': 'j1'}, 'steps': STEPS, 'timeout': 60}, [AnsibleConnectionFailure('gone')] * 3)


def test_a_node_lost_after_its_result_was_read_keeps_the_result():
    result, calls = run({'job': {'ansible_job_id': 'j1'}, 'steps': STEPS, 'timeout': 60}, [_done()], cleanup_fails=True)
    assert [args['mode'] for _name, args in calls] == ['status', 'cleanup']
    assert len(result['records']) == 2 and result['not_ok'] == 1 and not result.get('failed')
    assert 'could not be removed from the node' in result['warnings'][0]
    # Not removed when asked not to.
    _result, calls = run({'job': {'ansible_job_id': 'j1'}, 'steps': STEPS, 'timeout': 60, 'cleanup': 'no'}, [_done()])
    assert [args['mode'] for _name, args in calls] == ['status']


def test_a_job_that_never_started_gives_its_failure_to_every_test_without_polling():
    result, calls = run({'job': {'failed': True, 'msg': 'ib_write_bw not found'}, 'steps': STEPS, 'timeout': 60}, [])
    assert calls == [] and result['tests'] == 2
    assert [(r['failure']['kind'], r['failure']['message']) for r in result['records']] == [
        ('task_failed', 'ib_write_bw not found')] * 2


@pytest.mark.parametrize('args, message', [
    ({'job': 'j1', 'steps': STEPS, 'timeout': 5}, 'job must be'),
    ({'job': {}, 'steps': 'x', 'timeout': 5}, 'steps must be'),
    ({'job': {}, 'steps': STEPS}, 'timeout must be a number'),
    ({'job': {}, 'steps': STEPS, 'timeout': 0}, 'timeout must be a number of seconds from 1 to 2592000, got 0.0'),
    # -e values arrive as strings, and float() takes these: NaN passes every < test (time.sleep(nan)
    # raises ValueError, a NaN timeout never ends the poll); infinity and 1e300 would never end it.
    ({'job': {}, 'steps': STEPS, 'timeout': 'nan'}, 'timeout must be a number of seconds from 1 to 2592000, got nan'),
    ({'job': {}, 'steps': STEPS, 'timeout': 'inf'}, 'timeout must be a number of seconds from 1 to 2592000, got inf'),
    ({'job': {}, 'steps': STEPS, 'timeout': '1e300'}, 'timeout must be a number of seconds from 1 to 2592000, got 1e'),
    ({'job': {}, 'steps': STEPS, 'timeout': 5, 'delay': 'nan'}, 'delay must be a number of seconds from 0.1 to 3600, got nan'),
    ({'job': {}, 'steps': STEPS, 'timeout': 5, 'delay': '-inf'}, 'delay must be a number of seconds from 0.1 to 3600, got -inf'),
    ({'job': {}, 'steps': STEPS, 'timeout': 5, 'delay': 86400}, 'delay must be a number of seconds from 0.1 to 3600, got 86400'),
    ({'job': {}, 'steps': STEPS, 'timeout': 5, 'dest': ['x']}, 'dest must be a directory'),
    ({'job': {}, 'steps': STEPS, 'timeout': 5, 'cleanup': 'maybe'}, 'cleanup must be a boolean'),
])
def test_bad_arguments_are_refused_with_the_reason(args, message):
    with pytest.raises(AnsibleActionFail, match=message):
        run(args, [])
