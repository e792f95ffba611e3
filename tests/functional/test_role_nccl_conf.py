# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Role nccl_conf through ansible-playbook on local simulated nodes.

The quartet (check+diff, apply, apply again, check again) on an InfiniBand H100 node with
a RoCE storage NIC and on a RoCE v2 MI300X node, each file compared whole; the default
route's interface, removal, overrides and omissions, inputs that must fail before anything
changes, and the optional role in playbooks/configure.yml.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys

import pytest
import yaml

from tests.functional.helpers import recap, tree_hash
from tests.sim import cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONF = 'etc/nccl.conf'
# RCCL reads /etc/rccl.conf: the role writes that file on the all-AMD node.
CONF_OF = {'roce': 'etc/rccl.conf'}

SPEC = {'nodes': [
    {'name': 'ib', 'profile': 'nvidia_h100_8x_ndr'},
    {'name': 'roce', 'profile': 'amd_mi300x_roce'},
]}

PLAY = '''
- name: Role under test
  hosts: gpu_nodes
  gather_facts: false
  become: false
  environment: "{{ gpu_fabric_environment }}"
  tasks:
    - name: NCCL settings
      ansible.builtin.import_role:
        name: hpc.gpu_fabric.nccl_conf
      tags: [nccl_conf, configure]
'''

# The quartet keeps NCCL_SOCKET_IFNAME out (nccl_conf_omit), so that these files do not
# depend on whether the facts carry a default route; test_default_route covers it.
# InfiniBand: no GID index; the 200 Gb/s RoCE storage NIC mlx5_8 is left out.
EXPECTED_IB = '''\
# Ansible managed
# NCCL settings of this node, written by the hpc.gpu_fabric nccl_conf role from the node's
# gpu_fabric_ib and gpu_fabric_gdr facts: run the role again after a hardware change.
# NCCL reads the KEY=VALUE lines of /etc/nccl.conf (RCCL: /etc/rccl.conf) when it
# initialises; the job's environment, then $NCCL_CONF_FILE or ~/.nccl.conf, take
# precedence (NCCL src/misc/param.cc). Only a '#' in the first column starts a comment.
#
# Why each value:
# - NCCL_IB_HCA: the 8 ACTIVE port(s) in gpu_fabric_ib of the NICs next to the GPUs (nearest NIC
#   of GPU0: mlx5_0 PIX, GPU1: mlx5_1 PIX, GPU2: mlx5_2 PIX, GPU3: mlx5_3 PIX, GPU4: mlx5_4 PIX,
#   GPU5: mlx5_5 PIX, GPU6: mlx5_6 PIX, GPU7: mlx5_7 PIX). Left out: mlx5_8:1 (Ethernet 200
#   Gb/s, a management NIC, not a compute rail: the nearest NIC of no GPU, of another model
#   (MT41692 MT_0000000884 Ethernet) than the compute rails; its netdev enp209s0f0np0 carries
#   the default route; the closest GPU is NODE away). '=' makes each entry an exact device name,
#   so mlx5_1 does not also select mlx5_10.
# - NCCL_NET_GDR_LEVEL: GPUDirect RDMA is ready (gpu_fabric_gdr.gdr_ready) and every GPU has a
#   NIC of NCCL_IB_HCA within PIX (GPU0-mlx5_0 PIX, GPU1-mlx5_1 PIX, GPU2-mlx5_2 PIX,
#   GPU3-mlx5_3 PIX, GPU4-mlx5_4 PIX, GPU5-mlx5_5 PIX, GPU6-mlx5_6 PIX, GPU7-mlx5_7 PIX); NCCL
#   uses GPUDirect RDMA for a GPU/NIC pair whose distance is at most NCCL_NET_GDR_LEVEL
#   (src/graph/paths.cc ncclTopoCheckGdr; default PXB). PIX is narrower than that default:
#   GPUDirect RDMA stays on the NIC under each GPU's own switch
# - kept out by nccl_conf_omit: NCCL_SOCKET_IFNAME

NCCL_IB_HCA==mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1
NCCL_NET_GDR_LEVEL=PIX
'''
# RoCE v2: the GID of the fabric address, the same index on every port.
EXPECTED_ROCE = '''\
# Ansible managed
# NCCL settings of this node, written by the hpc.gpu_fabric nccl_conf role from the node's
# gpu_fabric_ib and gpu_fabric_gdr facts: run the role again after a hardware change.
# NCCL reads the KEY=VALUE lines of /etc/nccl.conf (RCCL: /etc/rccl.conf) when it
# initialises; the job's environment, then $NCCL_CONF_FILE or ~/.nccl.conf, take
# precedence (NCCL src/misc/param.cc). Only a '#' in the first column starts a comment.
#
# Why each value:
# - NCCL_IB_GID_INDEX: GID 3 is the RoCE v2 GID with an IPv4 address on all 8 RoCE port(s) in
#   NCCL_IB_HCA (mlx5_0:1 192.168.10.11, mlx5_1:1 192.168.11.11, mlx5_2:1 192.168.12.11,
#   mlx5_3:1 192.168.13.11, mlx5_4:1 192.168.14.11, mlx5_5:1 192.168.15.11, mlx5_6:1
#   192.168.16.11, mlx5_7:1 192.168.17.11; gid_attrs/types "RoCE v2", IPv4-mapped GID): RoCE v2
#   is routed over UDP/IP, the v1 entries are not
# - NCCL_IB_HCA: the 8 ACTIVE port(s) in gpu_fabric_ib of the NICs next to the GPUs (nearest NIC
#   of GPU0: mlx5_0 PIX, GPU1: mlx5_1 PIX, GPU2: mlx5_2 PIX, GPU3: mlx5_3 PIX, GPU4: mlx5_4 PIX,
#   GPU5: mlx5_5 PIX, GPU6: mlx5_6 PIX, GPU7: mlx5_7 PIX). '=' makes each entry an exact device
#   name, so mlx5_1 does not also select mlx5_10.
# - NCCL_NET_GDR_LEVEL: GPUDirect RDMA is ready (gpu_fabric_gdr.gdr_ready) and every GPU has a
#   NIC of NCCL_IB_HCA within PIX (GPU0-mlx5_0 PIX, GPU1-mlx5_1 PIX, GPU2-mlx5_2 PIX,
#   GPU3-mlx5_3 PIX, GPU4-mlx5_4 PIX, GPU5-mlx5_5 PIX, GPU6-mlx5_6 PIX, GPU7-mlx5_7 PIX); NCCL
#   uses GPUDirect RDMA for a GPU/NIC pair whose distance is at most NCCL_NET_GDR_LEVEL
#   (src/graph/paths.cc ncclTopoCheckGdr; default PXB). PIX is narrower than that default:
#   GPUDirect RDMA stays on the NIC under each GPU's own switch
# - kept out by nccl_conf_omit: NCCL_SOCKET_IFNAME
#
# Notes:
# - AMD GPUs: RCCL takes the same NCCL_* variables and reads them from /etc/rccl.conf (RCCL
#   env-variables.html: NCCL_CONF_FILE defaults to ~/.rccl.conf or /etc/rccl.conf), the file
#   role nccl_conf writes on a node whose GPUs are all AMD

NCCL_IB_GID_INDEX=3
NCCL_IB_HCA==mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1
NCCL_NET_GDR_LEVEL=PIX
'''


def hashes(dest, names):
    return {name: tree_hash(os.path.join(dest, 'roots', name)) for name in names}


def build(dest, spec, host_vars=None):
    """Simulated nodes with their inventory; ``host_vars`` adds variables to named hosts."""
    inventory = cluster.build(spec, dest, 'local', python=sys.executable)
    for name, values in (host_vars or {}).items():
        inventory['all']['children']['gpu_nodes']['hosts'][name].update(values)
    with open(os.path.join(dest, 'inventory.yml'), 'w') as handle:
        yaml.safe_dump(inventory, handle, sort_keys=False)
    with open(os.path.join(dest, 'play.yml'), 'w') as handle:
        handle.write(PLAY)
    return [node['name'] for node in spec['nodes']]


def run(dest, playbook, *args):
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), playbook,
           '-i', os.path.join(dest, 'inventory.yml')] + list(args)
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
                          env=dict(os.environ, ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0'))


def playbook(dest, *args):
    return run(dest, os.path.join(dest, 'play.yml'), *args)


def conf(dest, node):
    path = os.path.join(dest, 'roots', node, CONF_OF.get(node, CONF))
    return open(path).read() if os.path.exists(path) else None


def explain(result):
    return result.stdout[-4000:] + result.stderr[-2000:]


OMIT_ROUTE = ['-e', '{"nccl_conf_omit": ["NCCL_SOCKET_IFNAME"]}']


def test_quartet(tmp_path):
    dest = str(tmp_path)
    names = build(dest, SPEC)

    # 1. --check --diff: the whole file shows as the drift, nothing below any root changes.
    before = hashes(dest, names)
    check = playbook(dest, '--check', '--diff', *OMIT_ROUTE)
    assert check.returncode == 0, explain(check)
    counts = recap(check)
    assert set(counts) == set(names)
    assert all(counts[name]['changed'] == 1 and counts[name]['failed'] == 0 for name in names), counts
    assert hashes(dest, names) == before
    for line in EXPECTED_IB.splitlines() + EXPECTED_ROCE.splitlines():
        assert '\n+' + line + '\n' in check.stdout, line
    assert conf(dest, 'ib') is None and conf(dest, 'roce') is None

    # 2. apply: the files, whole, and their mode.
    apply = playbook(dest, *OMIT_ROUTE)
    assert apply.returncode == 0, explain(apply)
    counts = recap(apply)
    assert all(counts[name]['changed'] == 1 and counts[name]['failed'] == 0 for name in names), counts
    assert conf(dest, 'ib') == EXPECTED_IB
    assert conf(dest, 'roce') == EXPECTED_ROCE
    for name in names:
        assert stat.S_IMODE(os.stat(os.path.join(dest, 'roots', name, CONF_OF.get(name, CONF))).st_mode) == 0o644
    assert not os.path.exists(os.path.join(dest, 'roots', 'roce', CONF))      # not the file RCCL ignores

    # 3. apply again: idempotent.
    again = playbook(dest, *OMIT_ROUTE)
    assert again.returncode == 0, explain(again)
    assert all(v['changed'] == 0 and v['failed'] == 0 for v in recap(again).values()), recap(again)

    # 4. --check again: nothing to change, nothing changed.
    settled = hashes(dest, names)
    final = playbook(dest, '--check', '--diff', *OMIT_ROUTE)
    assert final.returncode == 0, explain(final)
    assert all(v['changed'] == 0 and v['failed'] == 0 for v in recap(final).values()), recap(final)
    assert hashes(dest, names) == settled


FACTS_PLAY = PLAY + '''
    - name: Hand the host facts the role used to the test
      hpc.gpu_fabric.fabric_output:
        dest: "{{ results_dir }}"
        files: "{{ {inventory_hostname ~ '.json': ansible_facts.gpu_fabric_gdr.host | default({}) | to_json} }}"
      changed_when: false
'''


def test_default_route(tmp_path):
    """Without nccl_conf_omit: the default route's interface where gdr_facts reports one, else a note."""
    dest = str(tmp_path)
    build(dest, {'nodes': [SPEC['nodes'][0]]})
    with open(os.path.join(dest, 'facts.yml'), 'w') as handle:
        handle.write(FACTS_PLAY)
    apply = run(dest, os.path.join(dest, 'facts.yml'), '-e', 'results_dir=' + dest)
    assert apply.returncode == 0, explain(apply)
    with open(os.path.join(dest, 'ib.json')) as handle:
        host = json.load(handle)
    text = conf(dest, 'ib')
    settings = [line for line in text.splitlines() if line and not line.startswith('#')]
    if host.get('default_route_interface'):
        iface = host['default_route_interface']
        assert settings == [EXPECTED_IB.splitlines()[-2], 'NCCL_NET_GDR_LEVEL=PIX', 'NCCL_SOCKET_IFNAME==' + iface]
        assert '# - NCCL_SOCKET_IFNAME: the default route leaves through %s' % iface in text
    else:
        assert settings == EXPECTED_IB.splitlines()[-2:]
        assert ('#\n# Notes:\n# - NCCL_SOCKET_IFNAME not set: gpu_fabric_gdr.host.default_route_interface is not in '
                'the facts\n#   (a gdr_facts without it, or no default route)\n\nNCCL_IB_HCA=') in text


def test_overrides_omit_and_absent(tmp_path):
    dest = str(tmp_path)
    names = build(dest, {'nodes': [SPEC['nodes'][1]]})
    # The user wins: a GID index of their choosing (an integer), a setting the facts do not
    # make, and one recommended setting kept out.
    apply = playbook(dest, '-e', '{"nccl_conf_overrides": {"NCCL_IB_GID_INDEX": 5, "NCCL_IB_TC": "106"},'
                                 ' "nccl_conf_omit": ["NCCL_NET_GDR_LEVEL", "NCCL_SOCKET_IFNAME"]}')
    assert apply.returncode == 0, explain(apply)
    text = conf(dest, 'roce')
    assert [line for line in text.splitlines() if line and not line.startswith('#')] == [
        'NCCL_IB_GID_INDEX=5', EXPECTED_ROCE.splitlines()[-2], 'NCCL_IB_TC=106']
    assert '# - NCCL_IB_GID_INDEX: set by nccl_conf_overrides; the facts recommend 3: GID 3 is the RoCE v2' in text
    assert '# - NCCL_IB_TC: set by nccl_conf_overrides; the facts recommend nothing for it\n' in text
    assert '# - kept out by nccl_conf_omit: NCCL_NET_GDR_LEVEL, NCCL_SOCKET_IFNAME\n' in text
    assert 'NCCL_NET_GDR_LEVEL: GPUDirect' not in text and 'NCCL_SOCKET_IFNAME not set' not in text

    # absent removes the file; check mode first changes nothing; again is a no-op.
    before = hashes(dest, names)
    check = playbook(dest, '--check', '-e', 'nccl_conf_state=absent')
    assert check.returncode == 0 and recap(check)['roce']['changed'] == 1, explain(check)
    assert hashes(dest, names) == before
    removed = playbook(dest, '-e', 'nccl_conf_state=absent')
    assert removed.returncode == 0 and recap(removed)['roce']['changed'] == 1, explain(removed)
    assert conf(dest, 'roce') is None
    # Only the file goes: its directory stays.
    assert os.path.isdir(os.path.join(dest, 'roots', 'roce', 'etc'))
    again = playbook(dest, '-e', 'nccl_conf_state=absent')
    assert again.returncode == 0 and recap(again)['roce']['changed'] == 0, explain(again)


@pytest.mark.parametrize('extra, task, message', [
    ('{"nccl_conf_overrides": {"NCCL_IB_HCA=mlx5_0": "x"}}', 'Check the file path, the overrides and the names to omit',
     'must be environment variable names'),
    ('{"nccl_conf_overrides": {"NCCL_IB_HCA": "=mlx5_0:1\\nNCCL_DEBUG=INFO"}}',
     'Check the file path, the overrides and the names to omit', 'a string or an integer on one line'),
    ('{"nccl_conf_overrides": {"NCCL_IB_DISABLE": true}}', 'Check the file path, the overrides and the names to omit',
     "a YAML true would be written as 'True', which NCCL reads as 0"),
    ('{"nccl_conf_state": "gone"}', "Validating arguments against arg spec 'main'",
     'value of nccl_conf_state must be one of: present, absent, got: gone'),
], ids=['name-with-equals', 'value-with-newline', 'value-bool', 'state-not-a-state'])
def test_bad_input_changes_nothing(tmp_path, extra, task, message):
    dest = str(tmp_path)
    names = build(dest, {'nodes': [SPEC['nodes'][0]]})
    before = hashes(dest, names)
    result = playbook(dest, '-e', extra)
    assert result.returncode == 2, explain(result)
    assert recap(result)['ib']['failed'] == 1
    block = re.search(r'^TASK \[hpc\.gpu_fabric\.nccl_conf : %s[^\]]*\] \**\n(.*?)(?=^(?:TASK|PLAY RECAP|NO MORE HOSTS) )'
                      % re.escape(task), result.stdout, re.M | re.S)
    assert block and 'fatal: [ib]' in block.group(1), explain(result)
    assert message in ' '.join(block.group(1).split()), block.group(1)
    assert hashes(dest, names) == before


def test_configure_playbook_runs_it_where_asked(tmp_path):
    """Only on hosts with gpu_fabric_nccl_conf, and from the facts as the other roles left the node:
    ACS redirects above GPU0 until pcie_acs clears it, and only then is GPUDirect RDMA ready."""
    dest = str(tmp_path)
    spec = {'nodes': [{'name': 'h100', 'profile': 'nvidia_h100_8x_ndr', 'faults': ['acs_enabled']},
                      {'name': 'plain', 'profile': 'homelab_cx4'}]}
    names = build(dest, spec, {'h100': {'gpu_fabric_nccl_conf': True, 'nccl_conf_omit': ['NCCL_SOCKET_IFNAME']}})
    configure = os.path.join(REPO, 'playbooks', 'configure.yml')
    # The roles that matter here (pcie_acs changes what nccl_conf sees); the others have their own tests.
    common = ['-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'memlock_verify=false', '--tags', 'pcie_acs,nccl_conf']

    before = hashes(dest, names)
    check = run(dest, configure, '--check', '--diff', *common)
    assert check.returncode == 0, explain(check)
    assert hashes(dest, names) == before
    # In check mode ACS still redirects: the level is left unset, and the file says why.
    assert '\n+' + EXPECTED_IB.splitlines()[-2] + '\n' in check.stdout
    assert '\n+NCCL_NET_GDR_LEVEL=' not in check.stdout
    assert 'PCIe ACS redirection on the GPU<->NIC paths (role pcie_acs)' in ' '.join(check.stdout.split())

    apply = run(dest, configure, *common)
    assert apply.returncode == 0, explain(apply)
    assert all(v['failed'] == 0 for v in recap(apply).values()), recap(apply)
    assert conf(dest, 'h100') == EXPECTED_IB
    assert conf(dest, 'plain') is None


@pytest.mark.parametrize('state', ['present', 'absent'])
def test_fifo_destination_is_refused_and_left_alone(tmp_path, state):
    """A FIFO where the file goes: template would block reading it and file state=absent would
    unlink it; the role refuses before either, in check mode too, and the FIFO stays."""
    dest = str(tmp_path)
    build(dest, {'nodes': [SPEC['nodes'][0]]})
    fifo = os.path.join(dest, 'roots', 'ib', 'etc', 'nccl-fifo.conf')
    os.mkfifo(fifo)
    inode = os.lstat(fifo).st_ino
    for args in (['--check'], []):
        result = playbook(dest, *args, '-e', 'nccl_conf_state=%s' % state, '-e', 'nccl_conf_path=/etc/nccl-fifo.conf')
        assert result.returncode == 2, explain(result)
        assert recap(result)['ib']['failed'] == 1
        assert ('exists and is not a regular file (a FIFO): the role writes or removes only a regular file'
                in ' '.join(result.stdout.split())), explain(result)
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.lstat(fifo).st_ino == inode


@pytest.mark.parametrize('path', ['/etc/../etc/nccl.conf', 'etc/nccl.conf', '/etc/nccl.conf\nX'], ids=['dotdot', 'relative', 'newline'])
def test_bad_path_is_refused(tmp_path, path):
    dest = str(tmp_path)
    names = build(dest, {'nodes': [SPEC['nodes'][0]]})
    before = hashes(dest, names)
    result = playbook(dest, '-e', json.dumps({'nccl_conf_path': path}))
    assert result.returncode == 2 and recap(result)['ib']['failed'] == 1, explain(result)
    assert "nccl_conf_path must be an absolute path without a '..' component or control characters" in ' '.join(result.stdout.split())
    assert hashes(dest, names) == before
