# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Roles pcie_acs and ofed_peermem through ansible-playbook on local simulated nodes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _pci
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot
from tests.functional.helpers import recap, tree_hash
from tests.sim import cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PLAY = '''
- name: Roles under test
  hosts: gpu_nodes
  gather_facts: false
  environment: "{{ gpu_fabric_environment }}"
  tasks:
    - name: Facts
      hpc.gpu_fabric.gdr_facts:
        root: "{{ gpu_fabric_root }}"
    - name: ACS
      ansible.builtin.import_role:
        name: hpc.gpu_fabric.pcie_acs
    - name: Peer memory
      ansible.builtin.import_role:
        name: hpc.gpu_fabric.ofed_peermem
'''


def playbook(dest, *args):
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(dest, 'play.yml'),
           '-i', os.path.join(dest, 'inventory.yml')] + list(args)
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
                          env=dict(os.environ, ANSIBLE_NOCOLOR='1'))


@pytest.fixture(scope='module')
def nodes(tmp_path_factory):
    dest = str(tmp_path_factory.mktemp('roles'))
    spec = {'nodes': [
        {'name': 'acs', 'profile': 'metax_c500_cx7', 'faults': ['acs_enabled']},
        {'name': 'ok', 'profile': 'nvidia_h100_8x_ndr'},
        {'name': 'kernel', 'profile': 'metax_c500_cx7', 'faults': ['mm_kobj_not_exported']},
        {'name': 'stale', 'profile': 'metax_c500_cx7', 'faults': ['ofed_stale_build']},
    ]}
    inventory = cluster.build(spec, dest, 'local', python=sys.executable)
    with open(os.path.join(dest, 'play.yml'), 'w') as handle:
        handle.write(PLAY)
    roots = dict((h, v['gpu_fabric_root']) for h, v in inventory['all']['children']['gpu_nodes']['hosts'].items())
    return dest, roots


def test_quartet(nodes):
    dest, roots = nodes
    hashes = dict((h, tree_hash(r)) for h, r in roots.items())

    check = playbook(dest, '--check', '--diff')
    assert tree_hash(roots['acs']) == hashes['acs'] and tree_hash(roots['ok']) == hashes['ok'], 'check mode changed files'
    assert 'ACSCtl: SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+' in check.stdout      # the drift, as a diff
    assert recap(check)['acs']['changed'] >= 1

    first = playbook(dest)
    result = recap(first)
    assert result['acs']['failed'] == 0 and result['acs']['changed'] >= 3
    # seed 000: the kernel cannot be fixed by configuration; the role says so and what the options are.
    assert result['kernel']['failed'] == 1
    assert 'does not export mm_kobj, so no OFED build can create memory_peers' in first.stdout
    assert 'option: run a kernel that still exports mm_kobj' in first.stdout
    # OFED built for another kernel: a rebuild is needed, not run unless asked for.
    assert result['stale']['failed'] == 1 and 'rebuild OFED against this kernel' in first.stdout

    sysroot = SysRoot(roots['acs'])
    for bdf in os.listdir(os.path.join(roots['acs'], 'sys/bus/pci/devices')):
        acs = _pci.parse_acs(sysroot.binary('/sys/bus/pci/devices/%s/config' % bdf))
        if acs and acs['present'] and bdf in ('0000:07:00.0', '0000:10:10.0'):
            assert acs['ctl'] == 0, bdf
    with open(os.path.join(roots['acs'], 'usr/local/sbin/gpu-fabric-acs')) as handle:
        script = handle.read()
    assert 'setpci -s 0000:07:00.0 ECAP_ACS+0x6.w=0000:007f >/dev/null || status=1\n' in script and script.endswith('exit $status\n')
    assert os.readlink(os.path.join(roots['acs'], 'etc/systemd/system/multi-user.target.wants/gpu-fabric-acs.service')) == \
        '/etc/systemd/system/gpu-fabric-acs.service'

    again = playbook(dest, '--limit', 'acs,ok')
    assert all(v['changed'] == 0 and v['failed'] == 0 for v in recap(again).values()), again.stdout[-2000:]
    check_again = playbook(dest, '--limit', 'acs,ok', '--check')
    assert all(v['changed'] == 0 for v in recap(check_again).values())


def test_rebuild_when_asked(nodes):
    dest, roots = nodes
    before = tree_hash(roots['stale'])
    dry = playbook(dest, '--limit', 'stale', '--check', '-e', 'ofed_peermem_rebuild=true',
                   '-e', '{"ofed_peermem_rebuild_command": ["mlnx-ofed-rebuild"]}')
    assert 'would run: mlnx-ofed-rebuild' in dry.stdout and tree_hash(roots['stale']) == before
    done = playbook(dest, '--limit', 'stale', '-e', 'ofed_peermem_rebuild=true',
                    '-e', '{"ofed_peermem_rebuild_command": ["mlnx-ofed-rebuild"]}')
    assert recap(done)['stale']['failed'] == 0, done.stdout[-3000:]
    assert 'ok: peer-memory path present for metax' in done.stdout
    assert os.path.exists(os.path.join(roots['stale'], 'sys/kernel/mm/memory_peers/mxcd/version'))


def test_bad_input_changes_nothing(nodes):
    dest, roots = nodes
    before = tree_hash(roots['acs'])
    for extra in ('{"pcie_acs_scope": "everywhere"}', '{"pcie_acs_clear": ["ReqRedir", "Bogus"]}',
                  '{"pcie_acs_scope": "devices", "pcie_acs_devices": ["0000:08:00.0"]}'):
        result = playbook(dest, '--limit', 'acs', '-e', extra)
        assert recap(result)['acs']['failed'] == 1, extra
        assert tree_hash(roots['acs']) == before, extra
    assert 'is not a PCI bridge' in result.stdout
