# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Roles memlock and cpu_governor through ansible-playbook on local simulated nodes.

The quartet (check+diff, apply, apply again, check again) on three nodes: one whose
CPUs run powersave (homelab_cx4, seed 002 before cpupower was run), one already at
performance, and a VM without cpufreq. Then removal of the boot unit, inputs that
must fail before anything changes, the cpupower stand-in against the real tool's
behaviour, and (as root) the memlock login check on a live root in a private mount
namespace.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.functional.helpers import recap, tree_hash
from tests.sim import cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CPUPOWER = os.path.join(REPO, 'tests', 'sim', 'bin', 'cpupower')
LIMITS = 'etc/security/limits.d/90-gpu-fabric-memlock.conf'
DROPIN = 'etc/systemd/system.conf.d/90-gpu-fabric-memlock.conf'
UNIT = 'etc/systemd/system/gpu-fabric-cpu-governor.service'
WANTS = 'etc/systemd/system/multi-user.target.wants/gpu-fabric-cpu-governor.service'
CPUFREQ = 'sys/devices/system/cpu/cpu%d/cpufreq/scaling_governor'

SPEC = {'nodes': [
    {'name': 'drifted', 'profile': 'homelab_cx4'},
    {'name': 'tuned', 'profile': 'nvidia_h100_8x_ndr'},
    {'name': 'vm', 'profile': 'no_rdma_vm'},
]}
CPUS = {'drifted': 8, 'tuned': 16}

PLAY = '''
- name: Roles under test
  hosts: gpu_nodes
  gather_facts: false
  become: false
  environment: "{{ gpu_fabric_environment }}"
  tasks:
    - name: Locked memory
      ansible.builtin.import_role:
        name: hpc.gpu_fabric.memlock
      tags: [memlock, configure]
    - name: CPU governor
      ansible.builtin.import_role:
        name: hpc.gpu_fabric.cpu_governor
      tags: [cpu_governor, configure]
    # Written by the controller itself (no module per host and run).
    - name: Hand the cpu_governor_result fact to the test
      hpc.gpu_fabric.fabric_output:
        dest: "{{ results_dir }}"
        files: "{{ {inventory_hostname ~ '.json': cpu_governor_result | default({}) | to_json} }}"
      check_mode: false
      changed_when: false
      tags: [cpu_governor]
'''


def hashes(dest, names):
    return {name: tree_hash(os.path.join(dest, 'roots', name)) for name in names}


def build(dest, spec):
    cluster.build(spec, dest, 'local', python=sys.executable)
    with open(os.path.join(dest, 'play.yml'), 'w') as handle:
        handle.write(PLAY)
    os.makedirs(os.path.join(dest, 'results'), exist_ok=True)
    return [node['name'] for node in spec['nodes']]


def playbook(dest, *args):
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(dest, 'play.yml'),
           '-i', os.path.join(dest, 'inventory.yml'), '-e', 'results_dir=' + os.path.join(dest, 'results')] + list(args)
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
                          env=dict(os.environ, ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0'))


def task_output(result, name):
    """What ansible-playbook printed under the task whose name ends with ``name``."""
    match = re.search(r'^TASK \[[^\]]*: %s\] \**\n(.*?)(?=^(?:TASK|RUNNING HANDLER|PLAY RECAP) )' % re.escape(name),
                      result.stdout, re.M | re.S)
    assert match, 'task %r not in the output' % name
    return match.group(1)


def read(dest, node, rel):
    with open(os.path.join(dest, 'roots', node, rel)) as handle:
        return handle.read()


def governors(dest, node):
    return [read(dest, node, CPUFREQ % cpu).strip() for cpu in range(CPUS[node])]


def results(dest, names):
    found = {}
    for name in names:
        with open(os.path.join(dest, 'results', name + '.json')) as handle:
            found[name] = json.load(handle)
    return found


def explain(result):
    return result.stdout[-4000:] + result.stderr[-2000:]


def test_quartet(tmp_path):
    dest = str(tmp_path)
    names = build(dest, SPEC)
    assert governors(dest, 'drifted') == ['powersave'] * 8

    # 1. --check --diff: the drift is reported, nothing below any root changes.
    before = hashes(dest, names)
    check = playbook(dest, '--check', '--diff')
    assert check.returncode == 0, explain(check)
    counts = recap(check)
    assert set(counts) == set(names)
    assert all(counts[name]['failed'] == 0 for name in names), counts
    assert all(counts[name]['changed'] > 0 for name in names), counts
    assert hashes(dest, names) == before
    drift = task_output(check, 'Report the CPUs whose governor differs')
    assert 'changed: [drifted]' in drift
    assert 'scaling_governor (current -> performance)' in drift
    for cpu in range(8):
        assert 'cpu%d: powersave -> performance' % cpu in drift
    assert '[tuned]' not in drift.replace('skipping: [tuned]', '')
    assert 'DefaultLimitMEMLOCK=infinity:infinity' in check.stdout
    assert 'ExecStart=/usr/bin/cpupower -c all frequency-set -g performance' in check.stdout
    no_cpufreq = task_output(check, 'Say that this host has no cpufreq')
    assert re.search(r'ok: \[vm\] =>\s+msg:.*no cpufreq on this host', no_cpufreq, re.S)
    assert '[drifted]' not in no_cpufreq.replace('skipping: [drifted]', '')
    facts = results(dest, names)
    assert facts['drifted']['cpufreq'] is True
    assert facts['drifted']['drift'] == dict(('cpu%d' % cpu, 'powersave') for cpu in range(8))
    assert facts['tuned']['drift'] == {} and int(facts['tuned']['cpus']) == 16
    assert facts['vm']['cpufreq'] is False and 'no cpufreq' in facts['vm']['message']

    # 2. apply: every host changes, and the files and governors are what was asked.
    apply = playbook(dest)
    assert apply.returncode == 0, explain(apply)
    counts = recap(apply)
    assert all(counts[name]['failed'] == 0 and counts[name]['changed'] > 0 for name in names), counts
    assert 'changed: [drifted]' in task_output(apply, 'Set the governor on every CPU now')
    for name in names:
        limits = read(dest, name, LIMITS)
        for domain in ('\\*', 'root'):
            for kind in ('soft', 'hard'):
                assert re.search(r'^%s\s+%s\s+memlock\s+unlimited$' % (domain, kind), limits, re.M), (name, limits)
        dropin = read(dest, name, DROPIN)
        assert re.search(r'^\[Manager\]\nDefaultLimitMEMLOCK=infinity:infinity\n\Z', dropin, re.M), dropin
    for name in ('drifted', 'tuned'):
        unit = read(dest, name, UNIT)
        for line in ('Type=oneshot', 'ExecStart=/usr/bin/cpupower -c all frequency-set -g performance',
                     'WantedBy=multi-user.target', 'RemainAfterExit=yes'):
            assert re.search('^%s$' % re.escape(line), unit, re.M), (name, line)
        assert not re.search('^After=.*multi-user.target', unit, re.M)
        assert os.readlink(os.path.join(dest, 'roots', name, WANTS)) == '/' + UNIT
    assert governors(dest, 'drifted') == ['performance'] * 8
    assert governors(dest, 'tuned') == ['performance'] * 16
    assert not os.path.lexists(os.path.join(dest, 'roots', 'vm', UNIT))
    assert not os.path.lexists(os.path.join(dest, 'roots', 'vm', WANTS))
    assert not os.path.exists(os.path.join(dest, 'roots', 'vm', 'sys/devices/system/cpu/cpu0/cpufreq'))

    # 3. apply again: idempotent on every host.
    again = playbook(dest)
    assert again.returncode == 0, explain(again)
    counts = recap(again)
    assert set(counts) == set(names)
    assert all(counts[name]['changed'] == 0 and counts[name]['failed'] == 0 for name in names), counts
    assert results(dest, names)['drifted']['drift'] == {}

    # 4. --check again: nothing to change, nothing changed.
    settled = hashes(dest, names)
    final = playbook(dest, '--check')
    assert final.returncode == 0, explain(final)
    counts = recap(final)
    assert set(counts) == set(names)
    assert all(counts[name]['changed'] == 0 and counts[name]['failed'] == 0 for name in names), counts
    assert hashes(dest, names) == settled


def test_absent_and_other_limits(tmp_path):
    dest = str(tmp_path)
    names = build(dest, {'nodes': [{'name': 'drifted', 'profile': 'homelab_cx4'}]})
    apply = playbook(dest, '-e', '{"memlock_soft": 1048576, "memlock_domain": "@rdma"}')
    assert apply.returncode == 0, explain(apply)
    limits = read(dest, 'drifted', LIMITS)
    assert re.search(r'^@rdma\s+soft\s+memlock\s+1048576$', limits, re.M), limits
    assert re.search(r'^root\s+soft\s+memlock\s+1048576$', limits, re.M), limits
    assert re.search(r'^@rdma\s+hard\s+memlock\s+unlimited$', limits, re.M), limits
    # limits.conf counts KiB, systemd bytes: 1048576 KiB is 1048576K, not 1048576.
    assert 'DefaultLimitMEMLOCK=1048576K:infinity\n' in read(dest, 'drifted', DROPIN)
    assert os.path.islink(os.path.join(dest, 'roots', 'drifted', WANTS))

    removed = playbook(dest, '--tags', 'cpu_governor', '-e', 'cpu_governor_state=absent')
    assert removed.returncode == 0, explain(removed)
    assert recap(removed)['drifted']['changed'] > 0
    assert not os.path.lexists(os.path.join(dest, 'roots', 'drifted', UNIT))
    assert not os.path.lexists(os.path.join(dest, 'roots', 'drifted', WANTS))
    # Removing the unit leaves the governor as it is now.
    assert governors(dest, 'drifted') == ['performance'] * 8

    settled = hashes(dest, names)
    again = playbook(dest, '--tags', 'cpu_governor', '-e', 'cpu_governor_state=absent')
    assert again.returncode == 0, explain(again)
    assert (recap(again)['drifted']['changed'], recap(again)['drifted']['failed']) == (0, 0)
    assert hashes(dest, names) == settled


@pytest.mark.parametrize('args, task, message', [
    (['-e', 'memlock_soft=lots'], 'memlock : Check the memlock limits and domain',
     "memlock_soft and memlock_hard take a number of KiB or 'unlimited'"),
    (['-e', '{"memlock_soft": 1048576, "memlock_hard": 1024}'], 'memlock : Check that the soft limit does not exceed the hard limit',
     'memlock_soft (1048576) is above memlock_hard (1024)'),
    (['--tags', 'cpu_governor', '-e', 'cpu_governor_governor=turbo'], "cpu_governor : Validating arguments against arg spec 'main'",
     'value of cpu_governor_governor must be one of: performance, powersave, ondemand, conservative, schedutil, userspace, got: turbo'),
    (['--tags', 'cpu_governor', '-e', 'cpu_governor_state=gone'], "cpu_governor : Validating arguments against arg spec 'main'",
     'value of cpu_governor_state must be one of: present, absent, got: gone'),
    # Passes the argument spec, but the simulated intel_pstate node offers performance and powersave only.
    (['--tags', 'cpu_governor', '-e', 'cpu_governor_governor=ondemand'], 'cpu_governor : Fail before any change when a CPU does not offer the governor',
     'ondemand is not in scaling_available_governors of CPU(s) 0, 1, 2, 3, 4, 5, 6, 7 (cpu0 offers performance powersave)'),
], ids=['memlock-not-a-number', 'memlock-soft-above-hard', 'governor-not-a-governor', 'state-not-a-state', 'governor-not-offered'])
def test_bad_input_changes_nothing(tmp_path, args, task, message):
    dest = str(tmp_path)
    names = build(dest, {'nodes': [{'name': 'drifted', 'profile': 'homelab_cx4'}]})
    before = hashes(dest, names)
    result = playbook(dest, *args)
    assert result.returncode == 2, explain(result)
    assert recap(result)['drifted']['failed'] == 1
    block = re.search(r'^TASK \[hpc\.gpu_fabric\.%s[^\]]*\] \**\n(.*?)(?=^(?:TASK|RUNNING HANDLER|PLAY RECAP|NO MORE HOSTS) )'
                      % re.escape(task), result.stdout, re.M | re.S)
    assert block and 'fatal: [drifted]' in block.group(1), explain(result)
    assert message in ' '.join(block.group(1).split()), block.group(1)
    assert hashes(dest, names) == before
    assert governors(dest, 'drifted') == ['powersave'] * 8


def test_missing_cpupower_changes_nothing(tmp_path):
    dest = str(tmp_path)
    names = build(dest, {'nodes': [{'name': 'drifted', 'profile': 'homelab_cx4'}]})
    root = os.path.join(dest, 'roots', 'drifted')
    # The node's PATH without the simulator's stand-ins (this machine has no cpupower).
    path = os.pathsep.join(d for d in os.environ.get('PATH', '').split(os.pathsep)
                           if d and not os.path.exists(os.path.join(d, 'cpupower')))
    before = hashes(dest, names)
    result = playbook(dest, '--tags', 'cpu_governor', '-e', json.dumps({'gpu_fabric_environment': {'PATH': path, 'GF_SIM_ROOT': root}}))
    assert result.returncode == 2, explain(result)
    block = task_output(result, 'Fail before any change when cpupower is missing')
    assert 'fatal: [drifted]' in block
    text = ' '.join(block.split())
    assert 'linux-cpupower (Debian)' in text and 'kernel-tools (EL)' in text and 'Nothing was changed' in text
    assert hashes(dest, names) == before


def cpupower(root, *args):
    env = dict(os.environ)
    env.pop('GF_SIM_ROOT', None)
    if root:
        env['GF_SIM_ROOT'] = root
    return subprocess.run([CPUPOWER] + list(args), capture_output=True, text=True, timeout=60, check=False, env=env)


def test_cpupower_stand_in(tmp_path):
    dest = str(tmp_path)
    build(dest, {'nodes': [{'name': 'drifted', 'profile': 'homelab_cx4'}, {'name': 'vm', 'profile': 'no_rdma_vm'}]})
    root = os.path.join(dest, 'roots', 'drifted')
    vm = os.path.join(dest, 'roots', 'vm')

    unset = cpupower(None, 'frequency-info')
    assert unset.returncode == 1 and 'GF_SIM_ROOT' in unset.stderr and unset.stdout == ''
    assert cpupower(None, '--version').returncode == 0

    # cpufreq-info.c get_policy(), as in fixtures/public/cpupower/*.txt.
    policy = cpupower(root, '-c', '1', 'frequency-info', '-p')
    assert policy.returncode == 0
    assert policy.stdout == ('analyzing CPU 1:\n'
                             '  current policy: frequency should be within 800 MHz and 3.00 GHz.\n'
                             '                  The governor "powersave" may decide which speed to use\n'
                             '                  within this range.\n')
    info = cpupower(root, 'frequency-info')
    assert info.stdout.startswith('analyzing CPU 0:\n  driver: intel_pstate\n')
    assert '  available cpufreq governors: performance powersave\n' in info.stdout

    # A governor the kernel does not offer: the write fails, -ENODEV, exit 237, nothing set.
    refused = cpupower(root, '-c', 'all', 'frequency-set', '-g', 'ondemand')
    assert refused.returncode == 237
    assert refused.stdout.startswith('Setting cpu: 0\nError setting new values. Common errors:\n')
    assert governors(dest, 'drifted') == ['powersave'] * 8

    partial = cpupower(root, '-c', '2,4-5', 'frequency-set', '-g', 'performance')
    assert partial.returncode == 0 and partial.stdout == 'Setting cpu: 2\nSetting cpu: 4\nSetting cpu: 5\n'
    assert governors(dest, 'drifted') == ['powersave', 'powersave', 'performance', 'powersave',
                                          'performance', 'performance', 'powersave', 'powersave']
    assert cpupower(root, '-c', 'x', 'frequency-set', '-g', 'performance').returncode == 1
    assert cpupower(root, 'frequency-set').returncode == 234

    # No cpufreq: the real tool's output on such a VM, and a refused frequency-set.
    none = cpupower(vm, 'frequency-info', '-p')
    assert none.returncode == 234 and none.stdout == 'analyzing CPU 0:\n  Unable to determine current policy\n'
    assert cpupower(vm, 'frequency-set', '-g', 'performance').returncode == 237


def overlay_works():
    if os.geteuid() != 0 or not shutil.which('unshare') or not shutil.which('runuser'):
        return False
    probe = subprocess.run(['unshare', '--mount', '--propagation', 'private', 'sh', '-c',
                            'd=$(mktemp -d) && mkdir "$d/u" "$d/w" && '
                            'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$d/u,workdir=$d/w" /etc'],
                           capture_output=True, text=True, timeout=60, check=False)
    return probe.returncode == 0


@pytest.mark.skipif(not overlay_works(), reason='needs root, unshare, runuser and overlayfs on /etc in a mount namespace')
def test_memlock_login_check_on_a_live_root(tmp_path):
    """Live root (gpu_fabric_root=/): /etc is a private overlay, so the host's /etc stays as it is.

    Only lowered limits: raising the hard limit needs CAP_SYS_RESOURCE, which some sandboxes drop.
    memlock_systemd=false keeps the handler from re-executing the host's systemd.
    """
    dest = str(tmp_path)
    for sub in ('upper', 'work', 'results'):
        os.makedirs(os.path.join(dest, sub))
    with open(os.path.join(dest, 'play.yml'), 'w') as handle:
        handle.write(PLAY)
    inventory = {'all': {'children': {'gpu_nodes': {'hosts': {'live': {
        'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
        'gpu_fabric_root': '/', 'gpu_fabric_environment': {}}}}}}}
    with open(os.path.join(dest, 'inventory.yml'), 'w') as handle:
        json.dump(inventory, handle)
    script = ('mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc && shift 2 && exec "$@"')

    def live(*extra):
        cmd = ['unshare', '--mount', '--propagation', 'private', 'sh', '-c', script, 'sh',
               os.path.join(dest, 'upper'), os.path.join(dest, 'work'),
               os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(dest, 'play.yml'),
               '-i', os.path.join(dest, 'inventory.yml'), '-e', 'results_dir=' + os.path.join(dest, 'results'),
               '--tags', 'memlock', '-e', '{"memlock_soft": 4096, "memlock_hard": 8192, "memlock_systemd": false}'] + list(extra)
        return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
                              env=dict(os.environ, ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0'))

    host_limits = os.path.join('/', LIMITS)
    existed = os.path.exists(host_limits)
    good = live()
    assert good.returncode == 0, explain(good)
    assert 'A new login of root gets memlock 4096.' in good.stdout
    with open(os.path.join(dest, 'upper', 'security/limits.d/90-gpu-fabric-memlock.conf')) as handle:
        assert re.search(r'^root\s+soft\s+memlock\s+4096$', handle.read(), re.M)
    assert os.path.exists(host_limits) == existed

    # limits.conf(5): '*' does not reach root, so without the root entries root keeps its limit.
    bad = live('-e', 'memlock_include_root=false')
    assert bad.returncode == 2, explain(bad)
    block = ' '.join(task_output(bad, 'Check that a new login gets the configured limit').split())
    assert 'fatal: [live]' in block
    assert re.search(r'A new login of root gets memlock \S+, not 4096', block), block
    assert 'does not apply' in block and 'pam_limits' in block
