# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The counters a pair test's window reads, on a simulated node: the PCIe AER files, the mlx5 congestion
counters and the ``ethtool -S`` stand-in's pause counters - rendered at rest, and moved by each perftest
run (tests/sim/tools_perftest.py calls ``after_test``) as a real fault, or healthy congestion, moves them.

- AER: /sys/bus/pci/devices/<bdf>/aer_dev_correctable, aer_dev_fatal, aer_dev_nonfatal of every PCIe function
  with a link, in the format of kernel 6.x drivers/pci/pcie/aer.c aer_stats_dev_attr() ('<name> <count>' per
  error bit of aer_correctable_error_string[] / aer_uncorrectable_error_string[], then TOTAL_ERR_*).
- ``ethtool -S IF`` (tests/sim/bin/ethtool): mlx5's layout ('NIC statistics:', five blanks, 'name: value';
  tests/fixtures/public/ethtool/ethq_8_mlx5_connectx4lx_ubuntu1804.txt) with the per-priority pause counters
  of the mlx5 counters document and a few neighbours, from a state file per netdev.
- What a test moves: the profile's ``window`` ({hca: spec}, tests/sim/faults.py WINDOW_FAULTS), written to
  WINDOW_FILE by render. A spec: 'aer' {error: count per test} on the HCA and 'aer_link' on the port above it
  (the link partner counts too), 'pause' {'rx'|'tx': {prio: share of the test time}} and 'storm' (events per
  test), 'cc' 'healthy' (congestion met and answered: the receiver's CNPs handled by the sender) or
  'unhandled' (this HCA, as sender, handles none), 'loss' {counter: per test}, 'retrain' [[GT/s, width], ...]
  (the link's speed and width as it retrains during the test).

Usage: tools_window.py ethtool ARGS...   (tests/sim/bin/ethtool calls it; GF_SIM_ROOT names the node)
"""

from __future__ import annotations

import json
import os
import sys
import time

STATE_DIR = 'var/lib/gf-sim/ethtool'
WINDOW_FILE = 'var/lib/gf-sim/window.json'
CORRECTABLE = ('RxErr', 'BadTLP', 'BadDLLP', 'Rollover', 'Timeout', 'NonFatalErr', 'CorrIntErr', 'HeaderOF')
UNCORRECTABLE = ('Undefined', 'DLP', 'SDES', 'TLP', 'FCP', 'CmpltTO', 'CmpltAbrt', 'UnxCmplt', 'RxOF', 'MalfTLP', 'ECRC',
                 'UnsupReq', 'ACSViol', 'UncorrIntErr', 'BlockedTLP', 'AtomicOpBlocked', 'TLPBlockedErr', 'PoisonTLPBlocked')
# CNPs a congested test sees (order of magnitude of a 400G incast test of a few seconds).
CNPS_PER_TEST = 4000


def _mlx5_names():
    names = ['rx_packets_phy', 'tx_packets_phy', 'rx_bytes_phy', 'tx_bytes_phy', 'rx_pause_ctrl_phy', 'tx_pause_ctrl_phy',
             'rx_discards_phy', 'tx_discards_phy', 'rx_crc_errors_phy', 'rx_out_of_buffer']
    for prio in range(8):
        names += ['rx_prio%d_bytes' % prio, 'rx_prio%d_packets' % prio, 'rx_prio%d_discards' % prio,
                  'tx_prio%d_bytes' % prio, 'tx_prio%d_packets' % prio,
                  'rx_prio%d_pause' % prio, 'rx_prio%d_pause_duration' % prio, 'tx_prio%d_pause' % prio,
                  'tx_prio%d_pause_duration' % prio, 'rx_prio%d_pause_transition' % prio]
    return names + ['tx_pause_storm_warning_events', 'tx_pause_storm_error_events', 'module_unplug', 'module_bus_stuck']


MLX5_NAMES = _mlx5_names()


def _write(root, rel, text):
    path = os.path.join(root, rel.lstrip('/'))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + '.tmp%d' % os.getpid()
    with open(tmp, 'w') as handle:
        handle.write(text)
    os.replace(tmp, path)


def aer_text(names, counts, total):
    return ''.join('%s %d\n' % (name, counts.get(name, 0)) for name in names) + '%s %d\n' % (total, sum(counts.values()))


def render_window(root, profile, paths, links):
    """At rest: AER files at zero on every function with a link, the ethtool state of each RoCE port, the window specs."""
    for bdf, path in paths.items():
        if bdf in links:
            _write(root, path + '/aer_dev_correctable', aer_text(CORRECTABLE, {}, 'TOTAL_ERR_COR'))
            _write(root, path + '/aer_dev_fatal', aer_text(UNCORRECTABLE, {}, 'TOTAL_ERR_FATAL'))
            _write(root, path + '/aer_dev_nonfatal', aer_text(UNCORRECTABLE, {}, 'TOTAL_ERR_NONFATAL'))
    hcas = {}
    for hca in profile.get('hcas', []):
        parent = (next((d for d in profile.get('pci', []) if d['bdf'] == hca['pci']), {}) or {}).get('parent')
        netdev = next((p.get('netdev') for p in hca.get('ports') or [] if p.get('link_layer') == 'Ethernet'), None)
        hcas[hca['name']] = {'bdf': hca['pci'], 'parent': parent, 'netdev': netdev,
                             'ports': [p.get('port', 1) for p in hca.get('ports') or []]}
        if netdev:
            _write(root, '%s/%s.json' % (STATE_DIR, netdev), json.dumps(dict.fromkeys(MLX5_NAMES, 0)))
    _write(root, WINDOW_FILE, json.dumps({'hcas': hcas, 'specs': profile.get('window') or {},
                                          'paths': dict((bdf, paths[bdf]) for bdf in paths)}, sort_keys=True))


def moves(mine, theirs, sender, seconds):
    """What one end's counters rise by in one test: {'aer': {...}, 'aer_link': {...}, 'hw': {...}, 'ethtool': {...},
    'retrain': [...]}. ``mine``/``theirs``: the window specs of this end's HCA and of its peer's ({} for none);
    ``sender``: whether this end sends the data (congestion builds at the receiver, which sends the CNPs)."""
    mine, theirs = mine or {}, theirs or {}
    found = {'aer': dict(mine.get('aer') or {}), 'aer_link': dict(mine.get('aer_link') or {}), 'hw': {}, 'ethtool': {},
             'retrain': list(mine.get('retrain') or [])}
    congested = [spec.get('cc') for spec in (mine, theirs) if spec.get('cc')]
    if congested and not sender:
        found['hw'].update(np_cnp_sent=CNPS_PER_TEST, np_ecn_marked_roce_packets=CNPS_PER_TEST)
    if congested and sender:
        found['hw']['rp_cnp_handled'] = 0 if mine.get('cc') == 'unhandled' else CNPS_PER_TEST
    found['hw'].update(mine.get('loss') or {})
    for direction, prios in (mine.get('pause') or {}).items():
        for prio, share in prios.items():
            duration = int(float(share) * seconds * 1e6)
            # A pause frame holds up to 65535 quanta; at 400 Gb/s one quantum (512 bit times) is 1.28 ns, so a
            # frame pauses about 84 us and is refreshed before it runs out (IEEE 802.1Qbb): one frame per 40 us.
            frames = max(1, duration // 40)
            found['ethtool'].update({'%s_prio%s_pause' % (direction, prio): frames,
                                     '%s_prio%s_pause_duration' % (direction, prio): duration,
                                     '%s_pause_ctrl_phy' % direction: frames})
    if mine.get('storm'):
        found['ethtool']['tx_pause_storm_warning_events'] = int(mine['storm'])
    return found


def _add_aer(root, path, rise):
    if not path or not rise:
        return
    for name, names, total in (('aer_dev_correctable', CORRECTABLE, 'TOTAL_ERR_COR'),):
        rel = os.path.join(root, path.lstrip('/'), name)
        counts = {}
        if os.path.isfile(rel):
            with open(rel) as handle:
                for line in handle:
                    parts = line.split()
                    if len(parts) == 2 and parts[0] in names:
                        counts[parts[0]] = int(parts[1])
        for key, value in rise.items():
            counts[key] = counts.get(key, 0) + int(value)
        _write(root, path + '/' + name, aer_text(names, counts, total))


def _add_hw(root, hca, port, rise):
    for name, value in rise.items():
        rel = '/sys/class/infiniband/%s/ports/%d/hw_counters/%s' % (hca, port, name)
        path = os.path.join(root, rel.lstrip('/'))
        old = 0
        if os.path.isfile(path):
            with open(path) as handle:
                old = int(handle.read().strip() or 0)
        _write(root, rel, '%d\n' % (old + int(value)))


def _add_ethtool(root, netdev, rise):
    if not netdev or not rise:
        return
    path = os.path.join(root, STATE_DIR, netdev + '.json')
    state = {}
    if os.path.isfile(path):
        with open(path) as handle:
            state = json.load(handle)
    for name, value in rise.items():
        state[name] = state.get(name, 0) + int(value)
    _write(root, '%s/%s.json' % (STATE_DIR, netdev), json.dumps(state))


def load(root):
    path = os.path.join(root, WINDOW_FILE)
    if not os.path.isfile(path):
        return None
    with open(path) as handle:
        return json.load(handle)


def spec_of(root, hca):
    """The window spec of ``hca`` on the node at ``root`` ({} for none)."""
    state = load(root) or {}
    return (state.get('specs') or {}).get(hca) or {}


def after_test(root, hca, theirs, sender, seconds):
    """Move the counters of ``hca`` on the node at ``root`` as one test of ``seconds`` moves them (``theirs``: the
    peer's spec, sent over the test's own connection). Returns what moved."""
    state = load(root)
    if not state or hca not in (state.get('hcas') or {}):
        return {}
    info = state['hcas'][hca]
    found = moves((state.get('specs') or {}).get(hca), theirs, sender, seconds)
    paths = state.get('paths') or {}
    _add_aer(root, paths.get(info['bdf']), found['aer'])
    _add_aer(root, paths.get(info.get('parent')), found['aer_link'])
    if found['hw']:
        _add_hw(root, hca, (info.get('ports') or [1])[0], found['hw'])
    _add_ethtool(root, info.get('netdev'), found['ethtool'])
    return found


def during_test(root, hca, step_s=0.05):
    """A link that retrains: its speed and width written in turn while the test runs (the pair test's sampler reads
    them), then left at the last value."""
    state = load(root) or {}
    seen = ((state.get('specs') or {}).get(hca) or {}).get('retrain') or []
    info = (state.get('hcas') or {}).get(hca) or {}
    path = (state.get('paths') or {}).get(info.get('bdf'))
    for speed, width in seen:
        if path:
            _write(root, path + '/current_link_speed', '%.1f GT/s PCIe\n' % speed)
            _write(root, path + '/current_link_width', '%d\n' % width)
        time.sleep(step_s)


def ethtool(root, argv):
    """The ``ethtool -S IF`` stand-in: (exit status, stdout, stderr)."""
    if len(argv) != 2 or argv[0] not in ('-S', '--statistics'):
        return 1, '', 'ethtool (simulator stand-in): only -S IF is simulated\n'
    path = os.path.join(root, STATE_DIR, argv[1] + '.json')
    if not os.path.isfile(path):
        # ethtool's own words for a netdev that does not exist (SIOCETHTOOL: ENODEV).
        return 71, '', 'Cannot get stats strings information: No such device\n'
    with open(path) as handle:
        state = json.load(handle)
    names = [n for n in MLX5_NAMES if n in state] + sorted(n for n in state if n not in MLX5_NAMES)
    return 0, 'NIC statistics:\n' + ''.join('     %s: %d\n' % (name, state[name]) for name in names), ''


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    root = os.environ.get('GF_SIM_ROOT')
    if not argv or argv[0] != 'ethtool' or not root:
        sys.stderr.write('usage: GF_SIM_ROOT=ROOT tools_window.py ethtool -S IF\n')
        return 2
    code, out, err = ethtool(root, argv[1:])
    sys.stdout.write(out)
    sys.stderr.write(err)
    return code


if __name__ == '__main__':
    sys.exit(main())
