# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""configure.yml in check mode on this machine, for real (root /).

The CI machine has no RDMA device, no GPU, no cpufreq and cannot load kernel modules:
every role must say why it skips, none may fail, and nothing may change.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_configure_check_mode_on_this_machine(tmp_path):
    etc_before = subprocess.run(['ls', '-la', '/etc/security/limits.d', '/etc/modules-load.d', '/etc/systemd/system'],
                                capture_output=True, text=True, check=False).stdout
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'playbooks', 'configure.yml'),
           '-i', 'localhost,', '-c', 'local', '--check', '--diff',
           '-e', 'gpu_fabric_become=false', '-e', 'ansible_python_interpreter=' + sys.executable]
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
                            env=dict(os.environ, ANSIBLE_NOCOLOR='1'))
    recap = re.search(r'^localhost\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)', result.stdout, re.M)
    assert recap, result.stdout[-3000:] + result.stderr[-3000:]
    assert recap.group(4) == '0', result.stdout[-5000:]
    assert result.returncode == 0
    out = result.stdout
    assert 'No bridge with ACS is in scope' in out                     # pcie_acs: no GPU<->NIC path here
    assert 'not_applicable: no GPU of a supported vendor' in out          # ofed_peermem
    assert re.search(r'cpufreq', out, re.I)                               # cpu_governor says there is none
    etc_after = subprocess.run(['ls', '-la', '/etc/security/limits.d', '/etc/modules-load.d', '/etc/systemd/system'],
                               capture_output=True, text=True, check=False).stdout
    assert etc_after == etc_before
