# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Counter rates: the ONE place that says when an increase of a port's error counters
between two reads is a fault. Used for the fabric's switch ports (plugin_utils/diagnosis/_fabric.py,
two perfquery reads by ib_fabric_facts) and for the benchmark's per-round deltas
(plugin_utils/bench/_bench.py).

Rules (each verdict names the counter, the increase, the seconds and the rate):
  - ``flapping``: any increase of ``link_downed`` - the link went down and retrained
    (IBTA PortCounters LinkDownedCounter; one step is one lost link).
  - ``ber``: ``symbol_error`` per second above what a bit error ratio of 1e-12 allows at the
    link's rate (IBTA Vol 2 physical layer: BER of 10^-12 or better per lane; at 400 Gb/s
    that is 0.4 errors per second). Without the link's rate or the time between the reads
    the increase is said, and judged against a rate of 0 (fail closed: an unknown rate is no
    licence for errors).
  - ``recovering``: any increase of ``link_error_recovery`` - the link retrained without
    going down, which a healthy cable does not need.
A counter that went DOWN between reads was cleared (perfquery -R, a reboot): no increase
is known, and that is said as ``cleared`` rather than read as a negative rate.
"""

from __future__ import annotations

from typing import Any

# IBTA specification Vol 2 (physical layer), bit error ratio of a compliant link: 1e-12.
BER_LIMIT = 1e-12
RULES = ('flapping', 'ber', 'recovering')


def allowed_symbol_errors_per_s(gbps: object) -> float | None:
    """Symbol errors per second a link of ``gbps`` Gb/s may show at the IBTA BER (None: rate unknown)."""
    if not isinstance(gbps, (int, float)) or isinstance(gbps, bool) or gbps <= 0:
        return None
    return gbps * 1e9 * BER_LIMIT


def increases(before: dict[str, Any] | None, after: dict[str, Any] | None) -> tuple[dict[str, int], list[str]]:
    """{counter: increase} of the integer counters present in both reads, and the counters
    that went down (cleared between the reads)."""
    rises: dict[str, int] = {}
    cleared: list[str] = []
    for name, new in (after or {}).items():
        old = (before or {}).get(name)
        if not isinstance(new, int) or not isinstance(old, int) or isinstance(new, bool) or isinstance(old, bool):
            continue
        if new > old:
            rises[name] = new - old
        elif new < old:
            cleared.append(name)
    return rises, sorted(cleared)


def judge(rises: dict[str, Any] | None, seconds: Any = None, gbps: object = None) -> list[dict[str, Any]]:
    """Verdicts over ``rises`` ({counter: increase}) seen in ``seconds`` on a link of ``gbps``:
    a list of {'rule', 'counter', 'increase', 'seconds', 'per_s', 'allowed_per_s'}; empty when
    nothing breaks a rule."""
    # What a node sent may hold anything: only positive integers are increases.
    found = dict((name, value) for name, value in (rises or {}).items()
                 if isinstance(value, int) and not isinstance(value, bool) and value > 0)
    seconds = seconds if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds > 0 else None
    verdicts: list[dict[str, Any]] = []

    def add(rule: str, counter: str, allowed: float | None = None) -> None:
        increase = found[counter]
        verdicts.append({'rule': rule, 'counter': counter, 'increase': increase, 'seconds': seconds,
                         'per_s': round(increase / seconds, 6) if seconds else None, 'allowed_per_s': allowed})

    if found.get('link_downed'):
        add('flapping', 'link_downed')
    if found.get('symbol_error'):
        allowed = allowed_symbol_errors_per_s(gbps)
        if seconds is None or allowed is None or found['symbol_error'] / seconds > allowed:
            add('ber', 'symbol_error', allowed)
    if found.get('link_error_recovery'):
        add('recovering', 'link_error_recovery')
    return verdicts


def compare(before: dict[str, Any] | None, after: dict[str, Any] | None, seconds: Any = None, gbps: object = None) -> dict[str, Any]:
    """Two reads of one port's counters -> {'increase', 'cleared', 'verdicts'}."""
    rises, cleared = increases(before, after)
    return {'increase': rises, 'cleared': cleared, 'verdicts': judge(rises, seconds, gbps)}


# ---------------------------------------------------------------------------- windows (the subnet's ports)
# What ibdiagnet, NVIDIA's fabric checker, judges a port counter by over its run: the rise between its two
# reads against a per-counter "difference allowed threshold"; for symbol_error_counter and
# link_down_counter it is 1 (ibdiagnet2.log: '"symbol_error_counter" increased during the run (difference
# value=27,difference allowed threshold=1)', '"link_down_counter" increased during the run (difference
# value=1,difference allowed threshold=1)', as quoted from a real ibdiagnet2.log in
# https://github.com/wuchanghui5220/pot tested.md), and its BER test's default is 10^-12 (ibdiagnet
# User Manual v2.13.0, Basic Commands, --ber_test / --ber_thresh:
# https://docs.nvidia.com/networking/display/ibdiagnetUserManualv213/Basic+Commands). Those two are
# the rules above ('flapping': any rise of link_downed; 'ber': symbol errors past the 1e-12 rate). No
# public ibdiagnet threshold was found for link_error_recovery: it keeps this module's 'recovering'
# rule (any rise). Other counters (port_rcv_errors, port_xmit_discards, ...) are reported in the
# evidence, not judged: congestion moves them on a healthy fabric (PortXmitDiscards, PortXmitWait).
IBDIAGNET_THRESHOLDS = {'symbol_error': 1, 'link_downed': 1}
# The bring-up grace window, minutes after the discovering node booted (the fabric is brought up with
# its nodes): links train, retrain once and count symbol errors while they equalise, which is no fault
# of a cable. No vendor publishes a figure for it; 10 minutes covers a cluster's power-on and the
# subnet manager's first sweeps (opensm's default sweep_interval is 10 s, opensm.conf(5)), and it is a
# role variable (gpu_fabric_link_grace) for a site that knows its own bring-up time.
LINK_GRACE_MIN = 10
LINK_GRACE_MAX_MIN = 1440
# A link that went down and came back more than once within one window is retraining, not coming up:
# a fault even inside the grace window (FABRIC_LINK_FLAPPING), distinct from a link that trained at a
# lower width or speed (FABRIC_LINK_DEGRADED).
RETRAINS_REPEATED = 2


def in_grace(uptime_s: object, grace_min: object) -> bool:
    """True while ``uptime_s`` seconds since boot are within ``grace_min`` minutes (both numbers)."""
    ok = [isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in (uptime_s, grace_min)]
    return all(ok) and float(uptime_s) < float(grace_min) * 60  # type: ignore[arg-type]


def window(before: dict[str, Any] | None, after: dict[str, Any] | None, seconds: Any = None, gbps: object = None,
           uptime_s: object = None, grace_min: object = LINK_GRACE_MIN, saturated: Any = ()) -> dict[str, Any]:
    """Two reads of one port over a window -> {'increase', 'cleared', 'verdicts', 'phase', 'retrains',
    'retrains_per_min', 'saturated'}: ``phase`` 'bring_up' when the window lies inside the grace window
    and the link did not retrain repeatedly (its verdicts are then information), else 'steady'. A counter
    saturated in the second read (``saturated``, module_utils/_ibdiag.py COUNTER_BITS) rose by an
    unknown amount: it is named, never read as a rise of 0."""
    result = compare(before, after, seconds, gbps)
    retrains = result['increase'].get('link_downed', 0)
    seconds = seconds if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds > 0 else None
    result['retrains'] = retrains
    result['retrains_per_min'] = round(retrains * 60.0 / seconds, 3) if seconds and retrains else None
    result['saturated'] = sorted(name for name in saturated or () if name in ('symbol_error', 'link_downed', 'link_error_recovery'))
    result['phase'] = 'bring_up' if in_grace(uptime_s, grace_min) and retrains < RETRAINS_REPEATED else 'steady'
    return result
