# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""_slurm: scontrol's node records (real outputs: tests/fixtures/public/scontrol, tests/fixtures/real/slurm-lab), the
drain reason, and the plan - drain, leave another's drain alone, resume only after a newer re-check, the cap."""

from __future__ import annotations

import time

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _slurm
from tests.unit.conftest import fixture_text

LAB_O = ('real', 'slurm-lab', 'scontrol_show_node_o_22_05.txt')
LAB_M = ('real', 'slurm-lab', 'scontrol_show_node_22_05.txt')


def lab_nodes():
    return _slurm.parse_nodes(fixture_text(*LAB_O))


def test_lab_one_line_records():
    nodes = lab_nodes()
    assert sorted(nodes) == ['n1', 'n2', 'n3', 'n4']
    assert (nodes['n1']['base'], nodes['n1']['flags']) == ('IDLE', ['DRAIN'])
    assert nodes['n1']['reason'] == 'gpu_fabric: IB_PORT_DOWN mlx5_1/1' and nodes['n1']['reason_user'] == 'root'
    assert nodes['n1']['reason_time'] == '2026-11-28T09:22:37'
    # An admin's reason that holds ' Reason=' and a '[user@time]' of its own: the real suffix is the last.
    assert nodes['n2']['reason'] == 'swap PSU State=IDLE Reason=x [bob@2020-01-01T00:00:00] (ticket 4711)'
    assert nodes['n2']['state'] == 'IDLE+DRAIN' and not _slurm.ours(nodes['n2']) and _slurm.out_of_service(nodes['n2'])
    assert nodes['n3']['state'] == 'MIXED+DRAIN' and _slurm.ours(nodes['n3'])
    assert nodes['n4']['base'] == 'DOWN' and nodes['n4']['reason'].startswith('NHC: ') and _slurm.out_of_service(nodes['n4'])


def test_lab_multiline_reads_the_same():
    one, many = lab_nodes(), _slurm.parse_nodes(fixture_text(*LAB_M))
    assert {k: (v['state'], v['reason'], v['reason_time']) for k, v in one.items()} == \
        {k: (v['state'], v['reason'], v['reason_time']) for k, v in many.items()}


def test_public_allocated_without_reason():
    nodes = _slurm.parse_nodes(fixture_text('public', 'scontrol', 'geertvangeest_20_11_allocated_multiline.txt'))
    node = nodes['binfservas07']
    assert (node['base'], node['flags'], node['reason']) == ('ALLOCATED', [], None)
    assert not _slurm.out_of_service(node)


def test_public_down_cut_excerpt():
    node = _slurm.parse_nodes(fixture_text('public', 'scontrol', 'sirepo_2136_19_05_down_cut.txt'))['localhost']
    assert node['base'] == 'DOWN' and node['reason'] is None and _slurm.out_of_service(node)


@pytest.mark.parametrize('state, base, flags', [
    ('IDLE+DRAIN', 'IDLE', {'DRAIN'}),
    ('DOWN*+DRAIN', 'DOWN', {'DRAIN', 'NOT_RESPONDING'}),      # Slurm 20 and older (rackslab/Slurm-web issue 153)
    ('DOWN+CLOUD+NOT_RESPONDING', 'DOWN', {'CLOUD', 'NOT_RESPONDING'}),
    ('', 'UNKNOWN', set()),
])
def test_state_flags(state, base, flags):
    assert _slurm.state_flags(state) == (base, flags)


def test_hostile_output_is_bounded():
    with pytest.raises(_slurm.SlurmOutputError):
        _slurm.parse_nodes('slurm_load_node error: Unable to contact slurm controller\n')
    huge = 'NodeName=n1 State=IDLE Reason=' + 'x' * (2 * _slurm.MAX_RECORD) + ' [root@2026-01-01T00:00:00]\n'
    node = _slurm.parse_nodes(huge)['n1']
    assert node['reason_time'] is None and len(node['reason']) < _slurm.MAX_RECORD
    with pytest.raises(_slurm.SlurmOutputError):
        _slurm.parse_nodes(''.join('NodeName=n%d State=IDLE\n' % i for i in range(_slurm.MAX_NODES + 1)))


def test_reason_is_bounded_and_escaped():
    text = _slurm.reason('IB_PORT_DOWN', 'mlx5_1/1\n"x" [a@b] ' + 'y' * 300, 2)
    assert text.startswith('gpu_fabric: IB_PORT_DOWN mlx5_1/1 ?x? ?a@b? ') and text.endswith(' (+2 more)')
    assert len(text) == _slurm.REASON_MAX
    assert _slurm.reason_code(text) == 'IB_PORT_DOWN' and _slurm.reason_code('maintenance') == ''


def nodes_of(**states):
    """{name: node} from name='STATE|reason|time'."""
    found = {}
    for name, spec in states.items():
        state, reason, when = (spec.split('|') + [None, None])[:3]
        base, flags = _slurm.state_flags(state)
        found[name] = {'name': name, 'state': state, 'base': base, 'flags': sorted(flags), 'reason': reason or None,
                       'reason_user': 'root' if reason else None, 'reason_time': when}
    return found


ERR = {'status': 'error', 'reason': 'gpu_fabric: IB_PORT_DOWN mlx5_1/1', 'finding': 'IB_PORT_DOWN@x/mlx5_1/1', 'stages': ['facts']}
OK = {'status': 'ok', 'reason': '', 'finding': None, 'stages': ['facts']}


def by_node(planned):
    return {entry['node']: entry['outcome'] for entry in planned['nodes']}


def test_plan_drains_errors_and_leaves_others_alone():
    nodes = nodes_of(n1='IDLE', n2='IDLE+DRAIN|maintenance: PSU|2026-01-01T00:00:00', n3='MIXED', n4='DOWN+NOT_RESPONDING|Not responding|2026-01-01T00:00:00')
    planned = _slurm.plan(nodes, {'n1': ERR, 'n2': ERR, 'n3': ERR, 'n4': ERR, 'gone': ERR, 'n[1-4]': ERR}, share=1.0)
    assert [(a['node'], a['action']) for a in planned['actions']] == [('n1', 'drain'), ('n3', 'drain')]
    assert by_node(planned) == {'n1': 'drained', 'n2': 'untouched', 'n3': 'drained', 'n4': 'untouched', 'gone': 'skipped', 'n[1-4]': 'skipped'}
    assert [e['note'] for e in planned['nodes'] if e['node'] == 'n3'] == ['jobs running: DRAINING until they end']


def test_plan_cap_counts_nodes_already_held():
    nodes = nodes_of(**dict(('n%d' % i, 'IDLE') for i in range(1, 20)))
    nodes['n1'] = nodes_of(n1='IDLE+DRAIN|gpu_fabric: IB_PORT_DOWN mlx5_1/1|2026-01-01T00:00:00')['n1']
    planned = _slurm.plan(nodes, {'n1': ERR, 'n2': ERR, 'n3': ERR}, share=0.1)
    # 10 % of 19 nodes is 1: n1 (held already) fills it.
    assert planned['cap'] == 1 and planned['capped'] == ['n2', 'n3'] and planned['actions'] == []
    assert _slurm.cap(0.1, 4) == 1 and _slurm.cap(0.5, 4) == 2 and _slurm.cap(0.1, 1000) == 100


def test_plan_resumes_only_after_a_newer_recheck():
    drained_at = '2026-01-01T10:00:00'
    nodes = nodes_of(n1='IDLE+DRAIN|gpu_fabric: IB_PORT_DOWN mlx5_1/1|' + drained_at,
                     n2='IDLE+DRAIN|gpu_fabric: BENCH_PAIR_LOW n2->n3 rail 0 host|' + drained_at,
                     n3='IDLE+DRAIN|maintenance|' + drained_at)
    after = _slurm.local_epoch(drained_at) + 60
    planned = _slurm.plan(nodes, {'n1': OK, 'n2': OK, 'n3': OK}, share=1.0, report_time=after)
    assert [(a['node'], a['action']) for a in planned['actions']] == [('n1', 'resume')]
    outcome = {e['node']: e for e in planned['nodes']}
    assert 'did not run the bench check' in outcome['n2']['why'] and outcome['n3']['outcome'] == 'left'
    # A report older than the drain re-checked nothing.
    stale = _slurm.plan(nodes, {'n1': OK}, share=1.0, report_time=after - 120)
    assert stale['actions'] == [] and 'not newer than the drain' in by_reason(stale, 'n1')
    # Not in the report, or still failing: kept.
    assert by_node(_slurm.plan(nodes, {}, share=1.0, report_time=after))['n1'] == 'kept'
    assert _slurm.plan(nodes, {'n1': ERR}, share=1.0, report_time=after)['actions'] == []


def by_reason(planned, name):
    return [e['why'] for e in planned['nodes'] if e['node'] == name][0]


def test_plan_is_idempotent_on_its_own_result():
    nodes = nodes_of(n1='IDLE')
    first = _slurm.plan(nodes, {'n1': ERR}, share=1.0)
    assert first['actions'][0]['reason'] == ERR['reason']
    stamp = time.strftime('%Y-%m-%dT%H:%M:%S')
    again = _slurm.plan(nodes_of(n1='IDLE+DRAIN|%s|%s' % (ERR['reason'], stamp)), {'n1': ERR}, share=1.0)
    assert again['actions'] == [] and by_node(again) == {'n1': 'kept'}


def test_plan_writes_only_its_own_printable_reasons():
    hostile = dict(ERR, reason='maintenance [root@2026-01-01T00:00:00]')
    planned = _slurm.plan(nodes_of(n1='IDLE', n2='IDLE'), {'n1': hostile, 'n2': dict(ERR, reason='gpu_fabric: X "y"\n')}, share=1.0)
    assert [a['reason'] for a in planned['actions']] == ['gpu_fabric: ERROR see report.json', 'gpu_fabric: X ?y?']
