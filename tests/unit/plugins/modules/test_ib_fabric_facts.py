# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""ib_fabric_facts in-process: over the simulator's infiniband-diags stand-ins (real
processes, timeouts), from saved outputs, and on nodes without tools or without an IB port."""

from __future__ import annotations

import os
import shutil

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.modules import ib_fabric_facts
from tests.sim import fabric, render
from tests.unit.plugins.modules.utils import run_module

SIM_BIN = os.path.join(os.path.dirname(fabric.__file__), 'bin')
FIXTURES = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'fixtures', 'public')


@pytest.fixture(scope='module')
def node_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('node'))
    render.render(render.load_profile('nvidia_h100_8x_ndr'), root)
    return root


def facts(result):
    return result['ansible_facts']['gpu_fabric_ib_fabric']


def test_discovers_the_simulated_pod_through_the_stand_ins(monkeypatch, tmp_path, node_root):
    path = fabric.write(fabric.model(faults=('sm_duplicated', 'flapping_link')), str(tmp_path / 'fabric.json'))
    monkeypatch.setenv('GF_SIM_FABRIC', path)
    monkeypatch.setenv('PATH', SIM_BIN + os.pathsep + os.environ['PATH'])
    result, failed = run_module(ib_fabric_facts.main, {'root': node_root, 'sm_lids': [1, 2], 'interval': 0.1}, monkeypatch)
    assert not failed, result
    got = facts(result)
    assert got['status'] == 'ok' and got['tools'] == dict.fromkeys(ib_fabric_facts.TOOLS, 'used')
    assert len([n for n in got['topology']['nodes'].values() if n['type'] == 'switch']) == 6
    # The local port's sminfo and the LID the other nodes see, and the master SA's records of both (saquery SMIR).
    assert sorted((s['lid'], s['state_name'], s['asked']) for s in got['sm']['sms']) == [
        (1, 'SMINFO_MASTER', 'local port'), (1, 'SMINFO_MASTER', 'saquery SMIR'),
        (2, 'SMINFO_MASTER', 'lid 2'), (2, 'SMINFO_MASTER', 'saquery SMIR')]
    assert got['unread'] == {'count': 0, 'lines': []}
    reads = got['counters']['reads']
    assert len(reads) == 2 and reads[1]['read_at'] > reads[0]['read_at'] and got['counters']['interval_s'] >= 0.1
    # 4 leaves x 40 ports + 2 spines x 16 ports, per read.
    assert len(reads[0]['ports']) == 192
    flapping = [p for p in reads[1]['ports'] if p['counters']['link_downed']]
    assert len(flapping) == 1 and flapping[0]['lid'] == 4


def test_reads_saved_outputs(monkeypatch, tmp_path, node_root):
    logs = tmp_path / 'logs'
    logs.mkdir()
    for kind, name, dest in (('iblinkinfo', 'linpack_edr_sb7700.txt', 'iblinkinfo.txt'),
                             ('sminfo', 'ompi_users_2009_master.txt', 'sminfo.txt'),
                             ('perfquery', 'infiniband_diags_16_rhel75_x.txt', 'perfquery.1.txt')):
        shutil.copy(os.path.join(FIXTURES, kind, name), str(logs / dest))
    result, failed = run_module(ib_fabric_facts.main, {'root': node_root, 'from_log': str(logs)}, monkeypatch)
    assert not failed, result
    got = facts(result)
    # ibnetdiscover.txt and the second counter read were not saved: said, not failed.
    assert got['status'] == 'partial' and got['tools']['ibnetdiscover'] == 'no saved output (ibnetdiscover.txt)'
    assert got['tools']['iblinkinfo'] == 'read from log' and len(got['topology']['links']) == 19
    assert got['sm']['sms'][0]['guid'] == '0x0002c90200259201' and len(got['counters']['reads']) == 1


def test_a_standby_no_node_points_at_is_read_and_asked(monkeypatch, tmp_path, node_root):
    path = fabric.write(fabric.model(faults=('sm_standby_tie',)), str(tmp_path / 'fabric.json'))
    monkeypatch.setenv('GF_SIM_FABRIC', path)
    monkeypatch.setenv('PATH', SIM_BIN + os.pathsep + os.environ['PATH'])
    result, failed = run_module(ib_fabric_facts.main, {'root': node_root, 'sm_lids': [1], 'interval': 0}, monkeypatch)
    assert not failed, result
    got = facts(result)
    assert got['status'] == 'ok', got['reason']
    # LID 2 is in no node's sm_lid: saquery SMIR listed it, then sminfo 2 asked it.
    assert sorted((s['lid'], s['state_name'], s['priority'], s['asked']) for s in got['sm']['sms'] if s['lid'] == 2) == [
        (2, 'SMINFO_STANDBY', 14, 'lid 2'), (2, 'SMINFO_STANDBY', 14, 'saquery SMIR')]


def test_saved_ports_report_wrapped_sminfo_and_smir(monkeypatch, tmp_path, node_root):
    logs = tmp_path / 'logs'
    logs.mkdir()
    for kind, name, dest in (('ibnetdiscover', 'infiniband_exporter_ports_edr.txt', 'ibnetdiscover.txt'),
                             ('sminfo', 'ompi_users_2009_wrapped_after_priority.txt', 'sminfo.txt'),
                             ('saquery', 'rdma_core_format_smir_master_standby_tie.txt', 'saquery_smir.txt')):
        with open(os.path.join(FIXTURES, kind, name)) as handle:
            (logs / dest).write_text(''.join(line for line in handle if not line.startswith('## ')))
    os.mkfifo(str(logs / 'iblinkinfo.txt'))            # a FIFO is refused, not waited on
    os.symlink('/etc/hostname', str(logs / 'perfquery.1.txt'))
    result, failed = run_module(ib_fabric_facts.main, {'root': node_root, 'from_log': str(logs)}, monkeypatch)
    assert not failed, result
    got = facts(result)
    assert got['tools']['iblinkinfo'].startswith('not read (iblinkinfo.txt') and got['tools']['perfquery'].startswith('not read')
    assert got['tools']['ibnetdiscover'] == 'read from log' and got['unread'] == {'count': 0, 'lines': []}
    assert len([l for l in got['topology']['links'] if l['b']]) == 4
    assert sorted((s['lid'], s['state'], s['asked']) for s in got['sm']['sms']) == [
        (2, 3, 'local port'), (2, 3, 'local port'), (2, 3, 'saquery SMIR'), (7, 2, 'saquery SMIR')]


def test_unread_lines_make_the_facts_partial(monkeypatch, tmp_path, node_root):
    logs = tmp_path / 'logs'
    logs.mkdir()
    (logs / 'ibnetdiscover.txt').write_text('CA 134 1 0x7cfe9003003b4bde 4x EDR - SW 1719 10 0x7cfe9003009ce5b0 '
                                            "( 'o0001 HCA-1' - 'ib-i1l1s01' )\nsome line from another tool\n")
    result, failed = run_module(ib_fabric_facts.main, {'root': node_root, 'from_log': str(logs)}, monkeypatch)
    got = facts(result)
    assert not failed and got['status'] == 'partial' and '1 line(s)' in got['reason']
    assert got['unread'] == {'count': 1, 'lines': [{'line': 2, 'text': 'some line from another tool', 'tool': 'ibnetdiscover'}]}


def test_without_tools_the_result_says_so(monkeypatch, tmp_path, node_root):
    monkeypatch.setenv('PATH', str(tmp_path))
    result, failed = run_module(ib_fabric_facts.main, {'root': node_root}, monkeypatch)
    assert not failed and facts(result)['status'] == 'no_tools'
    assert 'infiniband-diags is not installed' in facts(result)['reason']


def test_a_node_without_ib_port(monkeypatch, tmp_path):
    root = str(tmp_path / 'vm')
    render.render(render.load_profile('no_rdma_vm'), root)
    result, failed = run_module(ib_fabric_facts.main, {'root': root}, monkeypatch)
    assert not failed and facts(result)['status'] == 'no_ib_port' and facts(result)['local'] == []


@pytest.mark.parametrize('args,message', [
    ({'root': '/nonexistent-root'}, 'is not a directory'),
    ({'interval': -1}, 'interval must be a number of seconds from 0 (one read) to 3600'),
    ({'from_log': '/nonexistent-logs'}, 'is not a directory of saved outputs'),
])
def test_bad_arguments_fail(monkeypatch, args, message):
    result, failed = run_module(ib_fabric_facts.main, args, monkeypatch)
    assert failed and message in result['msg']
