# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Schedules for pairwise fabric tests: which node tests which, round by round, on every rail.

A round is a set of disjoint pairs (server, client): no node is in two pairs of a round,
so all pairs of a round run at once, and every rail (the i-th HCA of every node) runs
them concurrently, each node running one perftest server or client per HCA.

Modes:
  full      - every unordered pair exactly once, by the circle method (a round-robin
              tournament, Berger tables): N - 1 rounds for even N, N for odd N (one
              node idle per round).
  ring      - neighbours in the given order, i <-> i + 1 and the last with the first:
              2 rounds for an even N; 3 for an odd N, because a cycle of odd length
              has no perfect matching and two matchings cover at most N - 1 of its N edges.
  random    - k rounds, each a uniformly random perfect matching (one node idle when
              N is odd), no pair repeated across the k rounds; deterministic given the seed.
  loopback  - one round where each node tests itself (server and client on the same node).

A round is kept as two parallel lists, ``servers`` and ``clients`` (pair j is
``servers[j]`` -> ``clients[j]``), and the rails once for the whole schedule: a
4,096-node schedule has 4,095 rounds x 2,048 pairs x 8 rails = 67 million tests,
far too many to build one object per test (or even per pair) on a controller. The
per-test form (``expand``) is built on request, one round at a time (``round_number``),
or only for the node that asks (``node``).

Pure functions of their arguments; errors are ScheduleError (a ValueError) whose
message says what was wrong.
"""

from __future__ import annotations

import gc
import random
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple, Union

MODES = ('full', 'ring', 'random', 'loopback')
DIRECTIONS = ('alternate', 'both')

# Expanding more tests than this at once is refused: one dict per test, a million of
# them are ~0.5 GB on the controller. Expand one round at a time instead.
EXPAND_LIMIT = 1000000

# How many node names a note lists before it says "and N more".
_NOTE_NAMES = 8

# A rail of rail_table: {rail, hca, hcas (node -> its HCA), missing}. A round: (servers, clients, idle),
# server i tests with client i. A seed: what random.Random takes (an integer, or text).
Rail = Dict[str, Any]
Round = Tuple[List[str], List[str], List[str]]
Seed = Union[int, str]


class ScheduleError(ValueError):
    pass


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Hold the cyclic garbage collector while rounds are built.

    A 4,096-node schedule is ~12,000 lists holding 8.4 million references; every young
    generation collection walks the lists made since the last one, so the collector
    cost more than the slicing (4,095 rounds of 4,096 nodes on the 2-core CI machine:
    0.68 s with it, 0.27 s without). Lists of strings form no cycles: nothing is lost.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def pair_id(first: str, second: str) -> str:
    """Identifier of an unordered pair, the same whichever node serves: '<first><><second>',
    the nodes in the order of the input list (``first`` comes before ``second``)."""
    return '%s<>%s' % (first, second)


def _names(nodes: Sequence[str], limit: int = _NOTE_NAMES) -> str:
    shown = ', '.join(nodes[:limit])
    return shown + (' and %d more' % (len(nodes) - limit) if len(nodes) > limit else '')


def check_nodes(nodes: Any) -> List[str]:
    """The node list as a list, or ScheduleError: it must be a non-empty list of distinct names."""
    if not isinstance(nodes, (list, tuple)):
        raise ScheduleError('nodes must be a list of inventory hostnames, got %s' % type(nodes).__name__)
    if not nodes:
        raise ScheduleError('nodes is empty: there is nothing to schedule')
    bad = [node for node in nodes if not isinstance(node, str) or not node]
    if bad:
        raise ScheduleError('node names must be non-empty strings, got %r' % (bad[0],))
    names: List[str] = list(nodes)
    if len(set(nodes)) != len(nodes):
        seen, duplicates = set(), []
        for node in nodes:
            if node in seen and node not in duplicates:
                duplicates.append(node)
            seen.add(node)
        raise ScheduleError('duplicate node names: %s (each node must appear once)' % _names(duplicates))
    return names


def _check_hcas(hcas: Any, where: str) -> List[str]:
    if not isinstance(hcas, (list, tuple)):
        raise ScheduleError('%s must be a list of HCA names, got %s' % (where, type(hcas).__name__))
    bad = [hca for hca in hcas if not isinstance(hca, str) or not hca]
    if bad:
        raise ScheduleError('%s: HCA names must be non-empty strings, got %r' % (where, bad[0]))
    if len(set(hcas)) != len(hcas):
        raise ScheduleError('%s names an HCA twice (%s): each rail must be a different HCA' % (where, ', '.join(hcas)))
    return list(hcas)


def rail_table(nodes: Sequence[str], rails: Any) -> List[Rail]:
    """The rails: [{rail, hca, hcas, missing}], rail i being the i-th HCA of every node.

    ``rails`` is None (one rail, each node's default device: ``hca`` None), a list of HCA
    names that every node has, or a dict node -> list of HCA names when nodes differ.
    ``hcas`` maps each node that has rail i to its HCA name; ``missing`` lists, in node
    order, the nodes without one (a node absent from the dict has no rail at all);
    ``hca`` is the name when every node that has the rail names it the same, else None.
    """
    if rails is None:
        return [{'rail': 0, 'hca': None, 'hcas': dict.fromkeys(nodes), 'missing': []}]
    if isinstance(rails, (list, tuple)):
        names = _check_hcas(rails, 'rails')
        if not names:
            raise ScheduleError('rails is empty: give the HCA names of a node (e.g. [mlx5_0, mlx5_1]), or leave rails out')
        return [{'rail': index, 'hca': name, 'hcas': dict.fromkeys(nodes, name), 'missing': []}
                for index, name in enumerate(names)]
    if isinstance(rails, dict):
        per_node = dict((node, _check_hcas(rails[node], 'rails[%s]' % node)) for node in nodes if node in rails)
        count = max([len(hcas) for hcas in per_node.values()] or [0])
        if not count:
            raise ScheduleError('rails names no HCA for any of the %d node(s)' % len(nodes))
        table = []
        for index in range(count):
            hcas = dict((node, per_node[node][index]) for node in nodes if len(per_node.get(node, ())) > index)
            named = set(hcas.values())
            table.append({'rail': index, 'hca': named.pop() if len(named) == 1 else None, 'hcas': hcas,
                          'missing': [node for node in nodes if node not in hcas]})
        return table
    raise ScheduleError('rails must be a list of HCA names or a dict node -> list of HCA names, got %s'
                        % type(rails).__name__)


class _Circle(object):
    """The circle method over ``order`` (round-robin tournament, Berger tables).

    For an even count the last node is fixed and the other m = N - 1 sit on a circle at
    positions 0..m-1; for an odd count all N sit on the circle (m = N) and the fixed
    seat is empty: whoever would meet it is idle. In round r (0 <= r < m) position r
    meets the fixed seat and position r + k meets r - k (mod m) for k = 1..h, h = (m - 1) / 2.
    Two positions x != y meet in the round r with 2r = x + y (mod m), which exists and is
    unique because m is odd, and each position meets the fixed seat in round r = x: every
    pair meets exactly once in m rounds, and no node is in two pairs of a round.

    Orientation: r + k serves when k is odd, r - k when k is even, and position r serves
    the fixed node in even rounds. From one round to the next a node's k moves by one,
    so its role flips: with an odd N it alternates every round it plays, with an even N
    it keeps a role two rounds in a row at most (around its game with the fixed node).
    Each node serves in (N - 1) // 2 or (N - 1) // 2 + 1 of its N - 1 games.
    """

    def __init__(self, order: Sequence[str]) -> None:
        if len(order) % 2:
            self.fixed, ring = None, list(order)
        else:
            self.fixed, ring = order[-1], list(order[:-1])
        self.ring = ring
        self.m = len(ring)
        self.h = (self.m - 1) // 2
        self.position = dict((name, at) for at, name in enumerate(ring))
        # Three copies, so that positions r +- k (mod m) are one slice starting in the middle copy.
        self.ring3 = ring * 3

    def pairs_per_round(self) -> int:
        return self.h + (0 if self.fixed is None else 1)

    def round(self, index: int) -> Round:
        """(servers, clients, idle) of round ``index``: all slicing, no per-pair Python work."""
        ring3, mid, h = self.ring3, self.m + index, self.h
        servers = ring3[mid + 1:mid + h + 1:2]       # r + k, k odd
        clients = ring3[mid - 1:mid - h - 1:-2]      # r - k, k odd
        if h > 1:
            servers += ring3[mid - 2:mid - h - 1:-2]  # r - k, k even
            clients += ring3[mid + 2:mid + h + 1:2]   # r + k, k even
        node = self.ring[index]
        if self.fixed is None:
            return servers, clients, [node]
        if index % 2:
            servers.append(self.fixed)
            clients.append(node)
        else:
            servers.append(node)
            clients.append(self.fixed)
        return servers, clients, []

    def node_round(self, index: int, node: str) -> Round:
        """(servers, clients, idle) of round ``index`` cut down to ``node``'s pair, in O(1):
        what round() + _only() give, without building the round (O(N) per round made one
        node's plan O(N^2): 0.65 s for 4,096 nodes, on every one of the 4,096 hosts)."""
        m, r = self.m, index
        if node == self.fixed:
            partner = self.ring[r]
            return ([node], [partner], []) if r % 2 else ([partner], [node], [])
        offset = (self.position[node] - r) % m
        if offset == 0:
            if self.fixed is None:
                return [], [], [node]
            return ([self.fixed], [node], []) if r % 2 else ([node], [self.fixed], [])
        # node = r + k (offset k <= h) or r - k (offset m - k); pair {r + k, r - k}: r + k serves when k is odd.
        k, above = (offset, True) if offset <= self.h else (m - offset, False)
        partner = self.ring[(r - k) % m] if above else self.ring[(r + k) % m]
        serves = (k % 2 == 1) == above
        return ([node], [partner], []) if serves else ([partner], [node], [])

    def pairs_within(self, present: Set[str]) -> List[int]:
        """For each round, how many of its pairs have both nodes in the set ``present``.

        Pairs {x, 2r - x} of round r with both present number (c[2r] - p[r]) / 2, where p is
        the 0/1 indicator of ``present`` along the circle and c its cyclic self-convolution:
        c[s] = sum over x of p[x] p[s - x]. The convolution is one big-integer square
        (p packed into fixed-width slots wide enough that no slot carries into the next),
        O(m) Python work instead of the O(m^2) of looking at every pair of every round.
        """
        m = self.m
        flags = [node in present for node in self.ring]
        width = (m.bit_length() + 7) // 8
        packed = bytearray(m * width)
        for position, flag in enumerate(flags):
            if flag:
                packed[position * width] = 1
        value = int.from_bytes(bytes(packed), 'little')
        square = (value * value).to_bytes(2 * m * width, 'little')
        slots = [int.from_bytes(square[start:start + width], 'little') for start in range(0, 2 * m * width, width)]
        fixed_present = self.fixed is not None and self.fixed in present
        return [(slots[2 * r % m] + slots[2 * r % m + m] - flags[r]) // 2 + (1 if fixed_present and flags[r] else 0)
                for r in range(m)]


def _ring_rounds(nodes: List[str]) -> List[Round]:
    """Neighbour pairs i -> i + 1 (the last -> the first), as (servers, clients, idle) rounds."""
    count = len(nodes)
    if count < 3:
        return [([nodes[0]], [nodes[1]], [])] if count == 2 else []
    if count % 2 == 0:
        return [(nodes[0::2], nodes[1::2], []),
                (nodes[1::2], nodes[2::2] + nodes[:1], [])]
    # Odd cycle: the edges i -> i + 1 with i even, then with i odd, then the closing edge.
    return [(nodes[0:count - 1:2], nodes[1:count - 1:2], nodes[-1:]),
            (nodes[1:count - 1:2], nodes[2::2], nodes[:1]),
            (nodes[-1:], nodes[:1], nodes[1:-1])]


class _Plan(object):
    """The rounds of one schedule, each made on demand from a few numbers (circle modes)
    or kept as lists (ring, loopback: at most three rounds)."""

    def __init__(self, nodes: List[str], mode: str, k: int, seed: Seed, direction: str) -> None:
        self.notes: List[str] = []
        self.circle: Optional[_Circle] = None
        # The rounds as lists (ring, loopback; a circle mode has none), the circle's rounds chosen.
        self.lists: List[Round] = []
        self.chosen: List[int] = []
        if mode in ('full', 'random') and len(nodes) > 1:
            order = list(nodes)
            rng = random.Random(seed) if mode == 'random' else None
            if rng:
                rng.shuffle(order)
            self.circle = _Circle(order)
            self.chosen = list(range(self.circle.m))
            if rng:
                if k > self.circle.m:
                    self.notes.append('k=%d random matchings asked, but %d nodes have only %d disjoint ones: '
                                      'all %d are used (full coverage, in random order)'
                                      % (k, len(nodes), self.circle.m, self.circle.m))
                self.chosen = rng.sample(self.chosen, min(k, self.circle.m))
        elif mode == 'loopback':
            self.lists = [(list(nodes), list(nodes), [])]
        elif mode == 'ring':
            self.lists = _ring_rounds(nodes)
            if len(nodes) % 2 and len(nodes) > 2:
                self.notes.append('an odd ring (%d nodes) needs 3 rounds: a cycle of odd length is not covered '
                                  'by 2 matchings' % len(nodes))
        else:
            self.lists = []
        if len(nodes) == 1 and mode != 'loopback':
            self.notes.append('a single node has no peer: no rounds (mode=loopback tests a node by itself)')
        self.base = len(self.chosen) if self.circle else len(self.lists)
        # A loopback test has no direction: mirrored it would repeat itself.
        self.mirrored = direction == 'both' and mode != 'loopback'

    def __len__(self) -> int:
        return self.base * (2 if self.mirrored else 1)

    def round(self, index: int) -> Round:
        base = index % self.base
        if self.circle:
            servers, clients, idle = self.circle.round(self.chosen[base])
        else:
            servers, clients, idle = (list(part) for part in self.lists[base])
        return (clients, servers, idle) if index >= self.base else (servers, clients, idle)

    def node_round(self, index: int, node: str) -> Round:
        """round(index) cut down to ``node``'s pair (or its idleness)."""
        base = index % self.base
        if self.circle:
            servers, clients, idle = self.circle.node_round(self.chosen[base], node)
        else:
            servers, clients, idle = _only(node, *self.lists[base])
        return (clients, servers, idle) if index >= self.base else (servers, clients, idle)

    def pairs_per_round(self) -> List[int]:
        if self.circle:
            counts = [self.circle.pairs_per_round()] * self.base
        else:
            counts = [len(servers) for servers, _clients, _idle in self.lists]
        return counts * (2 if self.mirrored else 1)

    def pairs_within(self, present: Set[str]) -> List[int]:
        """Per round, how many pairs have both nodes in ``present`` (those that run on a rail)."""
        if self.circle:
            per_circle_round = self.circle.pairs_within(present)
            counts = [per_circle_round[r] for r in self.chosen]
        else:
            counts = [sum(1 for server, client in zip(servers, clients) if server in present and client in present)
                      for servers, clients, _idle in self.lists]
        return counts * (2 if self.mirrored else 1)


def _seed(seed: Any) -> Any:
    """A seed of digits given as text (`-e fabric_bench_seed=7`, an INI inventory) is that integer:
    random.Random('7') and random.Random(7) draw different matchings."""
    # ASCII digits only: isdigit() is also true for '\u00b2', which int() refuses.
    if isinstance(seed, str) and seed.strip().isascii() and seed.strip().isdigit():
        return int(seed)
    return seed


def _check_options(mode: str, k: Any, seed: Any, direction: str) -> int:
    if mode not in MODES:
        raise ScheduleError('unknown mode %r: choose one of %s' % (mode, ', '.join(MODES)))
    if direction not in DIRECTIONS:
        raise ScheduleError('unknown direction %r: choose one of %s' % (direction, ', '.join(DIRECTIONS)))
    # At most 18 digits: past 4,300 int() raises ValueError (sys.get_int_max_str_digits()).
    if isinstance(k, str) and k.strip().isascii() and k.strip().isdigit() and len(k.strip()) <= 18:
        k = int(k)  # INI inventories give strings
    if isinstance(k, bool) or not isinstance(k, int):
        raise ScheduleError('k must be an integer (the number of random matchings), got %r' % (k,))
    if k < 1:
        raise ScheduleError('k must be at least 1 (the number of random matchings), got %d' % k)
    if isinstance(seed, bool) or not isinstance(seed, (int, str)):
        raise ScheduleError('seed must be an integer or a string, got %r' % (seed,))
    return k


def _summary(nodes: List[str], table: List[Rail], plan: _Plan, mode: str, direction: str, seed: Seed) -> Dict[str, Any]:
    notes = list(plan.notes)
    pairs_per_round = plan.pairs_per_round()
    tests_per_round = [count * len(table) for count in pairs_per_round]
    for rail in table:
        if rail['missing']:
            within = plan.pairs_within(set(rail['hcas']))
            tests_per_round = [tests - (pairs - runs) for tests, pairs, runs in zip(tests_per_round, pairs_per_round, within)]
            notes.append('rail %d (%s): %d node(s) without it sit out its tests: %s'
                         % (rail['rail'], rail['hca'] or 'HCA names differ', len(rail['missing']), _names(rail['missing'])))
    pairs = sum(pairs_per_round)
    count = len(nodes)
    return {
        'mode': mode,
        'direction': direction,
        'seed': seed if mode == 'random' else None,
        'nodes': count,
        'rails': len(table),
        'rounds': len(plan),
        'pairs': pairs,
        'pairs_covered': pairs // 2 if plan.mirrored else pairs,
        'pairs_possible': count if mode == 'loopback' else count * (count - 1) // 2,
        'pairs_per_round': pairs_per_round,
        'tests': sum(tests_per_round),
        'tests_per_round': tests_per_round,
        'tests_skipped': pairs * len(table) - sum(tests_per_round),
        'notes': notes,
    }


def expand_round(servers: Sequence[str], clients: Sequence[str], table: List[Rail],
                 position: Mapping[str, int]) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """One round as tests: ([{server, client, rail, server_hca, client_hca, pair_id}],
    [{server, client, rail, missing}]), pair-major, a pair's rails in rail order.
    ``position`` maps node -> index in the input list (for pair_id)."""
    tests, skipped = [], []
    for server, client in zip(servers, clients):
        ident = pair_id(server, client) if position[server] <= position[client] else pair_id(client, server)
        for rail in table:
            hcas = rail['hcas']
            if server in hcas and client in hcas:
                tests.append({'server': server, 'client': client, 'rail': rail['rail'],
                              'server_hca': hcas[server], 'client_hca': hcas[client], 'pair_id': ident})
            else:
                skipped.append({'server': server, 'client': client, 'rail': rail['rail'],
                                'missing': [node for node in dict.fromkeys((server, client)) if node not in hcas]})
    return tests, skipped


def _prepare(nodes: Any, rails: Any, mode: str, k: Any, seed: Any, direction: str) -> Tuple[List[str], List[Rail], _Plan]:
    nodes = check_nodes(nodes)
    k = _check_options(mode, k, seed, direction)
    table = rail_table(nodes, rails)
    plan = _Plan(nodes, mode, k, seed, direction)
    absent = [node for node in nodes if node not in rails] if isinstance(rails, dict) else []
    if absent:
        plan.notes.append('%d node(s) have no entry in rails and sit out every rail: %s' % (len(absent), _names(absent)))
    return nodes, table, plan


def summary(nodes: Any, rails: Any = None, mode: str = 'full', k: Any = 1, seed: Any = 0, direction: str = 'alternate') -> Dict[str, Any]:
    """The counts of a schedule without building its rounds (O(N x rails))."""
    seed = _seed(seed)
    nodes, table, plan = _prepare(nodes, rails, mode, k, seed, direction)
    return _summary(nodes, table, plan, mode, direction, seed)


def _only(node: str, servers: List[str], clients: List[str], idle: List[str]) -> Round:
    """The part of a round that ``node`` takes part in: its pair (at most one), or its idleness."""
    for side in (servers, clients):
        if node in side:
            index = side.index(node)
            return [servers[index]], [clients[index]], []
    return [], [], [node] if node in idle else []


def _check_round(round_number: Any, count: int) -> int:
    if isinstance(round_number, str) and round_number.strip().isascii() and round_number.strip().isdigit() and len(round_number.strip()) <= 18:
        round_number = int(round_number)
    if isinstance(round_number, bool) or not isinstance(round_number, int):
        raise ScheduleError('round must be an integer (1 for the first round), got %r' % (round_number,))
    if not 1 <= round_number <= count:
        raise ScheduleError('round %d does not exist: this schedule has %d round(s), numbered from 1' % (round_number, count))
    return round_number


def schedule(nodes: Any, rails: Any = None, mode: str = 'full', k: Any = 1, seed: Any = 0, direction: str = 'alternate', round_number: Any = None,
             expand: bool = False, node: Optional[str] = None) -> Dict[str, Any]:
    """The schedule: {mode, direction, seed, rails, rounds, summary}.

    ``rounds`` holds every round, or only round ``round_number`` (1-based) when given;
    a round is {round, servers, clients, idle}, plus ``tests`` and ``skipped`` (see
    expand_round) when ``expand`` is true. With ``node``, each round keeps only the pair
    that node is in (what the node itself runs), and ``idle`` says whether it sits out.
    """
    seed = _seed(seed)
    nodes, table, plan = _prepare(nodes, rails, mode, k, seed, direction)
    counts = _summary(nodes, table, plan, mode, direction, seed)
    if node is not None and node not in nodes:
        raise ScheduleError('node %r is not one of the %d nodes scheduled' % (node, len(nodes)))
    numbers: Sequence[int]
    if round_number is None:
        numbers = range(1, len(plan) + 1)
    else:
        numbers = [_check_round(round_number, len(plan))]
    position = None
    if expand:
        tests = sum(counts['tests_per_round'][number - 1] for number in numbers)
        if node is None and tests > EXPAND_LIMIT:
            raise ScheduleError('expand would build %d test entries (more than %d): expand one round at a time '
                                '(round=1..%d), or one node\'s tests (node=...), or leave expand off'
                                % (tests, EXPAND_LIMIT, len(plan)))
        position = dict((name, index) for index, name in enumerate(nodes))
    rounds = []
    with _gc_paused():
        for number in numbers:
            if node is not None:
                servers, clients, idle = plan.node_round(number - 1, node)
            else:
                servers, clients, idle = plan.round(number - 1)
            entry = {'round': number, 'servers': servers, 'clients': clients, 'idle': idle}
            if position is not None:
                entry['tests'], entry['skipped'] = expand_round(servers, clients, table, position)
            rounds.append(entry)
    return {'mode': mode, 'direction': direction, 'seed': counts['seed'], 'rails': table, 'rounds': rounds,
            'summary': counts}
