# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Rules over the counters read around each pair test (bench.json ``windows``: plugin_utils/bench/_window.py):
PCIe errors under load, PCIe links that retrained, PFC pause storms, congestion control that does not
answer, loss on a lossless class. Each root sits on the device whose counters rose and explains only the
tests whose path crosses it (the registry's explains, the linker's on_path).

Healthy congestion is no finding: CNPs sent by the receiver and handled by the sender, pauses below
PAUSE_SHARE of the test time, no storm, no loss.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings as F
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _roce_rules
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._findings import Finding, Place, finding
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._rule import Fleet, rule
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench, _window
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._aer import REPLAY_ERRORS
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._gdr import natural_key
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._window import LOSS_COUNTERS

# Correctable PCIe errors per second of test above which a link is worse than the PCIe Base Specification
# allows: its bit error ratio of 1e-12 (PCIe Base Specification 4.0, 4.2.7 / 8.3.4 "BER") gives a 16-lane
# 32 GT/s link (Gen5 x16, the fastest an HCA uses) 0.512 bit errors a second, and each correctable error
# (a receiver error, a bad TLP or DLLP and its replay) needs at least one. Without the test's time, more than
# CORRECTABLE_MIN in one window.
CORRECTABLE_PER_S = 1.0
CORRECTABLE_MIN = 10
# Pause time on one priority and direction above this share of the test time (ethtool's pause duration in
# microseconds against the window's seconds) is a finding: a port paused that long cannot carry the
# bandwidth threshold's share of its rate (1 - plugin_utils/bench/_bench.py BW_RATIO). A storm event is
# always one (mlx5 tx_pause_storm_*: the NIC stalled past its watermark; docs.kernel.org mlx5 counters).
PAUSE_SHARE = round(1.0 - _bench.BW_RATIO, 3)
STORM_COUNTERS = ('tx_pause_storm_warning_events', 'tx_pause_storm_error_events')
# Congestion control: a receiver that sent at least CNP_MIN CNPs (or saw that many ECN marks) in one test,
# while the sender handled fewer than HANDLED_SHARE of them (mlx5 rp_cnp_handled counts each CNP the reaction
# point acted on: NVIDIA "Understanding mlx5 Linux counters"). A few CNPs at a test's start are DCQCN at work.
CNP_MIN = 100
HANDLED_SHARE = 0.5
TESTS_NAMED = 20


def _test(entry: Dict[str, Any]) -> str:
    return '%s->%s rail %s %s' % (entry.get('server'), entry.get('client'), entry.get('rail'), entry.get('memory'))


def _windows(fleet: Fleet) -> List[Dict[str, Any]]:
    return [e for e in (fleet.bench or {}).get('windows') or [] if isinstance(e, dict) and isinstance(e.get('window'), dict)]


def _seconds(window: Dict[str, Any]) -> Optional[float]:
    value = window.get('seconds')
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


# ---------------------------------------------------------------------------- PCIe

def _aer_owner(entry: Dict[str, Any], item: Dict[str, Any]) -> Tuple[Tuple[str, ...], List[Place]]:
    """(the key a rise is grouped by, the places it sits on) for one AER rise of a test's window."""
    host, hca, gpu, role = entry['host'], entry.get('hca'), entry.get('gpu'), item.get('role')
    if role in ('hca', 'hca_link'):
        return ('hca', host, str(hca)), [('hca', host, hca)]
    if role in ('gpu', 'gpu_link') and gpu:
        return ('gpu', host, str(gpu)), [('gpu', host, gpu), ('gpu_nic', host, gpu, hca)]
    # A bridge higher up: host-memory traffic of the HCA crosses it, GPU memory where the test's path does.
    place: Place = ('gpu_nic', host, gpu, hca) if entry.get('memory') == 'gpu' and gpu else ('hca_host', host, hca)
    return ('bridge', host, str(item.get('bdf'))), [place]


def _aer_groups(fleet: Fleet) -> Dict[Tuple[str, ...], Dict[str, Any]]:
    groups: Dict[Tuple[str, ...], Dict[str, Any]] = {}
    for entry in _windows(fleet):
        window = entry['window']
        touched: Dict[Tuple[str, ...], Dict[str, Any]] = {}
        for item in window.get('aer') or []:
            if not isinstance(item, dict) or not isinstance(item.get('rise'), dict):
                continue
            owner, places = _aer_owner(entry, item)
            group = groups.setdefault(owner, {'bdfs': {}, 'places': [], 'tests': [], 'seconds': 0.0, 'timed': True,
                                              'correctable': 0, 'uncorrectable': 0})
            touched[owner] = group
            rise = item['rise']
            kinds = group['bdfs'].setdefault(str(item.get('bdf')), {'role': item.get('role'), 'rise': {}})
            for name, value in rise.items():
                kinds['rise'][name] = kinds['rise'].get(name, 0) + value
            # The rate of the device's own link: its own count or its link partner's, whichever is higher.
            corr = rise.get('TOTAL_ERR_COR') or sum(rise.get(k, 0) for k in REPLAY_ERRORS)
            kinds['correctable'] = kinds.get('correctable', 0) + corr
            group['uncorrectable'] += rise.get('TOTAL_ERR_FATAL', 0) + rise.get('TOTAL_ERR_NONFATAL', 0)
            group['places'].extend(p for p in places if p not in group['places'])
        for group in touched.values():
            # Each test's time once, however many functions of its path counted errors.
            seconds = _seconds(window)
            group['seconds'] += seconds or 0.0
            group['timed'] = group['timed'] and seconds is not None
            group['tests'].append(_test(entry))
    for group in groups.values():
        group['correctable'] = max([item.get('correctable', 0) for item in group['bdfs'].values()] or [0])
    return groups


def _aer_finding(owner: Tuple[str, ...], group: Dict[str, Any]) -> Optional[Finding]:
    kind, host, name = owner
    per_s = group['correctable'] / group['seconds'] if group['timed'] and group['seconds'] else None
    high = per_s > CORRECTABLE_PER_S if per_s is not None else group['correctable'] > CORRECTABLE_MIN
    if not high and not group['uncorrectable']:
        return None
    rose = sorted(group['bdfs'].items())
    own = [bdf for bdf, item in rose if item['role'] in ('hca', 'gpu')]
    bridges = [bdf for bdf, item in rose if item['role'] not in ('hca', 'gpu')]
    device = name if kind != 'bridge' else 'the PCIe bridge %s' % name
    bdf = (own or bridges)[0]
    words = ', '.join('%s (%s): %s' % (b, item['role'], ', '.join('%s +%d' % kv for kv in sorted(item['rise'].items())))
                      for b, item in rose)
    rate = ('%.1f correctable errors per second of test, above the %.1f a link within the PCIe bit error ratio allows'
            % (per_s, CORRECTABLE_PER_S) if per_s is not None and high else
            '%d correctable errors' % group['correctable'] if high else '')
    worse = '%d uncorrectable error(s)' % group['uncorrectable'] if group['uncorrectable'] else ''
    return finding(
        F.PCIE_ERRORS_UNDER_LOAD, host, 'PCIe %s (%s)' % (bdf, device),
        {'device': name, 'kind': kind, 'counted_at': dict(rose), 'bridges': bridges, 'correctable': group['correctable'],
         'uncorrectable': group['uncorrectable'], 'per_s': round(per_s, 3) if per_s is not None else None,
         'allowed_per_s': CORRECTABLE_PER_S, 'tests': group['tests'][:TESTS_NAMED], 'tests_total': len(group['tests'])},
        'the PCIe AER counters of %s rose during %d pair test(s) (%s): %s; each correctable error is a replay on the link, '
        'so its bandwidth drops though it trained at full speed and width' % (
            device, len(group['tests']), words, '; '.join(w for w in (rate, worse) if w)),
        at=group['places'], device=device, bdf=bdf)


def pcie_error_findings(fleet: Fleet) -> List[Finding]:
    found = []
    for owner, group in sorted(_aer_groups(fleet).items(), key=lambda item: [natural_key(str(p)) for p in item[0]]):
        item = _aer_finding(owner, group)
        if item is not None:
            found.append(item)
    return found


def retraining_findings(fleet: Fleet) -> List[Finding]:
    """PCIE_LINK_RETRAINING: a link whose samples during one test changed speed or width."""
    groups: Dict[Tuple[str, str], Dict[str, Any]] = {}
    for entry in _windows(fleet):
        for link in entry['window'].get('links') or []:
            if not isinstance(link, dict) or _window.changes(link.get('seen')) == 0:
                continue
            key = (entry['host'], str(link.get('bdf')))
            group = groups.setdefault(key, {'role': link.get('role'), 'changes': 0, 'seen': [], 'tests': [], 'places': [],
                                            'device': entry.get('hca') if link.get('role') == 'hca' else entry.get('gpu')})
            group['changes'] += _window.changes(link.get('seen'))
            group['seen'].extend(v for v in link.get('seen') or [] if v not in group['seen'])
            group['tests'].append(_test(entry))
            places: List[Place] = [('hca', entry['host'], entry.get('hca'))] if link.get('role') == 'hca' else \
                [('gpu', entry['host'], entry.get('gpu')), ('gpu_nic', entry['host'], entry.get('gpu'), entry.get('hca'))]
            group['places'].extend(p for p in places if p not in group['places'])
    found = []
    for (host, bdf), group in sorted(groups.items(), key=lambda item: (item[0][0], item[0][1])):
        values = ', '.join('%s GT/s x%s' % tuple(v) for v in group['seen'][:8])
        found.append(finding(
            F.PCIE_LINK_RETRAINING, host, 'PCIe %s (%s)' % (bdf, group['device']),
            {'bdf': bdf, 'role': group['role'], 'changes': group['changes'], 'seen': group['seen'][:20],
             'tests': group['tests'][:TESTS_NAMED], 'tests_total': len(group['tests'])},
            'the PCIe link of %s (%s) changed speed or width %d time(s) while %d pair test(s) ran (seen: %s): it retrained '
            'under load' % (group['device'], bdf, group['changes'], len(group['tests']), values),
            at=group['places'], device=group['device'], bdf=bdf))
    return found


# ---------------------------------------------------------------------------- RoCE

def _netdev(fleet: Fleet, host: str, hca: Any) -> str:
    for device in ((fleet.judged.get(host) or {}).get('ib') or {}).get('devices') or []:
        if device.get('name') == hca:
            for port in device.get('ports') or []:
                if port.get('netdev'):
                    return str(port['netdev'])
    return 'IF'


def _pause_groups(fleet: Fleet) -> Dict[Tuple[str, str], Dict[str, Any]]:
    groups: Dict[Tuple[str, str], Dict[str, Any]] = {}
    for entry in _windows(fleet):
        window = entry['window']
        pause = window.get('pause') or {}
        if not pause:
            continue
        group = groups.setdefault((entry['host'], str(entry.get('hca'))), {'rise': {}, 'seconds': 0.0, 'timed': True, 'tests': []})
        for name, value in pause.items():
            group['rise'][name] = group['rise'].get(name, 0) + value
        group['seconds'] += _seconds(window) or 0.0
        group['timed'] = group['timed'] and _seconds(window) is not None
        group['tests'].append(_test(entry))
    return groups


def _pause_shares(group: Dict[str, Any]) -> List[Tuple[float, str, int]]:
    """[(share of the test time, direction, priority)] of every priority that was paused, largest first."""
    shares = []
    for direction in ('rx', 'tx'):
        for prio in range(8):
            duration = group['rise'].get('%s_prio%d_pause_duration_us' % (direction, prio))
            if duration and group['timed'] and group['seconds']:
                shares.append((duration / 1e6 / group['seconds'], direction, prio))
    return sorted(shares, reverse=True)


_WHO = {'rx': 'the switch paused this host (pause frames received on priority %d)',
        'tx': 'this host paused the switch (pause frames sent on priority %d: its receive side could not drain)'}


def pause_findings(fleet: Fleet) -> List[Finding]:
    found = []
    for (host, hca), group in sorted(_pause_groups(fleet).items(), key=lambda item: (item[0][0], natural_key(item[0][1]))):
        storms = dict((name, group['rise'][name]) for name in STORM_COUNTERS if group['rise'].get(name))
        shares = _pause_shares(group)
        high = [s for s in shares if s[0] > PAUSE_SHARE]
        if not storms and not high:
            continue
        share, direction, prio = high[0] if high else (shares[0] if shares else (None, 'tx', None))
        who = _WHO[direction] % prio if prio is not None else 'this host\'s NIC stalled sending pause frames'
        netdev = _netdev(fleet, host, hca)
        found.append(finding(
            F.ROCE_PFC_PAUSE_STORM, host, '%s %s %s' % (netdev, direction, 'prio %s' % prio if prio is not None else 'storm'),
            {'hca': hca, 'netdev': netdev, 'direction': direction, 'priority': prio, 'share': round(share, 4) if share else None,
             'allowed_share': PAUSE_SHARE, 'storm_events': storms, 'rise': group['rise'], 'seconds': round(group['seconds'], 3),
             'tests': group['tests'][:TESTS_NAMED], 'tests_total': len(group['tests'])},
            '%s%s%s during %d pair test(s) of %s' % (
                who, '; paused %.0f %% of the test time (above %.0f %%)' % (100 * share, 100 * PAUSE_SHARE) if high and share else '',
                '; pause storm events %s' % ', '.join('%s +%d' % kv for kv in sorted(storms.items())) if storms else '',
                len(group['tests']), hca),
            at=[('hca', host, hca)], netdev=netdev, hca=hca))
    return found


def _has_counter(fleet: Fleet, host: str, hca: Any, counter: str) -> bool:
    """Does the HCA's first port have the hw counter (facts)? A sender without rp_cnp_handled is no mlx5 port."""
    for device in ((fleet.judged.get(host) or {}).get('ib') or {}).get('devices') or []:
        if device.get('name') == hca:
            ports = device.get('ports') or []
            return bool(ports) and counter in (ports[0].get('hw_counters') or {})
    return False


def _pairs(fleet: Fleet) -> Dict[Tuple[Any, ...], Dict[str, Dict[str, Any]]]:
    pairs: Dict[Tuple[Any, ...], Dict[str, Dict[str, Any]]] = {}
    for entry in _windows(fleet):
        key = (entry.get('memory'), entry.get('server'), entry.get('client'), str(entry.get('rail')), str(entry.get('round')))
        pairs.setdefault(key, {})[str(entry.get('side'))] = entry
    return pairs


def cc_findings(fleet: Fleet) -> List[Finding]:
    """ROCE_CC_NOT_WORKING on the sending HCA whose peer sent CNPs it did not handle."""
    windowed = set((fleet.bench or {}).get('windowed') or [])
    groups: Dict[Tuple[str, str], Dict[str, Any]] = {}
    for key, ends in _pairs(fleet).items():
        for np_side, rp_side in (('server', 'client'), ('client', 'server')):
            np_end = ends.get(np_side)
            if np_end is None:
                continue
            rp_host = key[1] if rp_side == 'server' else key[2]
            rp_end = ends.get(rp_side) or {}
            rp_hca = rp_end.get('hca') or np_end.get('peer_hca')
            cc = np_end['window'].get('cc') or {}
            sent = max(cc.get('np_cnp_sent', 0), cc.get('np_ecn_marked_roce_packets', 0))
            handled = ((rp_end.get('window') or {}).get('cc') or {}).get('rp_cnp_handled', 0)
            if sent < CNP_MIN or handled >= HANDLED_SHARE * sent or rp_host not in windowed \
                    or not _has_counter(fleet, rp_host, rp_hca, 'rp_cnp_handled'):
                continue
            group = groups.setdefault((rp_host, str(rp_hca)), {'sent': 0, 'handled': 0, 'tests': [], 'receivers': set()})
            group['sent'] += sent
            group['handled'] += handled
            group['tests'].append(_test(np_end))
            group['receivers'].add('%s %s' % (np_end['host'], np_end.get('hca')))
    return [finding(F.ROCE_CC_NOT_WORKING, host, hca,
                    {'cnps_sent_to_it': group['sent'], 'cnps_handled': group['handled'], 'receivers': sorted(group['receivers']),
                     'cnp_min': CNP_MIN, 'handled_share_min': HANDLED_SHARE, 'tests': group['tests'][:TESTS_NAMED],
                     'tests_total': len(group['tests'])},
                    'during %d pair test(s) the receiving end (%s) sent %d CNPs (or saw that many ECN marks) and %s of %s handled '
                    '%d: congestion control did not slow the sender down' % (
                        len(group['tests']), ', '.join(sorted(group['receivers'])[:4]), group['sent'], hca, host,
                        group['handled']),
                    at=[('hca', host, hca)], hca=hca)
            for (host, hca), group in sorted(groups.items(), key=lambda item: (item[0][0], natural_key(item[0][1])))]


def _lossless(fleet: Fleet, host: str, hca: Any) -> Optional[bool]:
    """Is the RDMA traffic of the HCA's RoCE port set lossless (its QoS read, PFC on the RDMA priority)? None: unknown."""
    for port in ((fleet.judged.get(host) or {}).get('roce') or {}).get('ports') or []:
        if isinstance(port, dict) and port.get('hca') == hca:
            if port.get('source') is None:
                return None
            checks = _roce_rules.port_checks(port)
            return not set(checks) & {F.ROCE_PFC_OFF, F.ROCE_TC_NOT_LOSSLESS, F.ROCE_TRUST_PCP}
    return None


def loss_findings(fleet: Fleet) -> List[Finding]:
    """ROCE_LOSSLESS_LOSS (a lossless port) or ROCE_CONGESTION (lossy or unknown) where RoCE loss counters rose in the windows."""
    groups: Dict[Tuple[str, str], Dict[str, Any]] = {}
    for entry in _windows(fleet):
        window = entry['window']
        loss = dict((k, v) for k, v in (window.get('cc') or {}).items() if k in LOSS_COUNTERS and v)
        if not loss or not window.get('roce'):
            continue
        group = groups.setdefault((entry['host'], str(entry.get('hca'))), {'rise': {}, 'tests': []})
        for name, value in loss.items():
            group['rise'][name] = group['rise'].get(name, 0) + value
        group['tests'].append(_test(entry))
    found = []
    for (host, hca), group in sorted(groups.items(), key=lambda item: (item[0][0], natural_key(item[0][1]))):
        lossless = _lossless(fleet, host, hca)
        code = F.ROCE_LOSSLESS_LOSS if lossless else F.ROCE_CONGESTION
        netdev = _netdev(fleet, host, hca)
        found.append(finding(
            code, host, hca if code == F.ROCE_LOSSLESS_LOSS else netdev,
            {'hca': hca, 'netdev': netdev, 'lossless': lossless, 'rise': group['rise'], 'tests': group['tests'][:TESTS_NAMED],
             'tests_total': len(group['tests']), 'window': True},
            'RoCE loss counters of %s rose during %d pair test(s) (%s)%s' % (
                hca, len(group['tests']), ', '.join('%s +%d' % kv for kv in sorted(group['rise'].items())),
                ': its RDMA priority is set lossless (PFC), so something on the way drops what it must pause' if lossless
                else ': packets were dropped and retransmitted'),
            at=[('hca', host, hca)], hca=hca))
    return found


@rule(produces=(F.PCIE_ERRORS_UNDER_LOAD, F.PCIE_LINK_RETRAINING, F.ROCE_PFC_PAUSE_STORM, F.ROCE_CC_NOT_WORKING,
                F.ROCE_LOSSLESS_LOSS, F.ROCE_CONGESTION), parts=('bench', 'judged'))
def window_counters(fleet: Fleet, _findings: List[Finding]) -> List[Finding]:
    if not fleet.bench:
        return []
    return pcie_error_findings(fleet) + retraining_findings(fleet) + pause_findings(fleet) + cc_findings(fleet) + loss_findings(fleet)
