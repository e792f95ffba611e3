# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Fleet consistency: every node compared with the other nodes of its kind.

A fault that no rule names - an HCA that did not enumerate, one node on older firmware -
still shows as a difference from the node's peers. A kind is the GPU model (vendor and PCI
device id of gpu_fabric_gdr ``gpus``); nodes without a GPU form their kinds by HCA model
(``hca_type``), nodes without gdr facts kinds of their own. The GPU and HCA counts are
compared, not part of the kind: a node with one GPU fewer must meet its peers. The RDMA devices
are compared by role (module_utils/_rails.py): the compute rails' count, ports, rates and models
against the kind's compute rails, the storage and management cards apart (``other_hcas``): a card
more than the peers have is info, never a rail that "did not enumerate".

For each attribute (ATTRIBUTES), a node whose value differs from the value a strict majority
of its kind has is a finding on that node, one per attribute. Without a majority (a tie, or
fewer than MIN_MAJORITY nodes) one fleet-wide FLEET_SPLIT lists each value with its hosts
and blames none of them. Codes (docs/report.md):

  FLEET_HW_MISSING   error    fewer GPUs, RDMA devices or ports than most nodes of the kind
  FLEET_RAIL_SLOWER  error    a port slower than most nodes' ports, or on another link layer
  FLEET_DIFFERS      warning  any other attribute (the finding's subject) unlike most nodes
  FLEET_SPLIT        warning  nodes of a kind differ and no majority says which is right

What another rule already reports is not counted twice: each attribute's comment says what
it leaves to which rule; its value is None where that rule speaks for the node, and its judge
answers None where another finding accounts for the difference (a missing HCA takes its
firmware, ports and RoCE MTU along).
"""

from __future__ import annotations

from collections import Counter

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._rule import rule
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _rails
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._gdr import natural_key
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _nccl_env
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _roce_rules  # qos_signature, qos_text

# One node against another names no culprit: with two nodes (or a tie) either may be the odd one.
MIN_MAJORITY = 3
# What the rules before this one found (fleet_findings' ``findings``, handed by the engine), by the
# codes' roles in the registry (its ROLES): a port's own findings (rules/_node.py ib_findings),
# of which a port down or slower is that port's (OWNED_PORT_CODES); the node's GPUDirect RDMA
# findings (gdr_findings); the fleet's MTU rule (mtu_findings). This rule reads them, it never runs them.
PORT_CODES = _findings.codes_with('port')
OWNED_PORT_CODES = _findings.codes_with('port_owned')
GDR_CODES = _findings.codes_with('gpudirect')
MTU_CODES = _findings.codes_with('mtu')
# Per-node findings of gdr_findings that already say a node has no RDMA device at all.
NO_RDMA_CODES = _findings.codes_with('no_rdma')
# NCCL settings compared (_nccl_env.recommend): how many ports NCCL_IB_HCA lists (the names
# may legitimately differ from node to node), the GID index, the GPUDirect RDMA level.
NCCL_COMPARED = ('NCCL_IB_GID_INDEX', 'NCCL_NET_GDR_LEVEL')


def node_kind(node):
    """What a node is compared with: its GPU model, else its HCA models."""
    gdr, ib = node.get('gdr'), node.get('ib')
    gpus = (gdr or {}).get('gpus') or []
    if gpus:
        return 'GPU ' + ' + '.join(sorted(set('%s %s' % (g.get('vendor'), g.get('device_id')) for g in gpus)))
    models = sorted(set(d.get('hca_type') or 'unknown' for d in (ib or {}).get('devices') or []))
    hcas = ('HCA ' + ' + '.join(models)) if models else 'no HCA'
    return ('no GPU, %s' if gdr else 'GPU unknown (no gdr facts), %s') % hcas


def _all_devices(node):
    return (node.get('ib') or {}).get('devices') or []


def _devices(host, node, ctx, compute=True):
    """The node's RDMA devices of the compute rails (``compute`` False: the others), as
    _rails.roles tells them (ctx['roles'])."""
    role_of = ctx['roles'][host]
    return [d for d in _all_devices(node) if _rails.is_compute(role_of, d['name']) == compute]


def _ports(host, node, ctx):
    return [(device, port) for device in _devices(host, node, ctx) for port in device.get('ports') or []]


def _hca_difference(host, ref_hosts, ctx):
    """-1, 0 or 1: has ``host`` fewer, as many or more RDMA devices than the nodes of the
    reference value (0 where unknown)? A difference there is hca_count's finding."""
    mine = ctx['hca_count'].get(host)
    counts = [ctx['hca_count'][h] for h in ref_hosts if ctx['hca_count'].get(h) is not None]
    if mine is None or not counts:
        return 0
    return -1 if mine < min(counts) else (1 if mine > max(counts) else 0)


# ---------------------------------------------------------------------------- values

def gpu_count(host, node, ctx):
    # No rule counts GPUs: a GPU that fell off the bus (NVIDIA Xid 79, docs.nvidia.com/deploy/xid-errors)
    # is absent from the PCI tree and only shows against the peers.
    gdr = node.get('gdr')
    return len(gdr.get('gpus') or []) if gdr else None


def hca_count(host, node, ctx):
    # RDMA devices of the compute rails in /sys/class/infiniband: an HCA that did not enumerate
    # is absent, one whose port is down is present (IB_PORT_DOWN owns that). No device at all:
    # NO_RDMA_CODES say so. Storage and management cards: other_hcas.
    if node.get('ib') is None:
        return None
    count = len(_devices(host, node, ctx))
    return None if not count and ctx['codes'][host] & set(NO_RDMA_CODES) else count


def _per_hca(field):
    def value(host, node, ctx):
        # The distinct (model, value) pairs, not one per HCA: a missing HCA does not change
        # the set unless it was the only one of its model (then _per_hca_judge leaves it to
        # hca_model and hca_count), and the model (with the role of a storage or management card:
        # _rails.roles) keeps a storage NIC's firmware apart from the rails'.
        role_of = ctx['roles'][host]
        pairs = set('%s%s %s' % (d.get('hca_type') or '?', '' if _rails.is_compute(role_of, d['name'])
                                 else '/' + role_of[d['name']]['role'], d[field]) for d in _all_devices(node) if d.get(field))
        return tuple(sorted(pairs, key=natural_key)) or None
    value.__name__ = field
    return value


def hca_model(host, node, ctx):
    # hca_type (the PCI device id's part number, e.g. MT4129 for ConnectX-7): ib_link_facts
    # reads no vendor_part_id. A node without GPUs is already grouped by it. The compute rails'
    # models: a storage card's is other_hcas'.
    return tuple(sorted(set(d['hca_type'] for d in _devices(host, node, ctx) if d.get('hca_type')), key=natural_key)) or None


def other_hcas(host, node, ctx):
    # The storage and management cards (_rails.roles): role, model and ports (link layer, rate;
    # a port IB_PORT_DOWN or IB_RATE_DEGRADED reports without its rate). A node with one more
    # than its peers is info (_other_judge); one that lacks a card of its peers' is a warning.
    if not _all_devices(node):
        return None
    role_of, owned = ctx['roles'][host], ctx['owned_ports'][host]
    entries = []
    for device in _devices(host, node, ctx, compute=False):
        ports = ','.join('%s %s' % (p.get('link_layer'), '%g Gb/s' % p['rate_gbps'] if p.get('rate_gbps') and '%s/%s' % (
            device['name'], p.get('port')) not in owned else '(rate owned by another finding)') for p in device.get('ports') or [])
        entries.append('%s %s %s' % ((role_of.get(device['name']) or {}).get('role'), device.get('hca_type') or '?', ports))
    return tuple(sorted(entries, key=natural_key))


def rails(host, node, ctx):
    """Multiset of (link layer, rate) of the node's ports, as a sorted tuple.

    A port IB_PORT_DOWN or IB_RATE_DEGRADED reports (ctx['owned_ports']) counts at the node's
    best rate of its link layer - what it has when that rule's fault is fixed - so that the
    fault is not reported twice; with no such rate it counts as (link layer, None), which
    matches any rate (``_rail_judge``)."""
    if not _devices(host, node, ctx):
        return None      # no RDMA device: hca_count, or the per-node rules of NO_RDMA_CODES
    owned = ctx['owned_ports'][host]
    active = [(d, p) for d, p in _ports(host, node, ctx) if '%s/%s' % (d['name'], p.get('port')) not in owned]
    best = {}
    for _device, port in active:
        best[port.get('link_layer')] = max(best.get(port.get('link_layer')) or 0, port.get('rate_gbps') or 0) or None
    entries = [(p.get('link_layer'), p.get('rate_gbps')) for _d, p in active]
    entries += [(p.get('link_layer'), best.get(p.get('link_layer'))) for d, p in _ports(host, node, ctx)
                if '%s/%s' % (d['name'], p.get('port')) in owned]
    return tuple(sorted(entries, key=lambda e: (e[0] or '', e[1] or 0)))


def roce_mtu(host, node, ctx):
    # The netdev MTU of ACTIVE RoCE ports. MTU_MISMATCH (_diagnose.mtu_findings) owns a port
    # whose RDMA (active) MTU differs, fleet-wide; this sees what it cannot: 9000 against 4200
    # both allow a 4096-byte RDMA MTU (_ib.roce_active_mtu), yet the nodes are set up apart.
    # IB ports' MTU is the subnet's (MTU_MISMATCH); their IPoIB netdev carries no RDMA traffic.
    if host in ctx['mtu_hosts']:
        return None
    mtus = set(p.get('netdev_mtu') for _d, p in _ports(host, node, ctx)
               if p.get('link_layer') == 'Ethernet' and p.get('state') == 'ACTIVE' and p.get('netdev_mtu'))
    return tuple(sorted(mtus)) or None


def gid_index(host, node, ctx):
    # Per ACTIVE RoCE port the lowest index of a RoCE v2 GID with an IPv4 address (what
    # NCCL_IB_GID_INDEX must name, _nccl_env.gid_index). ROCE_NO_V2_GID owns a port without v2.
    if _findings.ROCE_NO_V2_GID in ctx['codes'][host]:
        return None
    indexes = set()
    for _device, port in _ports(host, node, ctx):
        if port.get('link_layer') == 'Ethernet' and port.get('state') == 'ACTIVE':
            v2 = [g['index'] for g in port.get('gids') or [] if g.get('type') == _nccl_env.ROCE_V2 and g.get('ipv4')]
            indexes.add(str(min(v2)) if v2 else 'none')
    return tuple(sorted(indexes, key=natural_key)) or None


def peer_memory(host, node, ctx):
    # gdr_ready, the peer-memory modules loaded and the memory_peers clients registered. Where
    # _diagnose.gdr_findings reports anything on the node (GDR_*, GPU_NIC_FAR) it says why.
    gdr = node.get('gdr')
    if not (gdr or {}).get('gpus') or ctx['gdr_codes'][host]:
        return None
    peer = gdr.get('peer_memory') or {}
    return ('gdr_ready %s' % gdr.get('gdr_ready'),
            'modules %s' % (','.join(sorted(peer.get('modules_loaded') or [])) or 'none'),
            'clients %s' % (','.join(sorted(peer.get('clients') or {})) or 'none'))


def kernel(host, node, ctx):
    # Not left to GDR_MM_KOBJ_NOT_EXPORTED: that names what a kernel lacks, this that one node
    # runs another kernel than its peers - a node updated ahead of the rest, which is how a
    # kernel without mm_kobj (tests/sim/faults.py mm_kobj_not_exported) gets onto one node.
    gdr = node.get('gdr')
    return ((gdr.get('kernel') or {}).get('release') or None) if gdr else None


def ofed(host, node, ctx):
    gdr = node.get('gdr')
    if not gdr:
        return None
    return (gdr.get('ofed') or {}).get('version') or 'inbox (no MLNX OFED found)'


def roce_qos(host, node, ctx):
    # RoCE lossless settings (_roce_rules.qos_signature): trust, PFC, ToS, CNP, ECN,
    # less what a ROCE_* finding of the node names; this sees a node set up consistently but
    # unlike its peers (PFC on priority 4 where the switches and peers use 3).
    return _roce_rules.qos_signature(node['roce'], ctx['roles'][host]) if node.get('roce') is not None else None


def nccl_settings(host, node, ctx):
    # The settings follow from the facts: a node with a finding of its own (a port down, a
    # missing HCA, GPUDirect RDMA not ready) gets other settings for that reason, reported there.
    if ctx['codes'][host] or host in ctx['named']:
        return None
    settings = (ctx['nccl'].get(host) or {}).get('settings') or {}
    hca = settings.get('NCCL_IB_HCA')
    values = ['NCCL_IB_HCA %s port(s)' % (len(hca.lstrip('=').split(',')) if hca else 'no')]
    values += ['%s %s' % (name, settings.get(name, 'not set')) for name in NCCL_COMPARED]
    return tuple(values)


# ---------------------------------------------------------------------------- judging

def _count_judge(host, value, ref, ref_hosts, ctx):
    return (_findings.FLEET_HW_MISSING, 'error') if value < ref else (_findings.FLEET_DIFFERS, 'warning')


def _set_judge(host, value, ref, ref_hosts, ctx):
    # A strict subset on a node with fewer RDMA devices: the missing HCA took its value with it;
    # a strict superset on a node with more: the extra HCA brought it.
    difference = _hca_difference(host, ref_hosts, ctx)
    if (difference < 0 and set(value) < set(ref)) or (difference > 0 and set(value) > set(ref)):
        return None
    return _findings.FLEET_DIFFERS, 'warning'


def _per_hca_judge(host, value, ref, ref_hosts, ctx):
    # Firmware and board ids are compared per HCA model the node shares with the reference:
    # a model only one side has is hca_model's difference (or hca_count's), not theirs too.
    def model(entry):
        return entry.split(' ', 1)[0]
    common = set(model(e) for e in value) & set(model(e) for e in ref)
    if [e for e in value if model(e) in common] == [e for e in ref if model(e) in common]:
        return None
    return _findings.FLEET_DIFFERS, 'warning'


def _rail_judge(host, value, ref, ref_hosts, ctx):
    extra, lacking = Counter(value) - Counter(ref), Counter(ref) - Counter(value)
    # (link layer, None): a port whose rate another rule owns, as good as any rate of its layer.
    for layer, rate in list(extra.elements()):
        match = next((entry for entry in lacking
                      if lacking[entry] > 0 and entry[0] == layer and (rate is None or entry[1] is None)), None)
        if match:
            extra[(layer, rate)] -= 1
            lacking[match] -= 1
    extra, lacking = +extra, +lacking
    best = {}
    for layer, rate in ref:
        best[layer] = max(best.get(layer) or 0, rate or 0)
    slower = [e for e in extra if e[0] in best and e[1] is not None and e[1] < best[e[0]]]
    if slower:
        return _findings.FLEET_RAIL_SLOWER, 'error'
    if _hca_difference(host, ref_hosts, ctx):
        return None      # the ports of a missing or an extra HCA: hca_count's finding
    if [e for e in extra if e[0] not in best]:
        return _findings.FLEET_RAIL_SLOWER, 'error'      # another link layer: NCCL cannot join it to the peers' rails
    if extra:
        return _findings.FLEET_DIFFERS, 'warning'
    return (_findings.FLEET_HW_MISSING, 'error') if lacking else None


def _other_judge(host, value, ref, ref_hosts, ctx):
    # A storage or management card more than the peers have is how that node was built (a storage
    # network of its own): said, as info. One the peers have and this node lacks (or another model,
    # another rate) is a difference to look at, not a compute rail's fault.
    lacking = Counter(ref) - Counter(value)
    return _findings.FLEET_DIFFERS, ('warning' if lacking else 'info')


def _named_devices(node):
    return [d for d in ((node.get('ib') or {}).get('devices') or []) if isinstance(d, dict) and d.get('name')]


def _rails_differ(host, node, value, ref, ctx):
    extra = Counter(value) - Counter(ref)
    return [d['name'] for d in _devices(host, node, ctx) if isinstance(d, dict) and d.get('name') for p in d.get('ports') or []
            if (p.get('link_layer'), p.get('rate_gbps')) in extra]


def _model_differs(host, node, _value, ref, ctx):
    return [d['name'] for d in _devices(host, node, ctx) if isinstance(d, dict) and d.get('name')
            and d.get('hca_type') and d['hca_type'] not in ref]


def _field_differs(field):
    def named(_host, node, _value, ref, _ctx):
        theirs = set((entry.split(' ', 1)[0].split('/')[0], entry.rsplit(' ', 1)[-1]) for entry in ref)
        return [d['name'] for d in _named_devices(node) if d.get(field) and ((d.get('hca_type') or '?'), str(d[field])) not in theirs]
    return named


def _roce_ports(_host, node, _value, _ref, _ctx):
    return [d['name'] for d in _named_devices(node) for p in d.get('ports') or [] if p.get('link_layer') == 'Ethernet']


# Which HCAs an attribute's difference names (the others are node-wide: _places).
_NAMED_BY = {'rails': _rails_differ, 'hca_model': _model_differs, 'firmware': _field_differs('fw_ver'),
             'board_id': _field_differs('board_id'), 'roce_mtu': _roce_ports, 'gid_index': _roce_ports, 'roce_qos': _roce_ports}


def _places(name, host, node, value, ref, ctx):
    """Where a node's difference sits (a finding's ``at``, _findings.on_path): the HCAs whose
    ports, model, firmware or board differ, or whose RoCE settings were compared; the node where
    the difference is node-wide (a GPU or an HCA missing: the rest shifts to other devices; the
    kernel, OFED, peer memory, the NCCL settings) or where no device can be named. ``rails`` and
    ``hca_model`` compare the compute rails only (``_devices``): a storage card of the same rate
    or model is never where their difference sits."""
    named = _NAMED_BY[name](host, node, value, ref, ctx) if name in _NAMED_BY else []
    if named:
        return [('hca', host, device) for device in sorted(set(named), key=natural_key)]
    return [('node', host)]


def _show(value):
    if isinstance(value, tuple):
        return ', '.join(str(v) for v in value) or 'none'
    return str(value)


def _show_rails(value):
    counts = Counter(value)
    return ', '.join('%d x %s %s' % (counts[e], e[0], '%g Gb/s' % e[1] if e[1] is not None else '(rate owned by another finding)')
                     for e in sorted(counts, key=lambda e: (e[0] or '', -(e[1] or 0))))


def _show_qos(value):
    return _roce_rules.qos_text(value)


def _plain(value):
    return [_plain(v) for v in value] if isinstance(value, tuple) else value


# name -> (layer, value, judge, words, remedy). Order matters: counts first (their findings
# explain the rest), NCCL last (it is left out where anything else named the node).
ATTRIBUTES = (
    ('gpu_count', 'ib_gpu', gpu_count, _count_judge, 'GPUs (gpu_fabric_gdr.gpus)',
     'compare lspci with a peer\'s; a missing GPU: check dmesg (fallen off the bus: Xid 79, PCIe link down), reseat or '
     'replace it'),
    ('hca_count', 'ib', hca_count, _count_judge, 'RDMA devices of the compute rails (/sys/class/infiniband)',
     'check lspci for the HCA and dmesg for its probe (mlx5_core errors, firmware not responding); a card that '
     'does not enumerate needs a reseat, a firmware reset (mlxfwreset) or a replacement'),
    ('rails', 'ib', rails, _rail_judge, 'compute rail ports by link layer and rate',
     'compare the cables, transceivers and switch ports of the slower rails with a healthy node (iblinkinfo, '
     'ibstat); a port on another link layer: mlxconfig LINK_TYPE_P1'),
    ('hca_model', 'ib', hca_model, _set_judge, 'HCA models of the compute rails (hca_type)',
     'check that the node has the same HCA models as its peers (a replacement card of another model)'),
    ('other_hcas', 'ib', other_hcas, _other_judge, 'storage and management cards (role, hca_type, ports)',
     'nothing to do where the card is meant to be there (a storage or management network of this node); a card the '
     'peers have and this node lacks: check lspci and dmesg for it, and its cable'),
    ('firmware', 'ib', _per_hca('fw_ver'), _per_hca_judge, 'HCA firmware (model fw_ver)',
     'update the HCA firmware to the version of the other nodes (mlxfwmanager, or the OFED/DOCA firmware bundle)'),
    ('board_id', 'ib', _per_hca('board_id'), _per_hca_judge, 'HCA board ids (model board_id)',
     'check the card (PSID/board id) against the peers\'; a vendor-specific board needs that vendor\'s firmware'),
    ('roce_mtu', 'ib', roce_mtu, _set_judge, 'netdev MTU of the RoCE ports',
     'set the same netdev MTU on the RoCE ports of every node (and the switch ports)'),
    ('gid_index', 'ib', gid_index, _set_judge, 'RoCE v2 GID index of the RoCE ports',
     'give the RoCE netdevs the same address configuration as the peers (the GID table follows the addresses)'),
    ('peer_memory', 'ib_gpu', peer_memory, _set_judge, 'peer memory (gdr_ready, modules, memory_peers clients)',
     'load the same peer-memory modules as the peers (role rdma_modules, role ofed_peermem)'),
    ('kernel', 'host', kernel, _set_judge, 'kernel release',
     'run the kernel of the other nodes, or move them all to the new one (then rebuild OFED: role ofed_peermem)'),
    ('ofed', 'host', ofed, _set_judge, 'OFED version',
     'install the OFED version of the other nodes'),
    ('roce_qos', 'ib', roce_qos, _set_judge, 'RoCE lossless settings (trust, PFC, RDMA CM ToS, CNP, ECN)',
     'apply the same RoCE QoS as the peers (role roce_qos) and match the switch ports'),
    ('nccl', 'host', nccl_settings, _set_judge, 'recommended NCCL settings (hosts.*.nccl)',
     'compare the node\'s facts with a peer\'s: the NCCL settings follow from them (role nccl_conf)'),
)


def _context(nodes, findings, nccl, roles=None):
    """What other rules already report, per host (``findings``: theirs, PORT_CODES, GDR_CODES, MTU_CODES)."""
    roles = dict((host, (roles or {}).get(host) if (roles or {}).get(host) is not None else _rails.node_roles(node))
                 for host, node in nodes.items())
    ctx = {'codes': {}, 'gdr_codes': {}, 'owned_ports': {}, 'named': set(), 'hca_count': {}, 'roles': roles,
           'mtu_hosts': set(f['host'] for f in findings or () if f['code'] in MTU_CODES), 'nccl': nccl or {}}
    above_info = {}
    for item in findings or ():
        if item['severity'] != 'info' and item.get('host') in nodes:
            above_info.setdefault(item['host'], []).append(item)
    for host in nodes:
        ib_found = [f for f in above_info.get(host, ()) if f['code'] in PORT_CODES]
        gdr_found = [f for f in above_info.get(host, ()) if f['code'] in GDR_CODES]
        ctx['gdr_codes'][host] = set(f['code'] for f in gdr_found)
        ctx['codes'][host] = set(f['code'] for f in ib_found) | ctx['gdr_codes'][host]
        ctx['owned_ports'][host] = set(f['subject'] for f in ib_found if f['code'] in OWNED_PORT_CODES)
    if nccl is None:
        ctx['nccl'] = _nccl_env.advice(nodes, roles)
    return ctx


def _quiet(verdict):
    """A judge's verdict that names nothing above info (None: another finding accounts for it)."""
    return verdict is None or verdict[1] == 'info'


def _against_majority(kind, nodes, ctx, spec, finding, ranked, known):
    """A finding per node whose value differs from the majority's (``ranked[0]``), as the attribute's judge says."""
    name, layer, _value_of, judge, words, remedy = spec
    show = _shower(name)
    ref, ref_hosts = ranked[0]
    found = []
    for value, members in ranked[1:]:
        for host in members:
            verdict = judge(host, value, ref, ref_hosts, ctx)
            if verdict is None:
                continue
            code, severity = verdict
            if severity != 'info':
                ctx['named'].add(host)
            found.append(finding(
                code, host, name,
                {'value': _plain(value), 'most_nodes': _plain(ref), 'nodes_with_most': len(ref_hosts),
                 'nodes_compared': known, 'kind': kind},
                '%s: %s here, %s on %d of the %d nodes of its kind (%s)'
                % (words, show(value), show(ref), len(ref_hosts), known, kind),
                severity=severity, layer=layer, attribute_remedy=remedy,
                at=_places(name, host, nodes[host], value, ref, ctx), path=_places(name, host, nodes[host], value, ref, ctx)))
    return found


def _split(kind, ctx, spec, ranked, known):
    """No majority: a value stays in the split only when no other value explains it away
    (a node whose difference another finding accounts for is not one side of it)."""
    name, layer, _value_of, judge, words, remedy = spec
    show = _shower(name)
    left = [(value, members) for value, members in ranked
            if not any(all(_quiet(judge(host, value, other, other_hosts, ctx)) for host in members)
                       for other, other_hosts in ranked if other != value)]
    if len(left) < 2:
        return []
    ctx['named'].update(host for _value, members in left for host in members)
    why = ('two nodes, so neither is the odd one' if known == 2 else
           'no value is held by more than half of the %d nodes' % known)
    return [_findings.finding(_findings.FLEET_SPLIT, None, '%s (%s)' % (name, kind),
                              {'attribute': name, 'kind': kind, 'values': [{'value': _plain(v), 'hosts': m} for v, m in left]},
                              '%s differ between nodes of one kind (%s) and %s: %s'
                              % (words, kind, why, '; '.join('%s on %s' % (show(v), ', '.join(m)) for v, m in left)),
                              layer=layer, attribute_remedy=remedy)]


def _shower(name):
    return _show_rails if name == 'rails' else _show_qos if name == 'roce_qos' else _show


def _judge_kind(kind, hosts, nodes, ctx, spec, finding):
    name, value_of = spec[0], spec[2]
    values = dict((host, value_of(host, nodes[host], ctx)) for host in hosts)
    if name == 'hca_count':
        ctx['hca_count'].update(values)
    groups = {}
    for host in sorted(hosts, key=natural_key):
        if values[host] is not None:
            groups.setdefault(values[host], []).append(host)
    if len(groups) < 2:
        return []
    known = sum(len(h) for h in groups.values())
    ranked = sorted(groups.items(), key=lambda item: (-len(item[1]), _shower(name)(item[0])))
    if known >= MIN_MAJORITY and 2 * len(ranked[0][1]) > known:
        return _against_majority(kind, nodes, ctx, spec, finding, ranked, known)
    return _split(kind, ctx, spec, ranked, known)


def fleet_findings(nodes, findings=(), nccl=None, roles=None):
    """Findings of nodes that differ from most nodes of their kind.

    ``nodes``: {host: {'ib': gpu_fabric_ib, 'gdr': gpu_fabric_gdr}}; ``findings``: the findings so
    far (_diagnose.diagnose gives those of ib_findings, gdr_findings and mtu_findings: a
    difference they name is not named again; none given, none is known); ``nccl``: {host:
    _nccl_env.recommend(...)} and ``roles``: {host: _rails.roles(...)} where the caller has them
    (computed here otherwise)."""
    finding = _findings.finding
    kinds = {}
    for host in sorted(nodes or {}, key=natural_key):
        kinds.setdefault(node_kind(nodes[host]), []).append(host)
    kinds = dict((kind, hosts) for kind, hosts in kinds.items() if len(hosts) >= 2)
    if not kinds:
        return []
    ctx = _context(nodes, findings, nccl, roles)
    found = []
    for spec in ATTRIBUTES:
        for kind in sorted(kinds):
            found.extend(_judge_kind(kind, kinds[kind], nodes, ctx, spec, finding))
    return found


@rule(produces=(_findings.FLEET_HW_MISSING, _findings.FLEET_RAIL_SLOWER, _findings.FLEET_DIFFERS, _findings.FLEET_SPLIT),
      reads=tuple(dict.fromkeys(PORT_CODES + GDR_CODES + MTU_CODES)), parts=('judged', 'roles'))
def consistency(fleet, findings):
    """Given the port, GPUDirect RDMA and MTU findings: a difference they name is not named again."""
    return fleet_findings(fleet.judged, findings, _nccl_env.advice(fleet.judged, fleet.roles), fleet.roles)
