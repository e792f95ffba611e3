# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""fabric_report over hostvars: every listed host is a node (localhost too), a rescued task
failure is a finding, and a run that validated nothing fails closed."""

from __future__ import annotations

from ansible_collections.hpc.gpu_fabric.plugins.filter.report import fabric_report
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils import _report
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
