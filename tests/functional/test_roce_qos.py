# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Role roce_qos and roce_qos_facts through ansible-playbook on local simulated nodes:
check mode shows the drift and changes nothing, the first run fixes it, the second changes
nothing, an InfiniBand node is skipped with its reason, and the diagnosis then finds no ROCE_*."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.functional.helpers import recap, tree_hash
from tests.sim import cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PLAY = '''
- name: Role under test
  hosts: gpu_nodes
  gather_facts: false
  environment: "{{ gpu_fabric_environment }}"
  roles:
    - hpc.gpu_fabric.roce_qos

- name: Facts after the role
  hosts: gpu_nodes
  gather_facts: false
  environment: "{{ gpu_fabric_environment }}"
  tasks:
    - name: Read the RoCE QoS
      hpc.gpu_fabric.roce_qos_facts:
        root: "{{ gpu_fabric_root }}"
        qos_tools: always
      register: facts
    - name: Keep them for the test
      ansible.builtin.copy:
        content: "{{ facts.ansible_facts.gpu_fabric_roce | to_json }}"
        dest: "{{ gpu_fabric_root }}/../{{ inventory_hostname }}.roce.json"
        mode: "0644"
      check_mode: false
      changed_when: false
'''


def playbook(dest, *args):
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(dest, 'play.yml'),
           '-i', os.path.join(dest, 'inventory.yml')] + list(args)
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
                          env=dict(os.environ, ANSIBLE_NOCOLOR='1'))


@pytest.fixture(scope='module')
def nodes(tmp_path_factory):
    dest = str(tmp_path_factory.mktemp('roce'))
    spec = {'nodes': [
        {'name': 'drift', 'profile': 'amd_mi300x_roce',
         'faults': ['roce_trust_pcp', 'roce_pfc_off', 'roce_ecn_off', 'roce_cnp_lossy', 'roce_tos_default']},
        {'name': 'ib', 'profile': 'homelab_cx4'},     # InfiniBand only
    ]}
    inventory = cluster.build(spec, dest, 'local', python=sys.executable)
    with open(os.path.join(dest, 'play.yml'), 'w') as handle:
        handle.write(PLAY)
    roots = dict((h, v['gpu_fabric_root']) for h, v in inventory['all']['children']['gpu_nodes']['hosts'].items())
    return dest, roots


def _facts(root, host):
    with open(os.path.join(os.path.dirname(root), '%s.roce.json' % host)) as handle:
        return json.load(handle)


def test_check_apply_idempotent(nodes):
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._roce_rules import roce_findings
    dest, roots = nodes
    before = dict((h, tree_hash(r)) for h, r in roots.items())
    check = playbook(dest, '--check', '--diff')
    assert recap(check)['drift']['failed'] == 0, check.stdout[-3000:]
    assert tree_hash(roots['drift']) == before['drift'], 'check mode changed the node'
    # The drift, field by field, as a diff.
    assert '-ens10f0np0 trust: pcp' in check.stdout and '+ens10f0np0 trust: dscp' in check.stdout
    assert '+ens10f0np0 rdma_cm default_roce_tos: 106' in check.stdout
    assert recap(check)['drift']['changed'] >= 1
    assert 'No ACTIVE RoCE port on this node' in check.stdout and recap(check)['ib']['changed'] == 0
    codes = set(f['code'] for f in roce_findings('drift', _facts(roots['drift'], 'drift')))
    assert codes == {'ROCE_TRUST_PCP', 'ROCE_PFC_OFF', 'ROCE_ECN_OFF', 'ROCE_CNP_LOSSY'}, codes

    first = playbook(dest)
    assert recap(first)['drift']['failed'] == 0 and recap(first)['drift']['changed'] >= 3, first.stdout[-3000:]
    facts = _facts(roots['drift'], 'drift')
    assert roce_findings('drift', facts) == []
    port = facts['ports'][0]
    assert (port['trust'], port['pfc'], port['roce_tos'], port['cnp_prio']) == ('dscp', [3], 106, 6)
    script = os.path.join(roots['drift'], 'usr/local/sbin/gpu-fabric-roce-qos')
    with open(script) as handle:
        text = handle.read()
    # The module's boot plan, rendered: the commands it runs now, for every setting of every port.
    assert 'mlnx_qos -i ens10f0np0 --trust dscp >/dev/null || status=1\n' in text
    assert 'mlnx_qos -i ens10f0np0 --dscp2prio set,26,3 >/dev/null || status=1\n' in text
    assert "if [ -e /sys/class/net/ens10f0np0/ecn/roce_np/cnp_802p_prio ]; then printf '%s\\n' 6 > " in text
    assert "printf '%s\\n' 106 > /sys/kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos || status=1\n" in text
    assert text.endswith('exit $status\n')
    assert os.path.islink(os.path.join(roots['drift'], 'etc/systemd/system/multi-user.target.wants/gpu-fabric-roce-qos.service'))
    assert not os.path.exists(os.path.join(roots['ib'], 'usr/local/sbin/gpu-fabric-roce-qos'))

    again = playbook(dest)
    assert recap(again)['drift']['changed'] == 0 and recap(again)['ib']['changed'] == 0, again.stdout[-3000:]


def test_boot_script_restores_after_a_reset(nodes):
    """What the unit runs at boot puts back what a reboot (the driver's defaults) lost."""
    from tests.sim import tools_qos
    dest, roots = nodes
    root = roots['drift']
    if not os.path.exists(os.path.join(root, 'usr/local/sbin/gpu-fabric-roce-qos')):
        pytest.skip('runs after test_check_apply_idempotent')
    # A reboot: mlx5 comes up with trust pcp and no PFC (tools_qos keeps the state per netdev).
    for netdev in ('ens10f0np0', 'ens17f0np0'):
        rc, _out, err = tools_qos.answer(root, ['mlnx_qos', '-i', netdev, '--trust', 'pcp', '--pfc', '0,0,0,0,0,0,0,0'])
        assert rc == 0, err
    script = os.path.join(root, 'usr/local/sbin/gpu-fabric-roce-qos')
    # The script writes absolute /sys paths: run with / mapped onto the node's root is not possible
    # without privileges, so its DCB lines (each a whole command, quoted by the boot_script filter)
    # are run by sh here, through the stand-in; tests/unit/plugins/plugin_utils/test__boot_script.py
    # runs whole scripts with their files below a temporary directory.
    with open(script) as handle:
        dcb = [line for line in handle if line.startswith('mlnx_qos ')]
    assert len(dcb) == 3 * 8
    env = dict(os.environ, GF_SIM_ROOT=root, PATH=cluster.SIM_BIN + ':' + os.environ['PATH'])
    done = subprocess.run(['sh', '-c', 'status=0\n%sexit $status\n' % ''.join(dcb)], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    rc, out, _err = tools_qos.answer(root, ['mlnx_qos', '-i', 'ens17f0np0'])
    assert rc == 0 and 'Priority trust state: dscp' in out and 'enabled     0   0   0   1   0   0   0   0' in out
