# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Role rdma_modules through ansible-playbook on local simulated clusters.

The quartet (check+diff, apply, apply, check) on an NVIDIA node without its peer-memory
module, a MetaX node and the seed-002 homelab node (NVIDIA GPU, inbox RDMA stack: its
nvidia_peermem cannot load); vendor- and link-aware lists; bad input; and a live
check-mode run on this machine, whose kernel may not load modules at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys

import yaml

from tests.functional.helpers import recap
from tests.sim import cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODPROBE = os.path.join(REPO, 'tests', 'sim', 'bin', 'modprobe')
CONF = 'etc/modules-load.d/gpu-fabric.conf'
HEADER = ['# Managed by Ansible (hpc.gpu_fabric.rdma_modules): local changes are overwritten.',
          '# systemd-modules-load.service loads these at boot (modules-load.d(5)).']
BASE = ['ib_core', 'ib_uverbs', 'ib_umad', 'rdma_ucm']
EINVAL = "nvidia_peermem: modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument"

SPEC = {'nodes': [
    {'name': 'n1', 'profile': 'nvidia_h100_8x_ndr', 'faults': ['peermem_not_loaded']},
    {'name': 'n2', 'profile': 'metax_c500_cx7'},
    {'name': 'n3', 'profile': 'homelab_cx4'},
]}


def write_playbook(dest, hosts='gpu_nodes', ib_facts=False, live=False):
    tasks = []
    if not live:
        tasks.append({'name': 'Read GPUs, OFED and kernel', 'hpc.gpu_fabric.gdr_facts': {'root': '{{ gpu_fabric_root }}'}})
    if ib_facts:
        tasks.append({'name': 'Read HCAs and ports', 'hpc.gpu_fabric.ib_link_facts': {'root': '{{ gpu_fabric_root }}'}})
    tasks.append({'name': 'Kernel modules', 'ansible.builtin.import_role': {'name': 'hpc.gpu_fabric.rdma_modules'}})
    play = {'name': 'Role rdma_modules', 'hosts': hosts, 'gather_facts': False, 'become': False, 'tasks': tasks}
    if not live:
        play['environment'] = '{{ gpu_fabric_environment }}'
    path = os.path.join(dest, 'live.yml' if live else 'play.yml')
    with open(path, 'w') as handle:
        yaml.safe_dump([play], handle, sort_keys=False)
    return path


def run(playbook, inventory, *extra):
    # One-line JSON results: a failed task's message can be read back whole.
    env = dict(os.environ, ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0',
               ANSIBLE_CALLBACK_RESULT_FORMAT='json', ANSIBLE_CALLBACK_FORMAT_PRETTY='0')
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), playbook, '-i', inventory] + list(extra)
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)


def failure(result, host):
    """The result of the task that failed on ``host`` (the last one)."""
    found = re.findall(r'^(?:fatal|failed): \[%s\](?: \(item=[^)]*\))?:? (?:FAILED! )?=> (\{.*\})$' % re.escape(host), result.stdout, re.M)
    assert found, result.stdout[-3000:]
    return json.loads(found[-1])


def digest(root):
    """Every file, directory and link below ``root``: what it is and what it holds."""
    tree = {}
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(base, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                tree[rel] = ('link', os.readlink(path))
            elif os.path.isdir(path):
                tree[rel] = ('dir', os.stat(path).st_mode)
            else:
                with open(path, 'rb') as handle:
                    tree[rel] = ('file', os.stat(path).st_mode, hashlib.sha256(handle.read()).hexdigest())
    return tree


def digests(inventory):
    return dict((host, digest(hv['gpu_fabric_root'])) for host, hv in inventory['all']['children']['gpu_nodes']['hosts'].items())


def read(root, rel):
    with open(os.path.join(root, rel)) as handle:
        return handle.read()


def loaded(root):
    return [line.split()[0] for line in read(root, 'proc/modules').splitlines() if line.strip()]


def listed(root):
    return [line for line in read(root, CONF).splitlines() if line and not line.startswith('#')]


def test_quartet(tmp_path):
    dest = str(tmp_path)
    inventory = cluster.build(SPEC, dest, 'local', python=sys.executable)
    inv = os.path.join(dest, 'inventory.yml')
    # The role leaves nvidia_peermem out on an inbox stack (homelab, no OFED); asked for
    # explicitly there, it must fail with the kernel's reason and not stop the others.
    inventory['all']['children']['gpu_nodes']['hosts']['n3']['rdma_modules_extra'] = ['nvidia_peermem']
    with open(inv, 'w') as handle:
        yaml.safe_dump(inventory, handle, sort_keys=False)
    play = write_playbook(dest)
    roots = dict((host, hv['gpu_fabric_root']) for host, hv in inventory['all']['children']['gpu_nodes']['hosts'].items())
    before = digests(inventory)

    # 1. check + diff: the drift is reported on every node, nothing below any root changes.
    check = run(play, inv, '--check', '--diff')
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    stats = recap(check)
    assert all(stats[host]['changed'] >= 2 and stats[host]['failed'] == 0 for host in roots), stats
    assert '+nvidia_peermem' in check.stdout and '+rdma_ucm' in check.stdout
    assert '"msg": "Would load rdma_ucm, nvidia_peermem"' in check.stdout      # n1 and n3
    assert '"msg": "Would load rdma_ucm"' in check.stdout                      # n2
    assert digests(inventory) == before

    # 2. apply: n1 and n2 converge; n3 fails on nvidia_peermem with the kernel's reason,
    # after its other modules were loaded.
    apply = run(play, inv)
    stats = recap(apply)
    assert apply.returncode == 2, apply.stdout[-3000:] + apply.stderr[-3000:]
    assert stats['n1']['failed'] == 0 and stats['n2']['failed'] == 0 and stats['n3']['failed'] == 1, stats
    # The role's file and the modules loaded now (modules-load.d itself exists: the simulated
    # nodes list their vendor modules in modules-load.d/hpc.conf, as seed 002 does).
    assert all(stats[host]['changed'] >= 2 for host in roots), stats
    msg = failure(apply, 'n3')['msg']
    assert msg.startswith('1 module(s) did not load: ' + EINVAL), msg
    assert 'no MLNX OFED' in msg and 'rdma_modules_peermem: false' in msg

    n1, n2, n3 = roots['n1'], roots['n2'], roots['n3']
    assert read(n1, CONF).splitlines() == HEADER + BASE + ['ib_ipoib', 'nvidia_peermem']
    assert read(n2, CONF).splitlines() == HEADER + BASE + ['ib_ipoib']          # MetaX: metax.ko registers mxcd itself
    assert read(n3, CONF).splitlines() == HEADER + BASE + ['ib_ipoib', 'nvidia_peermem']
    for host in roots:
        assert oct(os.stat(os.path.join(roots[host], CONF)).st_mode & 0o777) == '0o644'
    assert set(listed(n1)) <= set(loaded(n1)) and set(listed(n2)) <= set(loaded(n2))
    assert 'nvidia_peermem' not in loaded(n2)
    # The NVIDIA node's OFED was built with HAVE_MM_KOBJ_EXPORTED: the client registered.
    assert read(n1, 'sys/kernel/mm/memory_peers/nv_mem/version').strip() == '570.124.06'
    assert 'nvidia_peermem' not in loaded(n3)
    assert set(listed(n3)) - set(loaded(n3)) == {'nvidia_peermem'}
    applied = digests(inventory)

    # 3. apply again: nothing changes anywhere; n3 still fails, for the same reason.
    again = run(play, inv)
    stats = recap(again)
    assert all(stats[host]['changed'] == 0 for host in roots), stats
    assert stats['n1']['failed'] == 0 and stats['n2']['failed'] == 0 and stats['n3']['failed'] == 1, stats
    assert failure(again, 'n3')['msg'] == msg
    assert digests(inventory) == applied

    # 4. check: no drift on n1 and n2. n3 keeps the one drift no run can remove (its
    # nvidia_peermem is listed but cannot load): check mode says so, and changes nothing.
    final = run(play, inv, '--check')
    stats = recap(final)
    assert final.returncode == 0, final.stdout[-3000:]
    assert stats['n1']['changed'] == 0 and stats['n2']['changed'] == 0, stats
    assert stats['n3']['changed'] == 1 and '"msg": "Would load nvidia_peermem"' in final.stdout, stats
    assert digests(inventory) == applied


def test_vendor_and_link_aware(tmp_path):
    """With ib_link_facts gathered: no ib_ipoib on a RoCE-only node; user additions and removals."""
    dest = str(tmp_path)
    spec = {'nodes': [{'name': 'amd', 'profile': 'amd_mi300x_roce'}, {'name': 'nv', 'profile': 'nvidia_h100_8x_ndr'}]}
    inventory = cluster.build(spec, dest, 'local', python=sys.executable)
    hosts = inventory['all']['children']['gpu_nodes']['hosts']
    amd, nv = hosts['amd']['gpu_fabric_root'], hosts['nv']['gpu_fabric_root']
    # A kernel with rdma_ucm built in: never in /proc/modules, and nothing to load.
    builtin = os.path.join(nv, 'lib/modules', read(nv, 'proc/sys/kernel/osrelease').strip(), 'modules.builtin')
    os.makedirs(os.path.dirname(builtin))
    with open(builtin, 'w') as handle:
        handle.write('kernel/drivers/infiniband/core/rdma_ucm.ko\nkernel/fs/ext4/ext4.ko\n')
    play = write_playbook(dest, ib_facts=True)
    result = run(play, os.path.join(dest, 'inventory.yml'), '-e', json.dumps({'rdma_modules_extra': ['mlx5-ib', 'rpcrdma'],
                                                                              'rdma_modules_exclude': ['ib-umad']}))
    assert result.returncode == 0, result.stdout[-3000:]
    assert listed(amd) == ['ib_core', 'ib_uverbs', 'rdma_ucm', 'mlx5_ib', 'rpcrdma']   # amdgpu registers amdkfd itself
    assert listed(nv) == ['ib_core', 'ib_uverbs', 'rdma_ucm', 'ib_ipoib', 'nvidia_peermem', 'mlx5_ib', 'rpcrdma']
    assert set(listed(amd)) <= set(loaded(amd)) and set(listed(nv)) - set(loaded(nv)) == {'rdma_ucm'}
    for root in (amd, nv):
        assert 'ib_umad' in loaded(root)          # excluded from the list, not unloaded
    assert '"msg": "Loaded rpcrdma now; 6 of 7 modules were loaded already"' in result.stdout   # nv: rdma_ucm built in


def test_bad_input(tmp_path):
    dest = str(tmp_path)
    inventory = cluster.build({'nodes': [{'name': 'n1', 'profile': 'homelab_cx4'}]}, dest, 'local', python=sys.executable)
    inv = os.path.join(dest, 'inventory.yml')
    play = write_playbook(dest)
    before = digests(inventory)
    release = read(inventory['all']['children']['gpu_nodes']['hosts']['n1']['gpu_fabric_root'], 'proc/sys/kernel/osrelease').strip()

    unknown = run(play, inv, '-e', json.dumps({'rdma_modules_extra': ['no_such_module', 'mlx5_ib']}))
    assert unknown.returncode == 2 and recap(unknown)['n1']['changed'] == 0
    assert failure(unknown, 'n1')['msg'] == (
        "rdma_modules_extra names module(s) that this node's kernel does not have, nothing was changed: "
        "no_such_module (modprobe: FATAL: Module no_such_module not found in directory /lib/modules/%s)" % release)

    # A dict is refused by the argument specs. A scalar is not (check_type_list turns 5 into
    # ['5'] and leaves the variable an int): the role's own type check refuses it next.
    wrong = run(play, inv, '-e', json.dumps({'rdma_modules_extra': {'no': 'list'}}))
    assert wrong.returncode == 2
    result = failure(wrong, 'n1')
    assert result['msg'].startswith('Validation of arguments failed'), result
    assert "argument 'rdma_modules_extra' is of type" in result['msg'] and 'cannot be converted to a list' in result['msg']

    scalar = run(play, inv, '-e', json.dumps({'rdma_modules_extra': 5}))
    assert scalar.returncode == 2
    # ansible-core < 2.19 templates the value to the string '5' on the way (no native types).
    assert failure(scalar, 'n1')['msg'] in ('rdma_modules_extra must be a list of kernel module names, not 5',
                                            'rdma_modules_extra must be a list of kernel module names, not "5"')
    assert 'Validating arguments against arg spec' in scalar.stdout

    names = run(play, inv, '-e', json.dumps({'rdma_modules_exclude': ['ok', 'ib_core\nrm']}))
    assert names.returncode == 2
    assert failure(names, 'n1')['msg'] == 'Not kernel module names (letters, digits, _ and - only): "ib_core\\nrm"'

    for result in (unknown, wrong, scalar, names):
        assert recap(result)['n1']['changed'] == 0
    assert digests(inventory) == before


def test_live_check_mode(tmp_path):
    """gpu_fabric_root=/ in check mode on this machine: completes, and says why nothing is loaded."""
    dest = str(tmp_path)
    inv = os.path.join(dest, 'inventory.yml')
    with open(inv, 'w') as handle:
        yaml.safe_dump({'all': {'hosts': {'live': {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}}}}, handle)
    conf = '/' + CONF
    existed = os.path.exists(conf)
    result = run(write_playbook(dest, hosts='live', live=True), inv, '--check', '--diff')
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert recap(result)['live']['failed'] == 0
    if not os.path.exists('/proc/modules'):
        assert 'Skipped loading: /proc/modules does not exist, so this kernel cannot load modules' in result.stdout
    assert os.path.exists(conf) == existed


def run_modprobe(root, *args):
    env = dict(os.environ, GF_SIM_ROOT=root)
    return subprocess.run([MODPROBE] + list(args), env=env, capture_output=True, text=True, timeout=60, check=False)


def test_modprobe_stand_in(tmp_path):
    """kmod's behaviour where the role and the seeds depend on it."""
    dest = str(tmp_path)
    spec = {'nodes': [{'name': 'n1', 'profile': 'homelab_cx4'}, {'name': 'n2', 'profile': 'nvidia_h100_8x_ndr',
                                                                 'faults': ['peermem_not_loaded', 'mm_kobj_not_exported']}]}
    hosts = cluster.build(spec, dest, 'local', python=sys.executable)['all']['children']['gpu_nodes']['hosts']
    home, nv = hosts['n1']['gpu_fabric_root'], hosts['n2']['gpu_fabric_root']

    unset = subprocess.run([MODPROBE, 'ib_core'], env=dict(os.environ, GF_SIM_ROOT=''), capture_output=True, text=True, check=False)
    assert unset.returncode == 1 and unset.stderr.startswith('modprobe: FATAL: GF_SIM_ROOT is not set')
    # Seed 002's command: without -a the other words are parameters of the first module.
    seed = run_modprobe(home, 'ib_ipoib', 'rdma_ucm', 'nvidia-peermem')
    assert seed.returncode == 0 and 'rdma_ucm' not in loaded(home)
    dry = run_modprobe(home, '-n', '-v', 'rdma-ucm')
    assert dry.returncode == 0 and 'rdma_ucm.ko' in dry.stdout and 'rdma_ucm' not in loaded(home)
    both = run_modprobe(home, '-a', 'rdma_ucm', 'nvidia-peermem')
    assert both.returncode == 1 and both.stderr == "modprobe: ERROR: could not insert 'nvidia_peermem': Invalid argument\n"
    assert loaded(home)[0] == 'rdma_ucm'           # /proc/modules lists the newest first
    assert 'rdma_cm' in loaded(home)               # a dependency, loaded first
    missing = run_modprobe(home, 'no_such_module')
    assert missing.returncode == 1 and 'Module no_such_module not found in directory /lib/modules/' in missing.stderr
    assert run_modprobe(home, '-r', 'ib_core').stderr == 'modprobe: FATAL: Module ib_core is in use.\n'
    assert run_modprobe(home, '-r', 'rdma_ucm').returncode == 0 and 'rdma_ucm' not in loaded(home)

    # OFED without HAVE_MM_KOBJ_EXPORTED: the module loads, ib_core lists no client.
    assert run_modprobe(nv, 'nvidia_peermem').returncode == 0
    assert loaded(nv)[0] == 'nvidia_peermem'
    assert read(nv, 'sys/module/nvidia_peermem/version').strip() == '570.124.06'
    assert not os.path.exists(os.path.join(nv, 'sys/kernel/mm/memory_peers/nv_mem'))
    assert run_modprobe(nv, '-r', 'nvidia_peermem').returncode == 0
    assert not os.path.exists(os.path.join(nv, 'sys/module/nvidia_peermem'))


def test_inbox_stack_leaves_peermem_out(tmp_path):
    """Homelab node (NVIDIA GPU, no MLNX OFED): nvidia_peermem cannot load there, so it is not listed."""
    dest = str(tmp_path)
    inventory = cluster.build({'nodes': [{'name': 'n1', 'profile': 'homelab_cx4'}]}, dest, 'local', python=sys.executable)
    root = inventory['all']['children']['gpu_nodes']['hosts']['n1']['gpu_fabric_root']
    result = run(write_playbook(dest), os.path.join(dest, 'inventory.yml'))
    assert result.returncode == 0, result.stdout[-3000:]
    assert 'nvidia_peermem' not in listed(root) and 'nvidia_peermem' not in loaded(root)
    assert listed(root) == BASE + ['ib_ipoib'] and set(listed(root)) <= set(loaded(root))
