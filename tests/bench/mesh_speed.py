# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Wall time of a full-mesh benchmark on N simulated nodes against its floor.

Target (issue 4): within 1.1 x (rounds x per-test time) + the fixed cost of an empty
play on the same inventory. Measures, on local-connection simulated nodes, one rail,
host memory:
  empty_play_s   - ansible-playbook of one debug task over the inventory;
  fixed_s        - playbooks/benchmark.yml --check: the same play with everything but the
                   tests (facts, plan, judging, writing bench.json);
  per_test_s     - the median elapsed_s perftest_run reported for the tests;
  bench_s        - playbooks/benchmark.yml end to end;
and prints ratio = bench_s / (rounds x per_test_s + empty_play_s) and
ratio_fixed = bench_s / (rounds x per_test_s + fixed_s). It also runs the ring (2 rounds
for an even N) and reports the cost of one more round, per_round_s = (bench_s - ring_s) /
(rounds - 2), against per_test_s (round_ratio): what the engine adds per round, apart from
the play's fixed costs. slowest_tasks lists the full run's slowest tasks (wall time from a
task's start to the next one's, callbacks/gf_task_times.py).

--test-seconds S caps how long one simulated test runs (GF_SIM_PERFTEST_MAX_S; the
stand-ins' default 0.5 s is shorter than a real 8 MiB ib_write_bw with its 1 s pause after
connecting). --engine rounds measures the per-round engine instead of the sequence one.
--profile P --role-defaults measures what a user runs on such nodes: the role's defaults
(every rail, host and GPU memory, 8 MiB) instead of one rail, host memory, 1 MiB; a round
is then one step per memory kind ('rounds' counts the steps). --iterations N sets perftest's
iterations (fabric_bench_iterations; perftest's default is 5,000): longer tests, as a slower
fabric or a larger message gives them, for a real test length of S seconds or less.

Usage: python -m tests.bench.mesh_speed [--test-seconds S] [--engine E] [--profile P --role-defaults]
       [--iterations N] [N ...]
(run from the checkout, venv active)
"""

from __future__ import annotations

import argparse
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


CALLBACKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'callbacks')


def _playbook(args, env=None):
    start = time.perf_counter()
    subprocess.run([os.path.join(os.path.dirname(sys.executable), 'ansible-playbook')] + args, cwd=REPO, check=True,
                   capture_output=True, env=dict(os.environ, ANSIBLE_NOCOLOR='1', **(env or {})))
    return time.perf_counter() - start


def measure(nodes, test_seconds=None, engine='sequence', profile='homelab_cx4', role_defaults=False, iterations=None):
    work = tempfile.mkdtemp(prefix='gf-mesh-')
    spec = {'nodes': [{'name': 'n%02d' % i, 'profile': profile} for i in range(1, nodes + 1)]}
    cluster.build(spec, work, 'local', python=sys.executable)
    inventory = os.path.join(work, 'inventory.yml')
    with open(os.path.join(work, 'empty.yml'), 'w') as handle:
        handle.write(EMPTY)
    empty = _playbook([os.path.join(work, 'empty.yml'), '-i', inventory])
    out = os.path.join(work, 'out')
    os.makedirs(out)
    # The pairwise mesh alone: the collective and its search are not part of it.
    options = {'fabric_bench_engine': engine, 'gpu_fabric_collective_enabled': False}
    if not role_defaults:
        # One rail, host memory, 1 MiB: the homelab nodes' memlock is 8 MiB (seed 002 before
        # its setup) and perftest registers 2 x the message size (the stand-in refuses beyond it).
        options.update(fabric_bench_memory=['host'], fabric_bench_size=1048576)
    if iterations:
        options['fabric_bench_iterations'] = iterations
    memory_kinds = len(options.get('fabric_bench_memory', ['host', 'gpu']))
    args = [os.path.join(REPO, 'playbooks', 'benchmark.yml'), '-i', inventory, '-e', 'gpu_fabric_hosts=gpu_nodes',
            '-e', 'gpu_fabric_output_dir=' + out, '-e', json.dumps(options)]
    env = {'GF_SIM_PERFTEST_MAX_S': str(test_seconds)} if test_seconds else {}
    fixed = _playbook(args + ['--check'], env)
    ring = _playbook(args + ['-e', 'fabric_bench_mode=ring'], env)
    # The full run again with every task's wall time (callbacks/gf_task_times.py): where the time
    # that is not tests goes.
    times = os.path.join(work, 'task_times.jsonl')
    bench = _playbook(args, dict(env, GF_TASK_TIMES=times, ANSIBLE_CALLBACK_PLUGINS=CALLBACKS,
                                 ANSIBLE_CALLBACKS_ENABLED='gf_task_times'))
    with open(times) as handle:
        tasks = [json.loads(line) for line in handle]
    with open(os.path.join(out, 'bench.json')) as handle:
        report = json.load(handle)
    # One step per round and memory kind: the steps run one after the other.
    rounds = (nodes - 1 if nodes % 2 == 0 else nodes) * memory_kinds
    elapsed = [p.get('elapsed_s') for p in report['pairs'] if p.get('elapsed_s')]
    per_test = statistics.median(elapsed) if elapsed else None
    floor = rounds * per_test + empty if per_test else None
    floor_fixed = rounds * per_test + fixed if per_test else None
    return {'nodes': nodes, 'profile': profile, 'role_defaults': role_defaults, 'engine': engine, 'rounds': rounds,
            'rails': len(report.get('rails') or []) or None, 'pairs': len(report['pairs']), 'verdicts': report['verdicts'],
            'test_seconds': test_seconds or 0.5, 'empty_play_s': round(empty, 2), 'fixed_s': round(fixed, 2),
            'per_test_s': round(per_test, 3) if per_test else None, 'bench_s': round(bench, 2),
            'floor_s': round(floor, 2) if floor else None, 'ratio': round(bench / floor, 2) if floor else None,
            'floor_fixed_s': round(floor_fixed, 2) if floor_fixed else None,
            'ratio_fixed': round(bench / floor_fixed, 2) if floor_fixed else None,
            'ring_s': round(ring, 2),
            'per_round_s': round((bench - ring) / (rounds - 2 * memory_kinds), 3) if rounds > 2 * memory_kinds else None,
            'round_ratio': (round((bench - ring) / (rounds - 2 * memory_kinds) / per_test, 2)
                            if rounds > 2 * memory_kinds and per_test else None),
            'slowest_tasks': sorted(tasks, key=lambda row: -row['s'])[:8]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--test-seconds', type=float, default=None)
    parser.add_argument('--engine', choices=['sequence', 'rounds'], default='sequence')
    parser.add_argument('--profile', default='homelab_cx4')
    parser.add_argument('--role-defaults', action='store_true')
    parser.add_argument('--iterations', type=int, default=None)
    parser.add_argument('nodes', type=int, nargs='*', default=[8, 16])
    args = parser.parse_args(argv)
    print(json.dumps([measure(n, args.test_seconds, args.engine, args.profile, args.role_defaults, args.iterations)
                      for n in args.nodes],
                     indent=2))
    return 0


if __name__ == '__main__':
    sys.exit(main())
