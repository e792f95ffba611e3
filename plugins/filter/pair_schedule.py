# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
name: pair_schedule
author: hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
short_description: Rounds of disjoint node pairs for pairwise fabric tests, every rail at once
version_added: 0.1.0
description:
  - Plans which node tests which, round by round. Within a round the pairs are disjoint (no node is in two
    pairs), so they all run at once, and every rail runs them concurrently (rail I(i) is the I(i)-th HCA of
    every node), so in each round a node runs one perftest server or client per HCA.
  - C(full) covers every unordered pair exactly once by the circle method (round-robin tournament, Berger
    tables), in N-1 rounds for an even number N of nodes, N rounds for an odd N with one node idle per round.
  - C(ring) tests neighbours in the given order (each node with the next, the last with the first) -
    2 rounds for an even N, 3 for an odd N (a cycle of odd length is not covered by two matchings).
  - C(random) takes k rounds, each a uniformly random perfect matching (one node idle for an odd N),
    no pair repeated across the k rounds; the same seed gives the same schedule. They are k rounds of the
    circle method over a shuffled node order, so k is at most the round count of C(full) (more is capped, with a note).
  - C(loopback) is one round in which every node tests itself on each rail (server and client the same node).
  - Orientation (C(direction=alternate)) - each pair is tested once and the circle method names its server; a
    node's role flips from round to round (at most two rounds in a row the same with an even N), so each node
    serves in half of its tests, rounded up or down. In a ring each node serves once. C(direction=both) appends
    the mirror of every round (server and client swapped) so each direction of every pair is tested once.
  - Output size - a full schedule of 4,096 nodes has 4,095 rounds of 2,048 pairs, 67 million tests on 8 rails,
    far too many to build one object per test (or per pair) on the controller. So a round lists its pairs as two
    parallel lists, C(servers) and C(clients) (pair j is C(servers[j]) serving C(clients[j])), the HCAs are
    given once per rail in C(rails), and the per-test form (C(expand)) is built on request, best one round at a
    time (C(round)). Any single round is computed directly, without the others, so a play can loop over
    the round numbers 1 to C(summary.rounds) and ask for each round as it comes (see EXAMPLES).
  - Measured by C(python -m tests.bench.schedule_speed) - the whole compact schedule of 4,096 nodes x 8 rails,
    and one expanded round of it, each well under the 1 s target on a 2-core machine.
  - C(hpc.gpu_fabric.pair_schedule_summary) takes the same arguments and returns only the C(summary), without the
    rounds.
options:
  _input:
    description: The nodes (inventory hostnames), in order; the order fixes the schedule (and the ring).
    type: list
    elements: str
    required: true
  rails:
    description:
      - The HCAs of a node, in rail order (for example V([mlx5_0, mlx5_1, ..., mlx5_7])), when every node has the same.
      - Or a dict node -> list of HCA names when nodes differ; rail I(i) is the I(i)-th HCA of each node, and a node with
        fewer HCAs (or without an entry) sits out the rails it lacks, listed in the rail's C(missing) and in the notes.
      - Left out, there is one rail and C(hca) is V(null) (each node's default device).
    type: raw
  mode:
    description: Which pairs to test.
    type: str
    choices: [full, ring, random, loopback]
    default: full
  k:
    description: How many random matchings (rounds) C(mode=random) takes.
    type: int
    default: 1
  seed:
    description:
      - Seed of C(mode=random) (an integer or a string). The same seed gives the same schedule; it has a fixed default
        because a filter is evaluated again each time its variable is read, and every evaluation must agree.
        Pass for example the date to test other pairs on each run.
    type: raw
    default: 0
  direction:
    description: V(alternate) tests each pair once, server as described above; V(both) tests each pair in both directions.
    type: str
    choices: [alternate, both]
    default: alternate
  round:
    description: Return only this round (counted from 1); the C(summary) still describes the whole schedule.
    type: int
  expand:
    description:
      - Add C(tests) and C(skipped) to each returned round, one entry per pair and rail.
      - Refused when it would build more than a million entries; expand one round at a time, or one node's tests.
    type: bool
    default: false
  node:
    description:
      - Keep, in each returned round, only the pair this node is in (what the node itself runs, on every rail), or
        nothing and C(idle=[node]) when it sits the round out.
      - What each host of a play asks for, O(N) per call - cheaper than selecting its tests from a whole expanded round
        in Jinja (C(selectattr) over the 16,384 tests of a 4,096-node round takes seconds).
    type: str
'''

EXAMPLES = r'''
- name: Plan a full pairwise run over all rails (gpu_hcas is [mlx5_0, ..., mlx5_7])
  ansible.builtin.set_fact:
    bench_plan: "{{ groups['gpu'] | hpc.gpu_fabric.pair_schedule_summary(gpu_hcas) }}"
  run_once: true

- name: Run the rounds one after the other
  ansible.builtin.include_tasks: round.yml
  loop: "{{ range(1, bench_plan.rounds + 1) | list }}"
  loop_control:
    loop_var: bench_round

# round.yml: this round's tests, one per pair and rail
- name: Announce the round
  ansible.builtin.debug:
    msg: "round {{ bench_round }} of {{ bench_plan.rounds }}: {{ bench_plan.tests_per_round[bench_round - 1] }} tests"
  run_once: true

- name: This node's tests in the round, one per rail (empty when the node sits the round out)
  ansible.builtin.set_fact:
    bench_tests: >-
      {{ (groups['gpu'] | hpc.gpu_fabric.pair_schedule(gpu_hcas, round=bench_round, expand=true, node=inventory_hostname))
         .rounds[0].tests }}

- name: A ring, then three random matchings with a seed of the day, on nodes whose HCAs differ
  ansible.builtin.debug:
    msg:
      - "{{ groups['gpu'] | hpc.gpu_fabric.pair_schedule(hcas_by_node, mode='ring') }}"
      - "{{ groups['gpu'] | hpc.gpu_fabric.pair_schedule(hcas_by_node, mode='random', k=3, seed=ansible_date_time.date) }}"
  vars:
    hcas_by_node: "{{ dict(groups['gpu'] | zip(groups['gpu'] | map('extract', hostvars, 'gpu_hcas'))) }}"
'''

RETURN = r'''
_value:
  description: The schedule.
  type: dict
  contains:
    mode:
      description: The mode.
      type: str
    direction:
      description: The direction.
      type: str
    seed:
      description: The seed of C(mode=random), null otherwise.
      type: raw
    rails:
      description:
        - One entry per rail - C(rail) (its index), C(hca) (the HCA name when all nodes that have the rail call it
          the same, else null), C(hcas) (node -> HCA name, for the nodes that have the rail), C(missing) (the nodes
          that do not, in node order).
      type: list
      elements: dict
    rounds:
      description:
        - Every round in order, or only the one asked for with O(round). C(round) is its number (from 1); C(servers)
          and C(clients) are parallel lists (pair j is C(servers[j]) -> C(clients[j])), the same pairs on every rail
          where both nodes have that rail; C(idle) lists the nodes with no pair in the round (the bye of an odd N).
        - With O(expand), C(tests) is one entry per pair and rail, C(server), C(client), C(rail) (index),
          C(server_hca), C(client_hca), C(pair_id) (the same for both directions, C(first<>second) in node order),
          and C(skipped) one per pair and rail not run, with C(missing) (the nodes without that rail).
      type: list
      elements: dict
    summary:
      description:
        - C(rounds) (the number, for "round k of N"), C(nodes), C(rails), C(pairs) (pair tests in all rounds),
          C(pairs_covered) (distinct unordered pairs; nodes for loopback), C(pairs_possible), C(pairs_per_round),
          C(tests) (pair x rail tests that run), C(tests_per_round), C(tests_skipped) (pair x rail left out because a
          node lacks the rail), C(mode), C(direction), C(seed), and C(notes) (what was adjusted or left out, in words).
      type: dict
'''

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _schedule


def pair_schedule(nodes, rails=None, mode='full', k=1, seed=0, direction='alternate', round=None, expand=False, node=None):
    try:
        return _schedule.schedule(nodes, rails, mode=mode, k=k, seed=seed, direction=direction,
                                  round_number=round, expand=boolean(expand, strict=True), node=node)
    except (_schedule.ScheduleError, TypeError) as error:
        raise AnsibleFilterError('pair_schedule: %s' % error)


def pair_schedule_summary(nodes, rails=None, mode='full', k=1, seed=0, direction='alternate'):
    try:
        return _schedule.summary(nodes, rails, mode=mode, k=k, seed=seed, direction=direction)
    except _schedule.ScheduleError as error:
        raise AnsibleFilterError('pair_schedule_summary: %s' % error)


class FilterModule(object):

    def filters(self):
        return {'pair_schedule': pair_schedule, 'pair_schedule_summary': pair_schedule_summary}
