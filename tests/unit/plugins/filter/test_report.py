# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""fabric_report over hostvars: every listed host is a node (localhost too), a rescued task
failure is a finding, and a run that validated nothing fails closed."""

from __future__ import annotations

from ansible_collections.hpc.gpu_fabric.plugins.filter.report import fabric_report
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _report
from tests.bench import diagnosis_accuracy


def codes(report):
    return sorted((f['code'], f['host']) for f in report['findings'] if f['explained_by'] is None)


def test_localhost_is_a_node():
    facts = diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr')
    hostvars = {'localhost': {'ansible_facts': {'gpu_fabric_ib': facts['ib'], 'gpu_fabric_gdr': facts['gdr']},
                              'gpu_fabric_stages': ['validate']}}
    report = fabric_report(hostvars, ['localhost'])
    assert list(report['hosts']) == ['localhost'] and report['hosts']['localhost']['status'] == 'ok'
    assert report['summary']['hosts_ok'] == 1 and codes(report) == []
    assert _report.policy(report) == []


def test_nothing_validated_fails_closed():
    for hosts, words in (([], 'matched no inventory host'), (['gone'], 'every node was unreachable or failed (gone)')):
        report = fabric_report({}, hosts)
        found = dict((f['code'], f) for f in report['findings'])
        assert found['RUN_NOTHING_VALIDATED']['severity'] == 'error' and words in found['RUN_NOTHING_VALIDATED']['cause']
        assert sorted(f['id'] for f in _report.policy(report)) == sorted(f['id'] for f in report['findings']
                                                                         if f['explained_by'] is None)


def test_a_rescued_failure_is_named_and_a_lost_stage_is_not_reported_twice():
    facts = diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr')
    good = {'ansible_facts': {'gpu_fabric_ib': facts['ib'], 'gpu_fabric_gdr': facts['gdr']},
            'gpu_fabric_stages': ['validate', 'benchmark']}
    hostvars = {
        'a': good, 'b': good,
        # Facts failed: no facts at all, but the task and its message are known.
        'c': {'gpu_fabric_failures': [{'stage': 'validate', 'task': 'Read GPU/NIC topology', 'msg': 'boom'}]},
        # Through validate, then a benchmark task failed and was rescued.
        'd': dict(good, gpu_fabric_stages=['validate'],
                  gpu_fabric_failures=[{'stage': 'benchmark', 'task': 'Plan', 'msg': 'no address in 10.0.0.0/8'}]),
    }
    report = fabric_report(hostvars, ['a', 'b', 'c', 'd'])
    assert codes(report) == [('HOST_TASK_FAILED', 'c'), ('HOST_TASK_FAILED', 'd')]
    assert report['hosts']['c']['status'] == 'error' and report['hosts']['a']['status'] == 'ok'
    failed = [f for f in report['findings'] if f['host'] == 'd'][0]
    assert failed['cause'] == 'task "Plan" failed on d during benchmark: no address in 10.0.0.0/8'
    assert 'HOST_LOST' not in [f['code'] for f in report['findings']]
    assert 'nccl' not in report['hosts']['c'] and 'nccl' in report['hosts']['a']


def test_a_node_that_did_not_answer_is_unreachable_with_the_connection_error():
    """validate.yml keeps a node that did not answer in the run with a record marked unreachable:
    HOST_UNREACHABLE names the connection's error (report, junit), not a failed task; a task that
    failed on it earlier (configure) is still named; a node that answered and failed is not unreachable."""
    refused = 'Failed to connect to the host via ssh: ssh: connect to host 10.0.0.9 port 22: Connection refused'
    hostvars = {
        'gone': {'gpu_fabric_failures': [{'stage': 'validate', 'task': 'Stop on a node that does not answer', 'msg': refused,
                                          'unreachable': True}]},
        'later': {'gpu_fabric_failures': [{'stage': 'configure', 'task': 'Set the governor', 'msg': 'boom', 'unreachable': False},
                                          {'stage': 'validate', 'task': 'Stop on a node that does not answer', 'msg': 'timed out',
                                           'unreachable': True}]},
        'broken': {'gpu_fabric_failures': [{'stage': 'validate', 'task': 'Read HCAs', 'msg': 'no /sys', 'unreachable': False}]},
    }
    report = fabric_report(hostvars, ['gone', 'later', 'broken'])
    assert dict((h, e['status']) for h, e in report['hosts'].items()) == {'gone': 'unreachable', 'later': 'unreachable',
                                                                          'broken': 'error'}
    found = dict(((f['code'], f['host'], f['subject']), f) for f in report['findings'])
    gone = found[('HOST_UNREACHABLE', 'gone', 'node')]
    assert gone['evidence'] == {'msg': refused} and refused in gone['cause'] and gone['explained_by'] is None
    assert found[('HOST_UNREACHABLE', 'later', 'node')]['evidence'] == {'msg': 'timed out'}
    assert found[('HOST_TASK_FAILED', 'later', 'configure')]['evidence']['msg'] == 'boom'
    assert ('HOST_TASK_FAILED', 'gone', 'validate') not in found and ('HOST_UNREACHABLE', 'broken', 'node') not in found
    assert 'every node was unreachable or failed (broken, gone, later)' in found[('RUN_NOTHING_VALIDATED', None, 'run')]['cause']
    assert report['summary']['hosts_unreachable'] == 2
    assert refused in _report.junit(report)


def test_a_record_marked_unreachable_beside_facts_is_a_failed_task():
    """Facts came back, then a connection check failed (a later stage): the node answered once, so it is
    judged on its facts and the failure is named as a failed task, not as a node that never answered."""
    facts = diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr')
    hostvars = {'a': {'ansible_facts': {'gpu_fabric_ib': facts['ib'], 'gpu_fabric_gdr': facts['gdr']},
                      'gpu_fabric_failures': [{'stage': 'benchmark', 'task': 'Check that the node answers', 'msg': 'timed out',
                                               'unreachable': True}]}}
    report = fabric_report(hostvars, ['a'])
    assert report['hosts']['a']['status'] == 'error' and codes(report) == [('HOST_TASK_FAILED', 'a')]
