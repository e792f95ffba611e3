# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
name: collective_verdict
author: hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
short_description: Judge a collective_bench result against the bandwidth of the NICs the ranks use
version_added: 0.1.0
description:
  - Returns C(status) V(ok) (busbw at least O(healthy) of the expectation), V(warning) (at least O(warn)),
    V(low), V(corrupt) (C(#wrong) > 0 or out-of-bounds values, whatever the bandwidth), V(failed) (the run
    failed) or V(unknown) (no expectation), with C(ratio), C(busbw_gbs), C(expected_gbs) and C(reasons).
  - Defaults - busbw at least 80 % of the theoretical link bandwidth (NDR 400 Gb/s = 50 GB/s, healthy from
    40 GB/s), below 70 % a configuration issue.
  - C(collective_local_verdict) (hostvars, hosts, expected, healthy, warn) judges per-node runs (launcher local) against
    the median of the other nodes (below O(healthy) of it is C(slow)) and against an expectation when given;
    C(collective_outcome) gives any collective_bench task result a verdict (a task that failed before running is V(failed)).
  - The same file provides C(collective_expected) (hostvars, hosts, HCAs - the smallest node's sum of ACTIVE
    port rates / 8, in GB/s, from C(gpu_fabric_ib)) and C(culprit_search_start), C(culprit_search_next),
    C(culprit_search_update), the halving search for the node that drags a fleet-wide run down (one culprit
    among N >= 4 nodes in at most 2 x ceil(log2 N) runs); C(culprit_search_start) also takes, as its third
    argument, the nodes the facts already blame - the others run first as a group and, healthy, become the
    reference each blamed node runs with.
options:
  _input:
    description: A collective_bench result.
    type: dict
    required: true
  expected_gbs:
    description: Expected busbw in GB/s (C(collective_expected), or a user-given figure for intra-node runs).
    type: float
    required: true
  healthy:
    description: Share of the expectation at or above which the run is healthy.
    type: float
    default: 0.8
  warn:
    description: Share at or above which a run below O(healthy) is a warning rather than low.
    type: float
    default: 0.7
  metric:
    description: V(max) judges the peak busbw over the sizes, V(avg) the tool's "Avg bus bandwidth".
    type: str
    default: max
    choices: [max, avg]
'''

EXAMPLES = r'''
- name: Judge the fleet-wide all_reduce
  ansible.builtin.set_fact:
    verdict: >-
      {{ allreduce | hpc.gpu_fabric.collective_verdict(
           (hostvars | hpc.gpu_fabric.collective_expected(groups['gpu'])).gbs) }}
'''

RETURN = r'''
_value:
  description: C(status), C(ratio), C(busbw_gbs), C(expected_gbs), C(reasons), and the thresholds used.
  type: dict
'''

from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _collective


def collective_verdict(result, expected_gbs, healthy=_collective.HEALTHY_RATIO, warn=_collective.WARN_RATIO, metric='max'):
    if metric not in ('max', 'avg'):
        raise AnsibleFilterError('collective_verdict: metric must be max or avg, not %r' % (metric,))
    if not 0 < float(warn) <= float(healthy) <= 1.5:
        raise AnsibleFilterError('collective_verdict: need 0 < warn <= healthy (got warn=%s, healthy=%s)' % (warn, healthy))
    return _collective.judge(result, float(expected_gbs) if expected_gbs else None, float(healthy), float(warn), metric)


def collective_local_verdict(hostvars, hosts, expected_gbs=None, healthy=_collective.HEALTHY_RATIO, warn=_collective.WARN_RATIO,
                             metric='max', name='__fabric_collective_local'):
    """Every node's own collective (launcher local), judged against its peers and the expectation."""
    if not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError('collective_local_verdict: hosts must be a list of inventory names')
    results = dict((host, (hostvars[host] if host in hostvars else {}).get(name)) for host in hosts)
    return _collective.judge_nodes(results, expected_gbs, float(healthy), float(warn), metric)


def collective_outcome(result):
    """A collective_bench task result with a verdict, even when the task failed before it ran."""
    return _collective.normalize(result)


def collective_expected(hostvars, hosts, hcas=None):
    if not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError('collective_expected: hosts must be a list of inventory names')
    nodes = {}
    for host in hosts:
        facts = (hostvars[host] if host in hostvars else {}).get('ansible_facts', {})
        if 'gpu_fabric_ib' in facts:
            nodes[host] = facts['gpu_fabric_ib']
    return _collective.expected_busbw(nodes, hcas or None)


def culprit_search_start(nodes, reference=None, prior=None):
    return _collective.search_start(list(nodes), reference, list(prior or []))


def culprit_search_next(state):
    return _collective.search_next(state)


def culprit_search_update(state, runs, verdicts):
    return _collective.search_update(state, runs, verdicts)


class FilterModule(object):

    def filters(self):
        return {
            'collective_verdict': collective_verdict,
            'collective_expected': collective_expected,
            'collective_local_verdict': collective_local_verdict,
            'collective_outcome': collective_outcome,
            'culprit_search_start': culprit_search_start,
            'culprit_search_next': culprit_search_next,
            'culprit_search_update': culprit_search_update,
        }
