#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: culprit_search
short_description: Find the nodes and pairs of nodes that drag a fleet-wide collective down, in rounds of parallel runs
version_added: 0.1.0
description:
  - Runs after a collective over the whole fleet was not healthy. Each round starts C(hpc.gpu_fabric.collective_bench)
    runs over disjoint groups of nodes at once on the launcher node (the task's host), waits for all of them, and
    plans the next round from their verdicts; one line per round says what it ran and found.
  - Strategy C(rounds) (the default) takes the fewest rounds, the time a user waits. Bad groups are split eight ways
    and the parts all run; a group of 16 nodes or fewer runs node by node, each node beside a healthy reference.
    Pairs of nodes that are bad only together are searched by halving both sides of every candidate at once, in about
    log2(N) + 2 rounds (no search can average fewer than log2(N - 1)). Every node named runs again beside a second
    reference as soon as one is free, and the healthy nodes run together once at the end.
  - Strategy C(runs) (generalized binary splitting) spends about a third of the runs in several times the rounds, for
    clusters where node time is billed.
  - Runs on the controller through its action plugin; the runs themselves start on the task's host.
author:
  - hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Nothing runs in check mode; the search's start state is returned.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  nodes:
    description: The inventory names of the fleet whose collective was not healthy.
    type: list
    elements: str
    required: true
  names:
    description: The name the launcher reaches each node by (inventory name to C(ansible_host)); missing names are used as they are.
    type: dict
    default: {}
  reference:
    description: A node known to be healthy, outside O(nodes), to run a single suspect beside.
    type: str
  prior:
    description: Findings of C(hpc.gpu_fabric.fabric_report) (or inventory names); nodes with an error of their links, GPU-NIC
      paths or host are named from their facts, and run no benchmark.
    type: list
    elements: raw
    default: []
  from_facts:
    description: Add the findings of the nodes' own facts (as the report judges them, read from C(hostvars)) to O(prior).
    type: bool
    default: false
  pairs:
    description: The pairwise benchmark's report (C(hpc.gpu_fabric.bench_report)) or a list of C([node, node]); a pair it found bad is
      named at once when a group is bad although each of its parts is healthy.
    type: raw
  bench_pairs:
    description: Without O(pairs), the pairs this run's pairwise benchmark (role C(hpc.gpu_fabric.fabric_bench), same play) judged bad,
      read from its records.
    type: bool
    default: false
  strategy:
    description: C(rounds) for the fewest rounds, C(runs) for the fewest runs.
    type: str
    choices: [rounds, runs]
    default: rounds
  bench:
    description: The arguments of every C(hpc.gpu_fabric.collective_bench) run but C(hosts), C(fail_on_error) and C(from_log).
    type: dict
    default: {}
  timeout:
    description: A run's time limit in seconds (a minute more is given to its job); default the benchmark's own C(timeout).
    type: float
  delay:
    description: Seconds between two looks at the runs of a round.
    type: float
    default: 1
'''

EXAMPLES = r'''
- name: Search for the nodes that drag the fleet down
  hpc.gpu_fabric.culprit_search:
    nodes: "{{ ansible_play_hosts }}"
    bench:
      launcher: mpirun
      slots_per_host: 8
      max_bytes: 8G
    strategy: rounds
  run_once: true
  register: search
'''

RETURN = r'''
search:
  description: The search's final state. C(culprits) with C(basis) (runs, or facts), C(pairs), C(unresolved), C(notes), C(runs)
    (every run with its round, hosts, step, status and ratio), C(rounds), C(seconds) (the time the rounds took) and C(strategy).
  returned: always
  type: dict
lines:
  description: One line per round, as printed.
  returned: always
  type: list
  elements: str
'''

from ansible.module_utils.basic import AnsibleModule


def main():
    # Only reached when the action plugin is bypassed (a copy of the module alone).
    module = AnsibleModule(argument_spec=dict(nodes=dict(type='list', elements='str', required=True), names=dict(type='dict', default={}),
                                              reference=dict(type='str'), prior=dict(type='list', elements='raw', default=[]),
                                              from_facts=dict(type='bool', default=False), pairs=dict(type='raw'),
                                              bench_pairs=dict(type='bool', default=False),
                                              strategy=dict(type='str', choices=['rounds', 'runs'], default='rounds'),
                                              bench=dict(type='dict', default={}), timeout=dict(type='float'),
                                              delay=dict(type='float', default=1)),
                           supports_check_mode=True)
    module.fail_json(msg='culprit_search runs on the controller through its action plugin (hpc.gpu_fabric collection)')


if __name__ == '__main__':
    main()
