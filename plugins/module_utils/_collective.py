# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Judging collective_bench results (the search for the nodes that drag a fleet-wide run down is _group_search.py).

Pure functions over collective_bench results and ib_link_facts; the module collective_bench
(expected_busbw_gbs) and the filters in
plugins/filter/collective.py and playbooks/benchmark.yml call them.
"""

from __future__ import annotations

import math
from typing import Any, Collection, Mapping

from ansible_collections.hpc.gpu_fabric.plugins.module_utils._shape import integer, mapping, mappings, number, sequence, text

# A healthy fabric's all_reduce busbw reaches over 90 % of its NICs' rate (two DGX A100 over
# 8 x 200 Gb/s HDR each: 188.53 of 200 GB/s, tests/fixtures/public/nccl_tests/
# deepops_dgx_a100_2node_k8s_error_col.txt); healthy from 80 % leaves room for the run's own
# variation (one 400 Gb/s NDR NIC = 50 GB/s: healthy from 40 GB/s). Below 70 % the cause is
# configuration, not noise: without GPUDirect RDMA two MetaX C500 nodes measure 4.57 GB/s
# against 24.38 GB/s with it (tests/fixtures/seeds/000_mccl_allreduce_2node_16gpu_*.txt).
HEALTHY_RATIO = 0.8
WARN_RATIO = 0.7


def thresholds(healthy: object = None, warn: object = None) -> tuple[float, float]:
    """The collective's thresholds as (healthy, warn): None or '' (unset) is the default above, else a
    finite number - every -e key=value arrives as a string; ValueError unless 0 < warn <= healthy.
    The one check: module collective_bench, the collective filters and role fabric_collective's plan
    (filter collective_thresholds, before any run) all call it."""
    values = []
    for name, value, default in (('healthy_ratio', healthy, HEALTHY_RATIO), ('warn_ratio', warn, WARN_RATIO)):
        if value is None or value == '':
            values.append(default)
            continue
        try:
            value = None if isinstance(value, bool) else float(value)  # type: ignore[arg-type]  # refused below if not a number
        except (TypeError, ValueError):
            value = None
        if value is None or not math.isfinite(value):
            raise ValueError('%s must be a number, got %r' % (name, healthy if name == 'healthy_ratio' else warn))
        values.append(value)
    if not 0 < values[1] <= values[0]:
        raise ValueError('need 0 < warn_ratio <= healthy_ratio (got %s and %s)' % (values[1], values[0]))
    return values[0], values[1]


def node_nic_gbs(ib: object, hcas: Collection[object] | None = None) -> float | None:
    """GB/s a node's network can carry for a collective: the sum of its ACTIVE ports' rates
    (of ``hcas`` when given, e.g. the HCAs NCCL reported using), in GB/s (Gb/s / 8).

    Why the sum: NCCL spreads its rings/channels over the node's NICs (one or more channels
    per NIC), and a ring crosses each node boundary once, so a NIC carries 2(n-1)/n x S/k of
    an all-reduce of S bytes over k NICs; busbw is defined as algbw x 2(n-1)/n (nccl-tests
    doc/PERFORMANCE.md), hence busbw <= k x NIC rate. One 400 Gb/s NIC gives 50 GB/s.
    """
    total = 0.0
    for device in mappings(mapping(ib).get('devices')):
        if hcas and device.get('name') not in hcas:
            continue
        for port in mappings(device.get('ports')):
            rate = number(port.get('rate_gbps'))
            if port.get('state') == 'ACTIVE' and rate and rate > 0:
                total += rate
    return total / 8.0 if total and math.isfinite(total) else None


def expected_busbw(nodes_ib: Mapping[str, object] | None, hcas: Collection[object] | None = None) -> dict[str, Any]:
    """What the fleet should reach: the NIC bandwidth of a typical node (the upper median).

    Not the smallest node's: a node with a degraded or down port would lower the bar to its
    own level and hide itself; the median is what the healthy majority carries, and a node
    below it is what the culprit search must find. ``nodes_ib``: {host: gpu_fabric_ib}.
    Returns {gbs, basis}; gbs None when no node has an active port (an intra-node run needs
    a user-given expectation).
    """
    nodes = nodes_ib or {}
    values = sorted((gbs, host) for host, gbs in ((h, node_nic_gbs(nodes[h], hcas)) for h in sorted(nodes))
                    if gbs is not None)
    if not values:
        return {'gbs': None, 'basis': 'no ACTIVE RDMA port on any node: give expected_busbw_gbs'}
    gbs = values[len(values) // 2][0]
    below = [host for value, host in values if value < gbs]
    return {'gbs': round(gbs, 3), 'below_median': below,
            'basis': 'median of %d node(s) of the sum of ACTIVE port rates / 8' % len(values)}


def judge(result: object, expected_gbs: Any, healthy: float = HEALTHY_RATIO, warn: float = WARN_RATIO, metric: str = 'max') -> dict[str, Any]:
    """Verdict of one collective_bench result: ok, warning, low, corrupt, failed or unknown.

    ``metric``: 'max' judges the peak busbw over the sizes (the large messages, where the
    link is the limit; the average of nccl-tests includes tiny sizes that no network fills),
    'avg' the tool's own "Avg bus bandwidth". Data corruption (#wrong > 0 or out-of-bounds
    values) is an error whatever the bandwidth.
    """
    # A result is what a node returned: any field may hold any type (_shape).
    result = mapping(result)
    reasons: list[str] = []
    verdict: dict[str, Any] = {'expected_gbs': expected_gbs, 'healthy_ratio': healthy, 'warn_ratio': warn, 'metric': metric}
    wrong = integer(result.get('wrong_total'))
    oob = mapping(result.get('out_of_bounds'))
    if (wrong or 0) > 0 or (integer(oob.get('count')) or 0) > 0 or oob.get('ok') is False:
        reasons.append('data corruption: #wrong total %s, out-of-bounds values %s' % (wrong, oob.get('count')))
        verdict.update(status='corrupt', reasons=reasons, ratio=None)
        return verdict
    if result.get('status') != 'ok':
        failure = mapping(result.get('failure'))
        reasons.append('%s: %s' % (failure.get('kind', 'failed'), failure.get('message', result.get('msg', ''))))
        verdict.update(status='failed', reasons=reasons, ratio=None)
        return verdict
    value = number(result.get('max_busbw_gbs' if metric == 'max' else 'avg_busbw_gbs'))
    verdict['busbw_gbs'] = value
    if value is None or not number(expected_gbs):
        reasons.append('no bandwidth to judge' if value is None else 'no expectation (no NIC rate, no expected_busbw_gbs)')
        verdict.update(status='unknown', reasons=reasons, ratio=None)
        return verdict
    ratio = round(value / float(expected_gbs), 3)
    verdict['ratio'] = ratio
    if ratio >= healthy:
        status = 'ok'
    else:
        status = 'warning' if ratio >= warn else 'low'
        reasons.append('%s busbw %.2f GB/s is %.0f %% of the expected %.2f GB/s (healthy >= %.0f %%, warning >= %.0f %%)'
                       % (metric, value, 100 * ratio, expected_gbs, 100 * healthy, 100 * warn))
    transport = mapping(result.get('transport'))
    # Explanations of a shortfall only: a healthy single-node run over NVLink also shows
    # the Socket plugin and no GDR, which then mean nothing.
    if status == 'ok':
        transport = {}
    if transport.get('gdr') is False:
        reasons.append('GPUDirect RDMA was not used (the NCCL log says so): data went through host memory')
    if transport.get('net') == 'Socket':
        reasons.append('NCCL used the Socket transport, not RDMA')
    dropped = dropped_text(result)
    if dropped:
        # Said on top of the verdict: it stands on the records that were kept.
        reasons.append(dropped)
    verdict.update(status=status, reasons=reasons)
    return verdict


def dropped_text(result: object) -> str:
    """What the parser did not keep past its caps on records (module_utils/_nccl.py: ``dropped``), in words; '' if nothing."""
    dropped = mapping(mapping(result).get('dropped'))
    counts = ['%d %s' % (integer(count) or 0, text(kind)) for kind, count in sorted(dropped.items()) if integer(count)]
    return ('judged on the records kept: %s past the caps on records not kept (more than a fabric run prints)'
            % ', '.join(counts)) if counts else ''


def normalize(result: object) -> dict[str, Any]:
    """A collective_bench task result of any shape as a result with a verdict: a task that
    failed before the benchmark ran (bad arguments, no launcher) has only ``failed`` and ``msg``."""
    result = dict(mapping(result))
    if not isinstance(result.get('verdict'), dict):
        result.pop('verdict', None)
    if result.get('skipped') and result.get('status') is None:
        result.update(status='skipped', failure=None,
                      verdict={'status': 'skipped', 'reasons': [result.get('skip_reason') or 'skipped'], 'ratio': None})
    if not result.get('verdict'):
        message = text(result.get('msg')) or 'the task returned no result'
        result.setdefault('status', 'failed')
        result.setdefault('failure', {'kind': 'not_run', 'message': message})
        result['verdict'] = {'status': 'failed', 'reasons': ['not run: %s' % message], 'ratio': None}
    return result


# A run over one node's GPUs against their NVLink total (NCCL's totalBw): healthy from HEALTHY_RATIO (two
# H200 over NV18 reached 0.886 of it, tests/fixtures/real/h200x4-split/nodeA.txt), an error only below half.
# A ring does not use every NVLink of a GPU on every topology (GPUs that are not all joined to one NVSwitch),
# nor reach the peak at small fabric_collective_max_bytes: between the two such a node is a warning. A GPU
# pair forced through host memory or a socket measured 0.075 and 0.01 of it (nodeB_shm.txt, nodeB.txt).
NVLINK_LOW_RATIO = 0.5

# The transports of NCCL's connection lines between two GPUs of one node (src/transport/*.cc): P2P
# (NVLink or PCIe peer-to-peer), NVLS (NVLink SHARP), SHM (through host memory), NET (a network
# transport looped back: neither P2P nor SHM was allowed).
DIRECT_INTRA = ('P2P', 'NVLS')


def gpu_interconnect(transport: object) -> dict[str, Any] | None:
    """The GPUs' own interconnect of a node as NCCL detected it (GRAPH lines of a run over one
    node): {kind: NVLink|PCIe, gbs, basis}, or None when the run did not print its topology.

    ``gbs`` is NCCL's totalBw: the largest per-GPU sum of NVLink bandwidth (src/graph/search.cc
    getTotalBw; per link 20.6 GB/s on Hopper, SM90_NVLINK_BW in src/graph/topo.h), else the GPU's
    PCIe bandwidth. All-reduce busbw over NVLink reaches most of it: 328.62 of 370.8 GB/s
    on two H200 (NV18), tests/fixtures/real/h200x4-split/nodeA.txt."""
    best: dict[str, Any] | None = None
    for host, raw in sorted(mapping(mapping(transport).get('topology')).items()):
        entry = mapping(raw)
        total = number(entry.get('total_bw_gbs'))
        links = [text(kind) for kind in sequence(entry.get('links'))]
        if not total or total <= 0:
            continue
        kind = 'NVLink' if 'NVL' in links else 'PCIe'
        if best is None or total > best['gbs']:
            best = {'kind': kind, 'gbs': round(total, 3), 'host': host,
                    'basis': "NCCL's topology of the node (totalBw): GPUs joined by %s, %.1f GB/s per GPU" % (kind, total)}
    return best


def intra_node(transport: object) -> dict[str, Any]:
    """{host: {'kinds': {P2P|SHM|NVLS|NET: connections}, 'via': [...], 'direct': bool}} of the
    connections between two GPUs of one host in a run."""
    found: dict[str, Any] = {}
    for host, raw in sorted(mapping(mapping(transport).get('intra_by_host')).items()):
        entry = mapping(raw)
        kinds = dict((kind, integer(entry.get(kind)) or 0) for kind in ('P2P', 'NVLS', 'SHM', 'COLLNET', 'NET')
                     if (integer(entry.get(kind)) or 0) > 0)
        if kinds:
            found[host] = {'kinds': kinds, 'via': [text(v) for v in sequence(entry.get('via'))][:4],
                           'direct': any(kind in kinds for kind in DIRECT_INTRA)}
    return found


def judge_nodes(results: Mapping[str, object] | None, expected_gbs: Any = None, healthy: float = HEALTHY_RATIO, warn: float = WARN_RATIO,
                metric: str = 'max') -> dict[str, Any]:
    """Per-node collectives (launcher local: each node over its own GPUs), each judged against
    the expectation when one is given and against its peers: a node whose busbw is below
    ``healthy`` x the median of the other nodes' is ``slow``. Intra-node busbw is NVLink, PCIe
    or xGMI, not the NICs, so no expectation is derived from the network.

    ``results``: {host: collective_bench result}. Returns {hosts: {host: {status, busbw_gbs,
    peer_median_gbs, peer_ratio, verdict, ...}}, median_busbw_gbs, slow: [hosts], failed: [hosts]}.
    """
    key = 'max_busbw_gbs' if metric == 'max' else 'avg_busbw_gbs'
    hosts: dict[str, dict[str, Any]] = {}
    values: dict[str, float] = {}
    given = results or {}
    for host in sorted(given):
        result = normalize(given[host])
        interconnect = gpu_interconnect(result.get('transport'))
        # The network transport a run over one node's GPUs names (Socket, no GDR) says nothing of it:
        # only the connections between its GPUs do (intra_node).
        local = dict(result, transport={})
        if result.get('status') != 'ok':
            verdict = result['verdict']
        elif expected_gbs is not None:
            verdict = dict(judge(local, expected_gbs, healthy, warn, metric), basis='given (fabric_collective_expected_busbw_gbs)')
        elif interconnect and interconnect['kind'] == 'NVLink':
            # Below the healthy share a warning down to NVLINK_LOW_RATIO, an error only below it (see there).
            verdict = dict(judge(local, interconnect['gbs'], healthy, min(warn, NVLINK_LOW_RATIO), metric),
                           basis=interconnect['basis'])
        else:
            verdict = result['verdict']
        if expected_gbs is None and result.get('status') == 'ok' and verdict.get('status') in ('unknown', None):
            # PCIe alone gives no expectation: peer-to-peer through a CPU's root complex runs far below the
            # link rate, by platform ("CPUs are very, very bad PCI switches", NVIDIA/nccl#465).
            verdict = dict(verdict, status='measured', basis=interconnect['basis'] if interconnect else None, reasons=[
                'no expectation given and %s: judged against its peers only' % (
                    'its GPUs are joined by PCIe only' if interconnect else 'the run printed no GPU topology')])
        entry = {'status': result.get('status'), 'verdict': verdict, 'busbw_gbs': number(result.get(key)),
                 'avg_busbw_gbs': number(result.get('avg_busbw_gbs')), 'max_busbw_gbs': number(result.get('max_busbw_gbs')),
                 'wrong_total': integer(result.get('wrong_total')), 'failure': result.get('failure'),
                 'ranks': len(sequence(result.get('ranks'))) or None, 'transport': result.get('transport'),
                 'results': sequence(result.get('results')), 'benchmark': result.get('benchmark'),
                 'versions': result.get('versions'), 'interconnect': interconnect,
                 'intra': intra_node(result.get('transport')), 'env': mapping(result.get('env'))}
        if entry['ranks'] == 1 and result.get('status') == 'ok':
            # busbw = algbw x 2(n-1)/n for all-reduce (nccl-tests doc/PERFORMANCE.md): 0 for one
            # rank, which moves no data between GPUs. Measured, not comparable with peers.
            entry['verdict'] = dict(verdict, status='measured', reasons=[
                'one rank: no data crosses between GPUs, busbw is 0 by definition (nccl-tests doc/PERFORMANCE.md)'])
        elif result.get('status') == 'ok' and entry['busbw_gbs'] is not None:
            values[host] = entry['busbw_gbs']
        hosts[host] = entry
    slow: list[str] = []
    for host, value in sorted(values.items()):
        peers = sorted(v for h, v in values.items() if h != host)
        if not peers:
            continue
        middle = len(peers) // 2
        median = peers[middle] if len(peers) % 2 else (peers[middle - 1] + peers[middle]) / 2.0
        entry = hosts[host]
        entry['peer_median_gbs'] = round(median, 3)
        entry['peer_ratio'] = round(value / median, 3) if median else None
        if median and value < healthy * median:
            slow.append(host)
            entry['slow'] = True
    every = sorted(values.values())
    fleet_median: float | None = None
    if every:
        middle = len(every) // 2
        fleet_median = every[middle] if len(every) % 2 else (every[middle - 1] + every[middle]) / 2.0
    return {'hosts': hosts, 'median_busbw_gbs': round(fleet_median, 3) if fleet_median is not None else None, 'metric': metric,
            'healthy_ratio': healthy, 'warn_ratio': warn, 'expected_gbs': expected_gbs, 'slow': slow,
            'failed': sorted(h for h, e in hosts.items() if e['verdict'].get('status') in ('failed', 'corrupt')),
            'bad': sorted(h for h, e in hosts.items() if e['verdict'].get('status') in ('warning', 'low'))}


def run_host(name: str, nodes: Mapping[str, Any]) -> str | None:
    """The inventory host a name of NCCL's log (gethostname cut at the first dot) stands for, or None."""
    if name in nodes:
        return name
    matches = [host for host in nodes if host.split('.')[0] == name]
    return matches[0] if len(matches) == 1 else None
