# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""validate_fabric.yml through ansible-playbook on simulated clusters.

local: every node a local-connection host with its own root (no root needed).
netns: every node a network namespace with its own sshd; Ansible goes over real
SSH (root only; tests/lab/netns.sh). Both check the facts that came back against
the fault catalog's expectations, and that a dead node costs nothing but itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from xml.etree import ElementTree

import jmespath
import pytest

from tests.functional.helpers import recap, tree_hash
from tests.sim import cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAB = os.path.join(REPO, 'tests', 'lab', 'netns.sh')

SPEC = {'nodes': [
    {'name': 'n1', 'profile': 'nvidia_h100_8x_ndr'},
    {'name': 'n2', 'profile': 'nvidia_h100_8x_ndr', 'faults': ['rate_degraded_1x', 'error_counters']},
    {'name': 'n3', 'profile': 'metax_c500_cx7', 'faults': ['mm_kobj_not_exported']},
    {'name': 'n4', 'profile': 'amd_mi300x_roce', 'faults': ['acs_enabled', 'roce_no_v2_gid']},
    {'name': 'n5', 'profile': 'no_rdma_vm'},
]}
# Nothing listens on the discard port: the connection is refused at once, a dead node.
DEAD = {'dead1': {'ansible_connection': 'ssh', 'ansible_host': '127.0.0.1', 'ansible_port': 9,
                  'ansible_ssh_common_args': '-o ConnectTimeout=3 -o StrictHostKeyChecking=no'}}


def run_playbook(inventory, out, *extra):
    env = dict(os.environ, ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0')
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'validate_fabric.yml'),
           '-i', inventory, '-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'gpu_fabric_output_dir=' + out] + list(extra)
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)


def check_facts(inventory, out):
    checked = 0
    for host, hostvars in inventory['all']['children']['gpu_nodes']['hosts'].items():
        if host.startswith('dead'):
            continue
        with open(os.path.join(out, 'facts', host + '.json')) as handle:
            facts = json.load(handle)
        assert facts['ib'] is not None and facts['gdr'] is not None, host
        assert facts['ib']['root'] == hostvars['gpu_fabric_root']
        for expr, value in hostvars['gpu_fabric_sim_expect']:
            assert jmespath.search(expr, facts) == value, (host, expr)
            checked += 1
    return checked


def assert_summary(result):
    # ansible-playbook exits 4 when a host was unreachable (and 2 when a task failed).
    assert result.returncode == 4, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert 'dead1: no facts (unreachable, or the facts tasks failed on it)' in out
    assert 'n1: 9 RDMA device(s), 9/9 port(s) ACTIVE; 8 GPU(s) (nvidia); GPUDirect RDMA ready' in out
    assert 'n3: 3 RDMA device(s), 3/3 port(s) ACTIVE; 8 GPU(s) (metax); GPUDirect RDMA NOT ready' in out
    assert 'does not export mm_kobj' in out
    assert 'n5: 0 RDMA device(s), 0/0 port(s) ACTIVE; 0 GPU(s); GPUDirect RDMA NOT ready' in out
    # The port's judgement is the diagnosis' own (IB_RATE_DEGRADED, against ports of its model and role).
    assert "IB_RATE_DEGRADED the link trained at" in out and "below the node's other InfiniBand ports of its model and role" in out


def check_report(out, result):
    """report.json names each injected fault as a root cause on its node; the renderings exist and parse."""
    with open(os.path.join(out, 'report.json')) as handle:
        report = json.load(handle)
    assert report['schema'] == 'hpc.gpu_fabric/report' and report['schema_version'] == 1
    roots = set((f['code'], f['host']) for f in report['findings'] if f['explained_by'] is None)
    for expected in (('IB_RATE_DEGRADED', 'n2'), ('IB_ERROR_COUNTERS', 'n2'), ('GDR_MM_KOBJ_NOT_EXPORTED', 'n3'),
                     ('GDR_ACS_REDIRECT', 'n4'), ('ROCE_NO_V2_GID', 'n4'), ('HOST_UNREACHABLE', 'dead1')):
        assert expected in roots, (expected, sorted(roots))
    assert report['hosts']['n1']['status'] == 'ok' and report['hosts']['dead1']['status'] == 'unreachable'
    # A VM without GPU and RDMA device: nothing of the fabric could be checked there, so it is not "ok".
    assert report['hosts']['n5']['status'] == 'error' and ('HOST_NOTHING_TO_CHECK', 'n5') in roots
    # The default exit policy (a root-cause error) ends the run failed, after writing everything.
    assert 'exit policy (default: any root-cause error) matched' in result.stdout
    suite = ElementTree.parse(os.path.join(out, 'junit.xml')).getroot()
    failed = set((c.get('classname'), c.get('name')) for c in suite if c.find('failure') is not None)
    assert ('gpu_fabric.n3', 'ib_gpu') in failed and ('gpu_fabric.n1', 'ib') not in failed
    assert any(c.find('error') is not None for c in suite if c.get('classname') == 'gpu_fabric.dead1')
    with open(os.path.join(out, 'gpu_fabric.prom')) as handle:
        prom = handle.read()
    assert 'gpu_fabric_host_status{host="dead1"} 3' in prom and 'gpu_fabric_host_status{host="n1"} 0' in prom
    with open(os.path.join(out, 'report.md')) as handle:
        assert '`GDR_MM_KOBJ_NOT_EXPORTED` on n3' in handle.read()


def test_local_cluster(tmp_path):
    dest = str(tmp_path)
    inventory = cluster.build(SPEC, dest, 'local', python=sys.executable, extra_hosts=DEAD)
    result = run_playbook(os.path.join(dest, 'inventory.yml'), os.path.join(dest, 'out'))
    assert_summary(result)
    assert check_facts(inventory, os.path.join(dest, 'out')) >= 10
    check_report(os.path.join(dest, 'out'), result)
    # A drift run (--check --diff) adds the configure roles in check mode: it shows what they
    # would change, changes no node, and still writes the report.
    roots = dict((name, hv['gpu_fabric_root']) for name, hv in inventory['all']['children']['gpu_nodes']['hosts'].items()
                 if 'gpu_fabric_root' in hv)
    before = dict((name, tree_hash(root)) for name, root in roots.items())
    again = run_playbook(os.path.join(dest, 'inventory.yml'), os.path.join(dest, 'out2'), '--check', '--diff')
    assert dict((name, tree_hash(root)) for name, root in roots.items()) == before, 'a --check run changed a node'
    assert 'hpc.gpu_fabric.rdma_modules : ' in again.stdout and '+ib_uverbs' in again.stdout   # the drift, as a diff
    assert recap(again)['n1']['failed'] == 0 and recap(again)['n1']['changed'] > 0
    check_report(os.path.join(dest, 'out2'), again)


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists('/usr/sbin/sshd'),
                    reason='the SSH lab needs root and openssh-server')
def test_netns_cluster_over_ssh(tmp_path):
    dest = str(tmp_path)
    lab = os.path.join(dest, 'lab')
    env = dict(os.environ, LAB_DIR=lab)
    up = subprocess.run(['bash', LAB, 'up', str(len(SPEC['nodes']))], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert up.returncode == 0, up.stderr
    try:
        inventory = cluster.build(SPEC, dest, 'netns', key=os.path.join(lab, 'id_ed25519'), extra_hosts=DEAD)
        result = run_playbook(os.path.join(dest, 'inventory.yml'), os.path.join(dest, 'out'))
        assert_summary(result)
        assert check_facts(inventory, os.path.join(dest, 'out')) >= 10
        # A node that dies: its sshd is killed, the others still answer.
        subprocess.run(['bash', LAB, 'kill-node', '2'], env=env, check=True, timeout=60)
        result = run_playbook(os.path.join(dest, 'inventory.yml'), os.path.join(dest, 'out3'))
        assert 'n2: no facts' in result.stdout
        assert 'n1: 9 RDMA device(s)' in result.stdout and 'n3: 3 RDMA device(s)' in result.stdout
    finally:
        down = subprocess.run(['bash', LAB, 'down'], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert down.returncode == 0, down.stderr
    assert 'gf-node' not in subprocess.run(['ip', 'netns', 'list'], capture_output=True, text=True, check=False).stdout
