# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""``ethtool -S <netdev>``: a NIC's statistics, and the per-priority PFC pause counters in them.

The output (ethtool's do_gstats(): 'NIC statistics:' then one '     <name>: <value>' line per counter)
is read as {name: count}; a name may itself hold ': ' (be2net 'rxq0: rx_bytes', bnx2x '[0]: rx_bytes'),
so a line splits at its last colon. Real outputs: tests/fixtures/public/ethtool/ (mlx5, bnxt_en Thor2,
ice).

The pause counters each driver names (normalised by ``pfc()`` to rx/tx, priority, frames and duration):
- mlx5 (docs.kernel.org networking/device_drivers/ethernet/mellanox/mlx5/counters.html, "Physical Port
  Counters" and "Priority Port Counters"): rx_prio<N>_pause / tx_prio<N>_pause (pause frames received /
  sent on priority N), rx_prio<N>_pause_duration / tx_prio<N>_pause_duration (in microseconds),
  rx_pause_ctrl_phy / tx_pause_ctrl_phy (all pause frames), tx_pause_storm_warning_events (the device
  stalled past a watermark) and tx_pause_storm_error_events (stalled past the timeout: the NIC stopped
  sending pause frames to protect the fabric), rx_discards_phy;
- bnxt_en (Broadcom; tests/fixtures/public/ethtool/rocm_11027_bnxt_thor2_pfc_elided.txt):
  rx_pfc_ena_frames_pri<N> / tx_pfc_ena_frames_pri<N>, pfc_pri<N>_rx_duration_us / pfc_pri<N>_tx_duration_us;
- ice (Intel; drivers/net/ethernet/intel/ice/ice_ethtool.c ice_gstrings_pfc_stats): rx_priority_<N>_xoff.nic /
  tx_priority_<N>_xoff.nic (XOFF frames: the pauses), no duration.
Direction: rx = pause frames this host received (the switch is pausing this host's sending), tx = pause
frames this host sent (this host is pausing the switch: its receive side could not keep up).
"""

from __future__ import annotations

import re
import time
from typing import Any

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _process

# mlx5 with per-channel statistics prints thousands of counters (about 40 per channel, up to 128 channels
# and more): the bound is far beyond, and a longer output is cut, said.
LINES_MAX = 40000
NAME_MAX = 96
U64_MAX = (1 << 64) - 1
TIMEOUT_S = 5.0
_VALUE_RE = re.compile(r'^\s*(\d{1,20})\s*$', re.A)
_NAME_RE = re.compile(r'^[A-Za-z0-9_.\[\]: -]{1,%d}$' % NAME_MAX, re.A)
# Per-priority pause counters: (pattern, direction, what).
_PFC_PATTERNS = (
    (re.compile(r'^(rx|tx)_prio([0-7])_pause$'), 'frames'),
    (re.compile(r'^(rx|tx)_prio([0-7])_pause_duration$'), 'duration_us'),
    (re.compile(r'^(rx|tx)_pfc_ena_frames_pri([0-7])$'), 'frames'),
    (re.compile(r'^pfc_pri([0-7])_(rx|tx)_duration_us$'), 'duration_us'),
    (re.compile(r'^(rx|tx)_priority_([0-7])_xoff\.nic$'), 'frames'),
)
# Port-wide counters a window keeps (the mlx5 names; the storm events are mlx5's only).
PORT_COUNTERS = ('rx_pause_ctrl_phy', 'tx_pause_ctrl_phy', 'tx_pause_storm_warning_events', 'tx_pause_storm_error_events',
                 'rx_discards_phy', 'tx_discards_phy')


def parse_stats(text: Any) -> dict[str, Any]:
    """ethtool -S output -> {'counters': {name: count}, 'unread': [at most 5 lines that are no counter], 'cut': bool}.
    Never raises on any text."""
    counters: dict[str, int] = {}
    unread: list[str] = []
    cut = False
    if not isinstance(text, str):
        return {'counters': counters, 'unread': [], 'cut': False}
    for number, line in enumerate(text.splitlines()):
        if number >= LINES_MAX:
            cut = True
            break
        stripped = line.strip()
        if not stripped or stripped.endswith('statistics:') or stripped == '...':
            continue
        name, sep, value = stripped.rpartition(':')
        name = name.strip()
        match = _VALUE_RE.match(value)
        if not sep or match is None or not _NAME_RE.match(name):
            if len(unread) < 5:
                unread.append(ascii(stripped[:80]))
            continue
        count = int(match.group(1))
        if count <= U64_MAX:
            counters[name] = count
    return {'counters': counters, 'unread': unread, 'cut': cut}


def pfc(counters: Any) -> dict[str, int]:
    """The pause counters of ``counters`` (parse_stats()' counters) in one naming, whatever the driver:
    '<rx|tx>_prio<N>_pause' (frames), '<rx|tx>_prio<N>_pause_duration_us', and PORT_COUNTERS as named."""
    found: dict[str, int] = {}
    for name, value in (counters if isinstance(counters, dict) else {}).items():
        if not isinstance(value, int) or isinstance(value, bool) or not isinstance(name, str):
            continue
        if name in PORT_COUNTERS:
            found[name] = value
            continue
        for pattern, what in _PFC_PATTERNS:
            match = pattern.match(name)
            if match:
                first, second = match.group(1), match.group(2)
                direction, prio = (second, first) if first.isdigit() else (first, second)
                found['%s_prio%s_pause%s' % (direction, prio, '_duration_us' if what == 'duration_us' else '')] = value
                break
    return found


def read_pauses(netdevs: list[str], ethtool: str, timeout: float = TIMEOUT_S) -> dict[str, tuple[dict[str, int] | None, str | None]]:
    """Run ``ethtool -S <netdev>`` for every netdev at once (argument lists, each always reaped; all bounded by one
    ``timeout``: a read costs the slowest run, not their sum) -> {netdev: (pfc() of its counters, None) or (None, why
    it could not be read)}."""
    found: dict[str, tuple[dict[str, int] | None, str | None]] = {}
    running = []
    try:
        for netdev in netdevs:
            try:
                running.append((netdev, _process.Launched([ethtool, '-S', netdev], _process.c_locale_env(), name='ethtool')))
            except OSError as exc:
                found[netdev] = (None, 'ethtool could not run: %s' % (exc.strerror or exc))
        deadline = time.time() + timeout
        for netdev, launched in running:
            if not launched.wait_until(deadline, step=0.005):
                launched.timed_out = True
    finally:
        for netdev, launched in running:
            launched.finish()
    for netdev, launched in running:
        out, err = launched.output()
        if launched.timed_out:
            found[netdev] = (None, 'ethtool -S %s did not answer within %g s' % (netdev, timeout))
        elif launched.rc != 0:
            found[netdev] = (None, 'ethtool -S %s failed (rc %s): %s' % (netdev, launched.rc, (err.strip() or out.strip())[:160]))
        else:
            found[netdev] = (pfc(parse_stats(out)['counters']), None)
    return found


def read_pause(netdev: str, ethtool: str, timeout: float = TIMEOUT_S) -> tuple[dict[str, int] | None, str | None]:
    """read_pauses() of one netdev."""
    return read_pauses([netdev], ethtool, timeout)[netdev]
