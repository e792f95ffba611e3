# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""benchmark.yml (role fabric_bench) on a local simulated cluster with faults.

Four nodes and a dead one: a GPU far from its HCA (cross_numa) must show as GPU memory
far below host memory on that rail; a node whose perftest servers hang must give timeout
records for its pairs and leave no process behind; the dead node is left out; every
healthy pair's result is kept.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

from tests.functional.helpers import recap
from tests.sim import cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEAD = {'dead1': {'ansible_connection': 'ssh', 'ansible_host': '127.0.0.1', 'ansible_port': 9,
                  'ansible_ssh_common_args': '-o ConnectTimeout=3 -o StrictHostKeyChecking=no'}}


def test_pairwise_benchmark_with_faults(tmp_path):
    dest = str(tmp_path)
    spec = {'nodes': [{'name': 'n1', 'profile': 'nvidia_h100_8x_ndr'},
                      {'name': 'n2', 'profile': 'nvidia_h100_8x_ndr', 'faults': ['cross_numa']},
                      {'name': 'n3', 'profile': 'nvidia_h100_8x_ndr'},
                      {'name': 'hang', 'profile': 'nvidia_h100_8x_ndr'}]}
    inventory = cluster.build(spec, dest, 'local', python=sys.executable, extra_hosts=DEAD)
    hosts = inventory['all']['children']['gpu_nodes']['hosts']
    hosts['hang']['gpu_fabric_environment']['GF_SIM_PERFTEST_HANG'] = '1'
    with open(os.path.join(dest, 'inventory.yml'), 'w') as handle:
        yaml.safe_dump(inventory, handle)
    out = os.path.join(dest, 'out')
    os.makedirs(out)
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'playbooks', 'benchmark.yml'),
           '-i', os.path.join(dest, 'inventory.yml'), '-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'gpu_fabric_output_dir=' + out,
           '-e', json.dumps({'fabric_bench_hcas': ['mlx5_0'], 'fabric_bench_timeout': 6, 'fabric_bench_wait_for_server': 5})]
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, check=False,
                            env=dict(os.environ, ANSIBLE_NOCOLOR='1'))
    stats = recap(result)
    assert stats['dead1']['unreachable'] == 1, result.stdout[-3000:]
    assert all(stats[h]['failed'] == 0 for h in ('n1', 'n2', 'n3', 'hang', 'localhost')), result.stdout[-3000:]
    assert 'host memory: round 3 of 3' in result.stdout and 'gpu memory: round 3 of 3' in result.stdout   # progress

    with open(os.path.join(out, 'bench.json')) as handle:
        bench = json.load(handle)
    pairs = dict(((p['memory'], frozenset((p['server'], p['client']))), p) for p in bench['pairs'])
    # 4 live nodes: 6 pairs on one rail, in both memory kinds; the dead node is in none.
    assert len(bench['pairs']) == 12 and not any('dead1' in key for _m, key in pairs)
    hung_servers = [p for p in bench['pairs'] if p['server'] == 'hang']
    assert hung_servers
    for pair in hung_servers:
        # The server accepts and never answers: killed at the timeout, its client then reads EOF
        # (perftest: "ethernet_read_keys: Couldn't read remote address") or times out itself.
        assert pair['status'] == 'failed' and pair['failure']['kind'] in ('timeout', 'exchange_failed'), pair
    assert all(p['status'] == 'ok' for p in bench['pairs'] if 'hang' not in (p['server'], p['client']))
    healthy = pairs[('host', frozenset(('n1', 'n3')))]
    assert healthy['verdict'] == 'ok' and healthy['bw_avg_gbps'] > 0.9 * 400
    far = [pairs[('gpu', frozenset((peer, 'n2')))] for peer in ('n1', 'n3')]
    assert all(p['verdict'] == 'low' and p['gpu_vs_host'] < 0.9 for p in far), far
    assert bench['matrix']['host']['0']
    # Nothing of the benchmark outlives it, on any node (they all share this machine).
    leftover = subprocess.run(['pgrep', '-f', 'tools_perftest'], capture_output=True, text=True, check=False)
    assert leftover.stdout == ''
