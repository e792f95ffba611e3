# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""RoCE lossless rules: a node's gpu_fabric_roce (roce_qos_facts) -> findings (ROCE_*).

Each check and the value it expects, with why, is in docs/roce.md. One finding per node and
code; the subject names the ports (netdevs) it holds for. Ports that are not ACTIVE are left
to IB_PORT_DOWN. What could not be read is ROCE_QOS_UNKNOWN, never a pass.
"""

from __future__ import annotations

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings as F
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._findings import finding
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._rule import rule
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _dcbx  # who manages a port's DCB
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _rails  # which ports carry compute traffic
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import IB_MTUS, ROCE_MTU_OVERHEAD
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._roce import LOSS_COUNTERS, rdma_priority
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._shape import integer, mapping, mappings, sequence, text
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import parse_int

# The largest RoCE MTU (include/rdma/ib_verbs.h IB_MTU_4096): a netdev MTU below 4096 + the RoCE
# headers (_ib.ROCE_MTU_OVERHEAD) caps every RDMA message at 2048 bytes or less.
FULL_ROCE_MTU = IB_MTUS[-1]
# Loss counters that mean dropped packets on a lossless fabric (rnr_nak_retry_err is the
# application's receive queue, out_of_buffer the host's: not the fabric's loss).
FABRIC_LOSS = tuple(name for name in LOSS_COUNTERS if name in ('out_of_sequence', 'packet_seq_err', 'local_ack_timeout_err'))


def _ports(roce, role_of=None):
    """The ACTIVE RoCE ports that carry RDMA compute traffic: those of the node's compute rails
    (module_utils/_rails.py roles; ``role_of`` None: every port)."""
    return [p for p in _active(roce) if role_of is None or _rails.is_compute(role_of, text(p.get('hca')))]


def _active(roce):
    return [p for p in mappings(mapping(roce).get('ports')) if p.get('state') == 'ACTIVE']


def _subject(hits, ports):
    names = [text(p.get('netdev')) or '%s/%s' % (p.get('hca'), p.get('port')) for p in hits]
    return 'all RoCE ports' if len(hits) == len(ports) and len(ports) > 1 else ','.join(names)


def _pfc(port):
    return set(v for v in sequence(port.get('pfc')) if integer(v) is not None)


def _strict_tc(port, prio):
    prio_tc = dict((str(k), v) for k, v in mapping(port.get('prio_tc')).items())
    tc = prio_tc.get(str(prio))
    return tc is not None and dict((str(k), v) for k, v in mapping(port.get('tc_tsa')).items()).get(str(tc)) == 'strict'


def _tos_checks(port, tos, prio, pfc):
    """How the RDMA traffic is classified and whether its priority is lossless (the port's QoS read)."""
    found = {}
    if port.get('trust') == 'pcp':
        found[F.ROCE_TRUST_PCP] = ({'trust': 'pcp', 'roce_tos': tos},
                                   'trust pcp: the NIC classifies by the VLAN PCP, which untagged RoCE v2 packets do not '
                                   'carry, so RDMA traffic lands on priority 0 whatever its DSCP')
    if not pfc:
        found[F.ROCE_PFC_OFF] = ({'pfc': []}, 'PFC is enabled on no priority')
    if pfc and prio is not None and prio not in pfc:
        found[F.ROCE_TC_NOT_LOSSLESS] = ({'roce_tos': tos, 'dscp': tos >> 2 if tos is not None else None, 'priority': prio,
                                          'pfc': sorted(pfc)},
                                         'ToS %s (DSCP %s) maps to priority %s, PFC is on %s only'
                                         % (tos, tos >> 2 if tos is not None else '?', prio, sorted(pfc)))
    return found


def _dscp_conflicts(port, tos):
    """{DSCP (a JSON key): [priorities]} of the DSCPs dcb app maps to more than one priority (_roce.dcb_app_conflicts)."""
    # parse_int: ASCII digits, bounded (a key of 5,000 digits is past int()'s limit, a ValueError).
    conflicts = dict((parse_int(str(k)), sorted(v for v in sequence(levels) if integer(v) is not None))
                     for k, levels in mapping(port.get('dscp_conflicts')).items() if parse_int(str(k)) is not None)
    if not conflicts:
        return {}
    used = set(d for d in (tos >> 2 if tos is not None else None, integer(port.get('cnp_dscp'))) if d is not None)
    return {F.ROCE_DSCP_CONFLICT: ({'conflicts': dict((str(k), v) for k, v in sorted(conflicts.items())), 'used': sorted(used & set(conflicts))},
                                   '; '.join('DSCP %d mapped to priorities %s%s' % (
                                       k, v, ' (the %s DSCP)' % ('RDMA' if tos is not None and k == tos >> 2 else 'CNP')
                                       if k in used else '') for k, v in sorted(conflicts.items())))}


def _ecn_off(port, prio, pfc):
    """ECN where the RDMA traffic is lossless (DCQCN slows senders before PFC pauses the link);
    without PFC (ECN-only, "lossy RoCE") on the priority the RDMA traffic maps to."""
    wanted = pfc or (set([prio]) if prio is not None else set())
    off_at, words = {}, []
    for point in ('ecn_np', 'ecn_rp'):
        values = dict((str(k), v) for k, v in mapping(port.get(point)).items())
        if port.get(point) is None:
            continue    # the driver has no ECN files (not mlx5): nothing to judge, said in the facts
        off = sorted(p for p in wanted if not values.get(str(p)))
        if off:
            off_at[point] = off
            words.append('%s off on priority %s' % (point, off))
    return {F.ROCE_ECN_OFF: ({'off': off_at}, '; '.join(words))} if off_at else {}


def _cnp_lossy(port, pfc):
    cnp = integer(port.get('cnp_prio'))
    if cnp is None or cnp in pfc or _strict_tc(port, cnp):
        return {}
    return {F.ROCE_CNP_LOSSY: ({'cnp_prio': cnp, 'cnp_dscp': port.get('cnp_dscp'), 'pfc': sorted(pfc)},
                               'CNPs go out on priority %d (DSCP %s), neither PFC-enabled nor on a strict TC'
                               % (cnp, port.get('cnp_dscp')))}


def _mtu_low(port):
    mtu = integer(port.get('netdev_mtu'))
    if mtu is None or mtu - ROCE_MTU_OVERHEAD >= FULL_ROCE_MTU:
        return {}
    return {F.ROCE_MTU_MISMATCH: ({'netdev_mtu': mtu, 'active_mtu': port.get('active_mtu'),
                                   'needed': FULL_ROCE_MTU + ROCE_MTU_OVERHEAD},
                                  'netdev MTU %d leaves RoCE an MTU of %s (4096 needs %d)'
                                  % (mtu, port.get('active_mtu'), FULL_ROCE_MTU + ROCE_MTU_OVERHEAD))}


def _losses(port):
    losses = dict((k, v) for k, v in mapping(port.get('counters')).items() if k in FABRIC_LOSS and integer(v))
    if not losses:
        return {}
    return {F.ROCE_CONGESTION: ({'counters': losses, 'congestion': dict(
        (k, v) for k, v in mapping(port.get('counters')).items() if k not in FABRIC_LOSS)},
        'loss counters %s' % ', '.join('%s=%s' % kv for kv in sorted(losses.items())))}


def port_checks(port):
    """{code: (evidence, words)} of one ACTIVE RoCE port (the QoS checks only where its QoS was read)."""
    found = {}
    known = port.get('source') is not None
    if not known:
        found[F.ROCE_QOS_UNKNOWN] = ({'reason': port.get('source_reason')}, port.get('source_reason') or 'not read')
    tos = integer(port.get('roce_tos'))
    prio = rdma_priority(dict(port, trust='dscp')) if known else None
    pfc = _pfc(port)
    if known:
        found.update(_tos_checks(port, tos, prio, pfc))
        found.update(_dscp_conflicts(port, tos))
    found.update(_ecn_off(port, prio, pfc))
    if known:
        found.update(_cnp_lossy(port, pfc))
    found.update(_mtu_low(port))
    found.update(_losses(port))
    return found


_CAUSES = {
    F.ROCE_QOS_UNKNOWN: 'the DCB settings of the RoCE ports could not be read, so lossless RoCE was not checked',
    F.ROCE_TRUST_PCP: 'RDMA traffic is classified by PCP',
    F.ROCE_PFC_OFF: 'RDMA traffic is not lossless: a congested switch queue drops it and RoCE retransmits (go-back-N)',
    F.ROCE_TC_NOT_LOSSLESS: 'RDMA traffic lands in a lossy queue',
    F.ROCE_DSCP_CONFLICT: 'the priority a DSCP lands in depends on which of its conflicting entries the driver applies',
    F.ROCE_ECN_OFF: 'DCQCN cannot slow senders down before PFC pauses the link',
    F.ROCE_CNP_LOSSY: 'congestion notifications can be dropped or queued behind bulk traffic',
    F.ROCE_MTU_MISMATCH: 'RDMA messages are cut into smaller packets than the fabric allows',
    F.ROCE_CONGESTION: 'the port saw packet loss and retransmissions',
}


def _code_finding(host, code, hits, ports, severity=None):
    """One finding of ``code`` for the node, its ports' hits in the subject and evidence (ROCE_CONGESTION from the
    facts, totals since boot: info - whether they rose under load is the benchmark window's to say)."""
    if code == F.ROCE_TRUST_PCP and all(not (integer(p.get('roce_tos')) or 0) >> 2 for p, _e, _w in hits):
        severity = 'warning'
    if code == F.ROCE_DSCP_CONFLICT and not any(e['used'] for _p, e, _w in hits):
        severity = 'warning'
    return finding(code, host, _subject([p for p, _e, _w in hits], ports),
                   {'ports': dict((text(p.get('netdev')) or '?', e) for p, e, _w in hits)},
                   '%s: %s' % (_CAUSES[code], '; '.join(sorted(set('%s: %s' % (p.get('netdev'), w) for p, _e, w in hits)))),
                   severity=severity, at=[('hca', host, text(p.get('hca'))) for p, _e, _w in hits])


def _unread_others(host, others, role_of):
    """ROCE_QOS_UNKNOWN, as info, for ports of no compute rail whose DCB could not be read."""
    return finding(F.ROCE_QOS_UNKNOWN, host, ','.join(text(p.get('netdev')) or '%s/%s' % (p.get('hca'), p.get('port'))
                                                      for p in others),
                   {'ports': dict((text(p.get('netdev')) or '?', {'reason': p.get('source_reason'), 'hca': p.get('hca'),
                                                                  'role': (role_of.get(text(p.get('hca'))) or {}).get('role')})
                                  for p in others)},
                   'the DCB settings of %s could not be read (%s); %s not a compute rail (%s), so no collective '
                   'traffic depends on its lossless setup' % (
                       ', '.join(text(p.get('netdev')) or '?' for p in others),
                       '; '.join(sorted(set(text(p.get('source_reason')) or 'not read' for p in others))),
                       'it is' if len(others) == 1 else 'they are',
                       '; '.join(sorted(set('%s: %s' % (p.get('hca'), (role_of.get(text(p.get('hca'))) or {}).get('why'))
                                            for p in others)))),
                   severity='info', at=[('hca', host, text(p.get('hca'))) for p in others])


def roce_findings(host, roce, role_of=None, windowed=False):
    """Findings of one node's gpu_fabric_roce (None: not gathered, nothing to say).

    Lossless RoCE matters where the collectives' RDMA traffic goes: the ports of the compute rails
    (``role_of``: module_utils/_rails.py roles() of the node; None: every port). A storage or
    management port is not judged; one whose DCB could not be read is said, as info."""
    if roce is None:
        return []
    ports = _ports(roce, role_of)
    others = [p for p in _active(roce) if p not in ports and p.get('source') is None]
    per_code = {}
    for port in ports:
        for code, (evidence, words) in port_checks(port).items():
            per_code.setdefault(code, []).append((port, evidence, words))
    if windowed:
        # The pair tests read the loss counters around each test (plugin_utils/diagnosis/rules/_window.py judges their
        # rise): totals since boot say nothing more.
        per_code.pop(F.ROCE_CONGESTION, None)
    found = [_code_finding(host, code, per_code[code], ports, 'info' if code == F.ROCE_CONGESTION else None)
             for code in _CAUSES if code in per_code]
    if others:
        found.append(_unread_others(host, others, role_of))
    return found


# Which parts of the fleet signature a per-node finding already speaks for (left out of it).
_OWNS = {F.ROCE_TRUST_PCP: ('trust',), F.ROCE_PFC_OFF: ('pfc',), F.ROCE_TC_NOT_LOSSLESS: ('pfc', 'tos'),
         F.ROCE_ECN_OFF: ('ecn',), F.ROCE_CNP_LOSSY: ('cnp prio',)}


def qos_signature(roce, role_of=None):
    """What a node's RoCE ports of its compute rails are set to, for the fleet comparison
    (_fleet.roce_qos): per port, its (name, value) parts - trust, PFC priorities, ToS, CNP
    priority, ECN priorities - each part left out where a ROCE_* finding of the port names it;
    None without ACTIVE RoCE ports read. Kept as parts, never joined into one string: whether a
    node's settings are its peers' with only the ROCE_* finding's parts left out
    (_findings._qos_parts_missing_only) is a comparison of parts ('pfc 3,4' is one part)."""
    values = set()
    for port in _ports(roce, role_of):
        if port.get('source') is None:
            continue
        owned = set(part for code in port_checks(port) for part in _OWNS.get(code, ()))
        ecn = sorted(parse_int(str(k)) for k, v in mapping(port.get('ecn_np')).items() if v and parse_int(str(k)) is not None)
        parts = (('trust', port.get('trust')), ('pfc', ','.join(str(p) for p in sorted(_pfc(port))) or 'none'),
                 ('tos', port.get('roce_tos')), ('cnp prio', port.get('cnp_prio')),
                 ('ecn', ','.join(str(p) for p in ecn) or 'none'))
        values.add(tuple((name, str(value)) for name, value in parts if name not in owned))
    return tuple(sorted(values)) or None


def qos_text(signature):
    """A qos_signature (or its JSON form, lists) as text: 'trust dscp, pfc 3, ...', ports apart by '; '."""
    return '; '.join(', '.join('%s %s' % tuple(part) for part in port) for port in signature or ()) or 'none'


def nccl_traffic_class(roce, role_of=None):
    """(NCCL_IB_TC, reason) when every ACTIVE RoCE port of the compute rails (``role_of``:
    _rails.roles) has one RDMA CM ToS that lands on a PFC-enabled priority (NCCL uses its own
    TC, default 0, unless told: NCCL env.html NCCL_IB_TC), else (None, why not)."""
    ports = _ports(roce, role_of)
    if not ports:
        return None, None
    tos = set(integer(p.get('roce_tos')) for p in ports)
    if len(tos) != 1 or None in tos:
        return None, 'NCCL_IB_TC not set: the RoCE ports have no single RDMA CM ToS (%s)' % sorted(str(t) for t in tos)
    value = tos.pop()
    if any(port_checks(p) for p in ports):
        return None, ('NCCL_IB_TC not set: the RoCE lossless setup has findings (ROCE_*); fix them first, then use '
                      'the ToS of the lossless class')
    return value, ('the RDMA CM ToS of every RoCE port is %d (DSCP %d, ECN-capable), which maps to the PFC-enabled '
                   'priority %s: NCCL marks its own QPs with NCCL_IB_TC (default 0, a lossy class) unless told'
                   % (value, value >> 2, rdma_priority(dict(ports[0], trust='dscp'))))


@rule(produces=(F.ROCE_QOS_UNKNOWN, F.ROCE_TRUST_PCP, F.ROCE_PFC_OFF, F.ROCE_TC_NOT_LOSSLESS, F.ROCE_DSCP_CONFLICT, F.ROCE_ECN_OFF,
                F.ROCE_CNP_LOSSY, F.ROCE_MTU_MISMATCH, F.ROCE_CONGESTION), parts=('judged', 'roles', 'bench'))
def roce_lossless(fleet, _findings):
    windowed = set((fleet.bench or {}).get('windowed') or [])
    return [item for host in sorted(fleet.judged)
            for item in roce_findings(host, fleet.judged[host].get('roce'), fleet.roles[host], host in windowed)]


# ---- DCBX: who manages a port's DCB

def dcbx_findings(host, roce, role_of=None):
    """ROCE_DCBX_MISMATCH of one node's gpu_fabric_roce: the ACTIVE RoCE ports of its compute rails whose
    DCB manager (_dcbx.manager over the port's ``dcbx`` facts) is not ``dcbx_expected`` (roce_qos_facts:
    'host' where roce_qos configures the node, 'switch' where the switch is meant to; None: nothing
    meant, nothing judged). A port whose DCBX mode was not read is said, as info (never a pass)."""
    roce = mapping(roce)
    expected = roce.get('dcbx_expected')
    if expected not in _dcbx.MANAGERS:
        return []
    ports = [p for p in _ports(roce, role_of) if p.get('source') is not None]
    wrong, unread = [], []
    for port in ports:
        who, why = _dcbx.manager(mapping(port.get('dcbx')))
        if who is None:
            unread.append((port, why))
        elif who != expected:
            wrong.append((port, who, why))
    found = []
    if wrong:
        risk = ('the host is meant to manage its DCB (roce_qos sets PFC, ETS and the DSCP map), but the switch manages it: '
                'the next LLDP exchange with a switch that advertises other settings overwrites them, silently and at any '
                'time - RDMA traffic can land on a lossy priority or lose PFC, which a later run shows only as slow or '
                'failing collectives' if expected == 'host' else
                'the switch is meant to manage the DCB through DCBX, but the host does not take its settings: the ports keep '
                'what was set locally, which can differ from the switch\'s lossless class')
        found.append(finding(
            F.ROCE_DCBX_MISMATCH, host, _subject([p for p, _w, _y in wrong], ports),
            {'expected': expected,
             'ports': dict((text(p.get('netdev')) or '?', {'manager': who, 'why': why, 'dcbx': mapping(p.get('dcbx'))})
                           for p, who, why in wrong)},
            '%s: %s' % (risk, '; '.join(sorted('%s: %s' % (text(p.get('netdev')), why) for p, _w, why in wrong))),
            at=[('hca', host, text(p.get('hca'))) for p, _w, _y in wrong]))
    if unread:
        found.append(finding(
            F.ROCE_DCBX_MISMATCH, host, _subject([p for p, _y in unread], ports),
            {'expected': expected, 'ports': dict((text(p.get('netdev')) or '?', {'why': why}) for p, why in unread)},
            'the DCBX mode of %s could not be read, so whether the switch can overwrite the DCB settings was not checked: %s'
            % (', '.join(text(p.get('netdev')) or '?' for p, _y in unread), '; '.join(sorted(set(w for _p, w in unread)))),
            severity='info', at=[('hca', host, text(p.get('hca'))) for p, _y in unread]))
    return found


@rule(produces=(F.ROCE_DCBX_MISMATCH,), parts=('judged', 'roles'))
def roce_dcbx(fleet, _findings):
    return [item for host in sorted(fleet.judged) for item in dcbx_findings(host, fleet.judged[host].get('roce'), fleet.roles[host])]
