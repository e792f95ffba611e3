# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The culprit search of role fabric_collective (benchmark.yml) on a simulated fleet whose
faults the facts do not show: three nodes that slow every collective they are in, and two
nodes that are slow only together (tests/sim/tools_nccl.py GF_SIM_NCCL_SLOW, _SLOW_WITH).
The runs of a round start together: the stand-in logs when each run started and ended."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

from tests.functional.helpers import recap
from tests.sim import cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SLOW = ['m2', 'm6', 'm9']
PAIR = ['m4', 'm7']


def test_three_bad_nodes_and_a_bad_pair_invisible_in_facts(tmp_path):
    dest = str(tmp_path)
    log = os.path.join(dest, 'runs.jsonl')
    spec = {'nodes': [{'name': 'm%d' % i, 'profile': 'metax_c500_cx7', 'faults': []} for i in range(1, 11)]}
    inventory = cluster.build(spec, dest, 'local', python=sys.executable)
    hosts = inventory['all']['children']['gpu_nodes']['hosts']
    for name, host in hosts.items():
        env = host['gpu_fabric_environment']
        # 2 s a run: the runs of a round, started one after another by a busy controller, still overlap.
        env.update(GF_SIM_NCCL_LOG=log, GF_SIM_NCCL_DELAY='2')
        if name in SLOW:
            env['GF_SIM_NCCL_SLOW'] = '0.3'
        if name == PAIR[0]:
            env['GF_SIM_NCCL_SLOW_WITH'] = PAIR[1]
    cluster.write_hosts_file(hosts, os.path.join(dest, 'sim_hosts.json'))
    with open(os.path.join(dest, 'inventory.yml'), 'w') as handle:
        yaml.safe_dump(inventory, handle)
    out = os.path.join(dest, 'out')
    os.makedirs(out)
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), os.path.join(REPO, 'playbooks', 'benchmark.yml'),
           '-i', os.path.join(dest, 'inventory.yml'), '-e', 'gpu_fabric_hosts=gpu_nodes', '-e', 'gpu_fabric_output_dir=' + out,
           '-e', 'fabric_collective_max_bytes=64M', '--tags', 'fabric_collective']
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, check=False,
                            env=dict(os.environ, ANSIBLE_NOCOLOR='1'))
    stats = recap(result)
    assert stats and all(s['failed'] == 0 and s['unreachable'] == 0 for s in stats.values()), result.stdout[-3000:]
    with open(os.path.join(out, 'collective.json')) as handle:
        outcome = json.load(handle)
    assert outcome['fleet']['verdict']['status'] == 'low'
    search = outcome['search']
    # Every bad node named, no healthy one; the pair named as a pair, neither of its nodes as a culprit.
    assert sorted(search['culprits']) == SLOW and set(search['basis'].values()) == {'runs'}
    assert [p['nodes'] for p in search['pairs']] == [PAIR] and search['unresolved'] == [], search['notes']
    runs = search['runs']
    for run in runs:
        expected_bad = bool(set(run['hosts']) & set(SLOW)) or set(PAIR) <= set(run['hosts'])
        assert (run['status'] != 'ok') == expected_bad, run
        assert run['status'] == 'ok' or run['ratio'] < 0.5
    # Rounds of disjoint runs, started together: runs of one round overlapped in time, and no
    # node was in two runs at once.
    assert search['rounds'] < len(runs)
    # The default strategy (fewest rounds), one readable console line per round, the time they took.
    assert search['strategy'] == 'rounds' and search['seconds'] > 0
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip().startswith('culprit search round')]
    assert len(lines) == search['rounds'], result.stdout[-4000:]
    assert lines[0].startswith('culprit search round 1: ') and 'done after %d run(s)' % len(runs) in lines[-1], lines
    assert 'RETRYING' not in result.stdout and 'search.yml' not in result.stdout
    sys.stdout.write('\n'.join(lines) + '\n')
    with open(log) as handle:
        spans = [json.loads(line) for line in handle]
    search_spans = spans[1:]    # the first is the fleet run
    assert len(search_spans) == len(runs)
    overlapping = [(a, b) for i, a in enumerate(search_spans) for b in search_spans[i + 1:]
                   if a['start'] < b['end'] and b['start'] < a['end']]
    assert overlapping, search_spans
    assert all(not set(a['hosts']) & set(b['hosts']) for a, b in overlapping)
