# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Recommended NCCL settings of one node, from its own facts (gpu_fabric_ib, gpu_fabric_gdr).

Only what the facts justify: which RDMA ports the GPUs use (NCCL_IB_HCA), the RoCE v2 GID
(NCCL_IB_GID_INDEX), how far GPUDirect RDMA may reach (NCCL_NET_GDR_LEVEL) and the interface
of the default route (NCCL_SOCKET_IFNAME). Each value comes with its reason, citing the facts;
what the facts cannot decide is a note, not a guess. Tuning (NCCL_ALGO, NCCL_PROTO, channels)
and debugging (NCCL_DEBUG) are a job's business, not a node's: NCCL's env.html says debugging
variables "should not be used in production nor retained in scripts".

How NCCL reads these values (NVIDIA/nccl sources, and env.html of the NCCL user guide):
- NCCL_IB_HCA: comma-separated device[:port]; a leading '=' makes every entry an exact name,
  otherwise each is a prefix and mlx5_1 also selects mlx5_10..mlx5_17
  (src/transport/net_ib/init.cc, src/misc/utils.cc parseStringList/matchIfList).
- NCCL_NET_GDR_LEVEL: GPUDirect RDMA is used for a GPU/NIC pair whose distance is at most the
  level, and not beyond it (src/graph/paths.cc ncclTopoCheckGdr, "distance > netGdrLevel");
  the default is PXB. The names NCCL accepts are its path types LOC, PIX, PXB, PHB, SYS
  (src/graph/topo.cc topoPathTypeStr); an unknown name such as NODE is ignored.
- NCCL_SOCKET_IFNAME: a leading '=' means exact interface names (env.html).
"""

from __future__ import annotations

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _gdr
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _rails  # compute rails, storage, management
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._gdr import DEFAULT_GDR_LEVEL, dmabuf_stands_in, natural_key
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._pci import DISTANCE_CLASSES
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _roce_rules  # NCCL_IB_TC

# gdr_facts distance class -> NCCL path type. NCCL has no NODE: its topology has one CPU node
# per NUMA node, so a path through two host bridges of the same NUMA node is PHB to it.
NCCL_GDR_LEVELS = {'PIX': 'PIX', 'PXB': 'PXB', 'PHB': 'PHB', 'NODE': 'PHB', 'SYS': 'SYS'}
# gid_attrs/types of a RoCE v2 GID (kernel drivers/infiniband/core/cache.c gid_type_str);
# v1 entries read 'IB/RoCE v1' and are not routable over IP.
ROCE_V2 = 'RoCE v2'


def _port_id(device, port):
    return '%s:%s' % (device['name'], port.get('port'))


def _rate(port):
    return '%g Gb/s' % port['rate_gbps'] if port.get('rate_gbps') is not None else 'rate unknown'


def _nearest(gdr, nic_names):
    """{GPU name: (distance class, NIC name)} of each GPU's nearest NIC among ``nic_names``,
    ranked as gdr_facts ranks them (module_utils/_gdr.py nic_rank)."""
    return _gdr.nearest_nics((gdr or {}).get('topology'), nic_names)


def select_ports(ib, gdr, role_of=None):
    """The RDMA ports NCCL should use: ([(device, port)], {port id: why it is left out}, notes).

    The ACTIVE ports of the compute rails, in position order (module_utils/_rails.py: roles and
    order). A storage or management NIC is left out: listed, NCCL would also send collective
    traffic through it, at its own rate and away from the GPUs (a MetaX C500 node's 200 Gb/s
    BlueField-3 mlx5_2, NODE from every GPU, is one)."""
    role_of = role_of if role_of is not None else _rails.roles(ib, gdr)
    chosen, left_out, notes = [], {}, []
    for device in _rails.ordered((ib or {}).get('devices') or []):
        mine = role_of.get(device['name']) or {}
        for port in device.get('ports') or []:
            if port.get('state') != 'ACTIVE':
                left_out[_port_id(device, port)] = 'state %s, physical state %s' % (port.get('state'), port.get('phys_state'))
            elif not _rails.is_compute(role_of, device['name']):
                left_out[_port_id(device, port)] = '%s %s, a %s NIC, not a compute rail: %s; the closest GPU is %s away' % (
                    port.get('link_layer'), _rate(port), mine.get('role'), mine.get('why'), mine.get('gpu_distance') or 'unknown')
            else:
                chosen.append((device, port))
    if chosen and not (gdr or {}).get('gpus'):
        notes.append('no GPU in gpu_fabric_gdr: every ACTIVE port is listed, the topology cannot tell compute '
                     'NICs from storage or management NICs')
    return chosen, left_out, notes + _mixed_layers(chosen)


def _mixed_layers(ports):
    layers = sorted(set(port.get('link_layer') or '?' for _device, port in ports))
    if len(layers) < 2:
        return []
    return ['NCCL_IB_HCA mixes link layers (%s): NCCL refuses to connect an InfiniBand port to a RoCE one ("Try '
            'selecting NICs of only one link type using NCCL_IB_HCA", src/transport/net_ib/connect.cc); choose one '
            'with nccl_conf_overrides' % ', '.join(layers)]


def ib_hca(chosen, left_out, gdr):
    """NCCL_IB_HCA value and reason."""
    value = '=' + ','.join(_port_id(device, port) for device, port in chosen)
    nearest = _nearest(gdr, set(device['name'] for device, _port in chosen))
    text = 'the %d ACTIVE port(s) in gpu_fabric_ib' % len(chosen)
    if nearest:
        text += ' of the NICs next to the GPUs (nearest NIC of %s)' % ', '.join(
            '%s: %s %s' % (gpu, nearest[gpu][1], nearest[gpu][0]) for gpu in sorted(nearest, key=natural_key))
    if left_out:
        text += '. Left out: %s' % '; '.join('%s (%s)' % (pid, left_out[pid]) for pid in sorted(left_out, key=natural_key))
    return value, text + ". '=' makes each entry an exact device name, so mlx5_1 does not also select mlx5_10."


def gid_index(chosen):
    """(NCCL_IB_GID_INDEX value or None, reason or None, notes) for the RoCE ports among ``chosen``."""
    roce = [(device, port) for device, port in chosen if port.get('link_layer') == 'Ethernet']
    if not roce:
        return None, None, []
    candidates = {}
    for device, port in roce:
        candidates[_port_id(device, port)] = dict((gid['index'], gid['ipv4']) for gid in port.get('gids') or []
                                                  if gid.get('type') == ROCE_V2 and gid.get('ipv4'))
    order = sorted(candidates, key=natural_key)
    missing = [pid for pid in order if not candidates[pid]]
    if missing:
        return None, None, ['NCCL_IB_GID_INDEX not set: RoCE port(s) %s have no RoCE v2 GID with an IPv4 address (no '
                            'IPv4 address on the netdev, or RoCE v2 disabled); give the netdev its fabric address, '
                            'then run this again' % ', '.join(missing)]
    common = set.intersection(*(set(candidates[pid]) for pid in order))
    if not common:
        return None, None, ['NCCL_IB_GID_INDEX not set: the RoCE v2 IPv4 GID is at different indexes on different '
                            'ports (%s), so no single index fits; NCCL 2.21 and later pick it per port '
                            '(NCCL_IB_ROCE_VERSION_NUM=2, NCCL_IB_ADDR_FAMILY=AF_INET)'
                            % ', '.join('%s: %s' % (pid, '/'.join(str(i) for i in sorted(candidates[pid]))) for pid in order)]
    index = min(common)
    notes = []
    if len(common) > 1:
        notes.append('NCCL_IB_GID_INDEX: several RoCE v2 IPv4 GIDs (indexes %s) on every RoCE port; the lowest was '
                     'taken - set the one of the fabric address with nccl_conf_overrides if it is another'
                     % ', '.join(str(i) for i in sorted(common)))
    reason = ('GID %d is the RoCE v2 GID with an IPv4 address on all %d RoCE port(s) in NCCL_IB_HCA (%s; '
              'gid_attrs/types "RoCE v2", IPv4-mapped GID): RoCE v2 is routed over UDP/IP, the v1 entries are not'
              % (index, len(order), ', '.join('%s %s' % (pid, candidates[pid][index]) for pid in order)))
    return str(index), reason, notes


def _gdr_blockers(gdr):
    """What keeps GPUDirect RDMA off, as the roles and fixes of this collection name them."""
    fixes = []
    paths = ((gdr.get('peer_memory') or {}).get('paths') or {}).items()
    # As gdr_facts judges it (module_utils/_gdr.py assess): a vendor's missing peer-memory path
    # blocks GDR unless the dma-buf path stands in, which NCCL and RCCL can use, MCCL cannot.
    if any(not path.get('detected') and not dmabuf_stands_in(vendor, gdr.get('dmabuf')) for vendor, path in paths):
        fixes.append('the peer-memory path (role ofed_peermem; a module that is not loaded: role rdma_modules)')
    gpus = gdr.get('gpus') or []
    if any(p.get('acs_redirect') for p in gdr.get('topology') or []
           if any(g['name'] == p.get('gpu') and g.get('nearest_nic') == p.get('nic') for g in gpus)):
        fixes.append('PCIe ACS redirection on the GPU<->NIC paths (role pcie_acs)')
    limit = DISTANCE_CLASSES.index(DEFAULT_GDR_LEVEL)
    if any(g.get('nearest_nic_distance') in DISTANCE_CLASSES and DISTANCE_CLASSES.index(g['nearest_nic_distance']) > limit
           for g in gpus):
        fixes.append('the topology: a GPU with no NIC within %s (seat a NIC under the GPU\'s PCIe switch, or run '
                     'its ranks near a NIC)' % DEFAULT_GDR_LEVEL)
    return fixes


def gdr_level(gdr, chosen):
    """(NCCL_NET_GDR_LEVEL value or None, reason or None, notes)."""
    if not gdr:
        return None, None, ['NCCL_NET_GDR_LEVEL not set: no gpu_fabric_gdr facts']
    if not gdr.get('gpus'):
        return None, None, []
    if not chosen:
        return None, None, ['NCCL_NET_GDR_LEVEL not set: no RDMA port for the GPUs to use']
    if not gdr.get('gdr_ready'):
        fixes = _gdr_blockers(gdr)
        return None, None, [
            'NCCL_NET_GDR_LEVEL not set: GPUDirect RDMA is not ready (gpu_fabric_gdr.gdr_ready is false: %s). A level '
            'would not make it work - the collective library checks for peer memory itself and stages through host memory without it, '
            'and a level past its default %s would send GPU<->NIC traffic through the CPU. Fix %s first, then run '
            'this again' % ('; '.join(gdr.get('reasons') or ['no reason recorded']), DEFAULT_GDR_LEVEL,
                            ' and '.join(fixes) or 'the reasons above (role ofed_peermem for the peer-memory path)')]
    nearest = _nearest(gdr, set(device['name'] for device, _port in chosen))
    if not nearest:
        return None, None, ['NCCL_NET_GDR_LEVEL not set: gpu_fabric_gdr has no GPU<->NIC distance for the ports in '
                            'NCCL_IB_HCA']
    gpus = sorted(nearest, key=natural_key)
    worst = max((nearest[gpu][0] for gpu in gpus), key=DISTANCE_CLASSES.index)
    level = NCCL_GDR_LEVELS[worst]
    reason = ('GPUDirect RDMA is ready (gpu_fabric_gdr.gdr_ready) and every GPU has a NIC of NCCL_IB_HCA within %s '
              '(%s); NCCL uses GPUDirect RDMA for a GPU/NIC pair whose distance is at most NCCL_NET_GDR_LEVEL '
              '(src/graph/paths.cc ncclTopoCheckGdr; default %s)'
              % (worst, ', '.join('%s-%s %s' % (gpu, nearest[gpu][1], nearest[gpu][0]) for gpu in gpus), DEFAULT_GDR_LEVEL))
    if level != worst:
        reason += '; NCCL names %s %s (one CPU node per NUMA node in its topology)' % (worst, level)
    if DISTANCE_CLASSES.index(worst) < DISTANCE_CLASSES.index(DEFAULT_GDR_LEVEL):
        reason += '. %s is narrower than that default: GPUDirect RDMA stays on the NIC under each GPU\'s own switch' % level
    return level, reason, []


def socket_ifname(gdr):
    """(NCCL_SOCKET_IFNAME value or None, reason or None, notes)."""
    host = (gdr or {}).get('host')
    iface = host.get('default_route_interface') if isinstance(host, dict) else None
    if not iface:
        return None, None, ['NCCL_SOCKET_IFNAME not set: gpu_fabric_gdr.host.default_route_interface is not in the '
                            'facts (a gdr_facts without it, or no default route)']
    reason = ('the default route leaves through %s (gpu_fabric_gdr.host.default_route_interface); without it NCCL '
              'bootstraps over the first ib* interface it finds, else any but docker, lo and virbr '
              '(src/misc/socket.cc ncclFindInterfaces). \'=\' makes it an exact name, so %s does not also match '
              'interfaces whose names start with it' % (iface, iface))
    return '=' + iface, reason, []


def vendor_notes(gdr):
    vendors = set(g.get('vendor') for g in (gdr or {}).get('gpus') or [])
    notes = []
    if 'amd' in vendors:
        notes.append('AMD GPUs: RCCL takes the same NCCL_* variables and reads them from /etc/rccl.conf '
                     '(RCCL env-variables.html: NCCL_CONF_FILE defaults to ~/.rccl.conf or /etc/rccl.conf), '
                     'the file role nccl_conf writes on a node whose GPUs are all AMD')
    if 'metax' in vendors:
        notes.append('MetaX GPUs: MCCL reads MCCL_* variables (MCCL_IB_HCA, MCCL_NET_GDR_LEVEL), '
                     'not these NCCL_* ones')
    return notes


def recommend(ib, gdr, roce=None, role_of=None):
    """{'settings': {NAME: value}, 'reasons': {NAME: why}, 'notes': [...]} for one node.

    ``ib``: the node's gpu_fabric_ib (or None); ``gdr``: its gpu_fabric_gdr (or None);
    ``roce``: its gpu_fabric_roce (roce_qos_facts) where gathered, for NCCL_IB_TC; ``role_of``: its
    module_utils/_rails.py roles() where the caller has them.
    A note about one setting starts with its name ("NCCL_IB_GID_INDEX not set: ..."): the
    nccl_conf role drops it once the user overrode or omitted that name.
    """
    settings, reasons, notes = {}, {}, []
    devices = (ib or {}).get('devices') or []
    if not devices:
        notes.append('no RDMA device in gpu_fabric_ib (/sys/class/infiniband is empty): NCCL uses its socket '
                     'transport, and there is nothing to set for InfiniBand or RoCE (NCCL_IB_DISABLE=1 would only '
                     'skip the probe for devices that are not there)')
        chosen = []
    else:
        role_of = role_of if role_of is not None else _rails.roles(ib, gdr)
        chosen, left_out, port_notes = select_ports(ib, gdr, role_of)
        notes.extend(port_notes)
        if chosen:
            settings['NCCL_IB_HCA'], reasons['NCCL_IB_HCA'] = ib_hca(chosen, left_out, gdr)
        else:
            notes.append('NCCL_IB_HCA not set: no RDMA port is ACTIVE (%s)'
                         % '; '.join('%s %s' % (pid, left_out[pid]) for pid in sorted(left_out, key=natural_key)))
        value, reason, more = gid_index(chosen)
        notes.extend(more)
        if value is not None:
            settings['NCCL_IB_GID_INDEX'], reasons['NCCL_IB_GID_INDEX'] = value, reason
        value, reason, more = gdr_level(gdr, chosen)
        notes.extend(more)
        if value is not None:
            settings['NCCL_NET_GDR_LEVEL'], reasons['NCCL_NET_GDR_LEVEL'] = value, reason
        # RoCE lossless: the traffic class of the PFC-enabled priority, when the facts agree.
        # NCCL_IB_SL is not recommended: on RoCE the SL is the PCP, which trust dscp ignores.
        value, reason = _roce_rules.nccl_traffic_class(roce, role_of) if roce is not None else (None, None)
        if value is not None:
            settings['NCCL_IB_TC'], reasons['NCCL_IB_TC'] = value, reason
        elif reason:
            notes.append(reason)
    value, reason, more = socket_ifname(gdr)
    notes.extend(more)
    if value is not None:
        settings['NCCL_SOCKET_IFNAME'], reasons['NCCL_SOCKET_IFNAME'] = value, reason
    notes.extend(vendor_notes(gdr))
    return {'settings': settings, 'reasons': reasons, 'notes': notes}


def advice(nodes, roles=None):
    """{host: recommend(...)} for every node with facts (``nodes``: {host: {'ib', 'gdr', 'roce'}}),
    ``roles``: {host: module_utils/_rails.py node_roles()} where the caller has them: the one
    place the NCCL advice of a fleet is computed (the report's hosts.*.nccl, the fleet rule's
    comparison of it)."""
    roles = roles or {}
    return dict((host, recommend(node.get('ib'), node.get('gdr'), node.get('roce'),
                                 role_of=roles[host] if roles.get(host) is not None else _rails.node_roles(node)))
                for host, node in nodes.items() if node.get('ib') is not None or node.get('gdr') is not None)
