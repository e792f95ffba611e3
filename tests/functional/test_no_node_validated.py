# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""validate_fabric.yml when no node gets through: every node unreachable, every node failing,
and every node failing in --check (where configure.yml runs first). ansible-playbook ends a
playbook when every host of a play failed or was unreachable; the plays keep such nodes in the
run so that the report is written all the same, names each node and why, and the run fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.functional.helpers import recap

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODES = ('n1', 'n2')


def write_inventory(dest, hostvars):
    """Group gpu_nodes of NODES; ``hostvars(name)`` gives each node's variables."""
    path = os.path.join(dest, 'inventory.json')
    with open(path, 'w') as handle:
        json.dump({'all': {'children': {'gpu_nodes': {'hosts': dict((name, hostvars(name)) for name in NODES)}}}}, handle)
    return path


def run_playbook(inventory, out, *extra):
    env = dict(os.environ, ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0')
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'validate_fabric.yml'),
           '-i', inventory, '-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'gpu_fabric_output_dir=' + out] + list(extra)
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)


def report_of(out, result):
    assert os.path.isfile(os.path.join(out, 'report.json')), result.stdout[-4000:] + result.stderr[-2000:]
    for name in ('report.html', 'report.md', 'junit.xml', 'gpu_fabric.prom'):
        assert os.path.getsize(os.path.join(out, name)) > 0, name
    with open(os.path.join(out, 'report.json')) as handle:
        return json.load(handle)


def by_host(report, code):
    found = {}
    for item in report['findings']:
        if item['code'] == code:
            found.setdefault(item['host'], []).append(item)
    return found


def assert_nothing_validated(report):
    nothing = by_host(report, 'RUN_NOTHING_VALIDATED')[None][0]
    assert nothing['explained_by'] is None and 'every node was unreachable or failed (n1, n2)' in nothing['cause']
    assert report['summary']['hosts'] == 2 and report['summary']['hosts_ok'] == 0


def test_every_node_unreachable(tmp_path):
    """Nothing listens on the discard port: every connection is refused. The report names each
    node unreachable with the connection's error; ansible-playbook counts them unreachable (4)."""
    dest = str(tmp_path)
    inventory = write_inventory(dest, lambda name: {'ansible_connection': 'ssh', 'ansible_host': '127.0.0.1', 'ansible_port': 9,
                                                    'ansible_ssh_common_args': '-o ConnectTimeout=3 -o StrictHostKeyChecking=no'})
    out = os.path.join(dest, 'out')
    result = run_playbook(inventory, out)
    assert result.returncode == 4, result.stdout[-4000:] + result.stderr[-2000:]
    stats = recap(result)
    assert all(stats[name]['unreachable'] == 1 for name in NODES), stats
    report = report_of(out, result)
    assert dict((h, e['status']) for h, e in report['hosts'].items()) == {'n1': 'unreachable', 'n2': 'unreachable'}
    assert report['summary']['hosts_unreachable'] == 2
    assert_nothing_validated(report)
    unreachable = by_host(report, 'HOST_UNREACHABLE')
    assert sorted(unreachable) == list(NODES)
    for name in NODES:
        (item,) = unreachable[name]
        # ssh's own words, as ansible-core passes them on (2.19: 'Failed to connect to the host via ssh: ssh: connect
        # to host 127.0.0.1 port 9: Connection refused'; 2.16 may say 'Data could not be sent to remote host "127.0.0.1"').
        assert '127.0.0.1' in item['evidence']['msg'] and item['evidence']['msg'] in item['cause']
        assert item['cause'].startswith('no facts came back from %s: it did not answer' % name)
    # Not a failed task: the node never answered.
    assert not by_host(report, 'HOST_TASK_FAILED')
    with open(os.path.join(out, 'report.md')) as handle:
        markdown = handle.read()
    assert all('`HOST_UNREACHABLE` on %s' % name in markdown for name in NODES) and '127.0.0.1' in markdown


def _failing_inventory(dest):
    # Every node answers (a local connection) and every facts module fails: its root is not there.
    return write_inventory(dest, lambda name: {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
                                               'gpu_fabric_root': os.path.join(dest, 'no-such-root', name), 'gpu_fabric_become': False})


def test_every_node_failing_whatever_the_exit_policy(tmp_path):
    """The facts fail on every node: the report names each node's failed task and message, and the
    run fails even under an exit policy that matches nothing (a run that validated nothing did not pass)."""
    dest = str(tmp_path)
    inventory = _failing_inventory(dest)
    out = os.path.join(dest, 'out')
    result = run_playbook(inventory, out, '-e', "gpu_fabric_exit_policy=findings[?code=='NO_SUCH_CODE']")
    assert result.returncode == 2, result.stdout[-4000:] + result.stderr[-2000:]
    assert 'no node returned facts, so nothing was validated' in ' '.join(result.stdout.split())
    stats = recap(result)
    assert all(stats[name]['rescued'] == 1 and stats[name]['failed'] == 0 for name in NODES), stats
    report = report_of(out, result)
    assert dict((h, e['status']) for h, e in report['hosts'].items()) == {'n1': 'error', 'n2': 'error'}
    assert_nothing_validated(report)
    failed = by_host(report, 'HOST_TASK_FAILED')
    for name in NODES:
        (item,) = failed[name]
        assert item['evidence']['stage'] == 'validate' and item['evidence']['task'] == 'Read HCAs, ports, GIDs and counters from sysfs'
        assert 'no-such-root/%s is not a directory' % name in item['evidence']['msg']
    assert not by_host(report, 'HOST_UNREACHABLE')


def test_every_node_failing_in_check_mode(tmp_path):
    """--check runs configure.yml first: every node fails there too. Each node stays in the run
    (rescued), is still validated (and fails again), and the report names both failures."""
    dest = str(tmp_path)
    inventory = _failing_inventory(dest)
    out = os.path.join(dest, 'out')
    result = run_playbook(inventory, out, '--check', '--diff')
    assert result.returncode == 2, result.stdout[-4000:] + result.stderr[-2000:]
    assert 'exit policy (default: any root-cause error) matched' in result.stdout
    stats = recap(result)
    assert all(stats[name]['rescued'] == 2 and stats[name]['failed'] == 0 for name in NODES), stats
    report = report_of(out, result)
    assert_nothing_validated(report)
    failed = by_host(report, 'HOST_TASK_FAILED')
    for name in NODES:
        assert [f['evidence']['stage'] for f in failed[name]] == ['configure', 'validate'], failed[name]
        assert all('no-such-root/%s is not a directory' % name in f['cause'] for f in failed[name])
    assert report['summary']['hosts_failed'] == 2
