# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""configure.yml as a drift check: --check --diff names every drift and changes nothing.

Two drifted simulated nodes: the seed-002 homelab node as it was before its owner
configured it (governor powersave, no modules-load.d file, no memlock limits), and an
H100 node with ACS redirecting above a GPU and nvidia_peermem not loaded.
"""

from __future__ import annotations

import os
import subprocess
import sys

from tests.functional.helpers import recap, tree_hash
from tests.sim import cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def configure(inventory, *extra):
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'playbooks', 'configure.yml'),
           '-i', inventory, '-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'memlock_verify=false'] + list(extra)
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
                          env=dict(os.environ, ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0'))


def test_drift_check_then_remediate(tmp_path):
    dest = str(tmp_path)
    spec = {'nodes': [{'name': 'homelab', 'profile': 'homelab_cx4'},
                      {'name': 'h100', 'profile': 'nvidia_h100_8x_ndr', 'faults': ['acs_enabled', 'peermem_not_loaded']}]}
    hosts = cluster.build(spec, dest, 'local', python=sys.executable)['all']['children']['gpu_nodes']['hosts']
    inventory = os.path.join(dest, 'inventory.yml')
    roots = dict((name, hv['gpu_fabric_root']) for name, hv in hosts.items())
    before = dict((name, tree_hash(root)) for name, root in roots.items())

    drift = configure(inventory, '--check', '--diff')
    assert recap(drift)['homelab']['failed'] == 0 and recap(drift)['h100']['failed'] == 0, drift.stdout[-4000:]
    assert dict((name, tree_hash(root)) for name, root in roots.items()) == before, 'check mode changed a node'
    out = drift.stdout
    for words in ('+ib_uverbs',                       # rdma_modules: the modules-load.d file it would write
                  'Would load',                       # ... and the modules it would load now
                  '+DefaultLimitMEMLOCK=infinity',    # memlock: the systemd manager default
                  'powersave',                                          # cpu_governor: the drifted governor
                  'ReqRedir+ CmpltRedir+',                              # pcie_acs: ACSCtl before
                  ):
        assert words in out, words
    assert recap(drift)['homelab']['changed'] >= 3 and recap(drift)['h100']['changed'] >= 3

    fixed = configure(inventory)
    assert all(v['failed'] == 0 for v in recap(fixed).values()), fixed.stdout[-4000:]
    with open(os.path.join(roots['homelab'], 'sys/devices/system/cpu/cpu0/cpufreq/scaling_governor')) as handle:
        assert handle.read().strip() == 'performance'

    after = configure(inventory, '--check', '--diff')
    assert all(v['changed'] == 0 and v['failed'] == 0 for v in recap(after).values()), after.stdout[-4000:]
