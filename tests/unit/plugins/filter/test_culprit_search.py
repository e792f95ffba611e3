# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The culprit_search_* filters as the role fabric_collective chains them, and the findings the
search makes (plugins/plugin_utils/diagnosis/_search_findings.py)."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.filter import collective, culprit_search
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._search_findings import search_findings

F = dict(collective.FilterModule().filters(), **culprit_search.FilterModule().filters())
IB = {'devices': [{'name': 'mlx5_0', 'ports': [{'state': 'ACTIVE', 'rate_gbps': 400.0}]}]}


def _result(hosts, slow):
    busbw = 12.0 if set(hosts) & set(slow) else 44.0
    return {'status': 'ok', 'max_busbw_gbs': busbw, 'wrong_total': 0, 'out_of_bounds': {'count': 0, 'ok': True}}


def test_filters_drive_a_search_as_a_play_would():
    hostvars = dict(('n%02d' % i, {'ansible_facts': {'gpu_fabric_ib': IB}}) for i in range(24))
    expected = F['collective_expected'](hostvars, sorted(hostvars))
    assert expected['gbs'] == 50.0
    slow = ['n03', 'n11', 'n20']
    state = F['culprit_search_start'](sorted(hostvars))
    while not state['done']:
        runs = F['culprit_search_next'](state)
        # The play's shape: async starts, async_status results, one verdict per run in run order.
        started = [{'ansible_job_id': 'j%d' % i, 'started': True, 'finished': False} for i, _r in enumerate(runs)]
        finished = [dict(_result(r['hosts'], slow), verdict=F['collective_verdict'](_result(r['hosts'], slow), expected['gbs']),
                         ansible_job_id='j%d' % i, finished=True) for i, r in reversed(list(enumerate(runs)))]
        verdicts = F['culprit_search_verdicts'](started, finished)
        assert [v['status'] for v in verdicts] == ['low' if set(r['hosts']) & set(slow) else 'ok' for r in runs]
        state = F['culprit_search_update'](state, runs, verdicts)
    assert sorted(state['culprits']) == slow and state['unresolved'] == [] and state['rounds'] <= len(state['runs'])


def test_a_run_that_did_not_start_or_finish_is_failed_never_cleared():
    started = [{'failed': True, 'msg': 'launcher mpirun not found'}, {'ansible_job_id': 'j1'}, {'ansible_job_id': 'j2'},
               {'skipped': True, 'skip_reason': 'Conditional result was False'}]
    finished = [{'ansible_job_id': 'j1', 'finished': False}]
    verdicts = F['culprit_search_verdicts'](started, finished)
    assert [v['status'] for v in verdicts] == ['failed'] * 4
    assert 'launcher mpirun not found' in verdicts[0]['reasons'][0] and 'did not report back' in verdicts[2]['reasons'][0]
    with pytest.raises(AnsibleFilterError, match='registered results'):
        F['culprit_search_verdicts']({'results': []}, [])


def test_start_takes_findings_and_a_bench_report():
    findings = [{'host': 'n02', 'severity': 'error', 'layer': 'host', 'code': 'HOST_X'},
                {'host': 'n05', 'severity': 'warning', 'layer': 'ib', 'code': 'IB_Y'}]
    report = {'pairs': [{'server': 'n07', 'client': 'n01', 'verdict': 'failed'}]}
    state = F['culprit_search_start'](['n%02d' % i for i in range(8)], None, findings, report)
    assert state['culprits'] == ['n02'] and state['basis'] == {'n02': 'facts'} and state['known_pairs'] == [['n01', 'n07']]
    with pytest.raises(AnsibleFilterError, match='list of inventory names'):
        F['culprit_search_start']('n01')
    with pytest.raises(AnsibleFilterError, match='one verdict per run'):
        F['culprit_search_update'](state, [{}], [])


def test_findings_of_the_search():
    search = {'culprits': ['a', 'b'], 'basis': {'a': 'facts', 'b': 'runs'}, 'unresolved': ['z'],
              'pairs': [{'nodes': ['d', 'c'], 'basis': 'runs'}, {'nodes': ['e', 'f'], 'basis': 'pairwise benchmark'}],
              'runs': [{'step': 'trial', 'hosts': ['b', 'c', 'd'], 'group': ['b', 'c', 'd'], 'status': 'low'},
                       {'step': 'split', 'hosts': ['b', 'x'], 'group': ['b'], 'status': 'low'},
                       {'step': 'pair', 'hosts': ['c', 'd'], 'group': ['c', 'd'], 'status': 'warning'}]}
    found = dict((f['code'] + '/' + (f['host'] or ''), f) for f in search_findings(search))
    assert found['COLLECTIVE_CULPRIT/a']['evidence']['basis'] == 'facts' and 'its facts' in found['COLLECTIVE_CULPRIT/a']['cause']
    assert found['COLLECTIVE_CULPRIT/b']['evidence']['run']['hosts'] == ['b', 'x']
    pair = found['COLLECTIVE_PAIR_SLOW/c']
    assert pair['hosts'] == ['c', 'd'] and pair['subject'] == 'c-d' and 'warning' in pair['cause'] and 'd' in pair['remedy']
    assert 'pairwise benchmark' in found['COLLECTIVE_PAIR_SLOW/e']['cause']
    assert found['COLLECTIVE_SUSPECT/z']['severity'] == 'warning'
    assert search_findings(None) == [] and search_findings({'pairs': [{'nodes': ['only']}]}) == []
    # Through the diagnosis: the pair finding explains the fleet's low busbw.
    # (A fleet run's symptom is explained only by a root on its path: the run's nodes.)
    collective = {'fleet': {'verdict': {'status': 'low', 'ratio': 0.3, 'reasons': ['low']}, 'hosts': list('abcdefxz')},
                  'search': search}
    linked = _diagnose.link_causes(_diagnose.collective_findings(collective, dict((host, {}) for host in 'abcdefxz')) + search_findings(search))
    fleet = [f for f in linked if f['code'] == 'COLLECTIVE_BUSBW_LOW'][0]
    assert fleet['explained_by'] is not None
