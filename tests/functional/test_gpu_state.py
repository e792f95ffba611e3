# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The GPUs' own state through ansible-playbook: validate_fabric.yml on two simulated copies of the
real 2 x H200 machine (tests/sim/profiles/h200x2_no_rdma.yml), nvidia-smi answered by the stand-in
(tests/sim/bin/nvidia-smi). n2 has another job on a GPU and an XID 79 in its kernel log; n1 a DCGM
host engine on both GPUs (a monitoring agent, not a job)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

from tests.functional.helpers import recap
from tests.sim import cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_validate_names_the_busy_gpu_and_the_xid_not_the_monitoring_agent(tmp_path):
    dest = str(tmp_path)
    spec = {'nodes': [{'name': 'n1', 'profile': 'h200x2_no_rdma'},
                      {'name': 'n2', 'profile': 'h200x2_no_rdma', 'faults': ['gpu_busy', 'gpu_xid79']}]}
    inventory = cluster.build(spec, dest, 'local', python=sys.executable)
    # n1: nv-hostengine on both GPUs, as DCGM runs it (310 MiB each).
    hosts = inventory['all']['children']['gpu_nodes']['hosts']
    state = os.path.join(hosts['n1']['gpu_fabric_root'], 'var/lib/gf-sim/gpu.json')
    with open(state) as handle:
        data = json.load(handle)
    data['state']['processes'] = [{'bdf': gpu['bdf'], 'pid': 900 + n, 'name': 'nv-hostengine', 'used_mib': 310, 'uid': 0}
                                  for n, gpu in enumerate(data['gpus'])]
    with open(state, 'w') as handle:
        json.dump(data, handle)
    with open(os.path.join(dest, 'inventory.yml'), 'w') as handle:
        yaml.safe_dump(inventory, handle)
    out = os.path.join(dest, 'out')
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'validate_fabric.yml'),
           '-i', os.path.join(dest, 'inventory.yml'), '-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'gpu_fabric_output_dir=' + out]
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
                            env=dict(os.environ, ANSIBLE_NOCOLOR='1'))
    stats = recap(result)
    # The nodes' facts all came back; the report's exit policy fails the run (the XID is an error).
    assert all(stats[h]['failed'] == 0 and stats[h]['unreachable'] == 0 for h in ('n1', 'n2')), result.stdout[-3000:]
    assert 'exit policy' in result.stdout and 'GPU_XID@n2/0000:00:07.0/xid79' in result.stdout
    with open(os.path.join(out, 'facts', 'n2.json')) as handle:
        facts = json.load(handle)['gpu']
    assert facts['not_read'] == {} and [p['name'] for p in facts['processes']] == ['python3']
    assert [(x['xid'], x['severity']) for x in facts['xid']] == [(79, 'error')]
    with open(os.path.join(out, 'report.json')) as handle:
        report = json.load(handle)
    gpu = sorted((f['code'], f['host'], f['severity']) for f in report['findings'] if f['code'].startswith('GPU_'))
    assert gpu == [('GPU_BUSY', 'n2', 'warning'), ('GPU_XID', 'n2', 'error')]
    busy = next(f for f in report['findings'] if f['code'] == 'GPU_BUSY')
    assert busy['at'] == [['gpu', 'n2', 'GPU1'], ['gpus', 'n2']] and 'pid 3294 python3 of alice, 1644 MiB' in busy['cause']


def test_a_busy_gpu_makes_the_slow_node_contaminated_not_a_hardware_culprit(tmp_path):
    """Launcher local on three nodes: g2 runs slower (the nccl-tests stand-in at 120 instead of 327 GB/s)
    while another job holds one of its GPUs; the idle gate of role fabric_collective saw it: the slow run
    is explained by GPU_BUSY, marked contaminated."""
    dest = str(tmp_path)
    spec = {'nodes': [{'name': 'g%d' % i, 'profile': 'nvidia_h100_8x_ndr', 'env': {'GF_SIM_NVLINK_GBS': '120'} if i == 2 else {},
                       'faults': ['gpu_busy'] if i == 2 else []} for i in range(1, 4)]}
    cluster.build(spec, dest, 'local', python=sys.executable)
    out = os.path.join(dest, 'out')
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'validate_fabric.yml'),
           '-i', os.path.join(dest, 'inventory.yml'), '-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'gpu_fabric_output_dir=' + out,
           '-e', 'gpu_fabric_benchmark=true', '-e', 'fabric_collective_launcher=local', '--skip-tags', 'fabric_bench']
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, check=False,
                            env=dict(os.environ, ANSIBLE_NOCOLOR='1'))
    stats = recap(result)
    assert all(stats[h]['failed'] == 0 for h in ('g1', 'g2', 'g3')), result.stdout[-3000:]
    with open(os.path.join(out, 'report.json')) as handle:
        report = json.load(handle)
    hosts = report['collective']['nodes']['hosts']
    assert [p['name'] for p in hosts['g2']['gpu_gate']['processes']] == ['python3']
    assert hosts['g1']['gpu_gate']['processes'] == [] and report['collective']['nodes']['slow'] == ['g2']
    found = dict(((f['code'], f['host']), f) for f in report['findings'])
    busy = found[('GPU_BUSY', 'g2')]
    assert busy['evidence']['contaminated'] is True and busy['explained_by'] is None
    assert found[('COLLECTIVE_NODE_SLOW', 'g2')]['explained_by'] == busy['id']
    assert not [key for key in found if key[0].startswith('GPU_') and key[1] != 'g2']
