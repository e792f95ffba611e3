# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Diagnosis: pure rules over every host's facts and the benchmark results -> findings.

Bottom-up, as seed 000 teaches: the IB layer (ports, rates, counters, MTU, RoCE GIDs), then
IB+GPU (peer memory and why, ACS, NUMA), then what the benchmarks measured (pairs, GPU vs
host memory, the collective). A finding (DESIGN.md): code, layer, severity, host, subject,
evidence, cause, remedy. A higher-layer finding that a lower-layer one on the same host
explains gets ``explained_by`` (that finding's id): the report shows the roots, each with
the symptoms it causes, not twenty symptoms.
"""

from __future__ import annotations

from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import ERROR_COUNTERS

LAYERS = ('ib', 'ib_gpu', 'host', 'benchmark', 'collective')
SEVERITIES = ('info', 'warning', 'error')
# NCCL_NET_GDR_LEVEL default (PXB): a GPU farther from its NIC than this is not used for GDR.
FAR = ('PHB', 'NODE', 'SYS')
_DISTANCE = ('PIX', 'PXB', 'PHB', 'NODE', 'SYS')


def finding(code, layer, severity, host, subject, evidence, cause, remedy):
    return {'id': '%s@%s/%s' % (code, host or 'fleet', subject or '-'), 'code': code, 'layer': layer, 'severity': severity,
            'host': host, 'subject': subject, 'evidence': evidence, 'cause': cause, 'remedy': remedy, 'explained_by': None}


# ---------------------------------------------------------------------------- IB layer

def ib_findings(host, ib):
    found = []
    for device in (ib or {}).get('devices') or []:
        ports = device.get('ports') or []
        for port in ports:
            subject = '%s/%s' % (device['name'], port.get('port'))
            if port.get('state') != 'ACTIVE':
                why = ('no link partner (cable, transceiver or switch port)' if port.get('phys_state') == 'Polling'
                       else 'the link is down or disabled')
                found.append(finding(
                    'IB_PORT_DOWN', 'ib', 'error', host, subject,
                    {'state': port.get('state'), 'phys_state': port.get('phys_state')},
                    'port is %s, physical state %s: %s' % (port.get('state'), port.get('phys_state'), why),
                    'check the cable and the switch port (iblinkinfo, ibstat %s); a disabled port: ibportstate enable'
                    % device['name']))
                continue
            others = [p.get('rate_gbps') for d in (ib or {}).get('devices') or [] for p in d.get('ports') or []
                      if p is not port and p.get('state') == 'ACTIVE' and p.get('link_layer') == port.get('link_layer')
                      and p.get('rate_gbps')]
            best = max(others) if others else None
            if port.get('width') == '1X' or (best and port.get('rate_gbps') and port['rate_gbps'] < best):
                found.append(finding(
                    'IB_RATE_DEGRADED', 'ib', 'error', host, subject,
                    {'rate': port.get('rate'), 'width': port.get('width'), 'others_gbps': best},
                    'the link trained at %s (%s), below the node\'s other %s ports (%s Gb/s): every test and every '
                    'ring through it runs at this rate' % (port.get('rate'), port.get('width'), port.get('link_layer'), best or '?'),
                    'reseat or replace the cable/transceiver, then check with iblinkinfo that it trains at full width'))
            counters = dict((k, v) for k, v in (port.get('counters') or {}).items() if k in ERROR_COUNTERS and v)
            if counters or port.get('counters_saturated'):
                found.append(finding(
                    'IB_ERROR_COUNTERS', 'ib', 'warning', host, subject,
                    {'counters': counters, 'saturated': port.get('counters_saturated') or []},
                    'the port has counted link errors since the counters were last cleared%s' % (
                        ' (some saturated: the real count is unknown)' if port.get('counters_saturated') else ''),
                    'clear the counters (perfquery -x -R) and watch whether they rise under load; rising symbol or '
                    'receive errors mean a bad cable or transceiver'))
            if port.get('link_layer') == 'Ethernet':
                types = [g.get('type') for g in port.get('gids') or []]
                if 'RoCE v2' not in types:
                    found.append(finding(
                        'ROCE_NO_V2_GID', 'ib', 'error', host, subject, {'gid_types': types},
                        'no RoCE v2 GID on the port (no IP address on its netdev, or RoCE v2 disabled): NCCL cannot '
                        'pick a routable GID (NCCL_IB_GID_INDEX)', 'give the port\'s netdev an IP address; check cma_roce_mode'))
    return found


def mtu_findings(nodes):
    """Fleet rule: InfiniBand ports of different nodes with different active MTUs."""
    seen = {}
    for host in sorted(nodes):
        for device in (nodes[host].get('ib') or {}).get('devices') or []:
            for port in device.get('ports') or []:
                mtu = port.get('active_mtu')
                if port.get('link_layer') == 'Ethernet':
                    mtu = mtu or port.get('netdev_mtu')
                if port.get('state') == 'ACTIVE' and mtu:
                    seen.setdefault((port.get('link_layer'), mtu), []).append('%s:%s' % (host, device['name']))
    found = []
    for layer in set(key[0] for key in seen):
        values = sorted((len(v), mtu) for (lay, mtu), v in seen.items() if lay == layer)
        if len(values) > 1:
            common = values[-1][1]
            for (lay, mtu), ports in sorted(seen.items()):
                if lay == layer and mtu != common:
                    for port in ports:
                        found.append(finding('MTU_MISMATCH', 'ib', 'warning', port.split(':')[0], port.split(':')[1],
                                             {'mtu': mtu, 'most_ports': common},
                                             '%s MTU %s differs from the %s most ports use' % (layer, mtu, common),
                                             'set the same MTU on every port of the fabric (subnet manager partition MTU, '
                                             'netdev MTU for RoCE)'))
    return found


# ---------------------------------------------------------------------------- IB + GPU layer

def _top_rates(ib):
    return dict((d['name'], max([p.get('rate_gbps') or 0 for p in d.get('ports') or []] or [0])) for d in (ib or {}).get('devices') or [])


def gdr_findings(host, gdr, ib=None):
    found = []
    gdr = gdr or {}
    kernel, ofed = gdr.get('kernel') or {}, gdr.get('ofed') or {}
    dmabuf = (gdr.get('dmabuf') or {}).get('possible')
    if not gdr.get('gpus') or not gdr.get('nics'):
        return found
    for vendor, path in sorted(((gdr.get('peer_memory') or {}).get('paths') or {}).items()):
        if path.get('detected'):
            continue
        chain = ' -> '.join(path.get('chain') or [])
        # NVIDIA and AMD can use dma-buf instead of a peer-memory client (gdr_facts' notes).
        severity = 'warning' if dmabuf and vendor in ('nvidia', 'amd') else 'error'
        if kernel.get('mm_kobj_exported') is False:
            code, remedy = 'GDR_MM_KOBJ_NOT_EXPORTED', ('a kernel that exports mm_kobj, then rebuild MLNX OFED against it '
                                                        '(role ofed_peermem, tag ofed_peermem)')
        elif ofed.get('have_mm_kobj_exported') is False:
            code, remedy = 'GDR_OFED_STALE_BUILD', 'rebuild MLNX OFED for the running kernel (role ofed_peermem, tag ofed_peermem)'
        elif not path.get('module_loaded'):
            code, remedy = 'GDR_PEERMEM_NOT_LOADED', 'load the peer-memory module now and at boot (role rdma_modules, tag rdma_modules)'
        else:
            code, remedy = 'GDR_MEMORY_PEERS_MISSING', 'check the kernel log of the peer-memory module; reload it (role ofed_peermem)'
        found.append(finding(code, 'ib_gpu', severity, host, vendor,
                             {'client': path.get('client'), 'module_loaded': path.get('module_loaded'),
                              'mm_kobj_exported': kernel.get('mm_kobj_exported'),
                              'have_mm_kobj_exported': ofed.get('have_mm_kobj_exported'), 'dmabuf_possible': dmabuf},
                             chain, remedy))
    for pair in gdr.get('topology') or []:
        gpu = next((g for g in gdr.get('gpus') or [] if g['name'] == pair['gpu']), {})
        if gpu.get('nearest_nic') != pair['nic']:
            continue
        subject = '%s<->%s' % (pair['gpu'], pair['nic'])
        if pair.get('acs_redirect'):
            found.append(finding('GDR_ACS_REDIRECT', 'ib_gpu', 'error', host, subject,
                                 {'bridges': pair.get('acs_redirect_bridges')},
                                 'PCIe ACS on %s redirects GPU<->NIC peer-to-peer traffic up to the root complex'
                                 % ', '.join(pair.get('acs_redirect_bridges') or []),
                                 'disable ACS on the GPU<->NIC paths (role pcie_acs, tag pcie_acs)'))
        if pair.get('distance') in FAR:
            found.append(finding('GPU_NIC_FAR', 'ib_gpu', 'warning', host, subject, {'distance': pair['distance']},
                                 '%s is the nearest NIC of %s but %s away (across the CPU or NUMA nodes): NCCL does not use '
                                 'GPUDirect RDMA beyond PXB by default and the traffic crosses the socket'
                                 % (pair['nic'], pair['gpu'], pair['distance']),
                                 'put GPU and NIC under one PCIe switch, or bind the job to the NIC of the same NUMA node'))
    # A NIC that no GPU is near, while the node's other NICs each have one: it was seated in
    # the wrong slot (the other socket), and the GPU that should use it shares another NIC.
    near = dict((nic['name'], min([_DISTANCE.index(p['distance']) for p in gdr.get('topology') or []
                                   if p['nic'] == nic['name'] and p.get('distance') in _DISTANCE] or [len(_DISTANCE)]))
                for nic in gdr.get('nics') or [])
    close = [name for name, level in near.items() if level <= _DISTANCE.index('PXB')]
    # Only a NIC of the compute rails' rate: a slower storage or management NIC is meant to sit elsewhere.
    rates = _top_rates(ib)
    rail_rates = set(rates.get(name) for name in close)
    if len(close) >= 2:
        for name, level in sorted(near.items()):
            if name not in close and level < len(_DISTANCE) and rates.get(name) in rail_rates:
                found.append(finding('GPU_NIC_FAR', 'ib_gpu', 'warning', host, name, {'nearest_gpu_distance': _DISTANCE[level]},
                                     '%s has no GPU nearer than %s while the node\'s other NICs sit under a GPU\'s PCIe switch: '
                                     'a GPU whose rail it is reaches it across the socket' % (name, _DISTANCE[level]),
                                     'move the NIC to the slot of its GPU\'s PCIe switch (or check NCCL_IB_HCA / the rail map)'))
    return found


# ---------------------------------------------------------------------------- measured

def bench_findings(bench):
    found = []
    for pair in (bench or {}).get('pairs') or []:
        if pair.get('verdict') == 'ok':
            continue
        subject = '%s->%s rail %s %s' % (pair['server'], pair['client'], pair.get('rail'), pair.get('memory'))
        gpu_low = pair.get('memory') == 'gpu' and pair.get('status') == 'ok' and pair.get('gpu_vs_host') is not None \
            and pair.get('gpu_vs_host') < (bench.get('thresholds') or {}).get('gpu_ratio', 0.9)
        code = 'BENCH_PAIR_FAILED' if pair.get('verdict') == 'failed' else ('BENCH_GPU_MEMORY_LOW' if gpu_low else 'BENCH_PAIR_LOW')
        severity, cause = 'error', '; '.join(pair.get('reasons') or [])
        if gpu_low and pair.get('gpu_distance') in FAR:
            # Topology, not a fault: no GPU sits near this HCA (a storage NIC, or a rail wired to the other socket).
            severity = 'warning'
            cause += ('; the nearest GPU of this HCA is %s away, so GPU memory through it crosses the socket'
                      % pair['gpu_distance'])
        found.append(finding(code, 'benchmark', severity, None, subject,
                             {'bw_avg_gbps': pair.get('bw_avg_gbps'), 'port_rate_gbps': pair.get('port_rate_gbps'),
                              'gpu_vs_host': pair.get('gpu_vs_host'), 'gpu_distance': pair.get('gpu_distance'),
                              'failure': pair.get('failure')},
                             cause, 'see the lower-layer findings of both nodes' if severity == 'error' else
                             'leave this HCA out of GPU-memory tests (fabric_bench_hcas), or pin jobs to NICs near their GPUs'))
        found[-1]['hosts'] = [pair['server'], pair['client']]
    for rise in (bench or {}).get('counters') or []:
        found.append(finding('IB_ERRORS_UNDER_LOAD', 'ib', 'error', rise['host'], '%s (%s)' % (rise['hca'], rise['pair']),
                             rise['increase'], 'error counters rose while %s ran' % rise['pair'],
                             'replace the cable or transceiver of %s on %s' % (rise['hca'], rise['host'])))
    return found


def collective_findings(collective):
    found = []
    fleet = (collective or {}).get('fleet') or {}
    verdict = fleet.get('verdict') or {}
    if verdict.get('status') in ('warning', 'low', 'corrupt', 'failed'):
        code = {'corrupt': 'COLLECTIVE_DATA_CORRUPTION', 'failed': 'COLLECTIVE_FAILED'}.get(verdict['status'], 'COLLECTIVE_BUSBW_LOW')
        severity = 'warning' if verdict['status'] == 'warning' else 'error'
        found.append(finding(code, 'collective', severity, None, fleet.get('benchmark') or 'collective',
                             {'busbw_gbs': verdict.get('busbw_gbs'), 'expected_gbs': verdict.get('expected_gbs'),
                              'ratio': verdict.get('ratio'), 'wrong_total': fleet.get('wrong_total')},
                             '; '.join(verdict.get('reasons') or []), 'see the culprit nodes and their lower-layer findings'))
    transport = fleet.get('transport') or {}
    if transport.get('net') == 'Socket' and fleet.get('hosts') and len(fleet['hosts']) > 1:
        found.append(finding('COLLECTIVE_SOCKET_TRANSPORT', 'collective', 'error', None, 'transport',
                             {'evidence': transport.get('evidence')}, 'NCCL used TCP sockets across nodes, not RDMA',
                             'check that the RDMA devices are visible in the job (NCCL_IB_HCA, container devices)'))
    for host in ((collective or {}).get('search') or {}).get('culprits') or []:
        run = next((r for r in reversed(collective['search'].get('runs') or []) if r.get('group') == [host]), {})
        found.append(finding('COLLECTIVE_CULPRIT', 'collective', 'error', host, 'node',
                             {'run': run}, 'runs that include %s are %s; the same runs without it are healthy'
                             % (host, run.get('status', 'not healthy')),
                             'take %s out of the job and fix its lower-layer findings' % host))
    for host in ((collective or {}).get('search') or {}).get('unresolved') or []:
        found.append(finding('COLLECTIVE_SUSPECT', 'collective', 'warning', host, 'node', {},
                             'no healthy group to compare with: %s is among the suspects' % host,
                             'give fabric_collective a known-good reference node'))
    return found


# ---------------------------------------------------------------------------- roots and symptoms

# Which codes a root on the same host explains (a symptom anywhere above it).
EXPLAINS = {
    'IB_PORT_DOWN': ('BENCH_PAIR_FAILED', 'BENCH_PAIR_LOW', 'COLLECTIVE_CULPRIT'),
    'IB_RATE_DEGRADED': ('BENCH_PAIR_LOW', 'BENCH_GPU_MEMORY_LOW', 'COLLECTIVE_CULPRIT'),
    'IB_ERRORS_UNDER_LOAD': ('BENCH_PAIR_LOW', 'COLLECTIVE_CULPRIT'),
    'GDR_MM_KOBJ_NOT_EXPORTED': ('BENCH_GPU_MEMORY_LOW', 'COLLECTIVE_CULPRIT'),
    'GDR_OFED_STALE_BUILD': ('BENCH_GPU_MEMORY_LOW', 'COLLECTIVE_CULPRIT'),
    'GDR_PEERMEM_NOT_LOADED': ('BENCH_GPU_MEMORY_LOW', 'COLLECTIVE_CULPRIT'),
    'GDR_MEMORY_PEERS_MISSING': ('BENCH_GPU_MEMORY_LOW', 'COLLECTIVE_CULPRIT'),
    'GDR_ACS_REDIRECT': ('BENCH_GPU_MEMORY_LOW', 'COLLECTIVE_CULPRIT'),
    'GPU_NIC_FAR': ('BENCH_GPU_MEMORY_LOW', 'COLLECTIVE_CULPRIT'),
    'COLLECTIVE_CULPRIT': ('COLLECTIVE_BUSBW_LOW', 'COLLECTIVE_DATA_CORRUPTION'),
}


def _hosts_of(item):
    return item.get('hosts') or ([item['host']] if item.get('host') else [])


def link_causes(findings):
    """Set explained_by on every finding a lower one explains; roots keep None.

    A root explains a symptom on the same host (a pair's symptom: either of its two nodes);
    a culprit explains the fleet-wide collective finding. Roots are tried in the order
    given (bottom-up), so the lowest layer wins.
    """
    for symptom in findings:
        for root in findings:
            if root is symptom or symptom['code'] not in EXPLAINS.get(root['code'], ()):
                continue
            fleetwide = not _hosts_of(symptom)
            if fleetwide or set(_hosts_of(root)) & set(_hosts_of(symptom)):
                # A culprit that is itself explained passes the explanation down to its root.
                symptom['explained_by'] = root['explained_by'] or root['id']
                break
    # Chains: a symptom explained by something that is itself explained points at the root.
    by_id = dict((f['id'], f) for f in findings)
    for item in findings:
        seen = set()
        while item['explained_by'] and by_id.get(item['explained_by'], {}).get('explained_by') and item['explained_by'] not in seen:
            seen.add(item['explained_by'])
            item['explained_by'] = by_id[item['explained_by']]['explained_by']
    return findings


def diagnose(nodes, bench=None, collective=None, unreachable=None):
    """All findings, bottom-up, causes linked. ``nodes``: {host: {'ib': ..., 'gdr': ...}}."""
    findings = []
    for host in sorted(nodes):
        findings.extend(ib_findings(host, nodes[host].get('ib')))
    findings.extend(mtu_findings(nodes))
    findings.extend(bench_findings(bench) if bench else [])
    for host in sorted(nodes):
        findings.extend(gdr_findings(host, nodes[host].get('gdr'), nodes[host].get('ib')))
    findings.extend(collective_findings(collective) if collective else [])
    for host in sorted(unreachable or []):
        findings.append(finding('HOST_UNREACHABLE', 'host', 'error', host, 'node', {},
                                'no facts came back from %s (unreachable, or its facts tasks failed)' % host,
                                'check that the node is up and reachable over SSH; nothing on it was checked'))
    order = dict((layer, index) for index, layer in enumerate(LAYERS))
    findings.sort(key=lambda f: (order.get(f['layer'], 9), f['host'] or '', f['code'], f['subject'] or ''))
    return link_causes(findings)
