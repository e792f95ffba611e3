# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Fabric rules of issue 22 (items 3 and 6): every subnet manager judged (a standby at the master's
priority, an SM that will not take over), input that was not read never passes, and the places
(``at``) fabric findings sit on. On hand-made facts, the simulated pod and the real fixtures."""

from __future__ import annotations

import os

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _ibdiag
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose, _fabric
from tests.bench import diagnosis_accuracy
from tests.sim import fabric as sim_fabric, tools_ibdiags

FIXTURES = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'fixtures', 'public')


def body(kind, name):
    with open(os.path.join(FIXTURES, kind, name)) as handle:
        return ''.join(line for line in handle if not line.startswith('## '))


def fabric_facts(sms, tools=None, unread=None, topology=None):
    return {'status': 'ok', 'tools': tools or {'sminfo': 'used', 'saquery': 'used'}, 'sm': {'sms': sms, 'errors': []},
            'topology': topology or {}, 'unread': unread or {'count': 0, 'lines': []}}


def sm(lid, guid, priority, state, asked='local port'):
    return {'lid': lid, 'guid': guid, 'priority': priority, 'state': state,
            'state_name': _ibdiag.SM_STATES.get(state), 'asked': asked}


def codes(found):
    return sorted(f['code'] for f in found)


@pytest.fixture(scope='module')
def base():
    return diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr')


def test_standby_at_the_masters_priority_from_saquery_smir():
    parsed = _ibdiag.parse_saquery_sminfo(body('saquery', 'rdma_core_format_smir_master_standby_tie.txt'))
    sms = [dict(s, asked='saquery SMIR') for s in parsed['sms']]
    found = _fabric.sm_findings(fabric_facts(sms), {}, 'a')
    assert codes(found) == ['FABRIC_SM_PRIORITY_TIE']
    tie = found[0]
    assert [s['lid'] for s in tie['evidence']['standbys_at_master_priority']] == [7] and tie['evidence']['master']['lid'] == 2
    assert 'at the master\'s priority 0' in tie['cause'] and 'lower GUID' in tie['cause'] and tie['at'] == [['fabric']]


def test_distinct_priorities_and_a_lone_master_are_quiet():
    assert _fabric.sm_findings(fabric_facts([sm(1, '0x1', 14, 3), sm(2, '0x2', 13, 2, 'saquery SMIR')]), {}, 'a') == []
    assert _fabric.sm_findings(fabric_facts([sm(1, '0x1', 0, 3)]), {}, 'a') == []


def test_the_sms_own_answer_wins_over_the_sa_record():
    # The SA last polled LID 2 as STANDBY at priority 14; the SM itself now says priority 12.
    sms = [sm(1, '0x1', 14, 3), sm(2, '0x2', 14, 2, 'saquery SMIR'), sm(2, '0x2', 12, 2, 'lid 2')]
    assert _fabric.sm_findings(fabric_facts(sms), {}, 'a') == []


@pytest.mark.parametrize('state,word', [(0, 'SMINFO_NOTACTIVE'), (1, 'SMINFO_DISCOVERING')])
def test_an_sm_that_will_not_take_over(state, word):
    found = _fabric.sm_findings(fabric_facts([sm(1, '0x1', 14, 3), sm(2, '0x2', 13, state, 'saquery SMIR')]), {}, 'a')
    assert codes(found) == ['FABRIC_SM_INACTIVE'] and word in found[0]['cause'] and found[0]['at'] == [['fabric']]
    assert found[0]['severity'] == 'warning'


def test_a_record_without_state_is_not_an_absent_master_by_silence():
    found = _fabric.sm_findings(fabric_facts([sm(2, '0x2', 0, None)]), {}, 'a')
    assert codes(found) == ['FABRIC_SM_ABSENT'] and 'state of LID 2' in found[0]['cause'] and 'not read' in found[0]['cause']


def test_the_rewrapped_mail_paste_gives_a_master():
    parsed = _ibdiag.parse_sminfo(body('sminfo', 'ompi_users_2009_wrapped_after_priority.txt'))
    assert _fabric.sm_findings(fabric_facts([dict(s, asked='local port') for s in parsed['sms']]), {}, 'a') == []


def test_unread_lines_are_a_warning_naming_them(base):
    unread = {'count': 7, 'lines': [{'tool': 'ibnetdiscover', 'line': n, 'text': 'CA junk %d' % n} for n in range(1, 8)]}
    nodes = {'a': {'ib': base['ib'], 'fabric': fabric_facts([sm(1, '0x1', 14, 3)], unread=unread)}}
    found = [f for f in _fabric.fabric_findings(nodes) if f['code'] == 'FABRIC_INPUT_UNREAD']
    assert len(found) == 1 and found[0]['severity'] == 'warning' and found[0]['at'] == [['fabric']]
    assert found[0]['evidence']['count'] == 7 and len(found[0]['evidence']['first']) == 5
    assert "ibnetdiscover line 1: 'CA junk 1'" in found[0]['cause'] and 'line 6' not in found[0]['cause']


def test_saquery_failing_without_a_master_is_the_absent_sm_not_a_tool_problem():
    tools = {'sminfo': 'failed: rc=255 sminfo: iberror: failed: query', 'saquery': 'failed: rc=255 Query SA failed: Connection timed out',
             'iblinkinfo': 'used', 'ibnetdiscover': 'used', 'perfquery': 'used'}
    facts = dict(fabric_facts([], tools=tools), status='partial')
    facts['sm']['errors'] = [{'asked': 'saquery SMIR', 'error': 'ibwarn: [4711] sa_query: umad_recv failed: attr 0x18: Connection timed out'}]
    assert codes(_fabric.fabric_findings({'a': {'fabric': facts}})) == ['FABRIC_SM_ABSENT']
    # With a master answering, saquery failing is a tool problem: the standbys were not read.
    facts['sm']['sms'] = [sm(1, '0x1', 14, 3)]
    assert codes(_fabric.fabric_findings({'a': {'fabric': facts}})) == ['FABRIC_TOOLS_MISSING']


@pytest.mark.parametrize('fault,code', [('sm_standby_tie', 'FABRIC_SM_PRIORITY_TIE'),
                                        ('sm_standby_not_active', 'FABRIC_SM_INACTIVE')])
def test_simulated_standby_faults_are_found_from_every_sm(tmp_path, fault, code):
    model = sim_fabric.model(faults=(fault,))
    # No node points at the standby: the nodes' sm_lid is the master's only.
    assert set(model['sm_lid_of'].values()) == {1}
    facts = tools_ibdiags.fabric_facts(sim_fabric.write(model, str(tmp_path / 'fabric.json')), [1], interval=0)
    assert facts['status'] == 'ok' and facts['unread']['count'] == 0
    found = _fabric.sm_findings(facts, {}, 'gpu-01')
    assert codes(found) == [code] and found[0]['at'] == [['fabric']]


def test_the_standby_tie_is_the_one_root_of_the_pod(base):
    found = _diagnose.diagnose(diagnosis_accuracy.fabric_nodes(('sm_standby_tie',), base))
    assert sorted(set((f['code'], f['host']) for f in found if f['explained_by'] is None and f['severity'] != 'info')) == [
        ('FABRIC_SM_PRIORITY_TIE', None)]


def test_link_findings_sit_on_the_link_and_the_hca(base):
    nodes = diagnosis_accuracy.fabric_nodes(('degraded_switch_link', 'flapping_link'), base)
    found = _fabric.fabric_findings(nodes)
    degraded = [f for f in found if f['code'] == 'FABRIC_LINK_DEGRADED'][0]
    assert len(degraded['at']) == 1 and degraded['at'][0][0] == 'link'
    ends = degraded['at'][0][1:]
    assert ends == sorted(ends) and all(e.startswith('0x') and '/' in e for e in ends)
    flap = [f for f in found if f['code'] == 'FABRIC_LINK_FLAPPING'][0]
    assert ['hca', 'gpu-05', 'mlx5_3'] in flap['at'] and [p[0] for p in flap['at']] == ['link', 'hca']
    assert any(e.endswith('/1') for e in [p for p in flap['at'] if p[0] == 'link'][0][1:])
    uplinks = [f for f in _fabric.fabric_findings(diagnosis_accuracy.fabric_nodes(('missing_uplink',), base))
               if f['code'] == 'FABRIC_UPLINKS_ASYMMETRIC'][0]
    # Every active link of leaf-3: 32 host ports and the 7 up-links left.
    assert len([p for p in uplinks['at'] if p[0] == 'link']) == 39 and len([p for p in uplinks['at'] if p[0] == 'hca']) == 32
