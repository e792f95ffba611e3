# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The fabric beyond the nodes through the playbooks a user runs: the simulated fat tree
(tests/sim/fabric.py: 2 spines, 4 leaves, 16 nodes x 8 rails) in local mode, validate_fabric.yml
(validate, then report), with the infiniband-diags stand-ins on PATH. The first node with an InfiniBand
port discovers the fabric; report.json names the degraded switch link and the flapping port
(attributed to the node at its other end), report.html draws the fabric and report.md names
the ports. Off with gpu_fabric_discover_fabric=false: the report says the fabric is unchecked (not discovered).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.sim import fabric

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(playbook, inventory, out, *extra):
    env = dict(os.environ, ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0')
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'playbooks', playbook),
           '-i', inventory, '-e', 'gpu_fabric_output_dir=' + out, '-e', 'ansible_python_interpreter=' + sys.executable,
           '-e', 'gpu_fabric_fabric_counter_interval=0.2', '-f', '16'] + list(extra)
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)


def validate_and_report(tmp_path, faults, *extra):
    dest = tmp_path / 'pod'
    dest.mkdir()
    fabric.build(str(dest), faults=faults, python=sys.executable)
    out = str(tmp_path / 'out')
    inventory = str(dest / 'inventory.yml')
    result = run('validate_fabric.yml', inventory, out, *extra)
    with open(os.path.join(out, 'report.json')) as handle:
        report = json.load(handle)
    return report, out, result


def test_fat_tree_faults_are_named_with_their_switch_ports(tmp_path):
    report, out, result = validate_and_report(tmp_path, ('degraded_switch_link', 'flapping_link'))
    roots = dict(((f['code'], f['host']), f) for f in report['findings'] if f['explained_by'] is None and f['severity'] != 'info')
    assert ('FABRIC_LINK_DEGRADED', None) in roots, sorted(roots)
    assert 'leaf-2' in roots[('FABRIC_LINK_DEGRADED', None)]['subject']
    assert 'spine-1' in roots[('FABRIC_LINK_DEGRADED', None)]['subject']
    flap = roots[('FABRIC_LINK_FLAPPING', 'gpu-05')]
    assert 'leaf-2' in flap['subject'] and 'gpu-05 mlx5_3' in flap['subject']
    assert flap['evidence']['increase']['link_downed'] >= 1
    # Exactly these two fabric faults, and no link finding on any node beside them.
    assert sorted(k for k in roots if k[0].startswith('FABRIC_')) == [('FABRIC_LINK_DEGRADED', None), ('FABRIC_LINK_FLAPPING', 'gpu-05')]
    assert [k for k in roots if k[0].startswith(('IB_', 'FLEET_', 'MTU_', 'HOST_UNREACHABLE'))] == []
    assert report['fabric']['discovered_by'] == 'gpu-01' and len(report['fabric']['spines']) == 2
    assert len(report['fabric']['leaves']) == 4
    with open(os.path.join(out, 'report.html')) as handle:
        html = handle.read()
    assert '<section id="fabric">' in html and '<svg class="fabric"' in html and 'leaf-2:MQM9700/U1 port 33' in html
    with open(os.path.join(out, 'report.md')) as handle:
        markdown = handle.read()
    assert '## Fabric links and switch ports' in markdown and 'gpu-05 mlx5_3' in markdown
    assert result.returncode == 2   # the exit policy: root-cause errors


def test_discovery_off_says_the_fabric_is_unchecked(tmp_path):
    report, _out, result = validate_and_report(tmp_path, ('missing_uplink',), '-e', 'gpu_fabric_discover_fabric=false')
    codes = set(f['code'] for f in report['findings'])
    assert not [c for c in codes if c.startswith('FABRIC_')]
    assert report['fabric']['status'] == 'not_discovered' and report['fabric']['ib_hosts'] == 16
    assert result.returncode == 0, result.stdout[-3000:]
