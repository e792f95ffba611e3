# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Saved benchmark outputs, turned into what a live run hands to the report (playbook offline.yml).

- perftest client outputs named ``<server>__<client>__<rail>__<host|gpu>.txt`` (parsed by
  perftest_run ``from_log``) become the records the fabric_bench role keeps, and then
  exactly what ``bench_report`` makes of them (the report's ``bench``);
- nccl-tests / rccl-tests / mccl outputs (parsed by collective_bench ``from_log``) become
  what the fabric_collective role leaves in ``fabric_collective_result`` (the report's
  ``collective``): the run over the most nodes is the fleet run, judged against the NICs
  of the snapshots as the role judges it.

A log carries no error counters (no ``counters_delta``), no server side and no culprit
search; the report simply has none of those.
"""

from __future__ import annotations

import os
import re

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _collective
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils import _bench

# Names and HCAs may hold single underscores (gpu_node_1, mlx5_1); '__' separates the fields.
PERFTEST_NAME_RE = re.compile(r'^(?P<server>.+?)__(?P<client>.+?)__(?P<rail>.+?)__(?P<memory>host|gpu)\.(?:txt|log)$')
COLLECTIVE_SUFFIXES = ('.log', '.txt', '.json')


def classify(paths):
    """Log paths -> {'perftest': [{path, server, client, rail, memory}], 'collective': [path]}.

    Any *.log/*.txt/*.json that is not named as a perftest pair is a collective candidate;
    whether it is one is the parser's call (an unrecognised file is reported, not fatal).
    """
    perftest, collective = [], []
    for path in sorted(paths or []):
        name = os.path.basename(path)
        match = PERFTEST_NAME_RE.match(name)
        if match:
            entry = match.groupdict()
            entry['path'] = path
            perftest.append(entry)
        elif name.endswith(COLLECTIVE_SUFFIXES):
            collective.append(path)
    return {'perftest': perftest, 'collective': collective}


def _rail(rail, plan):
    """(rail number, HCA name or None) from a file name's rail: an index into the node's HCAs, or a name."""
    hcas = (plan or {}).get('hcas') or []
    if rail.isdigit():
        index = int(rail)
        return index, hcas[index] if index < len(hcas) else None
    return (hcas.index(rail) if rail in hcas else rail), rail


def bench_records(results, plans):
    """perftest_run from_log results (a loop's ``results``, each with its ``item``) ->
    {client host: [records as the fabric_bench role keeps them]}."""
    records = {}
    for result in results or []:
        entry = result.get('item') or {}
        if not entry.get('server'):
            continue
        server, client = entry['server'], entry['client']
        rail, client_hca = _rail(entry['rail'], plans.get(client))
        _server_rail, server_hca = _rail(entry['rail'], plans.get(server))
        # The log's own banner names the client's device; it beats the plan's rail order.
        client_hca = ((result.get('settings') or {}).get('device')) or client_hca
        test = {'side': 'client', 'server': server, 'client': client, 'rail': rail, 'round': None,
                'memory': entry['memory'], 'server_hca': server_hca, 'client_hca': client_hca}
        if entry['memory'] == 'gpu':
            test['gpu'] = ((plans.get(client) or {}).get('gpu_by_hca') or {}).get(client_hca)
        outcome = dict(result)
        if result.get('failed') or not result.get('status'):
            outcome.update(status='failed', failure=result.get('failure') or {
                'kind': 'task_failed', 'message': result.get('msg') or 'perftest_run could not parse %s' % entry['path']})
        record = _bench._record(test, outcome, None, None)
        record['log'] = entry['path']
        records.setdefault(client, []).append(record)
    return records


def bench_report(results, plans, options=None):
    """bench_report's output (pairs, matrix, verdicts, thresholds) from perftest logs, plus
    ``imported_logs``: which file gave which pair."""
    records = bench_records(results, plans)
    nodes = {}
    for host in set(plans) | set(records):
        nodes[host] = {'records': records.get(host, []), 'plan': plans.get(host) or {}}
    report = _bench.report(nodes, options or {})
    report['imported_logs'] = sorted(
        ({'log': r['log'], 'server': r['server'], 'client': r['client'], 'rail': r['rail'], 'memory': r['memory'],
          'status': r['status']} for rs in records.values() for r in rs), key=lambda e: e['log'])
    return report


def _recognised(result):
    if result.get('failed'):
        return False
    return (result.get('failure') or {}).get('kind') != 'unparsed'


def collective_result(results, nodes_ib, healthy=_collective.HEALTHY_RATIO, warn=_collective.WARN_RATIO):
    """collective_bench from_log results (a loop's ``results``, each with its ``item``, the path)
    -> the shape of the fabric_collective role's ``fabric_collective_result``, or None.

    The run over the most hosts (then the most ranks) is the fleet run. A multi-node run is
    judged against the NICs of the snapshots (collective_expected: the median node's ACTIVE
    port rates / 8); a run on one node moves data over NVLink/xGMI, which the NICs say
    nothing about, so it is judged for failures and corruption only.
    """
    imported, runs = [], []
    for result in results or []:
        path = result.get('item')
        if not _recognised(result):
            imported.append({'log': path, 'recognised': False,
                             'reason': result.get('msg') or (result.get('failure') or {}).get('message')})
            continue
        hosts = sorted(set(result.get('hosts') or []))
        runs.append((-len(hosts), -len(result.get('ranks') or []), path, result, hosts))
    if not runs:
        return None
    runs.sort(key=lambda run: run[:3])
    fleet_hosts = runs[0][4]
    if len(fleet_hosts) > 1:
        # Rank host names are the nodes' own names; use the snapshots of those nodes when
        # they are all there, else every snapshot.
        chosen = dict((h, ib) for h, ib in (nodes_ib or {}).items() if h in fleet_hosts)
        expected = _collective.expected_busbw(chosen if len(chosen) == len(fleet_hosts) else (nodes_ib or {}))
    else:
        expected = {'gbs': None, 'basis': 'the run is on one node (NVLink/xGMI): the NICs do not bound it'}
    judged = []
    for _hosts, _ranks, path, result, hosts in runs:
        entry = dict(result)
        for key in ('item', 'ansible_loop_var', 'changed', 'failed', 'invocation', 'msg', 'verdict'):
            entry.pop(key, None)
        entry['verdict'] = _collective.judge(entry, expected['gbs'] if len(hosts) > 1 else None, healthy, warn)
        entry['log'] = path
        judged.append(entry)
        imported.append({'log': path, 'recognised': True, 'benchmark': entry.get('benchmark'), 'hosts': hosts,
                         'status': entry.get('status'), 'verdict': entry['verdict'].get('status')})
    fleet = judged[0]
    per_host = {}
    for rank in fleet.get('ranks') or []:
        per_host[rank.get('host')] = per_host.get(rank.get('host'), 0) + 1
    return {'expected': expected, 'ranks_per_node': min(per_host.values()) if per_host else None,
            'fleet': fleet, 'search': None, 'other_runs': judged[1:],
            'imported_logs': sorted(imported, key=lambda e: e['log'] or '')}
