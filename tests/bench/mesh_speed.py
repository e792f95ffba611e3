# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Wall time of a full-mesh benchmark on N simulated nodes against its floor.

Target (issue 4): within 1.1 x (rounds x per-test time) + the fixed cost of an empty
play on the same inventory. Measures, on local-connection simulated nodes, one rail,
host memory:
  empty_play_s   - ansible-playbook of one debug task over the inventory;
  per_test_s     - the median elapsed_s perftest_run reported for the tests;
  bench_s        - playbooks/benchmark.yml end to end;
and prints the ratio bench_s / (rounds x per_test_s + empty_play_s).

Usage: python -m tests.bench.mesh_speed [N ...]   (run from the checkout, venv active)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from tests.sim import cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EMPTY = '- hosts: gpu_nodes\n  gather_facts: false\n  tasks:\n    - ansible.builtin.debug:\n        msg: hi\n'


def _playbook(args):
    start = time.perf_counter()
    subprocess.run([os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')] + args, cwd=REPO, check=True,
                   capture_output=True, env=dict(os.environ, ANSIBLE_NOCOLOR='1'))
    return time.perf_counter() - start


def measure(nodes):
    work = tempfile.mkdtemp(prefix='gf-mesh-')
    spec = {'nodes': [{'name': 'n%02d' % i, 'profile': 'homelab_cx4'} for i in range(1, nodes + 1)]}
    cluster.build(spec, work, 'local', python=sys.executable)
    inventory = os.path.join(work, 'inventory.yml')
    with open(os.path.join(work, 'empty.yml'), 'w') as handle:
        handle.write(EMPTY)
    empty = _playbook([os.path.join(work, 'empty.yml'), '-i', inventory])
    out = os.path.join(work, 'out')
    os.makedirs(out)
    bench = _playbook([os.path.join(REPO, 'playbooks', 'benchmark.yml'), '-i', inventory, '-e', 'gpu_fabric_hosts=gpu_nodes',
                       '-e', 'gpu_fabric_output_dir=' + out, '-e', json.dumps({'fabric_bench_memory': ['host']})])
    with open(os.path.join(out, 'bench.json')) as handle:
        report = json.load(handle)
    rounds = nodes - 1 if nodes % 2 == 0 else nodes
    elapsed = [p.get('elapsed_s') for p in report['pairs'] if p.get('elapsed_s')]
    per_test = statistics.median(elapsed) if elapsed else None
    floor = rounds * per_test + empty if per_test else None
    return {'nodes': nodes, 'rounds': rounds, 'pairs': len(report['pairs']), 'verdicts': report['verdicts'],
            'empty_play_s': round(empty, 2), 'per_test_s': per_test, 'bench_s': round(bench, 2),
            'floor_s': round(floor, 2) if floor else None, 'ratio': round(bench / floor, 2) if floor else None}


def main(argv=None):
    sizes = [int(a) for a in (argv if argv is not None else sys.argv[1:])] or [8, 16]
    print(json.dumps([measure(n) for n in sizes], indent=2))
    return 0


if __name__ == '__main__':
    sys.exit(main())
