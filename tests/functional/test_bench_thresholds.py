# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""One owner for the pair thresholds: benchmark.yml with a user's fabric_bench_bw_ratio, the pairwise
benchmark and the collective's culprit search in one run. The search starts from the pairs the
pairwise benchmark found bad: they must be bench.json's, judged with the user's ratio, not the
default's. The stand-in perftest runs at 97 % of the port rate at 8 MiB (tests/sim/tools_perftest.py
PLATEAU): healthy at the default 90 %, low at 99 %."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

from tests.functional.helpers import recap
from tests.sim import cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODES = ['t1', 't2', 't3', 't4']
# Tests run in parallel on local clusters with the same 127.0.1.x addresses: this test's own ports.
OPTIONS = {'fabric_bench_hcas': ['mlx5_0'], 'fabric_bench_memory': ['host'], 'fabric_bench_timeout': 8,
           'fabric_bench_wait_for_server': 15, 'fabric_bench_base_port': 27515, 'fabric_bench_beacon_port': 27514,
           'fabric_collective_max_bytes': '64M'}


def test_the_culprit_search_reads_the_pairs_with_the_users_thresholds(tmp_path):
    dest = str(tmp_path)
    spec = {'nodes': [{'name': name, 'profile': 'metax_c500_cx7', 'faults': []} for name in NODES]}
    inventory = cluster.build(spec, dest, 'local', python=sys.executable)
    hosts = inventory['all']['children']['gpu_nodes']['hosts']
    # t3 slows every collective it is in: the fleet's run is low and the search runs.
    hosts['t3']['gpu_fabric_environment']['GF_SIM_NCCL_SLOW'] = '0.3'
    cluster.write_hosts_file(hosts, os.path.join(dest, 'sim_hosts.json'))
    with open(os.path.join(dest, 'inventory.yml'), 'w') as handle:
        yaml.safe_dump(inventory, handle)
    out = os.path.join(dest, 'out')
    os.makedirs(out)
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'playbooks', 'benchmark.yml'),
           '-i', os.path.join(dest, 'inventory.yml'), '-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'gpu_fabric_output_dir=' + out,
           '-e', json.dumps(OPTIONS),
           # As a user types it: key=value, a string.
           '-e', 'fabric_bench_bw_ratio=0.99', '-e', 'ansible_async_dir=' + os.path.join(dest, 'async')]
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, check=False,
                            env=dict(os.environ, ANSIBLE_NOCOLOR='1'))
    stats = recap(result)
    assert stats and all(s['failed'] == 0 and s['unreachable'] == 0 for s in stats.values()), result.stdout[-3000:]
    with open(os.path.join(out, 'bench.json')) as handle:
        bench = json.load(handle)
    with open(os.path.join(out, 'collective.json')) as handle:
        outcome = json.load(handle)
    assert bench['thresholds']['bw_ratio'] == 0.99
    named = sorted(sorted((p['server'], p['client'])) for p in bench['pairs'] if p['verdict'] in ('low', 'failed'))
    # Every pair runs below 99 % of its rail: all 6 are low in bench.json ...
    assert len(named) == 6 and all(p['verdict'] == 'low' and p['status'] == 'ok' for p in bench['pairs']), bench['pairs']
    # ... and the search started from exactly those (with the default 90 % it had none).
    assert outcome['fleet']['verdict']['status'] == 'low'
    search = outcome['search']
    assert search['known_pairs'] == named, search
    assert 't3' in search['culprits'], search
