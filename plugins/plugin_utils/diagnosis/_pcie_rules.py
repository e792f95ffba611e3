# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Rules over the PCIe links and the IOMMU mode of a node (gdr_facts ``pcie_links``, ``iommu``;
module_utils/_pcie.py reads and judges them): PCIE_LINK_DEGRADED, HOST_IOMMU_TRANSLATED.

Each finding sits on the places whose traffic crosses what it names (``at``): an HCA's own link
on that HCA, a GPU's own link on the GPU and its GPU<->NIC paths, a bridge's link on the host
memory side of every HCA below it (('hca_host', host, hca): only host-memory tests through that
HCA hold it, _diagnose.pair_path) and on the GPU<->NIC paths that cross it (one end below it, the
other not); the IOMMU on the node.
"""

from __future__ import annotations

from typing import Any, Dict, List

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings as F
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._findings import Finding, Place, finding
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._rule import Fleet, rule
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._pcie import link_words


def _hca_rates(ib: Any) -> Dict[str, Any]:
    """{hca: Gb/s its ACTIVE ports carry together} (the ports of one card share its PCIe link)."""
    rates = {}
    for device in (ib or {}).get('devices') or []:
        total = sum(p.get('rate_gbps') or 0 for p in device.get('ports') or [] if p.get('state') == 'ACTIVE')
        if total:
            rates[device.get('name')] = total
    return rates


def _places(host: str, link: Dict[str, Any], topology: List[Dict[str, Any]]) -> List[Place]:
    gpus, nics = set(link.get('gpus') or []), set(link.get('nics') or [])
    if link.get('kind') == 'nic':
        return [('hca', host, name) for name in link.get('nics') or []]
    if link.get('kind') == 'gpu':
        return [('gpu', host, name) for name in link.get('gpus') or []] + \
            [('gpu_nic', host, p['gpu'], p['nic']) for p in topology if p.get('gpu') in gpus]
    # A bridge: its HCAs' traffic to host memory crosses it (('hca_host', ...), on host-memory tests'
    # paths only), and a GPU<->NIC path crosses it when one end is below it and the other is not
    # (both below: the switch turns GPU-memory traffic round, the up-link is never crossed). Not
    # ('hca', ...) nor ('gpu', ...): every GPU-memory test through that HCA or GPU holds those.
    return [('hca_host', host, name) for name in link.get('nics') or []] + \
        [('gpu_nic', host, p['gpu'], p['nic']) for p in topology if (p.get('gpu') in gpus) != (p.get('nic') in nics)]


def _need(link: Dict[str, Any], gdr: Dict[str, Any], rates: Dict[str, Any]) -> Any:
    """The port rate (Gb/s) one test through the link needs: the fastest HCA below it; for a GPU's
    own link, its nearest NIC's. None when no HCA rate is known."""
    names = list(link.get('nics') or [])
    if link.get('kind') == 'gpu':
        nearest = dict((g.get('name'), g.get('nearest_nic')) for g in gdr.get('gpus') or [])
        names = [nearest.get(g) for g in link.get('gpus') or [] if nearest.get(g)]
    known = [rates[name] for name in names if name in rates]
    return max(known) if known else None


def pcie_findings(host: str, gdr: Any, ib: Any = None) -> List[Finding]:
    """One PCIE_LINK_DEGRADED per link trained below what both ends can do."""
    found = []
    gdr = gdr or {}
    rates, topology = _hca_rates(ib), gdr.get('topology') or []
    for link in gdr.get('pcie_links') or []:
        if not link.get('degraded'):
            continue
        need = _need(link, gdr, rates)
        below = None if need is None or link.get('gbps') is None else link['gbps'] < need
        who = link.get('device') or 'the bridge above %s' % ', '.join((link.get('gpus') or []) + (link.get('nics') or []))
        what = []
        if link.get('width_degraded'):
            what.append('%s of %s lanes' % (link.get('width'), link.get('capable_width')))
        if link.get('speed_degraded'):
            what.append('%s of %s GT/s' % (link.get('speed_gts'), link.get('capable_speed_gts')))
        caps = ('; that is below the %s Gb/s of the HCA ports whose traffic crosses it, so they cannot reach their rate'
                % need if below else '; the HCA ports whose traffic crosses it need %s Gb/s' % need if need else '')
        found.append(finding(
            F.PCIE_LINK_DEGRADED, host, 'PCIe %s (%s)' % (link.get('downstream'), link.get('device') or 'bridge'),
            {'upstream': link.get('upstream'), 'downstream': link.get('downstream'), 'kind': link.get('kind'),
             'device': link.get('device'), 'speed_gts': link.get('speed_gts'), 'width': link.get('width'),
             'max_speed_gts': link.get('max_speed_gts'), 'max_width': link.get('max_width'),
             'upstream_max_speed_gts': link.get('upstream_max_speed_gts'), 'upstream_max_width': link.get('upstream_max_width'),
             'gbps': link.get('gbps'), 'capable_gbps': link.get('capable_gbps'), 'port_rate_gbps': need,
             'below_port_rate': below, 'gpus': link.get('gpus') or [], 'nics': link.get('nics') or []},
            'the PCIe link %s -> %s of %s trained at %s (%s): every transfer of %s through it is capped at %s Gb/s%s' % (
                link.get('upstream') or 'the root bus', link.get('downstream'), who, link_words(link), ', '.join(what),
                ', '.join((link.get('gpus') or []) + (link.get('nics') or [])),
                '%.1f' % link['gbps'] if link.get('gbps') else '?', caps),
            severity='warning' if below is False else None, at=_places(host, link, topology),
            device=link.get('device') or link.get('downstream'), bdf=link.get('downstream')))
    return found


def iommu_findings(host: str, gdr: Any) -> List[Finding]:
    """HOST_IOMMU_TRANSLATED where the IOMMU translates the DMA of a GPU node's GPUs or HCAs."""
    gdr = gdr or {}
    iommu = gdr.get('iommu') or {}
    translated = iommu.get('translated') or []
    if not translated or not gdr.get('gpus'):
        return []
    types = dict((d.get('name'), d.get('type')) for d in iommu.get('devices') or [] if d.get('name') in translated)
    return [finding(
        F.HOST_IOMMU_TRANSLATED, host, 'iommu',
        {'translated': translated, 'types': types, 'cmdline': iommu.get('cmdline') or {},
         'cmdline_mode': iommu.get('cmdline_mode'), 'units': iommu.get('units') or []},
        'the IOMMU translates the DMA of %s (IOMMU group type %s; kernel command line %s): GPUDirect RDMA needs every '
        'device to see the same physical addresses and works only with the IOMMU off or in passthrough, and GPU '
        'peer-to-peer over PCIe suffers the same way, so NCCL falls back to copies through host memory or runs slower'
        % (', '.join(translated), ', '.join(sorted(set(t or '?' for t in types.values()))),
           ' '.join('%s=%s' % kv for kv in sorted((iommu.get('cmdline') or {}).items())) or 'without iommu parameters'),
        at=[('node', host)])]


@rule(produces=(F.PCIE_LINK_DEGRADED,), parts=('judged',))
def pcie_links(fleet: Fleet, _findings: List[Finding]) -> List[Finding]:
    return [item for host in sorted(fleet.judged) for item in pcie_findings(host, fleet.judged[host].get('gdr'), fleet.judged[host].get('ib'))]


@rule(produces=(F.HOST_IOMMU_TRANSLATED,), parts=('judged',))
def iommu_mode(fleet: Fleet, _findings: List[Finding]) -> List[Finding]:
    return [item for host in sorted(fleet.judged) for item in iommu_findings(host, fleet.judged[host].get('gdr'))]
