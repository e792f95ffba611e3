# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Findings about the fabric beyond the nodes: switch and host links, up-links, the subnet
manager, flapping links and error rates at switch ports, and the cables of slow pairs.

Input: the nodes' facts ({host: {'ib': gpu_fabric_ib, 'fabric': gpu_fabric_ib_fabric}}, the
fabric facts from the one node that ran ib_fabric_facts) and the benchmark report. A switch
port whose other end is a node's HCA is attributed to that node (``host``), so that the
host's own findings about that port and the switch port's are one root cause; a link
between switches belongs to the fleet (``host`` None) and names both switch ports.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings as F
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _rates
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._findings import finding
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._rule import rule
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ibdiag import guid as norm_guid
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._shape import integer, mapping, mappings, number, text
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench  # which failed pairs never reached the hardware

# opensm's SMInfo states (IBTA Vol 1 14.4.1, SMInfo:SMState): 3 is MASTER, 2 STANDBY, 1 DISCOVERING, 0 NOT-ACTIVE.
SM_MASTER, SM_DISCOVERING, SM_NOTACTIVE = 3, 1, 0


def fabric_of(nodes):
    """(host, fabric facts) of the first node (by name) that discovered the fabric, else (None, None)."""
    for host in sorted(nodes or {}):
        fabric = mapping(mapping(nodes[host]).get('fabric'))
        if fabric:
            return host, fabric
    return None, None


def host_ports(nodes):
    """{GUID: (host, device)} from every node's gpu_fabric_ib (node GUID, and the port GUID of
    GID 0 - the lower 64 bits of the link-local GID)."""
    found = {}
    for host in sorted(nodes or {}):
        for device in mappings(mapping(mapping(nodes[host]).get('ib')).get('devices')):
            name = text(device.get('name'))
            for value in [device.get('node_guid')] + [g.get('gid', '')[-19:] for p in mappings(device.get('ports'))
                                                      for g in mappings(p.get('gids'))[:1] if isinstance(g.get('gid'), str)]:
                key = norm_guid(value) if isinstance(value, str) else None
                if key and key != '0x0000000000000000':
                    found.setdefault(key, (host, name))
    return found


def _node(topology, node_id):
    return mapping(mapping(topology.get('nodes')).get(node_id))


def _label(topology, end):
    node = _node(topology, end.get('node'))
    return '%s port %s' % (text(node.get('desc')) or text(end.get('desc')) or end.get('node'), end.get('port'))


def _kind(topology, end):
    return _node(topology, end.get('node')).get('type')


def _owner(end, owners):
    return owners.get(text(end.get('guid')) or text(end.get('node')))


def _end_name(end):
    """'guid/port' of a link end (the node id where no GUID is known), as ('link', a, b) places name it."""
    return '%s/%s' % (text(end.get('guid')) or text(end.get('node')), end.get('port'))


def _link_places(a, b, owners):
    """The places of the link a <-> b: ('link', end, end) with its ends sorted, and ('hca', host, hca)
    for an end that is a node's HCA."""
    found = [('link',) + tuple(sorted((_end_name(a), _end_name(b))))] if a and b else []
    for end in (a, b):
        owner = _owner(end, owners) if end else None
        if owner:
            found.append(('hca', owner[0], owner[1]))
    return found


FABRIC = ('fabric',)


def classify(topology):
    """{'leaves': [...], 'spines': [...]}: a switch with a CA attached is a leaf, one with only
    switches attached a spine."""
    attached = {}
    for link in mappings(topology.get('links')):
        a, b = mapping(link.get('a')), mapping(link.get('b'))
        if not b or link.get('state') != 'Active':
            continue
        for here, there in ((a, b), (b, a)):
            if _kind(topology, here) == 'switch':
                attached.setdefault(here.get('node'), set()).add(_kind(topology, there))
    leaves = sorted(n for n, kinds in attached.items() if 'ca' in kinds)
    spines = sorted(n for n, kinds in attached.items() if 'ca' not in kinds)
    return {'leaves': leaves, 'spines': spines}


def link_findings(topology, owners):
    found = []
    active = [l for l in mappings(topology.get('links')) if l.get('state') == 'Active' and mapping(l.get('b'))]
    kinds = Counter()
    for link in active:
        ends = frozenset((_kind(topology, mapping(link['a'])), _kind(topology, mapping(link['b']))))
        if number(link.get('gbps')):
            kinds[(ends, number(link['gbps']))] += 1
    usual = {}
    for (ends, gbps), count in kinds.items():
        if ends not in usual or count > usual[ends][1]:
            usual[ends] = (gbps, count)
    for link in active:
        a, b = mapping(link['a']), mapping(link['b'])
        ends = frozenset((_kind(topology, a), _kind(topology, b)))
        gbps = number(link.get('gbps'))
        could = mapping(link.get('could_be'))
        reasons = []
        if could.get('width') or could.get('lane_gbps'):
            reasons.append('both ends could train at %s' % ' '.join(
                str(v) + (' Gb/s per lane' if k == 'lane_gbps' else '') for k, v in sorted(could.items()) if v))
        expected = usual.get(ends, (None, 0))[0]
        if gbps and expected and gbps < expected:
            reasons.append('%g Gb/s against the fabric\'s usual %g Gb/s for such links' % (gbps, expected))
        if not reasons:
            continue
        owner = _owner(a, owners) or _owner(b, owners)
        subject = '%s <-> %s' % (_label(topology, a), _label(topology, b))
        found.append(finding(
            F.FABRIC_LINK_DEGRADED, owner[0] if owner else None, subject,
            {'width': link.get('width'), 'speed': link.get('speed'), 'gbps': gbps, 'usual_gbps': expected,
             'could_be': could, 'a': a, 'b': b},
            'the link trained at %s %s (%s): every flow through it runs slower' % (
                link.get('width'), link.get('speed') or '', '; '.join(reasons)), link=subject,
            # A host link is also the node's port: IB_RATE_DEGRADED of that HCA explains it (one fault, one root).
            at=_link_places(a, b, owners), path=_link_places(a, b, owners)))
    return found


def uplink_findings(topology, roles, owners=None):
    found = []
    spines = set(roles['spines'])
    counts = {}
    for leaf in roles['leaves']:
        counts[leaf] = sum(1 for l in mappings(topology.get('links')) if l.get('state') == 'Active' and mapping(l.get('b'))
                           and {mapping(l['a']).get('node'), mapping(l['b']).get('node')} & {leaf}
                           and {mapping(l['a']).get('node'), mapping(l['b']).get('node')} & spines)
    if len(counts) < 2:
        return found
    most = Counter(counts.values()).most_common(1)[0][0]
    peak = max(counts.values())
    for leaf, count in sorted(counts.items()):
        if count < peak:
            node = _node(topology, leaf)
            found.append(finding(
                F.FABRIC_UPLINKS_ASYMMETRIC, None, text(node.get('desc')) or leaf,
                {'uplinks': count, 'peers_uplinks': dict((text(_node(topology, n).get('desc')) or n, c) for n, c in counts.items()),
                 'most_leaves': most},
                '%s has %d up-links to the spines where its peers have %d: adaptive routing and ECMP spread '
                'traffic over fewer paths, which shows as bandwidth loss only under load' % (
                    text(node.get('desc')) or leaf, count, peak), switch=text(node.get('desc')) or leaf,
                # Every flow through this leaf: its active links (host ports and the remaining up-links).
                at=[place for l in mappings(topology.get('links')) if l.get('state') == 'Active' and mapping(l.get('b'))
                    and leaf in (mapping(l['a']).get('node'), mapping(l['b']).get('node'))
                    for place in _link_places(mapping(l['a']), mapping(l['b']), owners or {})] or [FABRIC]))
    return found


def _sms_by_guid(sms):
    """One record per SM (by GUID): the SM's own answer (sminfo) before the SA's record of it (saquery
    SMIR lists what the master last polled), and a record with a state before one without."""
    best = {}
    for sm in sms:
        key = text(sm.get('guid')) or 'lid %s' % sm.get('lid')
        rank = (integer(sm.get('state')) is not None, text(sm.get('asked')) != 'saquery SMIR')
        if key not in best or rank > best[key][0]:
            best[key] = (rank, sm)
    return [best[key][1] for key in sorted(best)]


def _sm_name(sm):
    return 'LID %s GUID %s priority %s' % (sm.get('lid'), sm.get('guid'), sm.get('priority'))


def _masters(sms, errors, masters, discovered_by):
    """No SM master, or several."""
    if not masters:
        unknown = [s for s in sms if integer(s.get('state')) is None]
        why = '; '.join(text(e.get('error')) for e in errors[:3]) or 'no SMInfo record'
        if unknown:
            why = 'the state of %s was not read; %s' % (', '.join(_sm_name(s) for s in unknown[:3]), why)
        return [finding(
            F.FABRIC_SM_ABSENT, None, 'subnet manager',
            {'asked_from': discovered_by, 'sms': sms, 'errors': errors[:10]},
            'no subnet manager answered as master (%s): the fabric keeps its routes until a link or node changes, '
            'then nothing reconfigures it' % why, at=[FABRIC])]
    if len(masters) > 1:
        return [finding(
            F.FABRIC_SM_MULTIPLE_MASTERS, None, 'subnet manager',
            {'masters': sorted(masters.values(), key=lambda s: integer(s.get('lid')) or 0)},
            '%d subnet managers each claim to be master (%s): the subnet is split and routes fight' % (
                len(masters), ', '.join('LID %s GUID %s' % (s.get('lid'), g) for g, s in sorted(masters.items()))),
            at=[FABRIC])]
    return []


def _priority_tie(sms, masters):
    """SMs that share a priority: at equal priority the GUID decides."""
    active = [s for s in sms if integer(s.get('state')) not in (SM_NOTACTIVE, None)]
    priorities = Counter(integer(s.get('priority')) for s in active)
    tied = sorted(p for p, c in priorities.items() if c > 1 and p is not None)
    if not tied:
        return []
    master = list(masters.values())[0] if len(masters) == 1 else None
    with_master = [s for s in active if master is not None and s is not master
                   and integer(s.get('priority')) == integer(master.get('priority'))]
    if with_master:
        cause = ('%s stand%s by at the master\'s priority %s (master %s): at equal priority the lower GUID is master, '
                 'so the GUIDs, not the priorities, decide who takes over, and a restarted SM with a lower GUID takes '
                 'the subnet back - each handover a heavy sweep that re-routes the fabric' % (
                     ', '.join(_sm_name(s) for s in with_master), 's' if len(with_master) == 1 else '',
                     master.get('priority'), _sm_name(master)))
    else:
        cause = ('subnet managers share priority %s: which one becomes master is decided by GUID, and a failover may '
                 'pick an unintended one' % ', '.join(str(p) for p in tied))
    return [finding(
        F.FABRIC_SM_PRIORITY_TIE, None, 'subnet manager',
        {'priority': tied, 'sms': active, 'master': master, 'standbys_at_master_priority': with_master}, cause, at=[FABRIC])]


def _inactive(sms, masters):
    """SMs that are not STANDBY beside a master: they will not take over."""
    idle = [s for s in sms if integer(s.get('state')) in (SM_NOTACTIVE, SM_DISCOVERING)]
    if not (idle and masters):
        return []
    return [finding(
        F.FABRIC_SM_INACTIVE, None, 'subnet manager',
        {'sms': idle},
        '%s: %s' % ('; '.join('%s is %s' % (_sm_name(s), text(s.get('state_name')) or s.get('state')) for s in idle),
                    'an SM that is not STANDBY does not poll the master and does not take over when it fails '
                    '(NOTACTIVE: stopped or disabled; DISCOVERING: still electing, or stuck if it stays so)'),
        at=[FABRIC])]


def _sm_views(nodes):
    """The nodes' views of their SM (each ACTIVE InfiniBand port's sm_lid), where they differ."""
    views = {}
    for host in sorted(nodes or {}):
        for device in mappings(mapping(mapping(nodes[host]).get('ib')).get('devices')):
            for port in mappings(device.get('ports')):
                if port.get('link_layer') == 'InfiniBand' and port.get('state') == 'ACTIVE' and integer(port.get('sm_lid')):
                    views.setdefault(text(device.get('name')), {}).setdefault(integer(port['sm_lid']), []).append(host)
    return [finding(
        F.FABRIC_SM_DISAGREE, None, 'sm_lid of %s' % device,
        {'views': dict((str(lid), hosts) for lid, hosts in sorted(seen.items()))},
        'the nodes\' %s ports see different subnet managers (%s): the fabric is split or an SM handover '
        'did not finish' % (device, '; '.join('SM LID %s: %d node(s)' % (lid, len(h)) for lid, h in sorted(seen.items()))),
        at=[FABRIC]) for device, seen in sorted(views.items()) if len(seen) > 1]


def sm_findings(fabric, nodes, discovered_by):
    """The subnet managers: none master, several masters, standbys at the master's priority, SMs that
    will not take over, and the nodes' views. IBTA/opensm elect by priority, then the LOWER GUID
    (opensm osm_sminfo_rcv.c smi_rcv_remote_sm_is_higher(): "higher priority or with same priority and
    lower GUID"); opensm(8) -p: "master is chosen by priority and GUID", 0 lowest to 15 highest."""
    sm = mapping(fabric.get('sm'))
    sms = _sms_by_guid(mappings(sm.get('sms')))
    masters = dict((text(s.get('guid')), s) for s in sms if integer(s.get('state')) == SM_MASTER)
    return (_masters(sms, mappings(sm.get('errors')), masters, discovered_by) + _priority_tie(sms, masters)
            + _inactive(sms, masters) + _sm_views(nodes))


def unread_findings(fabric, host):
    """Lines of the tools' outputs that no pattern read: a fabric built from them is not called ok."""
    unread = mapping(fabric.get('unread'))
    count = integer(unread.get('count')) or 0
    if count <= 0:
        return []
    lines = mappings(unread.get('lines'))
    tools = sorted(set(text(item.get('tool')) for item in lines))
    return [finding(
        F.FABRIC_INPUT_UNREAD, host, 'fabric tools\' output',
        {'count': count, 'tools': tools, 'first': lines[:5]},
        '%d line(s) of %s were not read, so what they say about the fabric was not judged; first: %s' % (
            count, ', '.join(tools) or 'the tools\' output',
            '; '.join('%s line %s: %r' % (text(item.get('tool')), item.get('line'), text(item.get('text'))[:120])
                      for item in lines[:5])),
        at=[FABRIC])]


def _port_speeds(topology):
    speeds, ends = {}, {}
    for link in mappings(topology.get('links')):
        for here, there in ((mapping(link.get('a')), mapping(link.get('b'))), (mapping(link.get('b')), mapping(link.get('a')))):
            if here.get('lid') is not None:
                speeds[(here['lid'], here.get('port'))] = number(link.get('gbps'))
                ends[(here['lid'], here.get('port'))] = (here, there)
    return speeds, ends


def counter_findings(fabric, topology, owners, covered=()):
    """The perfquery sweep of the switches: ports the subnet's read (subnet_findings) judged already
    (``covered``, {(node id, port)}) are left to it, and a window inside the bring-up grace is not judged
    here (subnet_findings says it, or nothing where the subnet was not read: the sweep's rises in it are bring-up)."""
    found = []
    reads = mappings(mapping(fabric.get('counters')).get('reads'))
    if len(reads) < 2:
        return found
    subnet = mapping(fabric.get('subnet'))
    by_lid = dict((lid, node_id) for node_id, node in mapping(topology.get('nodes')).items()
                  for lid in (node.get('lids') if isinstance(node, dict) and isinstance(node.get('lids'), list) else []))
    first, last = reads[0], reads[-1]
    seconds = (number(last.get('read_at')) or 0) - (number(first.get('read_at')) or 0)
    before = dict(((integer(p.get('lid')), integer(p.get('port'))), mapping(p.get('counters'))) for p in mappings(first.get('ports')))
    speeds, ends = _port_speeds(topology)
    for port in mappings(last.get('ports')):
        key = (integer(port.get('lid')), integer(port.get('port')))
        if key not in before:
            continue
        if (by_lid.get(key[0]), key[1]) in covered:
            continue
        result = _rates.window(before[key], mapping(port.get('counters')), seconds, speeds.get(key),
                               number(subnet.get('uptime_s')), _grace(subnet))
        if not result['verdicts']:
            continue
        here, there = ends.get(key, ({'lid': key[0], 'port': key[1], 'node': 'lid-%s' % key[0]}, {}))
        if result['phase'] == 'bring_up':
            # Inside the grace window: said as information, as the subnet's read says it (subnet_findings).
            found.append(_subnet_finding(topology, owners, {'guid': here.get('guid') or here.get('node'), 'port': key[1]}, result,
                                         seconds, (here, there, {}), {'uptime_s': number(subnet.get('uptime_s')),
                                                                      'grace_min': _grace(subnet), 'source': 'perfquery'}))
            continue
        owner = _owner(there, owners) if there else None
        subject = _label(topology, here) + (' (to %s)' % _label(topology, there) if there else '')
        rules = set(v['rule'] for v in result['verdicts'])
        code = F.FABRIC_LINK_FLAPPING if 'flapping' in rules else F.FABRIC_ERROR_RATE
        found.append(finding(
            code, owner[0] if owner else None, subject,
            {'verdicts': result['verdicts'], 'increase': result['increase'], 'seconds': round(seconds, 3),
             'hca': owner[1] if owner else None},
            'between two reads %.1f s apart the switch port %s' % (seconds, '; '.join(
                '%s rose by %d (%s)' % (v['counter'], v['increase'], v['rule']) for v in result['verdicts'])),
            port=subject, at=_link_places(here, there, owners) or [('link', _end_name(here), _end_name(here))]))
    return found


def _grace(subnet):
    """The grace window's minutes the facts were read with (ib_fabric_facts link_grace), else the default."""
    grace = number(subnet.get('grace_min'))
    return grace if grace is not None and 0 <= grace <= _rates.LINK_GRACE_MAX_MIN else _rates.LINK_GRACE_MIN


def _subnet_ends(topology, owners):
    """{(node id or GUID, port): (this end, the other end)} of every link end, and {(host, hca): the same} of the
    ends that are a node's HCA (a CA port names its port GUID, which host_ports() maps)."""
    by_port, by_owner = {}, {}
    for link in mappings(topology.get('links')):
        a, b = mapping(link.get('a')), mapping(link.get('b'))
        for here, there in ((a, b), (b, a)):
            if not here:
                continue
            by_port[(text(here.get('guid')) or text(here.get('node')), integer(here.get('port')))] = (here, there, link)
            owner = _owner(here, owners)
            if owner:
                by_owner[owner] = (here, there, link)
    return by_port, by_owner


def _subnet_windows(subnet):
    """(first read, last read, seconds) of the subnet's reads, or None where no window: one read, or the
    first not whole (a port left out of an incomplete read is not known to have read 0)."""
    reads = mappings(subnet.get('reads'))
    if len(reads) < 2 or not mapping(reads[0].get('summary')).get('complete'):
        return None
    seconds = (number(reads[-1].get('read_at')) or 0) - (number(reads[0].get('read_at')) or 0)
    return reads[0], reads[-1], seconds


def _subnet_place(port, by_port, by_owner, owners):
    key = (text(port.get('guid')), integer(port.get('port')))
    ends = by_port.get(key) or by_owner.get(owners.get(text(port.get('guid')))) if key[0] else None
    return ends or ({'node': key[0], 'guid': key[0], 'port': key[1], 'desc': text(port.get('desc'))}, {}, {})


def _subnet_finding(topology, owners, port, result, seconds, places, grace=None):  # pylint: disable=too-many-arguments
    here, there, link = places
    owner = (_owner(there, owners) if there else None) or _owner(here, owners)
    subject = _label(topology, here) + (' (to %s)' % _label(topology, there) if there else '')
    verdicts = result['verdicts']
    rules = set(v['rule'] for v in verdicts)
    evidence = {'source': (grace or {}).get('source', 'ibqueryerrors'), 'verdicts': verdicts, 'increase': result['increase'], 'seconds': round(seconds, 3),
                'phase': result['phase'], 'retrains': result['retrains'], 'retrains_per_min': result['retrains_per_min'],
                'saturated': result['saturated'], 'cleared': result['cleared'], 'hca': owner[1] if owner else None,
                'port_guid': text(port.get('guid')), 'port': integer(port.get('port')), 'uptime_s': (grace or {}).get('uptime_s'),
                'grace_min': (grace or {}).get('grace_min')}
    at = _link_places(here, there, owners) or [('link', _end_name(here), _end_name(here))]
    said = '; '.join('%s rose by %d (%s)' % (v['counter'], v['increase'], v['rule']) for v in verdicts)
    if result['phase'] == 'bring_up':
        # Bring-up: said, on no benchmark path (it explains nothing).
        return finding(F.IB_SUBNET_ERRORS, owner[0] if owner else None, subject, evidence,
                       'over %.1f s the port %s, inside the bring-up grace window (the node up %s s, window %s min) with '
                       'at most one retrain: links training, not yet a fault' % (
                           seconds, said, evidence.get('uptime_s'), evidence.get('grace_min')),
                       severity='info', port=subject, at=[('bring_up',) + tuple(p for p in at[0][1:])])
    if 'flapping' in rules:
        return finding(F.FABRIC_LINK_FLAPPING, owner[0] if owner else None, subject, evidence,
                       'over %.1f s the port %s: the link retrained %d time(s) (%s a minute) - retraining, not a link '
                       'trained lower' % (seconds, said, result['retrains'], result['retrains_per_min']), port=subject, at=at)
    if verdicts:
        return finding(F.IB_SUBNET_ERRORS, owner[0] if owner else None, subject, evidence,
                       'over %.1f s the port %s, past the steady-state rate (module_utils/_rates.py)' % (seconds, said),
                       port=subject, at=at)
    return finding(F.IB_SUBNET_ERRORS, owner[0] if owner else None, subject, evidence,
                   'the port\'s %s stopped counting at its maximum: how much it rose over %.1f s is unknown' % (
                       ', '.join(result['saturated']), seconds), severity='warning', port=subject, at=at)


def subnet_findings(fabric, topology, owners):
    """Every port of the subnet judged over the window of its two ibqueryerrors reads (module_utils/_rates.py
    window(): the one owner of when a rise is a fault, and of the bring-up grace). Returns (findings, the
    (node id, port) of every port judged: the perfquery sweep leaves them alone)."""
    subnet = mapping(fabric.get('subnet'))
    window = _subnet_windows(subnet)
    if window is None:
        return [], set()
    first, last, seconds = window
    before = dict(((text(p.get('guid')), integer(p.get('port'))), mapping(p.get('counters'))) for p in mappings(first.get('ports')))
    by_port, by_owner = _subnet_ends(topology, owners)
    found, covered = [], set()
    uptime, grace = number(subnet.get('uptime_s')), _grace(subnet)
    for port in mappings(last.get('ports')):
        key = (text(port.get('guid')), integer(port.get('port')))
        after = mapping(port.get('counters'))
        # Not listed in the first (whole) read: every counter read 0 then.
        result = _rates.window(before.get(key) or dict((name, 0) for name in after), after, seconds,
                               number(mapping(_subnet_place(port, by_port, by_owner, owners)[2]).get('gbps')), uptime, grace,
                               port.get('saturated') if isinstance(port.get('saturated'), list) else ())
        places = _subnet_place(port, by_port, by_owner, owners)
        covered.add((text(places[0].get('node')) or key[0], key[1]))
        if result['verdicts'] or result['saturated']:
            found.append(_subnet_finding(topology, owners, port, result, seconds, places, {'uptime_s': uptime, 'grace_min': grace}))
    # A port listed in neither read, in two whole reads, read 0 twice: judged too.
    covered.update(by_port)
    return found, covered


def slow_pair_findings(bench, topology, owners):
    """Slow or failed pairs: the switch ports between the two HCAs (their leaf ports, and the
    leaves' up-links when the leaves differ)."""
    found = []
    where = {}
    for link in mappings(topology.get('links')):
        for here, there in ((mapping(link.get('a')), mapping(link.get('b'))), (mapping(link.get('b')), mapping(link.get('a')))):
            owner = _owner(here, owners)
            if owner and there:
                where[owner] = (_label(topology, there), there.get('node'), link)
    for pair in mappings(mapping(bench).get('pairs')):
        if pair.get('verdict') in (None, 'ok') or _bench.not_reached(pair) is not None:
            # A test that never reached the hardware (_bench.not_reached) crossed no cable.
            continue
        # The HCAs of the pair's rail at each end (_bench.report()'s server_hca, client_hca).
        hcas = mapping(pair.get('hcas'))
        server = (text(pair.get('server')), text(pair.get('server_hca')) or text(hcas.get('server')) or text(pair.get('rail')))
        client = (text(pair.get('client')), text(pair.get('client_hca')) or text(hcas.get('client')) or text(pair.get('rail')))
        ends = [where.get(server), where.get(client)]
        if not all(ends):
            continue
        cables = ['%s %s <-> %s' % (server[0], server[1], ends[0][0]), '%s %s <-> %s' % (client[0], client[1], ends[1][0])]
        bad = [link for _label_, _node_, link in ends if link.get('state') != 'Active'
               or mapping(link.get('could_be')).get('width') or mapping(link.get('could_be')).get('lane_gbps')]
        subject = '%s->%s rail %s %s' % (server[0], client[0], pair.get('rail'), pair.get('memory'))
        item = finding(F.FABRIC_SLOW_PAIR_PATH, None, subject,
                       {'cables': cables, 'same_leaf': ends[0][1] == ends[1][1], 'bad_links': len(bad)},
                       'the pair\'s traffic crosses %s%s' % (
                           ' and '.join(cables),
                           '' if ends[0][1] == ends[1][1] else ' and the up-links of both leaves (see their findings)'),
                       path=[place for _label_, _node_, link in ends
                             for place in _link_places(mapping(link.get('a')), mapping(link.get('b')), owners)])
        item['hosts'] = [server[0], client[0]]
        found.append(item)
    return found


def _no_umad(sm):
    """sminfo failing is the SM not answering (FABRIC_SM_ABSENT says so), not a tool problem -
    unless it could not open the node's umad device at all (libibumad's "umad_init: can't read
    ABI version ... maybe ib_umad is not loaded"): then no SM was asked, and the SM is unknown.
    (Only the umad device itself: saquery's "sa_query: umad_recv failed" is the SA not answering.)"""
    return not mappings(sm.get('sms')) and any(
        'umad_init' in text(e.get('error')) or 'ib_umad' in text(e.get('error')) or '/dev/infiniband/umad' in text(e.get('error'))
        for e in mappings(sm.get('errors')))


def _tools_missing(host, fabric, no_umad):
    status = text(fabric.get('status'))
    tools = mapping(fabric.get('tools'))
    sm = mapping(fabric.get('sm'))
    # saquery SMIR is answered by the master's SA: with no master it fails as sminfo does (FABRIC_SM_ABSENT).
    no_master = not any(integer(s.get('state')) == SM_MASTER for s in mappings(sm.get('sms')))
    broken = dict((tool, how) for tool, how in tools.items()
                  if text(how) not in ('used', 'read from log')
                  and not (tool == 'sminfo' and text(how).startswith('failed') and not no_umad)
                  # ibqueryerrors not installed (or not saved): the subnet is not read, the perfquery sweep stands for it.
                  and not (tool == 'ibqueryerrors' and text(how).split(' (')[0] in ('not installed', 'no saved output'))
                  and not (tool == 'saquery' and text(how).startswith('failed') and no_master and not no_umad))
    if status not in ('no_tools', 'no_ib_port') and not broken:
        return []
    return [finding(F.FABRIC_TOOLS_MISSING, host, 'infiniband-diags',
                    {'status': status, 'tools': tools},
                    'the fabric could not be fully discovered from %s: %s' % (
                        host, '; '.join('%s: %s' % item for item in sorted(broken.items())) or text(fabric.get('reason')) or status),
                    at=[FABRIC])]


def _sm_judged(fabric, no_umad):
    """The SM is judged only when sminfo ran (it may have failed: the SM did not answer)."""
    sminfo = text(mapping(fabric.get('tools')).get('sminfo'))
    return text(fabric.get('status')) in ('ok', 'partial') and sminfo not in ('', 'not installed') \
        and not sminfo.startswith('no saved output') and not no_umad


def fabric_findings(nodes, bench=None):
    """Every fabric finding; nothing when no node discovered the fabric and no node has an
    InfiniBand port (an Ethernet-only or GPU-only fleet)."""
    host, fabric = fabric_of(nodes)
    if fabric is None:
        # Not discovered (gpu_fabric_discover_fabric off, facts from elsewhere): report.json's
        # ``fabric`` says so (summary()), the renderers show it as unchecked.
        return []
    no_umad = _no_umad(mapping(fabric.get('sm')))
    found = _tools_missing(host, fabric, no_umad)
    topology = mapping(fabric.get('topology'))
    owners = host_ports(nodes)
    found.extend(link_findings(topology, owners))
    found.extend(uplink_findings(topology, classify(topology), owners))
    found.extend(unread_findings(fabric, host))
    if _sm_judged(fabric, no_umad):
        found.extend(sm_findings(fabric, nodes, host))
    subnet, covered = subnet_findings(fabric, topology, owners)
    found.extend(subnet)
    found.extend(counter_findings(fabric, topology, owners, covered))
    if bench:
        found.extend(slow_pair_findings(bench, topology, owners))
    return found


def _switch_links(topology, bad):
    """The links between switches, each with its health (a finding's severity on it, else its state)."""
    links = []
    for link in mappings(topology.get('links')):
        a, b = mapping(link.get('a')), mapping(link.get('b'))
        if not b or _kind(topology, a) != 'switch' or _kind(topology, b) != 'switch':
            continue
        subject = '%s <-> %s' % (_label(topology, a), _label(topology, b))
        links.append({'a': a.get('node'), 'b': b.get('node'), 'label': subject, 'state': link.get('state'),
                      'health': bad.get(subject) or bad.get('%s <-> %s' % (_label(topology, b), _label(topology, a)))
                      or ('error' if link.get('state') != 'Active' else 'ok')})
    return links


def _not_discovered(nodes):
    ib_hosts = sorted(set(h for h in nodes or {} for d in mappings(mapping(mapping(nodes[h]).get('ib')).get('devices'))
                          for p in mappings(d.get('ports')) if p.get('link_layer') == 'InfiniBand'))
    # Fail closed: nodes with InfiniBand ports and no discovery - the fabric is unchecked, said.
    return {'status': 'not_discovered', 'discovered_by': None, 'spines': [], 'leaves': [], 'ids': {}, 'links': [],
            'ib_hosts': len(ib_hosts)} if ib_hosts else None


def _drawn(item):
    """A finding the fabric's view draws: the fabric's own, and a subnet port's (IB_SUBNET_ERRORS)."""
    return text(item.get('code')).startswith('FABRIC_') or item.get('code') == F.IB_SUBNET_ERRORS


def summary(nodes, findings):
    """What the HTML view draws: leaves, spines and links with a health each."""
    host, fabric = fabric_of(nodes)
    if fabric is None:
        return _not_discovered(nodes)
    topology = mapping(fabric.get('topology'))
    roles = classify(topology)
    bad = {}
    for item in findings or []:
        if _drawn(item) and item.get('subject'):
            bad.setdefault(text(item['subject']), item['severity'])
    links = _switch_links(topology, bad)
    drawn = set(link['label'] for link in links)
    for item in findings or []:
        subject = text(item.get('subject'))
        if _drawn(item) and item.get('severity') != 'info' and subject not in drawn:
            links.append({'a': None, 'b': None, 'label': '%s: %s' % (item['code'], subject), 'state': None,
                          'health': item['severity']})
    names = dict((n, text(_node(topology, n).get('desc')) or n) for n in roles['leaves'] + roles['spines'])
    return {'discovered_by': host, 'spines': [names[n] for n in roles['spines']], 'leaves': [names[n] for n in roles['leaves']],
            'ids': names, 'links': links, 'status': text(fabric.get('status'))}


def routes(nodes: Any) -> Dict[Any, Any]:
    """{(host, hca): places} of the fabric links a node's HCA reaches the others through: its own
    cable to its leaf, and the leaf's up-links to the spines (a pair between two leaves may cross
    any of them: the routes are the subnet manager's, adaptive routing picks among them). Empty
    when no node discovered the fabric."""
    _host, fabric = fabric_of(nodes)
    if fabric is None:
        return {}
    topology = mapping(fabric.get('topology'))
    owners = host_ports(nodes)
    spines = set(classify(topology)['spines'])
    active = [l for l in mappings(topology.get('links')) if l.get('state') == 'Active' and mapping(l.get('b'))]
    uplinks: dict = {}
    for link in active:
        a, b = mapping(link['a']), mapping(link['b'])
        for leaf, spine in ((a, b), (b, a)):
            if spine.get('node') in spines and leaf.get('node') not in spines:
                uplinks.setdefault(leaf.get('node'), []).append(('link',) + tuple(sorted((_end_name(a), _end_name(b)))))
    found = {}
    for link in mappings(topology.get('links')):
        a, b = mapping(link.get('a')), mapping(link.get('b'))
        for here, there in ((a, b), (b, a)):
            owner = _owner(here, owners) if here else None
            if owner and there:
                found[owner] = {'cable': ('link',) + tuple(sorted((_end_name(here), _end_name(there)))),
                                'leaf': there.get('node'), 'uplinks': uplinks.get(there.get('node')) or []}
    return found


@rule(produces=(F.FABRIC_ERROR_RATE, F.FABRIC_INPUT_UNREAD, F.FABRIC_LINK_DEGRADED, F.FABRIC_LINK_FLAPPING, F.FABRIC_SLOW_PAIR_PATH,
                F.FABRIC_SM_ABSENT, F.FABRIC_SM_DISAGREE, F.FABRIC_SM_INACTIVE, F.FABRIC_SM_MULTIPLE_MASTERS, F.FABRIC_SM_PRIORITY_TIE,
                F.FABRIC_TOOLS_MISSING, F.FABRIC_UPLINKS_ASYMMETRIC, F.IB_SUBNET_ERRORS), parts=('judged', 'bench'))
def beyond_the_node(fleet, _findings):
    return fabric_findings(fleet.judged, fleet.bench)
