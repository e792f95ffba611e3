# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""validate_fabric.yml with gpu_fabric_expected as a user gives it (-e JSON, which arrives as a string; a
refused value), on two simulated nodes alike, each one compute HCA short of its GPUs: one without it (gpus_outnumber_rails), one
with a ConnectX whose probe failed (rdma_unbound, which leaves it one rail short too) and one whose peer-memory module is of another driver
(peermem_driver_mismatch). Each class is named on its node; the variable's refusal is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.functional.helpers import recap
from tests.sim import cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = {'nodes': [
    {'name': 'e1', 'profile': 'nvidia_h100_8x_ndr', 'faults': ['gpus_outnumber_rails', 'peermem_driver_mismatch']},
    {'name': 'e2', 'profile': 'nvidia_h100_8x_ndr', 'faults': ['rdma_unbound']},
]}


def _run(inventory, out, expected):
    env = dict(os.environ, ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0')
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'validate_fabric.yml'),
           '-i', inventory, '-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'gpu_fabric_output_dir=' + out,
           '-e', 'gpu_fabric_expected=' + expected, '-e', "gpu_fabric_exit_policy=findings[?code=='NO_SUCH_CODE']"]
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    with open(os.path.join(out, 'report.json')) as handle:
        return result, json.load(handle)


def test_expected_inventory_and_the_node_against_itself(tmp_path):
    dest = str(tmp_path)
    cluster.build(SPEC, dest, 'local', python=sys.executable)
    inventory = os.path.join(dest, 'inventory.yml')
    # key=value: the JSON arrives as a string (compact: -e's key=value form splits at spaces).
    expected = json.dumps({'gpus': 8, 'hcas': {'compute': {'count': 8, 'rate_gbps': 400}}}, separators=(',', ':'))
    result, report = _run(inventory, os.path.join(dest, 'out'), expected)
    said = result.stdout + result.stderr
    assert all(recap(result)[h]['failed'] == 0 for h in ('e1', 'e2')), said[-4000:]
    assert not [f for f in report['findings'] if f['code'] == 'HOST_TASK_FAILED'], report['findings']
    roots = sorted((f['code'], f['host']) for f in report['findings'] if f['explained_by'] is None and f['severity'] != 'info')
    assert roots == [('GDR_PEERMEM_DRIVER_MISMATCH', 'e1'), ('INVENTORY_EXPECTED_MISMATCH', 'e1'), ('INVENTORY_GPU_WITHOUT_RAIL', 'e1'),
                     ('RDMA_DEVICE_UNBOUND', 'e2')], roots
    unbound, = [f for f in report['findings'] if f['code'] == 'RDMA_DEVICE_UNBOUND']
    assert 'mlx5_core: probe of' in unbound['cause']
    # On e2 the rail short of the inventory, and the GPU without a NIC of its own, are the failed probe's.
    for code in ('INVENTORY_EXPECTED_MISMATCH', 'INVENTORY_GPU_WITHOUT_RAIL'):
        on_e2 = [f for f in report['findings'] if f['code'] == code and f['host'] == 'e2']
        assert on_e2 and all(f['explained_by'] == unbound['id'] for f in on_e2), on_e2
    # A value of another shape: refused in one line naming it, the nodes' facts still read.
    result, report = _run(inventory, os.path.join(dest, 'out2'), 'gpus=8')
    failed = [f for f in report['findings'] if f['code'] == 'HOST_TASK_FAILED']
    assert failed and all('gpu_fabric_expected is a string that is not a JSON object' in f['cause'] for f in failed), failed
    assert any(f['code'] == 'GDR_PEERMEM_DRIVER_MISMATCH' for f in report['findings'])
