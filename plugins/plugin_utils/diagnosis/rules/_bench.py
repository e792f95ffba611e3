# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Rules over what the pairwise benchmark measured (bench.json): each pair that failed or was
slow, the nodes and records it could not test, the tests that never reached the hardware, the
counters that rose under load."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Set, Tuple

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings as F
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._findings import Finding, finding
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._rule import Fleet, rule
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._gdr import BEYOND_GDR_LEVEL, natural_key
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._window import LOSS_COUNTERS
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench

# NCCL_NET_GDR_LEVEL default (PXB, module_utils/_gdr.py): a GPU farther from its NIC than this is not used for GDR.
FAR = BEYOND_GDR_LEVEL


def pair_subject(pair: Dict[str, Any]) -> str:
    return '%s->%s rail %s %s' % (pair['server'], pair['client'], pair.get('rail'), pair.get('memory'))


def pair_path(pair: Dict[str, Any]) -> List[Tuple[Any, ...]]:
    """The places a pair's test went through (_bench.report()'s entry): both nodes, the HCA of
    its rail at either end and, for host memory, that HCA's way to host memory (('hca_host', host,
    hca): the PCIe bridges above it, _pcie_rules._places), for GPU memory, each side's GPU and its
    PCIe path to that HCA (a bridge on it sits on that ('gpu_nic', ...) place). What the entry does
    not name is not on the path (fail closed: nothing there explains it)."""
    path: List[Tuple[Any, ...]] = []
    for side in ('server', 'client'):
        host, hca, gpu = pair.get(side), pair.get('%s_hca' % side), pair.get('%s_gpu' % side)
        if not host:
            continue
        path.append(('node', host))
        if hca:
            path.append(('hca', host, hca))
            if pair.get('memory') != 'gpu':
                path.append(('hca_host', host, hca))
        if pair.get('memory') == 'gpu' and gpu:
            path.append(('gpu', host, gpu))
            if hca:
                path.append(('gpu_nic', host, gpu, hca))
    return path


def _not_tested(bench: Dict[str, Any]) -> List[Finding]:
    """Fail closed: what the benchmark could not test is said, with why (no HCA, one node, no perftest)."""
    found = []
    if bench.get('skipped'):
        # The run, and every node it left out (the linker adds the nodes it knows).
        found.append(finding(F.BENCH_NOT_RUN, None, 'pairwise',
                             dict({'skipped': bench['skipped'], 'excluded': bench.get('excluded') or {}},
                                  **({'split': True} if bench.get('split') is True else {})),
                             'the pairwise benchmark did not run: %s' % bench['skipped'], test=bench.get('test') or 'ib_write_bw',
                             path=[('run',)] + [('node', host) for host in sorted(bench.get('excluded') or {})]))
    for host, why in sorted((bench.get('excluded') or {}).items()):
        # The node, and its HCAs where the linker knows them.
        found.append(finding(F.BENCH_NODE_NOT_TESTED, host, 'node', {'reason': why},
                             '%s was left out of the pairwise benchmark: %s' % (host, why), path=[('node', host)]))
    for host, entry in sorted((bench.get('records_malformed') or {}).items(), key=lambda item: natural_key(item[0])):
        # Fail closed: a record that could not be placed was dropped, and the tests it held were not judged.
        entry = entry if isinstance(entry, dict) else {}
        found.append(finding(F.BENCH_RECORDS_MALFORMED, None, 'pairwise',
                             {'node': host, 'source': entry.get('source'), 'dropped': entry.get('dropped'),
                              'records': list(entry.get('records') or [])[:_bench.MALFORMED_NAMED]},
                             '%s record(s) of %s could not be judged and were dropped (%s): %s' % (
                                 entry.get('dropped'), host, entry.get('source'), '; '.join(entry.get('records') or [])),
                             path=[('run',), ('node', host)]))
    return found


def _pair_code(pair: Dict[str, Any], bench: Dict[str, Any], host_ok: Set[Tuple[Any, ...]]) -> Tuple[str, bool]:
    """Which symptom a pair that is not ok shows, and whether its GPU memory was slow against host memory."""
    ratio, gpu_vs_host = _bench.thresholds(bench.get('thresholds'))['gpu_ratio'], pair.get('gpu_vs_host')
    gpu_low = pair.get('memory') == 'gpu' and pair.get('status') == 'ok' and gpu_vs_host is not None and ratio is not None \
        and gpu_vs_host < ratio
    code = F.BENCH_PAIR_FAILED if pair.get('verdict') == 'failed' else (F.BENCH_GPU_MEMORY_LOW if gpu_low else F.BENCH_PAIR_LOW)
    if code == F.BENCH_PAIR_FAILED and pair.get('memory') == 'gpu' and (pair['server'], pair['client'], pair.get('rail')) in host_ok:
        # The link works (host memory passed on the same pair and rail): GPU memory itself could not be
        # used, e.g. ibv_reg_mr refused without a peer-memory client - the IB+GPU layer's symptom.
        code = F.BENCH_GPU_MEMORY_FAILED
    return code, gpu_low


def _pair_symptom(pair: Dict[str, Any], bench: Dict[str, Any], host_ok: Set[Tuple[Any, ...]]) -> Finding:
    code, gpu_low = _pair_code(pair, bench, host_ok)
    severity, cause = 'error', '; '.join(pair.get('reasons') or [])
    if gpu_low and pair.get('gpu_distance') in FAR:
        # Topology, not a fault of the pair: no GPU sits near this HCA (a storage NIC, or a rail wired to
        # the other socket). NCCL does not use GPUDirect RDMA that far by default (NCCL_NET_GDR_LEVEL
        # PXB), so jobs never see this; a compute-rate NIC without a near GPU is GPU_NIC_FAR, once per node.
        severity = 'info'
        cause += ('; the nearest GPU of this HCA is %s away, so GPU memory through it crosses the socket'
                  % pair['gpu_distance'])
    item = finding(code, None, pair_subject(pair),
                   {'bw_avg_gbps': pair.get('bw_avg_gbps'), 'port_rate_gbps': pair.get('port_rate_gbps'),
                    'gpu_vs_host': pair.get('gpu_vs_host'), 'gpu_distance': pair.get('gpu_distance'),
                    'memory': pair.get('memory'), 'failure': pair.get('failure'),
                    'server_failure': pair.get('server_failure'),
                    # Which end's failure made the test fail (what a root must explain: F.explains).
                    'failed_side': _bench.failure_cause(pair) if pair.get('verdict') == 'failed' else None},
                   cause, severity=severity, remedy=None if severity == 'error' else 'no_gpu_near',
                   path=pair_path(pair))
    item['hosts'] = [pair['server'], pair['client']]
    return item


def _pairs(bench: Dict[str, Any]) -> List[Finding]:
    """Each pair test that failed or was slow; the tests that never reached the hardware, said once."""
    found = []
    host_ok = set((p['server'], p['client'], p.get('rail')) for p in bench.get('pairs') or []
                  if p.get('memory') == 'host' and p.get('verdict') == 'ok')
    broken = []
    for pair in bench.get('pairs') or []:
        if pair.get('verdict') == 'ok':
            continue
        cause_of = _bench.not_reached(pair)
        if cause_of is not None:
            # Never reached the hardware (its beacon port taken, perftest missing): the run's failure, said
            # once below; no device verdict follows from it.
            broken.append((pair, cause_of))
            continue
        found.append(_pair_symptom(pair, bench, host_ok))
    if broken:
        found.append(_run_broken(broken))
    return found


def _counters_under_load(bench: Dict[str, Any]) -> List[Finding]:
    """One finding per HCA whose counters rose, its tests in evidence: a port flapping through the
    whole benchmark is one fault, not one per test."""
    found = []
    rises: Dict[Tuple[Any, Any], List[Dict[str, Any]]] = {}
    # RoCE loss counters of a port whose tests had their window read are the window rules' (rules/_window.py:
    # ROCE_LOSSLESS_LOSS, ROCE_CONGESTION): no cable fault.
    roce = set((w.get('host'), w.get('hca')) for w in bench.get('windows') or [] if (w.get('window') or {}).get('roce'))
    for rise in bench.get('counters') or []:
        if (rise['host'], rise['hca']) in roce:
            rise = dict(rise, increase=dict((k, v) for k, v in (rise.get('increase') or {}).items() if k not in LOSS_COUNTERS))
            if not rise['increase']:
                continue
        rises.setdefault((rise['host'], rise['hca']), []).append(rise)
    for (host, hca), items in sorted(rises.items(), key=lambda item: (item[0][0], natural_key(item[0][1]))):
        total: Dict[str, int] = {}
        for rise in items:
            for name, value in (rise.get('increase') or {}).items():
                total[name] = total.get(name, 0) + (value or 0)
        tests = [dict((k, rise.get(k)) for k in ('pair', 'rail', 'memory', 'round', 'increase', 'verdicts')) for rise in items]
        found.append(finding(F.IB_ERRORS_UNDER_LOAD, host, hca, {'increase': total, 'tests': tests},
                             'error counters of %s rose during %d test(s) of the benchmark (%s): %s' % (
                                 hca, len(items), ', '.join(sorted(set(r['pair'] for r in items)))[:300],
                                 ', '.join('%s +%d' % kv for kv in sorted(total.items()))),
                             hca=hca, at=[('hca', host, hca)], path=[('hca', host, hca)]))
    return found


def bench_findings(bench: Optional[Dict[str, Any]]) -> List[Finding]:
    bench = bench or {}
    return _not_tested(bench) + _pairs(bench) + _counters_under_load(bench)


# How many causes a BENCH_RUN_BROKEN names in its text (all are in its evidence, up to RUN_BROKEN_CAUSES).
_CAUSES_SAID = 6
RUN_BROKEN_CAUSES = 100


def _run_broken(broken: List[Tuple[Dict[str, Any], Dict[str, Any]]]) -> Finding:
    """One BENCH_RUN_BROKEN for the pair tests that never reached the hardware (``broken``: [(pair,
    _bench.not_reached(pair))]): each cause (a node's message, as the tool or perftest_run said it) with its nodes
    and tests; on the run, not on a node (nothing was measured of any node)."""
    causes: Dict[Tuple[Any, Any, str], Set[str]] = {}
    for pair, cause in broken:
        # Each end's own cause where both could not set up (both beacons' ports taken), not only the one that decided.
        sides = (('server', pair.get('server_failure')), ('client', pair.get('failure')))
        ends: List[Tuple[Any, Any]] = [(pair.get(side), failure) for side, failure in sides if _bench.never_reached(failure)]
        for host, failure in ends or [(cause['host'], cause)]:
            causes.setdefault((host, failure.get('kind'), failure.get('message') or ''), set()).add(pair_subject(pair))
    listed = sorted(causes.items(), key=lambda item: (natural_key(item[0][0] or ''), item[0][1], item[0][2]))
    nodes = sorted(set(host for pair, _c in broken for host in (pair.get('server'), pair.get('client')) if host), key=natural_key)
    failing = sorted(set(host for (host, _k, _m) in causes if host), key=natural_key)
    said = '; '.join('%s: %s: %s' % (host or '?', kind, message) for (host, kind, message), _t in listed[:_CAUSES_SAID])
    if len(listed) > _CAUSES_SAID:
        said += '; and %d more cause(s) in the evidence' % (len(listed) - _CAUSES_SAID)
    return finding(F.BENCH_RUN_BROKEN, None, 'pairwise',
                   {'tests': len(broken), 'nodes': nodes, 'failed_on': failing, 'causes_total': len(listed),
                    'causes': [{'host': host, 'kind': kind, 'message': message, 'tests': len(tests),
                                'subjects': sorted(tests)[:20]} for (host, kind, message), tests in listed[:RUN_BROKEN_CAUSES]]},
                   '%d pair test(s) over %s never reached the hardware: the benchmark could not set them up on %s (%s). '
                   'They say nothing of any device; those pairs were not tested' % (
                       len(broken), ', '.join(nodes[:20]) + (' and %d more' % (len(nodes) - 20) if len(nodes) > 20 else ''),
                       ', '.join(failing[:20]) + (' and %d more' % (len(failing) - 20) if len(failing) > 20 else ''), said),
                   path=[('run',)] + [('node', host) for host in nodes])


# NCCL variables that forbid a transport between GPUs of one node (NCCL docs, Environment Variables):


@rule(produces=(F.BENCH_NOT_RUN, F.BENCH_NODE_NOT_TESTED, F.BENCH_RECORDS_MALFORMED, F.BENCH_PAIR_FAILED, F.BENCH_PAIR_LOW,
                F.BENCH_GPU_MEMORY_LOW, F.BENCH_GPU_MEMORY_FAILED, F.BENCH_RUN_BROKEN, F.IB_ERRORS_UNDER_LOAD), parts=('bench',))
def pairwise(fleet: Fleet, _findings: List[Finding]) -> List[Finding]:
    return bench_findings(fleet.bench) if fleet.bench else []
