# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The culprit search in the fewest rounds: which nodes (and which pairs of nodes) drag a
fleet-wide collective down, when the time a user waits is what counts.

The runs of a round run at once on disjoint nodes, so a search takes its number of rounds times
one run (one to three minutes for an nccl-tests sweep); during a validation the nodes are
reserved anyway. So every node works in every round:

- a group known to hold a fault (the fleet, at first) is split into ARITY parts that all run in
  the next round (no half is cleared or blamed by inference, so nothing waits for a
  confirmation); a group of SINGLES_AT nodes or fewer runs node by node, each node beside a
  healthy reference node (one that ran healthy in a group the node was not in). A bad node
  among N is named in ceil(log_ARITY(N / SINGLES_AT)) + 1 rounds: 3 for 232 or 1,024 nodes.
  Until some node is known healthy, the parts have two nodes or more (a collective over one
  node measures its own GPUs, not the fabric);
- a bad group whose parts all ran healthy holds no bad node: two of its nodes are bad only
  together (a pair fault). It is halved, both halves run; a bad half holds the pair; two healthy
  halves mean one node of the pair in each: a candidate cross. Each round halves both sides of
  every cross and runs its two diagonals (X1+Y1, X2+Y2) at once; a bad diagonal is the new cross,
  and when none is bad the other diagonals (X1+Y2, X2+Y1: disjoint) are the crosses of the next
  round, all halved in parallel. Past PAIR_RUNS runs a round, diagonals of different crosses
  share a run. A pair among N is named in about log2(N) + 2 rounds; no strategy averages fewer
  than log2(N - 1) (pair_rounds_floor). A pair left by elimination is named and runs alone in
  the next round, beside whatever else runs; a pair the pairwise benchmark found bad is named
  at once;
- each named node runs again beside a second reference as soon as one is free: bad only beside
  its first reference, the two are a pair, not a bad node;
- once nothing is left to split, every cleared node runs together once (a pair between two
  groups that each ran healthy shows there).

The cost in runs stays within 3 x (k x ceil(log2(N / k)) + 2k) for k bad nodes among N
(tests/bench/culprit_search.py). Where node time is billed, strategy 'runs'
(plugin_utils/bench/_group_search.py, Hwang's generalized binary splitting) needs about a third of the
runs and several times the rounds.

Verdicts come from _collective.judge: this module only asks whether a run was bad
(_group_search.bad). The state is a plain dict; next_round plans a round, update folds its
verdicts in, search drives both for tests and benchmarks. Both strategies share this interface:
start() picks one, the other functions follow the state's 'strategy'.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _collective
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _group_search
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench._group_search import Run, State, Verdict

# An item of the search (a group to test, a bad group, a pair search within a group or across
# crosses), and the runs of one item this round with whether each was bad.
Item = Dict[str, Any]
Results = List[Tuple[Run, bool]]

STRATEGIES = ('rounds', 'runs')
DEFAULT_STRATEGY = 'rounds'

# Parts a bad group is split into per round, and the size at which a group runs node by node.
# 8 and 8: 3 rounds to a bad node among 1,024 (1,024 -> 128 -> 16 -> 2 -> 1 would be 4 with
# halving parts), and for one bad node among 1,024, 8 + 8 + 16 runs and the last round's 2,
# inside 3 x (ceil(log2 1024) + 2) = 36 (tests/bench/culprit_search.py prints both).
ARITY = 8
SINGLES_AT = 16
# The runs one pair search runs in a round at most. Each round halves both sides of every candidate
# cross and runs the two diagonals of each (X1+Y1, X2+Y2); the crosses left double when none is bad
# (X1+Y2 and X2+Y1), so beyond this, diagonals of different crosses share a run (a bad run keeps
# the diagonals it held). For one pair among 1,024 nodes, after the halves (the expectation over
# the placements, sides halved exactly): 10.7 rounds and 37 runs with 8; 10.6 and 42 with 16;
# 10.5 and 53 with no limit. 8 keeps the most runs a search can take nearer its runs bound
# (tests/bench/culprit_search.py max_runs) for 0.1 round; pair_rounds_floor is 10.0.
PAIR_RUNS = 8


def pair_rounds_floor(count: int) -> float:
    """The fewest rounds any search can average to name one bad pair among ``count`` nodes
    (equally likely anywhere): told one node of the pair, each round still answers one yes/no
    question - is the other node in that node's run? - and telling one of count - 1 equally
    likely nodes apart takes log2(count - 1) answers on average (Shannon's source coding
    theorem; a decision tree is a prefix code). 10.0 for 1,024 nodes, 7.85 for 232."""
    return math.log(count - 1, 2) if count > 2 else 0.0


def _log2(value: float) -> int:
    return int(math.ceil(math.log(max(value, 1), 2)))


def start(nodes: Sequence[str], reference: Optional[str] = None, prior: Optional[Iterable[Any]] = None, pairs: Optional[Iterable[Sequence[str]]] = None,
          strategy: str = DEFAULT_STRATEGY) -> State:
    """The state of a search over ``nodes``, whose run together was not healthy.

    ``reference``: a node known to be good, outside ``nodes`` (optional). ``prior``: nodes the
    facts blame, or the findings that blame them (_group_search.blamed): named without a run.
    ``pairs``: pairs of nodes the pairwise benchmark found bad ([[a, b], ...]), named at once
    when a group is bad although each of its parts is healthy. ``strategy``: 'rounds' (this
    module, the default) or 'runs' (_group_search).
    """
    if strategy not in STRATEGIES:
        raise ValueError('strategy must be one of %s, not %r' % (', '.join(STRATEGIES), strategy))
    # The reference node is known healthy and runs beside suspects: never a suspect itself (it
    # would be in two runs of one round).
    nodes = [n for n in nodes if n != reference]
    if strategy == 'runs':
        state = _group_search.search_start(nodes, reference, prior, pairs)
        state.update(strategy='runs', seconds=0.0)
        return state
    nodes = list(dict.fromkeys(nodes))
    named = set(_group_search.blamed(prior))
    blamed = [n for n in nodes if n in named]
    rest = [n for n in nodes if n not in blamed]
    known = sorted(sorted(p) for p in (pairs or []) if len(set(p)) == 2 and set(p) <= set(nodes))
    state = {'strategy': 'rounds', 'nodes': nodes, 'reference': reference, 'cleared': [], 'culprits': [], 'basis': {},
             'pairs': [], 'unresolved': [], 'notes': [], 'items': [], 'runs': [], 'rounds': 0, 'seconds': 0.0,
             'known_pairs': known, 'first_reference': {}, 'confirmed': [], 'verified': False, 'done': False,
             # Pairs named by elimination, to run alone (_plan_checks).
             'pair_checks': [],
             # The action's loop bound: each round halves a pair's sides at least (2 log2 N covers a
             # pair and bad nodes beside it, with room).
             'max_rounds': 2 * _log2(len(nodes)) + 8}
    for node in blamed:
        state['culprits'].append(node)
        state['basis'][node] = 'facts'
    if len(nodes) < 2:
        state['unresolved'] = list(rest)
        state['done'] = True
    elif blamed:
        # The others run alone first: healthy, the blamed nodes explain the fleet's run.
        if len(rest) >= 2 or (rest and reference):
            state['items'].append({'kind': 'trial', 'group': rest})
        else:
            state['unresolved'] = list(rest)
            state['notes'].append('%s could not run without the nodes the facts blame (no reference node)' % ', '.join(rest)
                                  if rest else 'every node is blamed by its facts')
            state['done'] = True
    else:
        state['items'].append({'kind': 'bad', 'group': rest})
    return state


# ---------------------------------------------------------------------------- planning a round

def _chunks(group: List[str], count: int) -> List[List[str]]:
    """``group`` in ``count`` parts of sizes that differ by one at most, in its order."""
    count = max(1, min(count, len(group)))
    size, extra = divmod(len(group), count)
    parts, at = [], 0
    for index in range(count):
        end = at + size + (1 if index < extra else 0)
        parts.append(group[at:end])
        at = end
    return parts


def _halves(group: List[str]) -> Tuple[List[str], List[str]]:
    middle = (len(group) + 1) // 2
    return group[:middle], group[middle:]


class _Planner(object):
    """One round's runs over disjoint nodes; references drawn from the healthy nodes free this round."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.busy: Set[str] = set()
        self.runs: List[Run] = []
        refs = ([state['reference']] if state.get('reference') else []) + state['cleared']
        # Healthy nodes a pair search still runs are no reference: they are in its runs this round.
        searched = set(n for i in state['items'] if i['kind'] in ('within', 'crosses') for n in _item_nodes(i))
        self.free = [n for n in refs if n not in _pair_nodes(state) and n not in searched]

    def available(self) -> int:
        return len([n for n in self.free if n not in self.busy])

    def references(self, count: int, avoid: Iterable[str] = ()) -> Optional[List[str]]:
        """``count`` free healthy nodes (none of ``avoid``), or None when there are fewer."""
        avoid = set(avoid)
        picked = [n for n in self.free if n not in self.busy and n not in avoid][:count]
        if len(picked) < count:
            return None
        self.busy.update(picked)
        return picked

    def add(self, group: Sequence[str], item: Optional[int], step: str, ref: Optional[str] = None) -> Run:
        hosts = list(group) + ([ref] if ref else [])
        self.busy.update(hosts)
        run = {'group': list(group), 'hosts': hosts, 'task': item, 'step': step}
        self.runs.append(run)
        return run


def _plan_bad(planner: _Planner, index: int, item: Item) -> None:
    group = item['group']
    if len(group) <= SINGLES_AT:
        refs = planner.references(min(len(group), planner.available()))
        if refs:
            # As many nodes as there are healthy nodes free; the others run next round.
            for node, ref in zip(group, refs):
                planner.add([node], index, 'single', ref)
            return
        if len(group) < 4:
            return  # waits for a healthy node to run beside (as a part of its own it would run as it did)
        # No healthy node yet: parts of two (three where one would be left alone).
        parts = _chunks(group, len(group) // 2)
    else:
        parts = _chunks(group, ARITY)
    for part in parts:
        if len(part) == 1:
            refs = planner.references(1, avoid=group)
            if refs:
                planner.add(part, index, 'single', refs[0])
            continue
        planner.add(part, index, 'split')


def _plan_pair(planner: _Planner, index: int, item: Item) -> None:
    if item['kind'] == 'within':
        for half in _halves(item['group']):
            if len(half) >= 2:
                planner.add(half, index, 'halves')
        return
    # The diagonals of every candidate cross (a cross of two nodes runs whole: it is one candidate
    # pair), at most PAIR_RUNS runs: the two diagonals of one cross never share a run (together
    # they would hold its other diagonals too), which dealing them out in turn ensures.
    diagonals = []
    for x, y in item['blocks']:
        if len(x) == 1 and len(y) == 1:
            diagonals.append([x, y])
            continue
        (x1, x2), (y1, y2) = _halves(x), _halves(y)
        diagonals.extend([a, b] for a, b in ((x1, y1), (x2, y2)) if a and b)
    count = min(len(diagonals), PAIR_RUNS)
    for at in range(count):
        held = diagonals[at::count]
        run = planner.add([n for x, y in held for n in x + y], index, 'cross')
        run['blocks'] = held


def _plan_checks(planner: _Planner) -> None:
    """Each named node beside a second reference, and each pair named by elimination alone, as soon
    as they are named: in the rounds the search runs anyway, not in one of their own at the end."""
    state = planner.state
    for node in state['culprits']:
        if state['basis'].get(node) != 'runs' or node in state['confirmed'] or node in planner.busy:
            continue
        first = state['first_reference'].get(node)
        ref = planner.references(1, avoid=[first] if first else [])
        if ref:
            planner.add([node], None, 'confirm', ref[0])
    for pair in state['pair_checks']:
        if not set(pair) & planner.busy:
            planner.add(pair, None, 'confirm_pair')


def _plan_final(planner: _Planner) -> None:
    """Every cleared node the checks leave free, together (a pair among them shows)."""
    state = planner.state
    if not state['verified']:
        eligible = [n for n in state['cleared'] if n not in _pair_nodes(state)]
        group = [n for n in eligible if n not in planner.busy]
        if len(group) >= 2:
            # Beside the confirmations, the nodes they leave free: a pair among those shows a round
            # earlier, and a further round runs every healthy node together.
            planner.add(group, None, 'verify' if len(group) == len(eligible) else 'verify_part')


def next_round(state: State) -> List[Run]:
    """The runs of the next round: [{'group': [suspects], 'hosts': [hosts to run on], 'task': i,
    'step': ...}], over disjoint hosts. Empty when the search is done."""
    if state.get('strategy') == 'runs':
        return _group_search.search_next(state)
    if state['done']:
        return []
    planner = _Planner(state)
    for index, item in enumerate(state['items']):
        if item['kind'] == 'trial':
            group = item['group']
            ref = planner.references(1) if len(group) == 1 else None
            if len(group) >= 2 or ref:
                planner.add(group, index, 'trial', ref[0] if ref else None)
        elif item['kind'] == 'bad':
            _plan_bad(planner, index, item)
        else:
            _plan_pair(planner, index, item)
    _plan_checks(planner)
    if not state['items']:
        _plan_final(planner)
    elif not any(i['kind'] in ('within', 'crosses') for i in state['items']):
        # While bad nodes are searched: the healthy nodes this round leaves free run together, when
        # they have not all run together yet. A pair bad only together among them is searched from
        # the next round on, beside the rest, instead of after it (the final run of every healthy
        # node together is still to come). Once only while a single bad group is searched: one
        # bad node among N spends its whole runs bound already (k = 1: 3 x (log2 N + 2) runs,
        # tests/bench/culprit_search.py).
        free = [n for n in planner.free if n not in planner.busy]
        again = len([i for i in state['items'] if i['kind'] == 'bad']) > 1 or not any(r['step'] == 'verify_early' for r in state['runs'])
        if len(free) >= 2 and again and not _ran_healthy(state, free):
            planner.add(free, None, 'verify_early')
    return planner.runs


# ---------------------------------------------------------------------------- folding the verdicts

def _item_nodes(item: Item) -> List[str]:
    """Every node an item of the search holds (a group, or the sides of its crosses)."""
    if item['kind'] == 'crosses':
        return [n for x, y in item['blocks'] for n in x + y]
    return list(item['group'])


def _pair_nodes(state: State) -> Set[str]:
    return set(n for pair in state['pairs'] for n in pair['nodes'])


def _clear(state: State, nodes: Iterable[str]) -> None:
    state['cleared'].extend(n for n in nodes if n not in state['cleared'] and n != state.get('reference')
                            and n not in state['culprits'])


def _name_pair(state: State, nodes: Iterable[str], basis: str) -> None:
    nodes = sorted(nodes)
    if nodes not in [p['nodes'] for p in state['pairs']]:
        state['pairs'].append({'nodes': nodes, 'basis': basis})
        state['verified'] = False


def _known_pair(state: State, group: Iterable[str]) -> Optional[List[str]]:
    for pair in state['known_pairs']:
        if set(pair) <= set(group) and pair not in [p['nodes'] for p in state['pairs']]:
            return list(pair)
    return None


def _ran_healthy(state: State, nodes: Iterable[str]) -> bool:
    """Did ``nodes`` all run together in a healthy run already (no pair among them)?"""
    nodes = set(nodes)
    return any(not run['bad'] and nodes <= set(run['hosts']) for run in state['runs'])


def _pair_within(state: State, group: Sequence[str]) -> List[Item]:
    """A bad group none of whose nodes is bad alone: a pair inside it."""
    known = _known_pair(state, group)
    if known:
        _name_pair(state, known, 'pairwise benchmark')
        return []
    if len(group) == 2:
        _name_pair(state, group, 'runs')
        return []
    halves = [list(half) for half in _halves(list(group))]
    if all(_ran_healthy(state, half) for half in halves):
        # Both halves ran healthy already (two parts of a split): one node in each, without a round.
        state['origins'] = state.get('origins', 0) + 1
        return [{'kind': 'crosses', 'blocks': [halves], 'origin': state['origins']}]
    return [{'kind': 'within', 'group': list(group)}]


def _fold_trial(state: State, item: Item, results: Results, new: List[Item]) -> None:
    _run, failed = results[0]
    if failed:
        new.append({'kind': 'bad', 'group': list(item['group'])})
    else:
        _clear(state, item['group'])
        state['verified'] = True


def _fold_bad(state: State, item: Item, results: Results, new: List[Item]) -> None:
    """The parts of a bad group: a bad single is named, a bad part is searched, the untested run next."""
    bad_parts = []
    for run, failed in results:
        if not failed:
            _clear(state, run['group'])
        elif run['step'] == 'single':
            node, ref = run['group'][0], run['hosts'][-1]
            if node not in state['culprits']:
                state['culprits'].append(node)
                state['basis'][node] = 'runs'
                state['first_reference'][node] = ref
        else:
            bad_parts.append(run['group'])
    tested = set(n for run, _failed in results for n in run['group'])
    untested = [n for n in item['group'] if n not in tested]
    anything_bad = any(failed for _run, failed in results)
    new.extend({'kind': 'bad', 'group': part} for part in bad_parts)
    if untested:
        # Parts that found no reference this round run next round: the fault is theirs when
        # every tested part was healthy, else they are only not cleared yet ('maybe').
        new.append({'kind': 'bad', 'group': untested, 'maybe': anything_bad or item.get('maybe', False),
                    'entire': item.get('entire') or item['group']})
    elif not anything_bad and not item.get('maybe'):
        # Every part healthy: no node of the group is bad alone, two are bad together (of the
        # whole group, where its parts ran over several rounds).
        new.extend(_pair_within(state, item.get('entire') or item['group']))


def _fold_within(state: State, item: Item, results: Results, new: List[Item]) -> None:
    bad_halves = [run['group'] for run, failed in results if failed]
    for half in bad_halves:
        new.extend(_pair_within(state, half))
    if not bad_halves:
        state['origins'] = state.get('origins', 0) + 1
        new.append({'kind': 'crosses', 'blocks': [list(_halves(item['group']))], 'origin': state['origins']})


def _other_diagonals(state: State, item: Item) -> List[List[List[str]]]:
    """Every diagonal of ``item`` ran healthy: the blocks of the other diagonals, or [] when one
    candidate pair is left (named, to run alone next round) or none."""
    blocks: List[List[List[str]]] = []
    # Every diagonal healthy: the other diagonals hold it (a cross of two nodes that ran healthy is none).
    for x, y in item['blocks']:
        if len(x) > 1 or len(y) > 1:
            (x1, x2), (y1, y2) = _halves(x), _halves(y)
            blocks.extend([a, b] for a, b in ((x1, y2), (x2, y1)) if a and b)
    if len(blocks) == 1 and len(blocks[0][0]) == 1 and len(blocks[0][1]) == 1:
        # One candidate left, by elimination: named now, run alone in the next round (_plan_checks).
        pair = sorted(blocks[0][0] + blocks[0][1])
        _name_pair(state, pair, 'runs')
        state['pair_checks'].append(pair)
        return []
    if not blocks:
        state['notes'].append('a pair search lost its pair: every candidate pair ran healthy, the bad run it started '
                              'from is not reproduced')
    return blocks


def _fold_crosses(state: State, item: Item, results: Results, new: List[Item]) -> None:
    # crosses: the pair is one node of x and one of y, in one of the blocks [x, y]; the pairs
    # between blocks (and within a side) ran in healthy runs, so a bad run holds it in one of the
    # diagonals it ran.
    bad = [run for run, failed in results if failed]
    blocks = []
    for run in bad:
        held = run['blocks']
        if len(held) == 1 and len(held[0][0]) == 1 and len(held[0][1]) == 1:
            _name_pair(state, held[0][0] + held[0][1], 'runs')
        else:
            blocks.extend(held)
    if not bad:
        blocks = _other_diagonals(state, item)
    if blocks:
        new.append({'kind': 'crosses', 'blocks': blocks, 'origin': item.get('origin')})


# What the verdicts of an item's runs decide, by the item's kind.
_FOLD = {'trial': _fold_trial, 'bad': _fold_bad, 'within': _fold_within, 'crosses': _fold_crosses}


def _fold_item(state: State, item: Item, results: Results, new: List[Item]) -> None:
    _FOLD.get(item['kind'], _fold_crosses)(state, item, results, new)


def _fold_checks(state: State, runs: Sequence[Run], failed_of: Dict[int, bool]) -> None:
    """The confirmations of named nodes and of pairs named by elimination, in whatever round they ran."""
    for run in runs:
        failed = failed_of[id(run)]
        if run['step'] == 'confirm':
            node, ref = run['group'][0], run['hosts'][-1]
            if failed:
                state['confirmed'].append(node)
            else:
                # Bad beside its first reference only: the two are bad together, neither alone.
                first = state['first_reference'].get(node)
                state['culprits'].remove(node)
                state['basis'].pop(node, None)
                _clear(state, [node, ref])
                if first:
                    _name_pair(state, [node, first], 'runs')
        elif run['step'] == 'confirm_pair':
            pair = sorted(run['group'])
            state['pair_checks'] = [p for p in state['pair_checks'] if p != pair]
            if not failed:
                state['pairs'] = [p for p in state['pairs'] if p['nodes'] != pair]
                _clear(state, pair)
                state['notes'].append('a pair search lost its pair: %s, its last candidate, ran healthy alone' % '-'.join(pair))


def _fold_final(state: State, runs: Sequence[Run], failed_of: Dict[int, bool]) -> None:
    for run in runs:
        failed = failed_of[id(run)]
        if run['step'] in ('verify', 'verify_part'):
            if failed:
                state['items'].extend(_pair_within(state, run['group']))
                if not state['items'] and not state['pairs']:
                    state['notes'].append('the cleared nodes ran bad together: not explained')
                    state['verified'] = True
            elif run['step'] == 'verify':
                state['verified'] = True
    if not state['items'] and len([n for n in state['cleared'] if n not in _pair_nodes(state)]) < 2:
        # Fewer than two healthy nodes: nothing to run together.
        state['verified'] = True


def _copy(state: State) -> State:
    return dict(state, cleared=list(state['cleared']), culprits=list(state['culprits']), basis=dict(state['basis']),
                pairs=[dict(p) for p in state['pairs']], unresolved=list(state['unresolved']), notes=list(state['notes']),
                runs=list(state['runs']), items=[dict(i) for i in state['items']], confirmed=list(state['confirmed']),
                first_reference=dict(state['first_reference']), pair_checks=[list(p) for p in state['pair_checks']])


def _record_runs(state: State, runs: Sequence[Run], verdicts: Sequence[Optional[Verdict]]) -> Dict[int, bool]:
    """Each run into the state's 'runs'; whether each was bad, by the run's id()."""
    failed_of = {}
    for run, verdict in zip(runs, verdicts):
        failed_of[id(run)] = _group_search.bad(verdict)
        state['runs'].append({'hosts': run['hosts'], 'group': run['group'], 'step': run['step'], 'round': state['rounds'],
                              'bad': failed_of[id(run)],
                              'status': (verdict or {}).get('status'), 'ratio': (verdict or {}).get('ratio')})
    return failed_of


def _fold_items(state: State, runs: Sequence[Run], failed_of: Dict[int, bool]) -> None:
    """The search's items after this round's runs."""
    items = state['items']
    new: List[Item] = []
    by_item: Dict[int, Results] = {}
    for run in runs:
        if run.get('task') is not None:
            by_item.setdefault(run['task'], []).append((run, failed_of[id(run)]))
    for index, item in enumerate(items):
        if index in by_item:
            _fold_item(state, item, by_item[index], new)
        elif runs:
            new.append(item)    # nothing of it could run this round (no reference free): next round
    for run in runs:
        if run['step'] == 'verify_early':
            if failed_of[id(run)]:
                new.extend(_pair_within(state, run['group']))
    if not runs:
        _give_up(state, items)
        new = []
    state['items'] = _disjoint(new)


def _finish(state: State, runs: Sequence[Run]) -> None:
    """Done when nothing is left to search or confirm, nothing could run, or at max_rounds."""
    state['done'] = not state['items'] and not state['pair_checks'] and state['verified'] and all(
        n in state['confirmed'] for n in state['culprits'] if state['basis'].get(n) == 'runs' and _second_reference(state, n))
    if not state['done'] and not state['items'] and not runs:
        state['done'] = True
    if state['rounds'] >= state['max_rounds'] and not state['done']:
        _give_up(state, state['items'])
        state['notes'].append('the search stopped after %d rounds' % state['rounds'])
        state['items'] = []
        state['done'] = True


def update(state: State, runs: Sequence[Run], verdicts: Optional[Sequence[Optional[Verdict]]], seconds: Optional[float] = None) -> State:
    """Fold the verdicts of next_round's runs into the state (a new dict). ``seconds``: how long
    the round took (what the user waited), added to the state's 'seconds'."""
    if state.get('strategy') == 'runs':
        new = _group_search.search_update(state, runs, verdicts)
        new['seconds'] = _seconds(state, seconds if runs else None)
        return new
    state = _copy(state)
    if state['done']:
        return state
    state['rounds'] += 1 if runs else 0
    state['seconds'] = _seconds(state, seconds if runs else None)
    failed_of = _record_runs(state, runs, list(verdicts or []) + [None] * (len(runs) - len(verdicts or [])))
    if state['items']:
        _fold_items(state, runs, failed_of)
        _fold_checks(state, runs, failed_of)
    else:
        _fold_checks(state, runs, failed_of)
        _fold_final(state, runs, failed_of)
    _finish(state, runs)
    return state


def _disjoint(items: Iterable[Item]) -> List[Item]:
    """The items of the next round over disjoint nodes: a pair search whose nodes another item
    holds already is dropped (a pair among the nodes a bad group's healthy parts cleared shows both
    in that group's search and in the run of the free healthy nodes). A pair it held but the
    other does not still shows in the final run of every healthy node together."""
    kept: List[Item] = []
    held: Set[str] = set()
    for item in items:
        nodes = set(_item_nodes(item))
        if item['kind'] in ('within', 'crosses') and nodes & held:
            continue
        kept.append(item)
        held |= nodes
    return kept


def _second_reference(state: State, node: str) -> bool:
    """Is there a healthy node other than ``node``'s first reference to confirm it with?"""
    first = state['first_reference'].get(node)
    refs = ([state['reference']] if state.get('reference') else []) + state['cleared']
    return any(n != first for n in refs if n not in _pair_nodes(state))


def _give_up(state: State, items: Iterable[Item]) -> None:
    left: List[str] = []
    for item in items:
        left.extend(n for n in _item_nodes(item) if n not in left)
    left = [n for n in left if n not in state['cleared'] and n not in state['unresolved']]
    state['unresolved'].extend(left)
    if left:
        state['notes'].append('no healthy node to run %s with: give a reference node' % ', '.join(left))


def _seconds(state: State, seconds: Any) -> float:
    try:
        seconds = float(seconds) if seconds is not None else 0.0
    except (TypeError, ValueError):
        seconds = 0.0
    return round(float(state.get('seconds') or 0.0) + (seconds if math.isfinite(seconds) and seconds > 0 else 0.0), 3)


# ---------------------------------------------------------------------------- what people read

def summary(state: State) -> Dict[str, Any]:
    """What a report needs: culprits (with their basis), pairs, unresolved, runs, rounds, seconds."""
    return {'culprits': list(state['culprits']), 'basis': dict(state['basis']), 'pairs': list(state['pairs']),
            'unresolved': list(state['unresolved']), 'runs': len(state['runs']), 'rounds': state['rounds'],
            'seconds': state.get('seconds') or 0.0, 'strategy': state.get('strategy', 'runs'), 'notes': list(state['notes'])}


_STEPS = {'trial': 'run(s) without the nodes the facts blame', 'split': 'part(s) of bad groups',
          'single': 'node(s) beside a healthy one', 'halves': 'half/halves of a pair search', 'cross': 'pair search run(s)',
          'confirm_pair': 'candidate pair(s) alone',
          'confirm': 'named node(s) beside a second reference', 'verify': 'run of every healthy node together',
          'verify_part': 'run of the healthy nodes left free', 'verify_early': 'run of the healthy nodes left free', 'pool': 'group(s) of untested nodes',
          'final': 'run of the rest together', 'pair': 'pair search run(s)', 'pairs': 'pair(s) of suspects'}


def round_line(state: State) -> str:
    """One line a person reads about the last round: its runs, what they found, what is left."""
    last = [r for r in state['runs'] if r['round'] == state['rounds']]
    if not last:
        return 'culprit search: no run%s' % (' (%s)' % '; '.join(state['notes']) if state['notes'] else '')
    steps: Dict[str, int] = {}
    for run in last:
        steps[run['step']] = steps.get(run['step'], 0) + 1
    bad = len([r for r in last if r['status'] not in ('ok', None, 'unknown')])
    found = [n for n in state['culprits'] if state['basis'].get(n) == 'runs']
    line = 'round %d: %d run(s) over %d node(s) (%s), %d bad' % (
        state['rounds'], len(last), len(set(h for r in last for h in r['hosts'])),
        ', '.join('%d %s' % (count, _STEPS.get(step, step)) for step, count in sorted(steps.items())), bad)
    line += '; named so far: %s' % (', '.join(found + ['-'.join(p['nodes']) for p in state['pairs']]) or 'none')
    if state['done']:
        line += '; done after %d run(s)' % len(state['runs'])
    return line


def search(nodes: Sequence[str], run: Callable[[List[str]], Optional[Verdict]], reference: Optional[str] = None, prior: Optional[Iterable[Any]] = None,
           pairs: Optional[Iterable[Sequence[str]]] = None, strategy: str = DEFAULT_STRATEGY) -> State:
    """Drive the search with ``run(hosts) -> verdict`` (for tests and benchmarks)."""
    state = start(nodes, reference, prior, pairs, strategy)
    while not state['done']:
        runs = next_round(state)
        state = update(state, runs, [run(r['hosts']) for r in runs])
    return state


def begin(nodes: Any, reference: Optional[str] = None, prior: Any = None, pairs: Any = None, strategy: Optional[str] = None) -> State:
    """start() with its arguments checked as they come from a task (the action culprit_search and the
    filter culprit_search_start): ValueError with a line that stands alone otherwise. ``pairs``: a
    fabric_bench report, its list of pairs, or [[a, b], ...] (_group_search.bad_pairs reads the bad ones)."""
    if not isinstance(nodes, (list, tuple)) or not all(isinstance(n, str) and n for n in nodes):
        raise ValueError('nodes must be a list of inventory names')
    if pairs is not None and not isinstance(pairs, (dict, list, tuple)):
        raise ValueError('pairs must be a fabric_bench report or a list of [node, node]')
    if prior is not None and not isinstance(prior, (list, tuple)):
        raise ValueError('prior must be a list of findings or inventory names')
    strategy = strategy or DEFAULT_STRATEGY
    if strategy not in STRATEGIES:
        raise ValueError('strategy must be one of %s, not %r' % (', '.join(STRATEGIES), strategy))
    return start(list(nodes), reference or None, list(prior or []), _group_search.bad_pairs(pairs), strategy)


def fold(state: State, runs: Sequence[Run], verdicts: Sequence[Optional[Verdict]], seconds: Optional[float] = None) -> State:
    """update() with one verdict per run checked (ValueError otherwise)."""
    if len(runs or []) != len(verdicts or []):
        raise ValueError('one verdict per run (%d runs, %d verdicts)' % (len(runs or []), len(verdicts or [])))
    return update(state, runs, verdicts, seconds)


def round_verdicts(started: Any, finished: Any) -> List[Dict[str, Any]]:
    """The verdict of each run of a round, in the order of the runs: started with async (poll 0),
    waited for with async_status. A run that did not start or did not finish is failed, never cleared."""
    if not isinstance(started, (list, tuple)) or not isinstance(finished, (list, tuple)):
        raise ValueError('the registered results of the loops (their .results)')
    done = dict((str(r.get('ansible_job_id')), r) for r in finished if isinstance(r, dict) and r.get('ansible_job_id'))
    verdicts = []
    for launch in started:
        launch = launch if isinstance(launch, dict) else {}
        job = launch.get('ansible_job_id')
        result = done.get(str(job), {'failed': True, 'msg': 'the run (job %s) did not report back' % job}) if job else launch
        verdicts.append(verdict_of(dict(result, ansible_job_id=job) if job else result))
    return verdicts


def verdict_of(result: Any) -> Dict[str, Any]:
    """The verdict of one run from what its job returned (a collective_bench result, or the
    failure of a run that did not start or did not finish): not started, not finished and
    skipped runs are failed, never cleared."""
    result = result if isinstance(result, dict) else {'failed': True, 'msg': 'no result'}
    verdict: Dict[str, Any] = _collective.normalize(result)['verdict']
    if verdict.get('status') == 'skipped' or (result.get('ansible_job_id') and not result.get('finished') and not result.get('failed')):
        verdict = {'status': 'failed', 'reasons': ['not run: %s' % '; '.join(verdict.get('reasons') or ['unfinished'])], 'ratio': None}
    return verdict


def _duration(seconds: Any) -> str:
    seconds = int(round(float(seconds or 0)))
    if seconds < 60:
        return '%d s' % seconds
    if seconds < 3600:
        return '%d min %02d s' % divmod(seconds, 60)
    return '%d h %02d min' % (seconds // 3600, seconds % 3600 // 60)


def report_line(search: Any) -> Optional[str]:
    """The search in one sentence for report.md and report.html (None: no search ran): what it
    named and what it cost the user, its rounds, runs and the time they took."""
    runs = search.get('runs') if isinstance(search, dict) else None
    if isinstance(runs, list):
        runs = len(runs)
    if not isinstance(runs, int) or isinstance(runs, bool):
        return None

    def names(items: Iterable[Any]) -> str:
        return ', '.join('%s' % n for n in items) or 'none'
    pairs = ['-'.join('%s' % n for n in p.get('nodes') or []) for p in search.get('pairs') or [] if isinstance(p, dict)]
    return ('Culprit search (strategy %s): %d round(s), %d run(s), %s. Named: %s; pairs bad only together: %s; unresolved: %s.%s'
            % (search.get('strategy') or 'runs', int(search.get('rounds') or 0), runs,
               _duration(search.get('seconds')), names(search.get('culprits') or []), names(pairs),
               names(search.get('unresolved') or []),
               (' Notes: %s.' % '; '.join('%s' % n for n in search['notes'])) if search.get('notes') else ''))
