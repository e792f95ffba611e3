# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""validate_fabric.yml as a user runs it, on two simulated 2 x H200 nodes (the real machine's profile), the
per-node collective on (launcher local): a setting in one node's /etc/nccl.conf, which NCCL's log prints as
"set by environment", is named as that node's root with the file it came from."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.sim import cluster, render

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_setting_in_one_nodes_etc_nccl_conf_is_its_root(tmp_path):
    dest = str(tmp_path)
    cluster.build({'nodes': [{'name': 'nodeA', 'profile': 'h200x2_no_rdma'}, {'name': 'nodeB', 'profile': 'h200x2_no_rdma'}]},
                  dest, 'local', python=sys.executable)
    render.render_nccl_conf(os.path.join(dest, 'roots', 'nodeB'), {'nccl_conf': {'/etc/nccl.conf': {'NCCL_MAX_NCHANNELS': '1'}}})
    out = os.path.join(dest, 'out')
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'validate_fabric.yml'),
           '-i', os.path.join(dest, 'inventory.yml'), '-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'gpu_fabric_output_dir=' + out,
           '-e', 'gpu_fabric_benchmark=true', '-e', 'fabric_collective_launcher=local', '-e', 'fabric_collective_ranks_per_node=2',
           '-e', 'ansible_python_interpreter=' + sys.executable]
    result = subprocess.run(cmd, cwd=REPO, env=dict(os.environ, ANSIBLE_NOCOLOR='1'), capture_output=True, text=True,
                            timeout=600, check=False)
    with open(os.path.join(out, 'report.json')) as handle:
        report = json.load(handle)
    found = dict(((f['code'], f['host']), f) for f in report['findings'])
    root = found.get(('COLLECTIVE_NCCL_TUNING', 'nodeB'))
    assert root is not None, result.stdout[-4000:]
    assert root['explained_by'] is None and root['severity'] == 'error'
    assert root['evidence']['variables']['NCCL_MAX_NCHANNELS']['source'] == '/etc/nccl.conf'
    assert 'NCCL_MAX_NCHANNELS=1 from /etc/nccl.conf' in root['cause']
    assert found[('COLLECTIVE_NODE_SLOW', 'nodeB')]['explained_by'] == root['id']
    assert found[('NCCL_CONF_DIFFERS', 'nodeB')]['subject'] == '/etc/nccl.conf'
    # The healthy node: nothing of the settings, no slow symptom.
    assert not [key for key in found if key[1] == 'nodeA' and key[0].startswith(('COLLECTIVE_', 'NCCL_'))]
