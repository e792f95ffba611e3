# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""_quarantine: a report's verdicts for the scheduler - which finding names the drain, which checks re-ran - and a
report that cannot be acted on refused with the reason."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils import _quarantine


def finding(code, host, subject, severity='error'):
    return {'id': '%s@%s/%s' % (code, host, subject), 'code': code, 'host': host, 'subject': subject, 'severity': severity}


REPORT = {
    'schema': 'hpc.gpu_fabric/report', 'schema_version': 1, 'generated_at': '2026-11-28T09:20:41.123456',
    'bench': {'pairs': []}, 'collective': None,
    'findings': [finding('IB_PORT_DOWN', 'n1', 'mlx5_1/1'), finding('HOST_CPU_GOVERNOR', 'n1', 'node', 'warning'),
                 finding('GDR_PEERMEM_NOT_LOADED', 'n1', 'node'), finding('BENCH_PAIR_LOW', None, 'n2->n3 rail 0 host')],
    'hosts': {
        # Roots in another order than the findings': the report's (bottom-up) order decides.
        'n1': {'status': 'error', 'roots': ['GDR_PEERMEM_NOT_LOADED@n1/node', 'HOST_CPU_GOVERNOR@n1/node', 'IB_PORT_DOWN@n1/mlx5_1/1']},
        'n2': {'status': 'error', 'roots': [], 'findings': ['BENCH_PAIR_LOW@None/n2->n3 rail 0 host']},
        'n3': {'status': 'error', 'roots': ['NOT_IN_FINDINGS@n3/x']},
        'n4': {'status': 'unreachable'},
        'n5': {'status': 'ok'},
        'n6': 'not a host entry',
    },
}


def test_verdicts():
    found = _quarantine.verdicts(REPORT)
    assert found['n1'] == {'status': 'error', 'reason': 'gpu_fabric: IB_PORT_DOWN mlx5_1/1 (+1 more)',
                           'finding': 'IB_PORT_DOWN@n1/mlx5_1/1', 'stages': ['facts', 'bench']}
    assert found['n2']['reason'] == 'gpu_fabric: BENCH_PAIR_LOW n2->n3 rail 0 host'
    assert found['n3']['reason'] == 'gpu_fabric: ERROR see report.json' and found['n3']['finding'] is None
    assert found['n4']['stages'] == ['bench'] and found['n5']['status'] == 'ok' and 'n6' not in found


def test_report_epoch():
    assert _quarantine.report_epoch(REPORT) == pytest.approx(1795857641.123456)
    assert _quarantine.report_epoch({'generated_at': 'yesterday'}) is None


def test_refused_reports(tmp_path):
    path = str(tmp_path / 'report.json')
    with pytest.raises(_quarantine.ReportError, match='cannot read'):
        _quarantine.read(path)
    with open(path, 'w') as handle:
        json.dump({'schema': 'other'}, handle)
    with pytest.raises(_quarantine.ReportError, match='not a report of hpc.gpu_fabric'):
        _quarantine.read(path)
    with open(path, 'w') as handle:
        handle.write('{')
    with pytest.raises(_quarantine.ReportError, match='not JSON'):
        _quarantine.read(path)
    with pytest.raises(_quarantine.ReportError, match='a directory, not a regular file'):
        _quarantine.read(str(tmp_path))
    os.mkfifo(str(tmp_path / 'fifo'))
    with pytest.raises(_quarantine.ReportError, match='not a regular file'):
        _quarantine.read(str(tmp_path / 'fifo'))


def test_lines_say_the_cap():
    result = {'nodes': [{'node': 'n1', 'outcome': 'drained', 'why': 'IB_PORT_DOWN@n1/mlx5_1/1', 'state_after': 'IDLE+DRAIN'},
                        {'node': 'n3', 'outcome': 'capped', 'why': 'the quarantine cap (1 of 4 nodes) is reached'},
                        {'node': 'n5', 'outcome': 'left', 'why': 'verdict ok'}],
              'capped': ['n3'], 'cap': 1, 'total': 4}
    assert _quarantine.lines(result) == [
        'n1: drained - IB_PORT_DOWN@n1/mlx5_1/1 [slurm now IDLE+DRAIN]',
        'n3: NOT drained (cap) - the quarantine cap (1 of 4 nodes) is reached',
        'quarantine cap: 1 of 4 slurm nodes may be drained at once; 1 node(s) with an error verdict NOT drained: n3']
    assert _quarantine.record(result, '/r/report.json', 'x')['nodes'][1]['outcome'] == 'capped'


def test_a_report_nested_too_deep_or_not_a_file_is_refused_with_why(tmp_path):
    deep = tmp_path / 'deep.json'
    deep.write_text('[' * 100000)
    with pytest.raises(_quarantine.ReportError, match='nested too deep'):
        _quarantine.load(str(deep))
    with pytest.raises(_quarantine.ReportError, match='cannot read the report'):
        _quarantine.load(str(tmp_path))
