# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""How many collective runs, and rounds of runs, the culprit search needs on synthetic fleets.

A run over a group of nodes is bad when it holds a bad node or both nodes of a bad pair; nothing
else is simulated (every run is judged right: the judge's thresholds are _collective's, and
their noise margin is what the functional tests check on the simulator). For N in {16, 64, 232,
1024} nodes and k in {0, 1, 2, 5, 10} bad nodes (k <= N), TRIALS random placements each, plus
pair-fault cases (one bad pair, with 0, 1 or 2 bad nodes beside it), three strategies:

  rounds    - plugins/plugin_utils/bench/_culprit_search.py, the default: the fewest rounds (every node
              in every round; bad groups split eight ways, small ones node by node beside a
              healthy reference, pairs by halving both sides of every candidate cross at once);
  runs      - plugins/plugin_utils/bench/_group_search.py (Hwang's adaptive group testing, k unknown):
              the fewest runs, for clusters where node time is billed;
  halving   - the search this replaced (halve every bad group, test both halves; a group of
              two or three nodes node by node with a cleared reference; pairs of suspects when
              every half is bad), kept here as the baseline;
  one_by_one - each node run with one known-good reference node, one run at a time.

The fleet run that finds the fleet bad is not counted (every strategy starts after it; with
k = 0 it is healthy and no search runs). One JSON line per (N, k, strategy, pair faults):
nodes, bad, pairs, strategy, trials, mean_runs, max_runs, mean_rounds, max_rounds,
false_culprits (healthy nodes named, summed over the trials), misses (bad nodes, and bad
pairs, not named), bound (k x ceil(log2(N / k)) + 2k, _group_search.runs_bound), runs_limit (3 x
the bound, a bad pair's two nodes counted among k), pair_floor_rounds (with a bad pair: the fewest
mean rounds any strategy can reach, log2(N - 1): _culprit_search.pair_rounds_floor), default
(true on the default strategy's rows).

Usage: python -m tests.bench.culprit_search [--trials N] [--nodes N ...]   (from the checkout)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
try:
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _group_search
except ImportError:     # run from the checkout without PYTHONPATH: the checkout's own link to itself
    sys.path.insert(0, os.path.join(REPO, '.collections'))
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _group_search
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _culprit_search

NODES = (16, 64, 232, 1024)
BAD = (0, 1, 2, 5, 10)
PAIR_BAD = (0, 1, 2)
TRIALS = 100


def fleet(bad, pairs):
    """run(hosts) -> verdict for a fleet with these bad nodes and bad pairs."""
    bad = set(bad)

    def run(hosts):
        hosts = set(hosts)
        hit = bool(hosts & bad) or any(a in hosts and b in hosts for a, b in pairs)
        return {'status': 'low' if hit else 'ok', 'ratio': 0.3 if hit else 0.95}
    return run


# ---------------------------------------------------------------------------- the old halving search

def _halving_next(state):
    if state['done']:
        return []
    runs, reference, small = [], (state['cleared'][0] if state['cleared'] else None), []
    for group in state['suspects']:
        if len(group) >= 4:
            middle = (len(group) + 1) // 2
            runs.extend({'group': half, 'hosts': list(half)} for half in (group[:middle], group[middle:]))
        elif reference is not None:
            runs.extend({'group': [node], 'hosts': [node, reference]} for node in group)
        else:
            small.extend(group)
    if small and not state['paired']:
        runs.extend({'group': small[i:i + 2], 'hosts': small[i:i + 2]} for i in range(0, len(small) - 1, 2))
    return runs


def _halving_update(state, runs, verdicts):
    state = dict(state, cleared=list(state['cleared']), culprits=list(state['culprits']), unresolved=list(state['unresolved']))
    tested, suspects = set(), []
    for run, verdict in zip(runs, verdicts):
        tested.update(run['group'])
        if not _group_search.bad(verdict):
            state['cleared'].extend(n for n in run['group'] if n not in state['cleared'])
        elif len(run['group']) == 1:
            state['culprits'].append(run['group'][0])
        else:
            suspects.append(run['group'])
    for group in state['suspects']:
        rest = [n for n in group if n not in tested]
        if rest:
            suspects.append(rest)
    if not runs:
        state['unresolved'].extend(n for group in suspects for n in group)
        suspects = []
    if runs and all(len(r['hosts']) == len(r['group']) == 2 for r in runs) and all(_group_search.bad(v) for v in verdicts) \
            and not state['cleared']:
        state['paired'] = True
    state['suspects'], state['done'] = suspects, not suspects
    return state


def halving(nodes, run):
    """The search before adaptive group testing: every run of a round at once."""
    state = {'suspects': [list(nodes)], 'cleared': [], 'culprits': [], 'unresolved': [], 'paired': False, 'done': False}
    runs_done = rounds = 0
    while not state['done'] and rounds < 200:
        runs = _halving_next(state)
        state = _halving_update(state, runs, [run(r['hosts']) for r in runs])
        runs_done += len(runs)
        rounds += 1
    return {'culprits': state['culprits'], 'pairs': [], 'runs': runs_done, 'rounds': rounds}


def one_by_one(nodes, run):
    """Each node with a known-good reference node (outside the fleet), one run at a time."""
    culprits = [node for node in nodes if _group_search.bad(run([node, '__reference__']))]
    return {'culprits': culprits, 'pairs': [], 'runs': len(nodes), 'rounds': len(nodes)}


def _strategy(name):
    def search(nodes, run):
        state = _culprit_search.search(nodes, run, strategy=name)
        return {'culprits': state['culprits'], 'pairs': [p['nodes'] for p in state['pairs']], 'runs': len(state['runs']),
                'rounds': state['rounds']}
    return search


STRATEGIES = (('rounds', _strategy('rounds')), ('runs', _strategy('runs')), ('halving', halving), ('one_by_one', one_by_one))


def measure(count, bad_count, pair_count, strategy, trials, seed=0):
    """One line of the table: ``trials`` random placements of the faults among ``count`` nodes."""
    name, search = strategy
    runs, rounds, false, misses = [], [], 0, 0
    for trial in range(trials):
        rng = random.Random('%d/%d/%d/%d/%d' % (seed, count, bad_count, pair_count, trial))
        nodes = ['n%04d' % i for i in range(count)]
        picked = rng.sample(nodes, bad_count + 2 * pair_count)
        bad, rest = set(picked[:bad_count]), picked[bad_count:]
        pairs = [sorted(rest[i:i + 2]) for i in range(0, len(rest), 2)]
        if not bad and not pairs:
            # A healthy fleet: its own run is healthy and no search starts.
            runs.append(0)
            rounds.append(0)
            continue
        found = search(nodes, fleet(bad, pairs))
        runs.append(found['runs'])
        rounds.append(found['rounds'])
        false += len(set(found['culprits']) - bad)
        misses += len(bad - set(found['culprits'])) + len([p for p in pairs if p not in [sorted(q) for q in found['pairs']]])
    return {'nodes': count, 'bad': bad_count, 'pairs': pair_count, 'strategy': name, 'trials': trials,
            'mean_runs': round(sum(runs) / float(trials), 2), 'max_runs': max(runs),
            'mean_rounds': round(sum(rounds) / float(trials), 2), 'max_rounds': max(rounds),
            'false_culprits': false, 'misses': misses, 'bound': _group_search.runs_bound(count, bad_count),
            # The runs the default strategy may spend: 3 x the bound, with a pair's two nodes counted as bad.
            'runs_limit': 3 * _group_search.runs_bound(count, bad_count + 2 * pair_count),
            # Where a pair is bad: the fewest mean rounds any strategy can reach (a proof, not a measurement).
            'pair_floor_rounds': round(_culprit_search.pair_rounds_floor(count), 2) if pair_count else None,
            'default': name == _culprit_search.DEFAULT_STRATEGY}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--trials', type=int, default=TRIALS)
    parser.add_argument('--nodes', type=int, nargs='*', default=list(NODES))
    args = parser.parse_args(argv)
    start = time.time()
    for count in args.nodes:
        cases = [(k, 0) for k in BAD if k <= count] + [(k, 1) for k in PAIR_BAD if k + 2 <= count]
        for bad_count, pair_count in cases:
            for strategy in STRATEGIES:
                print(json.dumps(measure(count, bad_count, pair_count, strategy, args.trials), sort_keys=True))
                sys.stdout.flush()
    sys.stderr.write('%.1f s\n' % (time.time() - start))
    return 0


if __name__ == '__main__':
    sys.exit(main())
