# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Finding every node (and every pair of nodes) that drags a fleet-wide collective down, in few
runs and fewer rounds: adaptive group testing for an unknown number of bad nodes.

A run over a group of nodes is bad when it holds a bad node (or both nodes of a bad pair). The
search is Hwang's generalized binary splitting (F. K. Hwang, "A method for detecting all
defective members in a population by group testing", J. Amer. Statist. Assoc. 67 (1972)
605-608), made to work without knowing how many nodes are bad and to run in rounds:

- a group known to hold a bad node is split: one half runs; healthy, its nodes are cleared and
  the other half holds the bad node (no run needed to say so); bad, the search goes on in that
  half and the other half goes back to the pool of untested nodes. One bad node among g costs
  ceil(log2 g) runs;
- once the splits are done, the pool is tested in groups of 2^a nodes, a = floor(log2((u - d + 1)
  / d)) for u pool nodes and d the bad nodes expected among them (Hwang's choice); k is not
  known, so d assumes the pool as dense as the whole fleet with the bad nodes found so far.
  Fewer than one expected: the pool runs once together with every cleared node, which also
  proves that the cleared nodes run healthy together. Once the runs show two bad groups or more
  (several bad nodes), the pool does not wait for the splits: its groups run in the same rounds
  as them, sized with every group being split counted as a bad node (232 nodes with 5 bad: 23
  rounds for 42 runs on average instead of 33 for 42; one bad node: unchanged);
- every run of a round is over other nodes (each node in at most one run at once), so the
  wall time is the number of rounds; a group of one node runs with a cleared reference node,
  one from outside the bad group when there is one (else a second reference must agree);
- a node named only by inference runs once more with a reference before it is named, and at
  the end the cleared nodes run together once: a run that is bad although each of its parts
  was healthy is a fault between two nodes, found by a binary search over the group's prefix
  (or named at once from the pairwise benchmark's bad pairs), and named as a pair, not a node.

Nodes the facts already blame (a lower-layer error) are set aside: the others run first and
no run is spent on the blamed ones. Verdicts come from _collective.judge (HEALTHY_RATIO and
WARN_RATIO there): this module only reads whether a run was bad.

The state is a plain dict (it travels between the rounds of a play as a fact); search_next
plans a round, search_update folds its verdicts in, search drives both for tests and benchmarks.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

# The search is plain data (kept in a task's result, JSON): the state, its runs, its tasks and the
# verdicts (_collective.judge) are dicts of JSON values.
State = Dict[str, Any]
Run = Dict[str, Any]
Task = Dict[str, Any]
Verdict = Mapping[str, Any]
# One round's folding: the state's tasks, the indexes of those done, the tasks it adds.
Fold = Dict[str, Any]

BAD = ('warning', 'low', 'corrupt', 'failed')


def bad(verdict: Optional[Mapping[str, Any]]) -> bool:
    """Is a run's verdict (from _collective.judge) not healthy? 'unknown' is not bad: no
    expectation proves nothing against the nodes."""
    return (verdict or {}).get('status') in BAD


def _log2(value: float) -> int:
    return int(math.ceil(math.log(max(value, 1), 2)))


def runs_bound(nodes: int, bad_count: int) -> int:
    """The runs the search aims at for ``bad_count`` bad nodes among ``nodes``:
    k x ceil(log2(N / k)) + 2k (Hwang's bound is about k x log2(N / k) + k; the other k pays for
    not knowing k and for the runs that confirm a node named by inference)."""
    if bad_count < 1:
        return 0
    return bad_count * _log2(float(nodes) / bad_count) + 2 * bad_count


# Findings that blame a node before any run: errors of its own links, GPU<->NIC paths and host
# (the layers below the benchmarks and the collective).
BLAMING_LAYERS = ('ib', 'ib_gpu', 'host')


def blamed(prior: Optional[Iterable[Any]]) -> List[str]:
    """The nodes ``prior`` blames: inventory names as they are, or findings (fabric_report's) of
    severity error in BLAMING_LAYERS, by their host."""
    nodes = []
    for item in prior or []:
        if isinstance(item, dict):
            item = item.get('host') if item.get('severity') == 'error' and item.get('layer') in BLAMING_LAYERS else None
        if isinstance(item, str) and item and item not in nodes:
            nodes.append(item)
    return nodes


def bad_pairs(results: Any) -> List[List[str]]:
    """Pairs of nodes the pairwise benchmark judged bad: ``results`` is a fabric_bench report
    (bench_report: {'pairs': [{server, client, verdict}]}), its list of pairs, or [[a, b], ...]."""
    if isinstance(results, dict):
        results = results.get('pairs')
    found = []
    for item in results if isinstance(results, (list, tuple)) else []:
        if isinstance(item, dict):
            if item.get('verdict') not in ('low', 'failed'):
                continue
            item = [item.get('server'), item.get('client')]
        if isinstance(item, (list, tuple)) and len(item) == 2 and all(isinstance(n, str) and n for n in item) \
                and item[0] != item[1] and sorted(item) not in found:
            found.append(sorted(item))
    return sorted(found)


def search_start(nodes: Sequence[str], reference: Optional[str] = None, prior: Optional[Iterable[Any]] = None,
                 pairs: Optional[Iterable[Sequence[str]]] = None) -> State:
    """The state of a search over ``nodes``, whose run together was not healthy.

    ``reference``: a node known to be good, outside ``nodes`` (optional). ``prior``: nodes the
    facts blame, or the findings that blame them (blamed()): named without a run. ``pairs``: pairs
    of nodes the pairwise benchmark found bad ([[a, b], ...]), named at once when a group is bad
    although each of its parts is healthy.
    """
    nodes = list(dict.fromkeys(nodes))
    named = set(blamed(prior))
    blamed_nodes = [n for n in nodes if n in named]
    rest = [n for n in nodes if n not in blamed_nodes]
    known = sorted(sorted(p) for p in (pairs or []) if len(set(p)) == 2 and set(p) <= set(nodes))
    state: State = {
        'nodes': nodes, 'reference': reference, 'cleared': [], 'culprits': [], 'basis': {}, 'pairs': [],
        'unresolved': [], 'notes': [], 'pool': [], 'tasks': [], 'runs': [], 'rounds': 0, 'known_pairs': known,
        'verified': False, 'paired': False, 'done': False,
        # The role's loop needs a fixed number of rounds: generous (every round makes progress).
        'max_rounds': 10 * _log2(len(nodes)) + 16}
    for node in blamed_nodes:
        state['culprits'].append(node)
        state['basis'][node] = 'facts'
    if len(nodes) < 2:
        state['done'] = True
        state['unresolved'] = list(rest)
    elif blamed_nodes:
        # The others run alone first: healthy, the blamed nodes explain the fleet's run.
        if len(rest) >= 2:
            state['tasks'].append({'kind': 'trial', 'group': rest})
        elif rest and reference:
            state['tasks'].append({'kind': 'split', 'group': rest, 'witness': None})
        else:
            state['unresolved'] = list(rest)
            state['notes'].append('%s could not run without the nodes the facts blame (no reference node)' % ', '.join(rest)
                                  if rest else 'every node is blamed by its facts')
            state['done'] = True
    else:
        state['tasks'].append({'kind': 'split', 'group': rest, 'witness': list(rest)})
    return state


def _references(state: State, busy: Set[str], avoid: Set[str], exclude: Set[str]) -> List[str]:
    """Cleared nodes free this round and not in ``exclude``, those outside ``avoid`` first."""
    pool = ([state['reference']] if state.get('reference') else []) + state['cleared']
    free = [n for n in pool if n not in busy and n not in exclude]
    return [n for n in free if n not in avoid] + [n for n in free if n in avoid]


def _take_reference(state: State, busy: Set[str], avoid: Iterable[str] = (), exclude: Iterable[str] = ()) -> Optional[str]:
    refs = _references(state, busy, set(avoid), set(exclude))
    if not refs:
        return None
    busy.add(refs[0])
    return refs[0]


def _found(state: State) -> int:
    """Bad nodes and pairs the runs (not the facts) have named so far."""
    return len([n for n in state['culprits'] if state['basis'].get(n) != 'facts']) + len(state['pairs'])


def _evidence(state: State) -> int:
    """Disjoint sets of nodes the runs have shown to hold a bad node (or pair): the nodes and pairs
    named, and the groups being split."""
    return _found(state) + len([t for t in state['tasks'] if t['kind'] == 'split'])


def _pool_group_size(state: State, beside: bool = False) -> int:
    """Hwang's group size for the pool: 2^a, a = floor(log2((u - d + 1) / d)) for u pool nodes and
    d the bad nodes expected among them; 0 when fewer than one is expected.

    k is not known. Once the splits are done (``beside`` false), d assumes the pool as dense as
    the fleet with the bad nodes found so far (a lower bound), so each pass over the pool finds
    about as many as were found before it and the group size halves with it; fewer than one
    expected, the pool then runs once with every cleared node. While splits go on (``beside``),
    every group being split counts as a bad node too, over the nodes outside the pool only (the
    pool holds the nodes no run has told anything about yet; floored at an eighth of the fleet,
    so that a search that has cleared few nodes cannot take the pool for nearly all bad): a fleet
    whose first runs show several bad groups gets its pool tested beside the splits, in the same
    rounds, instead of after them (the cost against plain halving and one-by-one testing:
    tests/bench/culprit_search.py)."""
    pool = len(state['pool'])
    searched = len([n for n in state['nodes'] if state['basis'].get(n) != 'facts'])
    if beside:
        expected = float(_evidence(state)) * pool / max(searched - pool, searched / 8.0, 1)
    else:
        expected = float(max(_found(state), 1)) * pool / max(searched, 1)
    if pool < 1 or expected < 1.0:
        return 0
    size: int = 2 ** int(math.floor(math.log((pool - expected + 1) / expected, 2)))
    return max(2, min(pool, size))


def _with_references(state: State, runs: List[Run], busy: Set[str]) -> List[Run]:
    """A group of one node runs with a cleared node (busy in nothing else this round), one from
    outside the group's witness when there is one: it cannot be the partner of a bad pair there."""
    planned = []
    for run in runs:
        avoid, exclude = run.pop('avoid'), run.pop('exclude', ())
        if len(run['hosts']) == 1:
            ref = _take_reference(state, busy, avoid, exclude)
            if ref is None:
                continue
            run['hosts'].append(ref)
        planned.append(run)
    return planned


def _task_runs(state: State, busy: Set[str]) -> List[Run]:
    """One run per task: a trial of its group, a half (or the last node) of a group being split, a pair probe."""
    runs = []
    for index, task in enumerate(state['tasks']):
        if task['kind'] == 'trial':
            group, step = task['group'], 'trial'
        elif task['kind'] == 'split':
            group = task['group'] if len(task['group']) == 1 else task['group'][:len(task['group']) // 2]
            step = 'confirm' if len(task['group']) == 1 else 'split'
        else:
            group, step = task['probe'], 'pair'
        busy.update(group)
        runs.append({'group': list(group), 'hosts': list(group), 'task': index, 'step': step,
                     'avoid': task.get('witness') or [], 'exclude': task.get('used') or []})
    return _with_references(state, runs, busy)


def _pool_runs(state: State, planned: List[Run], busy: Set[str]) -> Tuple[List[Run], Optional[List[Run]]]:
    """The pool's runs this round beside ``planned``; or, as the second item, the one 'final' run that
    replaces the whole round."""
    # The pool runs beside the splits when they show at least two bad groups and it is expected
    # to hold a bad node (each node is in one run at a time, so this costs no round); else it
    # waits for them (what they find tells how many bad nodes it holds), or runs when they cannot
    # (no cleared node yet to run a single node with). One bad group is what a fleet with a single
    # bad node shows: its pool waits, and the search stays at ceil(log2 N) + 2 runs.
    size = _pool_group_size(state, beside=True) if state['pool'] and planned and _evidence(state) >= 2 else 0
    if not (state['pool'] and (size or not planned)):
        return [], None
    size = size or _pool_group_size(state)
    group = state['pool'] + [n for n in state['cleared'] if n not in _pair_nodes(state)]
    if not size and not state['tasks'] and len(group) >= 2:
        # Fewer than one expected: the pool and every cleared node in one run, which also
        # proves that the cleared nodes run healthy together.
        return [], [{'group': group, 'hosts': list(group), 'task': None, 'step': 'final'}]
    size = size or len(state['pool'])
    runs = []
    for start in range(0, len(state['pool']), size):
        group = state['pool'][start:start + size]
        busy.update(group)
        runs.append({'group': group, 'hosts': list(group), 'task': None, 'step': 'pool', 'avoid': []})
    return _with_references(state, runs, busy), None


def _fallback_runs(state: State) -> List[Run]:
    """When nothing else can run: the suspects in pairs (no cleared node yet), or every cleared node together once."""
    if state['tasks'] and not state.get('paired'):
        # No cleared node to run a single suspect with: every half was bad so far (many bad
        # nodes). The suspects run in pairs; a healthy pair gives the reference nodes.
        left = [n for t in state['tasks'] for n in t.get('group') or []]
        return [{'group': left[i:i + 2], 'hosts': left[i:i + 2], 'task': None, 'step': 'pairs'}
                for i in range(0, len(left) - 1, 2)]
    if not state['tasks'] and not state['pool'] and not state['verified']:
        group = [n for n in state['cleared'] if n not in _pair_nodes(state)]
        if len(group) >= 2:
            return [{'group': group, 'hosts': list(group), 'task': None, 'step': 'verify'}]
    return []


def search_next(state: State) -> List[Run]:
    """The runs of the next round: [{'group': [suspects], 'hosts': [hosts to run on], 'task': i,
    'step': ...}], over disjoint hosts. Empty when the search is done."""
    if state['done']:
        return []
    busy: Set[str] = set()
    planned = _task_runs(state, busy)
    pool, final = _pool_runs(state, planned, busy)
    if final:
        return final
    planned += pool
    return planned or _fallback_runs(state)


def _pair_nodes(state: State) -> Set[str]:
    return set(n for pair in state['pairs'] for n in pair['nodes'])


def _clear(state: State, nodes: Iterable[str]) -> None:
    state['cleared'].extend(n for n in nodes if n not in state['cleared'] and n != state.get('reference'))


def _name(state: State, node: str, basis: str) -> None:
    if node not in state['culprits']:
        state['culprits'].append(node)
        state['basis'][node] = basis


def _pair_task(state: State, witness: Sequence[str]) -> Optional[Task]:
    """A group ran bad although no node of it is bad alone: find the pair (known, or searched)."""
    nodes = set(witness)
    for pair in state['known_pairs']:
        if set(pair) <= nodes and pair not in [p['nodes'] for p in state['pairs']]:
            state['pairs'].append({'nodes': list(pair), 'basis': 'pairwise benchmark'})
            state['verified'] = False
            return None
    order = list(witness)
    if len(order) < 2:
        return None
    if len(order) == 2:
        state['pairs'].append({'nodes': sorted(order), 'basis': 'runs'})
        state['verified'] = False
        return None
    # Smallest bad prefix: its last node is in the pair; a prefix of one node is healthy alone.
    task = {'kind': 'pair', 'order': order, 'lo': 1, 'hi': len(order), 'last': None, 'phase': 'prefix'}
    return _pair_probe(state, task)


def _pair_probe(state: State, task: Task) -> Optional[Task]:
    """The next run of a pair search, or None when it has named the pair."""
    order = task['order']
    while task['hi'] - task['lo'] > 1:
        middle = (task['lo'] + task['hi']) // 2
        probe = order[:middle] if task['phase'] == 'prefix' else order[:middle] + [task['last']]
        if len(probe) >= 2:
            task['probe'] = probe
            task['middle'] = middle
            return task
        task['lo'] = middle
    if task['phase'] == 'prefix':
        last = order[task['hi'] - 1]
        task.update(phase='partner', last=last, order=order[:task['hi'] - 1], lo=0, hi=task['hi'] - 1)
        return _pair_probe(state, task)
    if task['phase'] == 'partner':
        pair = sorted([order[task['hi'] - 1], task['last']])
        if task['hi'] > 1:
            # The bad run held more than these two: run the pair alone before naming it.
            task.update(phase='confirm', probe=pair, pair=pair)
            return task
        task['pair'] = pair
    state['pairs'].append({'nodes': task['pair'], 'basis': 'runs'})
    state['verified'] = False
    return None


def _split_task(group: Sequence[str], witness: Optional[Sequence[str]] = None) -> Task:
    return {'kind': 'split', 'group': list(group), 'witness': list(group if witness is None else witness)}


def _on_trial(state: State, run: Run, failed: bool, fold: Fold) -> None:
    fold['drop'].add(run['task'])
    if failed:
        fold['new'].append(_split_task(run['group']))
    else:
        _clear(state, run['group'])
        state['verified'] = True


def _on_pool(state: State, run: Run, failed: bool, fold: Fold) -> None:
    if failed and len(run['group']) == 1:
        _name(state, run['group'][0], 'runs')
    elif failed:
        fold['new'].append(_split_task(run['group']))
    else:
        _clear(state, run['group'])
    state['pool'] = [n for n in state['pool'] if n not in run['group']]


def _on_split_one_bad(state: State, run: Run, task: Task, fold: Fold) -> None:
    """A single node of a split ran bad beside its reference."""
    node, ref = run['group'][0], run['hosts'][-1]
    state['pool'].extend(n for n in task['group'] if n not in run['group'])
    used = (task.get('used') or []) + [ref]
    if ref in (task.get('witness') or ()) and len(used) < 2:
        # The reference came from the bad group itself: node and reference may be a
        # bad pair. Bad with a second reference too, the node is bad alone.
        task.update(group=[node], used=used)
    else:
        _name(state, node, 'runs')
        fold['drop'].add(run['task'])


def _on_split_healthy(state: State, run: Run, task: Task, fold: Fold) -> None:
    """A part of a split ran healthy."""
    _clear(state, run['group'])
    rest = [n for n in task['group'] if n not in run['group']]
    if rest:
        # The group holds a bad node and this half is healthy: the other half holds it.
        task['group'] = rest
        return
    # The group's run was bad, yet every part of it runs healthy: no node of the
    # witness is bad alone, two of them are bad together.
    fold['drop'].add(run['task'])
    if task.get('used'):
        # Bad with the first reference, healthy with another: that pair.
        state['pairs'].append({'nodes': sorted([run['group'][0], task['used'][0]]), 'basis': 'runs'})
        state['verified'] = False
    elif task.get('witness'):
        pair = _pair_task(state, task['witness'])
        if pair:
            fold['new'].append(pair)


def _on_split(state: State, run: Run, failed: bool, fold: Fold) -> None:
    task = fold['tasks'][run['task']]
    if failed and len(run['group']) == 1:
        _on_split_one_bad(state, run, task, fold)
    elif failed:
        state['pool'].extend(n for n in task['group'] if n not in run['group'])
        task.update(group=list(run['group']), witness=list(run['group']))
    else:
        _on_split_healthy(state, run, task, fold)


def _on_pair(state: State, run: Run, failed: bool, fold: Fold) -> None:
    task = fold['tasks'][run['task']]
    if task['phase'] == 'confirm':
        if failed:
            _pair_probe(state, task)
        else:
            state['notes'].append('%s ran bad together, %s as a pair ran healthy: not reproduced'
                                  % (', '.join(task['order'] + [task['last']]), ' and '.join(task['pair'])))
        fold['drop'].add(run['task'])
        return
    if failed:
        task['hi'] = task['middle']
    else:
        task['lo'] = task['middle']
    if _pair_probe(state, task) is None:
        fold['drop'].add(run['task'])


def _on_pairs(state: State, run: Run, failed: bool, fold: Fold) -> None:
    fold['drop'].update(range(len(fold['tasks'])))
    if failed:
        fold['new'].append(_split_task(run['group']))
    else:
        _clear(state, run['group'])


def _on_final(state: State, run: Run, failed: bool, fold: Fold) -> None:
    if failed:
        fold['new'].append(_split_task(state['pool'], run['group']))
    else:
        _clear(state, run['group'])
        state['verified'] = True
    state['pool'] = []


def _on_verify(state: State, run: Run, failed: bool, fold: Fold) -> None:
    if not failed:
        state['verified'] = True
        return
    pair = _pair_task(state, run['group'])
    if pair:
        fold['new'].append(pair)
    elif not state['pairs'] or _pair_nodes(state) & set(run['group']):
        state['notes'].append('the cleared nodes ran bad together: not explained')
        state['verified'] = True


# What each step's verdict decides: search_update hands each run to the rule of its step.
_ON_STEP = {'trial': _on_trial, 'pool': _on_pool, 'split': _on_split, 'confirm': _on_split, 'pair': _on_pair,
            'pairs': _on_pairs, 'final': _on_final, 'verify': _on_verify}


def _copy(state: State) -> State:
    return dict(state, cleared=list(state['cleared']), culprits=list(state['culprits']), basis=dict(state['basis']),
                pairs=list(state['pairs']), unresolved=list(state['unresolved']), notes=list(state['notes']),
                pool=list(state['pool']), runs=list(state['runs']), tasks=[dict(t) for t in state['tasks']])


def _close_round(state: State, runs: Sequence[Run]) -> None:
    """After a round's verdicts: what could not run is unresolved; done when nothing is left, or at max_rounds."""
    if not runs:
        # Nothing could run (no reference node for a single suspect): what is left is unresolved.
        left = [n for t in state['tasks'] for n in t.get('group') or []] + state['pool']
        state['unresolved'].extend(n for n in left if n not in state['unresolved'])
        state['tasks'], state['pool'] = [], []
        state['verified'] = True
        if left:
            state['notes'].append('no healthy node to run %s with: give a reference node' % ', '.join(left))
    state['done'] = not state['tasks'] and not state['pool'] and state['verified']
    if state['rounds'] >= state['max_rounds'] and not state['done']:
        left = [n for t in state['tasks'] for n in t.get('group') or t.get('order') or []] + state['pool']
        state['unresolved'].extend(n for n in left if n not in state['unresolved'] and n not in state['cleared'])
        state['notes'].append('the search stopped after %d rounds' % state['rounds'])
        state['done'] = True


def search_update(state: State, runs: Sequence[Run], verdicts: Optional[Sequence[Optional[Verdict]]]) -> State:
    """Fold the verdicts of search_next's runs into the state (a new dict)."""
    state = _copy(state)
    if state['done']:
        return state
    state['rounds'] += 1 if runs else 0
    verdicts = list(verdicts or [])
    tasks = state['tasks']
    fold = {'tasks': tasks, 'drop': set(), 'new': []}
    for run, verdict in zip(runs, verdicts + [None] * (len(runs) - len(verdicts))):
        state['runs'].append({'hosts': run['hosts'], 'group': run['group'], 'step': run['step'],
                              'round': state['rounds'], 'status': (verdict or {}).get('status'),
                              'ratio': (verdict or {}).get('ratio')})
        rule = _ON_STEP.get(run['step'])
        if rule is not None:
            rule(state, run, bad(verdict), fold)
    if any(r['step'] == 'pairs' for r in runs):
        paired = set(n for r in runs for n in r['group'])
        state['pool'].extend(n for t in tasks for n in t.get('group') or [] if n not in paired)
        state['paired'] = all(bad(v) for v in verdicts)
    state['tasks'] = [t for i, t in enumerate(tasks) if i not in fold['drop']] + fold['new']
    _close_round(state, runs)
    return state


def summary(state: State) -> Dict[str, Any]:
    """What a report needs: culprits (with their basis), pairs, unresolved, runs and rounds."""
    return {'culprits': list(state['culprits']), 'basis': dict(state['basis']), 'pairs': list(state['pairs']),
            'unresolved': list(state['unresolved']), 'runs': len(state['runs']), 'rounds': state['rounds'],
            'notes': list(state['notes'])}


def search(nodes: Sequence[str], run: Callable[[List[str]], Optional[Verdict]], reference: Optional[str] = None, prior: Optional[Iterable[Any]] = None,
           pairs: Optional[Iterable[Sequence[str]]] = None) -> State:
    """Drive the search with ``run(hosts) -> verdict`` (for tests and benchmarks)."""
    state = search_start(nodes, reference, prior, pairs)
    while not state['done']:
        runs = search_next(state)
        state = search_update(state, runs, [run(r['hosts']) for r in runs])
    return state
