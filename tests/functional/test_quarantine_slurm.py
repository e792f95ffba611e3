# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""playbooks/act.yml against a real Slurm (tests/lab/slurm.py: munged, slurmctld and four slurmd on this machine).

A fleet n1..n4 with two faulty nodes (n1: a port down, n3: the peer-memory chain, and a job running on n3) and n2
drained by an admin for maintenance: the two are drained with the project's reason (n3 DRAINING, its job still
running), n2 keeps the admin's reason, --check changes nothing, a second run changes nothing, a cap below the faulty
count drains none beyond it and says so, and a node fixed (a newer report says ok) is resumed; read back with the
real scontrol and sinfo.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time

import pytest

from tests.functional.helpers import recap
from tests.lab.slurm import SlurmLab, missing

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ADMIN = 'maintenance: PSU swap (ticket 4711)'

pytestmark = pytest.mark.skipif(bool(missing()), reason=missing() or 'Slurm lab available')


@pytest.fixture(scope='module')
def lab():
    cluster = SlurmLab(4)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def report(path, hosts, when=None):
    """A report.json of hosts {name: (status, [(code, subject), ...])}."""
    findings, entries = [], {}
    for name, (status, found) in hosts.items():
        ids = []
        for code, subject in found:
            ids.append('%s@%s/%s' % (code, name, subject))
            findings.append({'id': ids[-1], 'code': code, 'severity': 'error', 'host': name, 'subject': subject, 'layer': 'ib'})
        entries[name] = {'status': status, 'roots': ids, 'findings': ids}
    when = when or datetime.datetime.now(datetime.timezone.utc)
    with open(path, 'w') as handle:
        json.dump({'schema': 'hpc.gpu_fabric/report', 'schema_version': 1, 'generated_at': when.replace(tzinfo=None).isoformat(),
                   'hosts': entries, 'findings': findings, 'bench': None, 'collective': None}, handle)
    return path


def act(lab, report_path, *extra):
    env = dict(lab.env, ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0')
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'playbooks', 'act.yml'),
           '-i', 'localhost,', '-c', 'local', '-e', 'ansible_python_interpreter=' + sys.executable,
           '-e', 'gpu_fabric_scheduler=slurm', '-e', 'gpu_fabric_quarantine_report=' + report_path] + list(extra)
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    return result


def reason(lab, name):
    line = lab.node(name)
    return line.split(' Reason=', 1)[1].rsplit(' [', 1)[0] if ' Reason=' in line else None


def state(lab, name):
    return [word for word in lab.node(name).split() if word.startswith('State=')][0][len('State='):]


def test_drain_keep_cap_resume(lab, tmp_path):
    lab.scontrol('update', 'nodename=n2', 'state=DRAIN', 'reason=' + ADMIN)
    job = lab.submit('n3', 120)
    faulty = report(str(tmp_path / 'report.json'), {
        'n1': ('error', [('IB_PORT_DOWN', 'mlx5_1/1')]),
        'n2': ('ok', []),
        'n3': ('error', [('GDR_PEERMEM_NOT_LOADED', 'node'), ('HOST_MEMLOCK_LIMITED', 'node')]),
        'n4': ('ok', []),
    })

    # --check --diff: says what it would do, changes nothing.
    result = act(lab, faulty, '-e', 'gpu_fabric_quarantine_max=0.5', '--check', '--diff')
    assert 'n1: would be drained - IB_PORT_DOWN@n1/mlx5_1/1' in result.stdout
    assert '+n1 IDLE+DRAIN gpu_fabric: IB_PORT_DOWN mlx5_1/1' in result.stdout
    assert [state(lab, name) for name in lab.names] == ['IDLE', 'IDLE+DRAIN', 'MIXED', 'IDLE']
    assert reason(lab, 'n1') is None and reason(lab, 'n3') is None
    with open(str(tmp_path / 'quarantine.json')) as handle:
        assert json.load(handle)['check_mode'] is True

    # A cap below the faulty count (0.25 of 4 nodes: one) drains one and names the other.
    result = act(lab, faulty, '-e', 'gpu_fabric_quarantine_max=0.25')
    assert 'n3: NOT drained (cap)' in result.stdout
    assert 'quarantine cap: 1 of 4 slurm nodes may be drained at once; 1 node(s) with an error verdict NOT drained: n3' in result.stdout
    assert state(lab, 'n1') == 'IDLE+DRAIN' and reason(lab, 'n1') == 'gpu_fabric: IB_PORT_DOWN mlx5_1/1'
    assert state(lab, 'n3') == 'MIXED' and reason(lab, 'n3') is None
    with open(str(tmp_path / 'quarantine.json')) as handle:
        record = json.load(handle)
    assert record['capped'] == ['n3'] and record['cap'] == 1

    # Room for both: n3 is drained too, DRAINING with its job still running; the admin's n2 keeps its reason.
    result = act(lab, faulty, '-e', 'gpu_fabric_quarantine_max=0.5')
    assert recap(result)['localhost']['changed'] == 1
    assert state(lab, 'n3') == 'MIXED+DRAIN'
    assert reason(lab, 'n3') == 'gpu_fabric: GDR_PEERMEM_NOT_LOADED node (+1 more)'
    assert lab.states()['n3'] == 'draining'
    assert lab.run('squeue', '-h', '-j', job, '-o', '%T').strip() == 'RUNNING'
    assert state(lab, 'n2') == 'IDLE+DRAIN' and reason(lab, 'n2') == ADMIN
    assert 'n2' not in [entry['node'] for entry in json.load(open(str(tmp_path / 'quarantine.json')))['nodes']]

    # A second run changes nothing.
    drained = lab.scontrol('show', 'node', '-o')
    result = act(lab, faulty, '-e', 'gpu_fabric_quarantine_max=0.5')
    assert recap(result)['localhost']['changed'] == 0
    assert 'n1: kept drained - already drained by gpu_fabric for this finding' in result.stdout
    assert [reason(lab, name) for name in lab.names] == [reason_of(drained, name) for name in lab.names]

    # n1 fixed: a report made after the drain says ok (the drain's time has a one-second resolution).
    time.sleep(1.1)
    fixed = report(str(tmp_path / 'report2.json'),
                   {'n1': ('ok', []), 'n2': ('ok', []), 'n3': ('error', [('GDR_PEERMEM_NOT_LOADED', 'node')]), 'n4': ('ok', [])})
    result = act(lab, fixed, '-e', 'gpu_fabric_quarantine_max=0.5')
    assert 'n1: resumed - the report made after the drain says ok' in result.stdout
    assert 'DRAIN' not in state(lab, 'n1') and reason(lab, 'n1') is None
    # n3's verdict names another finding now: its reason follows; the admin's n2 is still untouched.
    assert reason(lab, 'n3') == 'gpu_fabric: GDR_PEERMEM_NOT_LOADED node'
    assert reason(lab, 'n2') == ADMIN
    assert lab.run('squeue', '-h', '-j', job, '-o', '%T').strip() == 'RUNNING'


def reason_of(listing, name):
    for line in listing.splitlines():
        if line.startswith('NodeName=%s ' % name):
            return line.split(' Reason=', 1)[1].rsplit(' [', 1)[0] if ' Reason=' in line else None
    return None


def test_scheduler_none_does_nothing(lab, tmp_path):
    path = report(str(tmp_path / 'report.json'), {'n4': ('error', [('IB_PORT_DOWN', 'mlx5_0/1')])})
    env = dict(lab.env, ANSIBLE_NOCOLOR='1')
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'playbooks', 'act.yml'),
           '-i', 'localhost,', '-c', 'local', '-e', 'ansible_python_interpreter=' + sys.executable, '-e', 'gpu_fabric_quarantine_report=' + path]
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-3000:]
    assert 'no scheduler given (gpu_fabric_scheduler: none): no node drained or resumed' in result.stdout
    assert 'DRAIN' not in state(lab, 'n4')
