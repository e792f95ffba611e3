# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
name: offline_bench
author: hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
short_description: Pairwise benchmark report from saved perftest outputs (playbook offline.yml)
version_added: 0.1.0
description:
  - Turns perftest client outputs parsed by M(hpc.gpu_fabric.perftest_run) with O(hpc.gpu_fabric.perftest_run#module:from_log)
    (the C(results) of a loop over the entries of C(offline_logs)) into the records the C(fabric_bench) role keeps,
    and returns what C(bench_report) makes of them - pairs with verdicts against the slower port's rate (from the
    snapshots' facts), GPU memory against host memory on the same pair, the N x N matrix - plus C(imported_logs).
  - The same file provides C(offline_logs) (log paths -> C(perftest) entries, named
    C(<server>__<client>__<rail>__<host|gpu>.txt), and C(collective) candidates, any other C(*.log), C(*.txt),
    C(*.json)) and C(offline_collective) (M(hpc.gpu_fabric.collective_bench) O(hpc.gpu_fabric.collective_bench#module:from_log)
    results -> the shape of C(fabric_collective_result) - the run over the most nodes is the fleet run, judged against
    the NICs of the snapshots; logs over a size cap and files the parser failed on are listed in C(imported_logs))
    and C(offline_snapshots) (a directory of snapshots -> each unpacked as data into C(<out>/offline/<node>/root) -
    files, directories and symlinks only, re-rooted, with caps on size and members; what was refused is returned
    per node, see C(docs/security.md)).
options:
  _input:
    description: The C(results) of the perftest_run loop; each item is an entry of C(offline_logs).
    type: list
    elements: dict
    required: true
  plans:
    description: Node -> C(bench_node_plan) of its facts (rails, port rates, nearest GPUs).
    type: dict
    required: true
  options:
    description: Thresholds C(bw_ratio), C(gpu_ratio), C(lat_max_us), as for C(bench_report).
    type: dict
    default: {}
'''

EXAMPLES = r'''
- name: Judge the pairs of the saved outputs
  ansible.builtin.set_fact:
    gpu_fabric_bench: "{{ parsed.results | hpc.gpu_fabric.offline_bench(plans, {'bw_ratio': 0.9}) }}"
'''

RETURN = r'''
_value:
  description: C(pairs), C(matrix), C(counters), C(verdicts), C(thresholds) as C(bench_report) returns them, and C(imported_logs).
  type: dict
'''

import os

from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils import _offline


def offline_logs(files):
    if not isinstance(files, (list, tuple)):
        raise AnsibleFilterError('offline_logs: expected a list of paths (or the files of ansible.builtin.find)')
    paths, refused = _offline.log_entries(files)
    return dict(_offline.classify(paths), refused=refused)


def offline_snapshots(directory, out_dir):
    # Runs on the controller and writes there: the unpacked trees are the controller's own
    # working copy, made in --check runs too (they change no node).
    if not isinstance(directory, str) or not os.path.isdir(directory):
        raise AnsibleFilterError('offline_snapshots: %r is not a directory of snapshots' % (directory,))
    if not isinstance(out_dir, str) or not out_dir:
        raise AnsibleFilterError('offline_snapshots: give the output directory')
    try:
        return _offline.unpack_snapshots(directory, out_dir)
    except OSError as exc:
        raise AnsibleFilterError('offline_snapshots: cannot unpack into %s: %s' % (out_dir, exc))


def offline_bench(results, plans, options=None):
    if not isinstance(plans, dict):
        raise AnsibleFilterError('offline_bench: plans must be a dict of node -> bench_node_plan')
    return _offline.bench_report(results or [], plans, options or {})


def offline_collective(results, hostvars, hosts, healthy=0.8, warn=0.7, refused=None):
    nodes_ib = {}
    for host in hosts or []:
        facts = (hostvars[host] if host in hostvars else {}).get('ansible_facts') or {}
        if 'gpu_fabric_ib' in facts:
            nodes_ib[host] = facts['gpu_fabric_ib']
    return _offline.collective_result(results or [], nodes_ib, float(healthy), float(warn), refused or [])


class FilterModule(object):

    def filters(self):
        return {
            'offline_logs': offline_logs,
            'offline_snapshots': offline_snapshots,
            'offline_bench': offline_bench,
            'offline_collective': offline_collective,
        }
