# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""How long the pair_schedule filter takes to plan a pairwise fabric run.

Target (issue 4): the schedule for 4,096 nodes x 8 rails in under 1 s. What is timed
is the filter function itself, called in-process as Jinja calls it (no templating
around it), wall time from the call to the returned value (freeing it afterwards is
not counted; that is reported separately for the largest case):

  full      - the whole schedule in its compact form: every round as parallel
              servers/clients lists, the 8 rails listed once, and the summary
              (4,095 rounds x 2,048 pairs for 4,096 nodes = 67 million tests);
  round     - one round expanded to its test entries (2,048 pairs x 8 rails =
              16,384 dicts for 4,096 nodes), as a play asks for round k of N;
  summary   - pair_schedule_summary, the counts without the rounds;
  hetero    - full and summary again where half the nodes have 4 HCAs and half 8
              (per-round counts then come from the convolution in _schedule);
  one_node  - one node's whole plan expanded (node=..., every round): what the
              sequence engine computes for each host of the play.
Also full expanded schedules (every test entry) for 8 and 16 nodes.

Usage: python -m tests.bench.schedule_speed [--runs N] [--nodes N ...]
Needs ansible_collections.hpc.gpu_fabric importable (scripts/test.sh sets PYTHONPATH).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

TARGET_S = 1.0


def _timed(func, runs):
    samples, result = [], None
    for _run in range(runs):
        result = None
        start = time.perf_counter()
        result = func()
        samples.append(time.perf_counter() - start)
    return {'median_ms': round(statistics.median(samples) * 1000, 3), 'min_ms': round(min(samples) * 1000, 3),
            'max_ms': round(max(samples) * 1000, 3)}, result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--runs', type=int, default=5)
    parser.add_argument('--nodes', type=int, nargs='+', default=[8, 16, 1000, 4096])
    parser.add_argument('--rails', type=int, default=8)
    args = parser.parse_args(argv)

    from ansible_collections.hpc.gpu_fabric.plugins.filter.pair_schedule import pair_schedule, pair_schedule_summary

    rails = ['mlx5_%d' % index for index in range(args.rails)]
    cases = []
    for count in args.nodes:
        nodes = ['gpu%04d' % index for index in range(count)]
        hetero = dict((node, rails if index % 2 else rails[:len(rails) // 2]) for index, node in enumerate(nodes))
        full_time, schedule = _timed(lambda: pair_schedule(nodes, rails), args.runs)
        counts = schedule['summary']
        middle = max(1, counts['rounds'] // 2)
        round_time, one = _timed(lambda: pair_schedule(nodes, rails, round=middle, expand=True), args.runs)
        summary_time, summary = _timed(lambda: pair_schedule_summary(nodes, rails), args.runs)
        assert summary == counts and len(one['rounds'][0]['tests']) == counts['tests_per_round'][middle - 1]
        case = {
            'nodes': count, 'rails': len(rails), 'rounds': counts['rounds'], 'pairs': counts['pairs'],
            'tests': counts['tests'], 'tests_in_round': counts['tests_per_round'][middle - 1],
            'full_compact': full_time, 'one_round_expanded': round_time, 'summary_only': summary_time,
            'hetero_full_compact': _timed(lambda: pair_schedule(nodes, hetero), args.runs)[0],
            'hetero_summary_only': _timed(lambda: pair_schedule_summary(nodes, hetero), args.runs)[0],
            'one_node_expanded': _timed(lambda: pair_schedule(nodes, rails, expand=True, node=nodes[count // 3]), args.runs)[0],
        }
        if counts['tests'] <= 100000:
            case['full_expanded'] = _timed(lambda: pair_schedule(nodes, rails, expand=True), args.runs)[0]
        else:
            start = time.perf_counter()
            del schedule
            case['free_full_compact_ms'] = round((time.perf_counter() - start) * 1000, 1)
        cases.append(case)

    largest = max(cases, key=lambda case: case['nodes'])
    result = {
        'python': platform.python_version(),
        'cpus': os.cpu_count(),
        'runs': args.runs,
        'target_s': TARGET_S,
        'cases': cases,
        'target_met': largest['full_compact']['median_ms'] < TARGET_S * 1000,
    }
    print(json.dumps(result, indent=2))
    return 0 if result['target_met'] else 1


if __name__ == '__main__':
    sys.exit(main())
