# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Rules over the collective benchmark: the fleet run (its verdict, its transport, GPUDirect
RDMA, the NCCL release), the per-node runs, and GPUs of one node that did not talk peer-to-peer."""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings as F
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._findings import Finding, Place, finding
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._rule import Fleet, rule
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._collective import HEALTHY_RATIO, gpu_interconnect, intra_node, run_host


# NCCL_P2P_DISABLE=1, NCCL_P2P_LEVEL=LOC (or 0: P2P only within one GPU), NCCL_SHM_DISABLE=1.
_NO_P2P_VALUES = {'NCCL_P2P_DISABLE': ('1',), 'NCCL_P2P_LEVEL': ('LOC', '0'), 'NCCL_SHM_DISABLE': ('1',)}
# NVIDIA/nccl#1676: up to this release NCCL needs the memory_peers client of nv_peer_mem.
NCCL_PEERMEM_CLIENT_ONLY = (2, 22, 3)


def _variables(*envs: Any) -> Dict[str, Any]:
    """{name: value} of the variables that forbid P2P or SHM, from the run's environment and what NCCL says it saw."""
    found = {}
    for env in envs:
        for name, values in _NO_P2P_VALUES.items():
            value = str((env or {}).get(name, '')).strip().upper()
            if value in values and name not in found:
                found[name] = (env or {}).get(name)
    return found


def _gpus_not_p2p(host: str, intra: Dict[str, Any], interconnect: Any, envs: Tuple[Any, ...], subject: str = 'collective') -> Optional[Finding]:
    """COLLECTIVE_GPUS_NOT_P2P for one host's connections between its own GPUs, or None.

    A network transport between two GPUs of one node is never right; host memory (SHM) is NCCL's
    normal choice between GPUs that share no P2P path (across CPU sockets), not between GPUs that
    NVLink joins."""
    kinds = intra.get('kinds') or {}
    if not kinds or intra.get('direct'):
        return None
    nvlink = bool(interconnect and interconnect.get('kind') == 'NVLink')
    if 'NET' not in kinds and not nvlink:
        return None
    variables = _variables(*envs)
    used = ', '.join(intra.get('via') or sorted(kinds))
    count = sum(kinds.values())
    joined = ('their NVLink (%s)' % interconnect['basis']) if nvlink else 'peer-to-peer'
    if variables:
        why = '%s %s set in the run\'s environment, so NCCL may not use %s between them' % (
            ' and '.join('%s=%s' % item for item in sorted(variables.items())), 'is' if len(variables) == 1 else 'are',
            'peer-to-peer or shared memory' if 'NCCL_SHM_DISABLE' in variables else 'peer-to-peer')
    else:
        why = ('nothing in the run\'s environment forbids P2P: NCCL found peer-to-peer between these GPUs impossible (PCIe ACS '
               'redirecting P2P to the root complex, an IOMMU translating DMA, GPUs behind different root complexes, or '
               'processes that cannot share CUDA IPC)')
    return finding(F.COLLECTIVE_GPUS_NOT_P2P, host, subject,
                   {'connections': kinds, 'via': intra.get('via'), 'variables': variables,
                    'interconnect': interconnect},
                   'the GPUs of %s talked to each other via %s (%d connection(s)), not peer-to-peer over %s: %s'
                   % (host, used, count, joined, why),
                   remedy='env' if variables else None, variables=', '.join(sorted(variables)) or '-',
                   at=[('gpus', host)], path=[('node', host), ('gpus', host)])


def _local_failed(host: str, entry: Dict[str, Any], subject: str, evidence: Dict[str, Any], path: Sequence[Place]) -> Finding:
    """A node's own run that failed or returned wrong data."""
    verdict = entry.get('verdict') or {}
    status = verdict.get('status')
    code = F.COLLECTIVE_DATA_CORRUPTION if status == 'corrupt' else F.COLLECTIVE_FAILED
    return finding(code, host, subject, evidence,
                   'the collective over the GPUs of %s: %s' % (host, '; '.join(verdict.get('reasons') or [status])),
                   remedy='missing_binary' if (entry.get('failure') or {}).get('kind') in ('missing_binary', 'not_run')
                   else 'node', path=path)


def _local_slow(host: str, entry: Dict[str, Any], intra: Dict[str, Any], local: Dict[str, Any],  # pylint: disable=too-many-arguments
                subject: str, evidence: Dict[str, Any], path: Sequence[Place]) -> Finding:
    """COLLECTIVE_NODE_SLOW: a node's own run slower than its peers', with how its GPUs talked against theirs."""
    mine = ', '.join(intra.get('via') or []) or 'unknown'
    peers = sorted(set(via for other, item in (local.get('hosts') or {}).items() if other != host
                       for found_intra in (item.get('intra') or {}).values() for via in found_intra.get('via') or []))
    # Only what the log shows; what else differs on the node is the differential's (rules/_differential.py).
    differs = ('its GPUs talked via %s, its peers\' via %s' % (mine, ', '.join(peers))
               if peers and mine != 'unknown' and set(intra.get('via') or []) != set(peers) else
               'its GPUs talked via %s, as its peers\' did' % mine if peers and mine != 'unknown' else
               'NCCL\'s log does not say how its GPUs talked')
    return finding(F.COLLECTIVE_NODE_SLOW, host, subject, dict(evidence, basis='peers'),
                   'busbw %.2f GB/s over the GPUs of %s is %.0f %% of the median of its peers (%.2f GB/s; '
                   'below %.0f %% is slow): %s'
                   % (entry.get('busbw_gbs') or 0, host, 100 * (entry.get('peer_ratio') or 0),
                      entry.get('peer_median_gbs') or 0, 100 * local.get('healthy_ratio', HEALTHY_RATIO), differs),
                   path=path)


def _local_host(host: str, entry: Dict[str, Any], local: Dict[str, Any]) -> List[Finding]:
    """The findings of one node's own run."""
    verdict = entry.get('verdict') or {}
    status = verdict.get('status')
    evidence = {'busbw_gbs': entry.get('busbw_gbs'), 'peer_median_gbs': entry.get('peer_median_gbs'),
                'peer_ratio': entry.get('peer_ratio'), 'expected_gbs': verdict.get('expected_gbs', local.get('expected_gbs')),
                'expected_basis': verdict.get('basis'), 'failure': entry.get('failure'),
                'wrong_total': entry.get('wrong_total'), 'intra': entry.get('intra')}
    if (entry.get('gpu_gate') or {}).get('processes'):
        # The idle gate found another process on its GPUs before the run (rules/_gpu.py GPU_BUSY).
        evidence['contaminated'] = (entry.get('gpu_gate') or {}).get('processes')
    subject = entry.get('benchmark') or 'collective'
    path = [('node', host), ('gpus', host)]
    if status in ('failed', 'corrupt'):
        return [_local_failed(host, entry, subject, evidence, path)]
    found = []
    own = (entry.get('intra') or {})
    # The run was over this node only: its connections are between its own GPUs, whatever NCCL's host name.
    intra = next((own[name] for name in sorted(own)), {}) if len(own) == 1 else own.get(host) or {}
    root = _gpus_not_p2p(host, intra, entry.get('interconnect'), ((entry.get('env') or {}),
                         ((entry.get('transport') or {}).get('env') or {})), subject)
    if root:
        found.append(root)
    if status in ('warning', 'low'):
        found.append(finding(F.COLLECTIVE_BUSBW_LOW, host, subject, evidence,
                             '; '.join(verdict.get('reasons') or []) + (
                                 ' (%s)' % verdict['basis'] if verdict.get('basis') else ''),
                             severity='warning' if status == 'warning' else 'error', remedy='node', path=path))
    if entry.get('slow'):
        found.append(_local_slow(host, entry, intra, local, subject, evidence, path))
    return found


def local_collective_findings(local: Optional[Dict[str, Any]]) -> List[Finding]:
    """Per-node collectives (fabric_collective launcher local): each node against its GPUs' own
    interconnect (NCCL's topology of the run: NVLink), the given expectation, and its peers."""
    local = local or {}
    return [item for host, entry in sorted((local.get('hosts') or {}).items()) for item in _local_host(host, entry, local)]


def _nccl_release(versions: Any) -> Optional[Tuple[int, ...]]:
    """(major, minor, patch) of the run's NCCL ('2.21.5+cuda12.4'), or None."""
    text = str((versions or {}).get('library_version') or '')
    parts = text.split('+', 1)[0].split('.')
    try:
        return tuple(int(part) for part in parts[:3]) if len(parts) >= 3 else None
    except ValueError:
        return None


def _verdict(fleet: Dict[str, Any], transport: Dict[str, Any], path: Sequence[Place]) -> List[Finding]:
    """The fleet run's own verdict: slow, corrupt or failed (or nothing)."""
    verdict = fleet.get('verdict') or {}
    if verdict.get('status') not in ('warning', 'low', 'corrupt', 'failed'):
        return []
    code = {'corrupt': F.COLLECTIVE_DATA_CORRUPTION, 'failed': F.COLLECTIVE_FAILED}.get(verdict['status'], F.COLLECTIVE_BUSBW_LOW)
    severity = 'warning' if verdict['status'] == 'warning' else 'error'
    return [finding(code, None, fleet.get('benchmark') or 'collective',
                    {'busbw_gbs': verdict.get('busbw_gbs'), 'expected_gbs': verdict.get('expected_gbs'),
                     'ratio': verdict.get('ratio'), 'wrong_total': fleet.get('wrong_total'),
                     'gdr': transport.get('gdr'), 'net': transport.get('net')},
                    '; '.join(verdict.get('reasons') or []), severity=severity, path=path)]


def _peermem_name(fleet: Dict[str, Any], transport: Dict[str, Any], nodes: Dict[str, Any], run_hosts: List[str]) -> List[Finding]:
    """COLLECTIVE_NCCL_PEERMEM_NAME on each node whose peer-memory module a NCCL this old does not know."""
    release = _nccl_release(fleet.get('versions'))
    if transport.get('net') != 'IB' or not release or release > NCCL_PEERMEM_CLIENT_ONLY:
        return []
    found = []
    for host in run_hosts:
        paths = (((nodes.get(host) or {}).get('gdr') or {}).get('peer_memory') or {}).get('paths') or {}
        nvidia = paths.get('nvidia') or {}
        if nvidia.get('detected') and str(nvidia.get('evidence') or '').startswith('/sys/module/'):
            found.append(finding(
                F.COLLECTIVE_NCCL_PEERMEM_NAME, host, 'nccl %s' % '.'.join(str(part) for part in release),
                {'nccl': (fleet.get('versions') or {}).get('library_version'), 'peer_memory': nvidia.get('evidence'),
                 'module': nvidia.get('module_loaded'), 'gdr_in_run': transport.get('gdr')},
                'NCCL %s looks for the memory_peers client of nv_peer_mem (/sys/kernel/mm/memory_peers/nv_mem/version) '
                'and does not know %s, which registers none on %s (%s only): it turns GPUDirect RDMA off there and every '
                'message is copied through host memory' % (
                    (fleet.get('versions') or {}).get('library_version'), nvidia.get('module_loaded') or 'nvidia_peermem',
                    host, nvidia.get('evidence')),
                at=[('node', host)]))
    return found


def _gdr_not_used(transport: Dict[str, Any], nodes: Dict[str, Any], trapped: List[Finding], hcas: List[str],
                  path: Sequence[Place]) -> List[Finding]:
    """COLLECTIVE_GDR_NOT_USED where every node's facts say GPUDirect RDMA works (or a NCCL too old for the
    node's peer-memory module, ``trapped``) and the run did not use it."""
    ready = dict((host, (node.get('gdr') or {}).get('gdr_ready')) for host, node in nodes.items()
                 if (node.get('gdr') or {}).get('gpus'))
    if not (transport.get('net') == 'IB' and transport.get('gdr') is False and ready and (all(ready.values()) or trapped)):
        return []
    # Every node's facts say GPUDirect RDMA works, yet the library did not use it: the job's
    # settings or environment, not the nodes (NCCL_NET_GDR_LEVEL below the GPU<->NIC distance,
    # a container without the peer-memory device files, NCCL_NET_GDR_READ/NCCL_IB_DISABLE set),
    # or a NCCL too old for the node's peer-memory module.
    return [finding(F.COLLECTIVE_GDR_NOT_USED, None, 'transport',
                    {'evidence': transport.get('evidence'), 'gdr_ready': ready, 'hcas': transport.get('hcas')},
                    'the collective ran over IB without GPUDirect RDMA (NCCL: "GPU Direct RDMA Disabled" for %s) '
                    'although gdr_facts finds every node GPUDirect-RDMA ready: data went through host memory'
                    % (', '.join(hcas) or 'its HCAs'), path=path)]


_NO_IB_WHY = {
    'libibverbs': 'NCCL could not load libibverbs ("%s"): rdma-core\'s verbs library is missing where the job '
                  'runs (a container, a node without the OFED or rdma-core user space)',
    'no_device': 'NCCL found no RDMA device ("%s"): the job does not see /dev/infiniband (a container without the '
                 'devices) or NCCL_IB_HCA names none of the HCAs',
    'disabled': 'NCCL_IB_DISABLE=1 is set in the job\'s environment (%s)'}


def _socket_transport(fleet: Dict[str, Any], transport: Dict[str, Any], nodes: Dict[str, Any], run_hosts: List[str],
                      path: Sequence[Place]) -> List[Finding]:
    """COLLECTIVE_SOCKET_TRANSPORT where a run over several nodes used TCP sockets."""
    if transport.get('net') != 'Socket' or not fleet.get('hosts') or len(fleet['hosts']) <= 1:
        return []
    rdma_hosts = [host for host in run_hosts if ((nodes.get(host) or {}).get('ib') or {}).get('devices')]
    unavailable = transport.get('ib_unavailable') or {}
    why = _NO_IB_WHY.get(str(unavailable.get('reason')))
    return [finding(F.COLLECTIVE_SOCKET_TRANSPORT, None, 'transport',
                    {'evidence': transport.get('evidence'), 'ib_unavailable': unavailable or None,
                     'rdma_hosts': rdma_hosts},
                    'NCCL used TCP sockets across nodes, not RDMA%s' % (
                        (': ' + why % unavailable.get('line')) if why else ''),
                    remedy=unavailable.get('reason') if unavailable.get('reason') in ('libibverbs', 'disabled') else None,
                    # A run whose nodes gave no facts still sits on the run (never nowhere).
                    at=[('node', host) for host in rdma_hosts or run_hosts] or [('run',)], path=path)]


def _fleet_not_p2p(fleet: Dict[str, Any], transport: Dict[str, Any], nodes: Dict[str, Any]) -> List[Finding]:
    """GPUs of one node that did not talk peer-to-peer in the fleet run (its connection lines by host)."""
    found = []
    interconnects = dict((name, _collective_interconnect(transport, name)) for name in (transport.get('intra_by_host') or {}))
    for name, intra in sorted(intra_node(transport).items()):
        host = run_host(name, nodes)
        if host is None:
            continue
        root = _gpus_not_p2p(host, intra, interconnects.get(name), (transport.get('env') or {},), fleet.get('benchmark') or 'collective')
        if root:
            found.append(root)
    return found


def _gdr_path(fleet: Dict[str, Any], transport: Dict[str, Any]) -> List[Finding]:
    """COLLECTIVE_GDR_PATH: how the run registered GPU buffers, where it used GPUDirect RDMA."""
    if transport.get('gdr') is not True or not fleet:
        return []
    # NCCL registers GPU buffers with dma-buf where both the GPU (init.cc 'DMA-BUF is available on GPU
    # device') and the NIC support it, else through the peer-memory client (src/transport/net_ib.cc).
    gdr_via = 'dma-buf' if transport.get('dmabuf_available') else 'peer memory'
    return [finding(F.COLLECTIVE_GDR_PATH, None, 'transport', {'gdr_via': gdr_via, 'hcas': transport.get('hcas')},
                    'the collective used GPUDirect RDMA through %s' % gdr_via)]


def collective_findings(collective: Optional[Dict[str, Any]], nodes: Optional[Dict[str, Any]] = None) -> List[Finding]:
    """The fleet run's findings (collective.fleet), and the run not run at all (collective.skipped)."""
    found = []
    nodes = nodes or {}
    skipped = (collective or {}).get('skipped')
    if skipped:
        # Not a fault, but what could not be checked must be said (a mixed fleet, one node).
        found.append(finding(F.COLLECTIVE_NOT_RUN, None, 'collective',
                             dict({'skipped': skipped}, **({'split': True} if (collective or {}).get('split') is True else {})),
                             'the collective benchmark did not run: %s' % skipped))
    fleet = (collective or {}).get('fleet') or {}
    transport = fleet.get('transport') or {}
    run_hosts = [host for host in (run_host(name, nodes) for name in fleet.get('hosts') or []) if host] or sorted(nodes)
    # A fleet run's path: every node of it, their GPUs and the HCAs NCCL used.
    hcas = [name.split(':', 1)[0] for name in transport.get('hcas') or []]
    path = [('node', host) for host in run_hosts] + [('gpus', host) for host in run_hosts] + [
        ('hca', host, hca) for host in run_hosts for hca in hcas]
    found.extend(_verdict(fleet, transport, path))
    trapped = _peermem_name(fleet, transport, nodes, run_hosts)
    found.extend(trapped)
    found.extend(_gdr_not_used(transport, nodes, trapped, hcas, path))
    found.extend(_socket_transport(fleet, transport, nodes, run_hosts, path))
    found.extend(_fleet_not_p2p(fleet, transport, nodes))
    found.extend(_gdr_path(fleet, transport))
    return found


def _collective_interconnect(transport: Dict[str, Any], name: str) -> Any:
    topology = ((transport or {}).get('topology') or {}).get(name)
    return gpu_interconnect({'topology': {name: topology}}) if topology else None


@rule(produces=(F.COLLECTIVE_NOT_RUN, F.COLLECTIVE_BUSBW_LOW, F.COLLECTIVE_DATA_CORRUPTION, F.COLLECTIVE_FAILED,
                F.COLLECTIVE_NCCL_PEERMEM_NAME, F.COLLECTIVE_GDR_NOT_USED, F.COLLECTIVE_SOCKET_TRANSPORT, F.COLLECTIVE_GPUS_NOT_P2P,
                F.COLLECTIVE_GDR_PATH), parts=('collective', 'judged'))
def fleet_run(fleet: Fleet, _findings: List[Finding]) -> List[Finding]:
    return collective_findings(fleet.collective, fleet.judged) if fleet.collective else []


@rule(produces=(F.COLLECTIVE_DATA_CORRUPTION, F.COLLECTIVE_FAILED, F.COLLECTIVE_GPUS_NOT_P2P, F.COLLECTIVE_BUSBW_LOW,
                F.COLLECTIVE_NODE_SLOW), parts=('collective',))
def node_runs(fleet: Fleet, _findings: List[Finding]) -> List[Finding]:
    return local_collective_findings(fleet.collective.get('nodes')) if fleet.collective else []


def version_skew(local: Optional[Dict[str, Any]]) -> List[Finding]:
    """COLLECTIVE_NCCL_VERSION_SKEW on each node whose own run loaded another NCCL release than most nodes' runs
    (NCCL's 'NCCL version 2.21.5+cuda12.4' line, module_utils/_nccl.py). Without a release held by more nodes than
    any other, every node is named with the releases seen: none of them is the fleet's."""
    hosts = (local or {}).get('hosts') or {}
    loaded = dict((host, str(((entry or {}).get('versions') or {}).get('library_version') or ''))
                  for host, entry in hosts.items())
    loaded = dict((host, version) for host, version in loaded.items() if version)
    counts = Counter(loaded.values()).most_common()
    if len(counts) < 2:
        return []
    fleet = counts[0][0] if counts[0][1] > counts[1][1] else None
    seen = dict(sorted(counts))
    found = []
    for host in sorted(loaded):
        if loaded[host] == fleet:
            continue
        cause = ('its run loaded NCCL %s, %d of %d nodes loaded %s' % (loaded[host], seen[fleet], len(loaded), fleet) if fleet
                 else 'its run loaded NCCL %s; the nodes loaded %s, none by most' % (
                     loaded[host], ', '.join('%s (%d)' % item for item in sorted(seen.items()))))
        found.append(finding(F.COLLECTIVE_NCCL_VERSION_SKEW, host, 'nccl', {'loaded': loaded[host], 'fleet': fleet, 'seen': seen},
                             cause, at=[('node', host)]))
    return found


@rule(produces=(F.COLLECTIVE_NCCL_VERSION_SKEW,), parts=('collective',))
def nccl_versions(fleet: Fleet, _findings: List[Finding]) -> List[Finding]:
    return version_skew(fleet.collective.get('nodes')) if fleet.collective else []
