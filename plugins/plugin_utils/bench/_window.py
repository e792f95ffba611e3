# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A pair test's window: what rose on one end between the counter reads around its step
(module_utils/_window.py read_window, before and after; perftest_run's sequence), compact, for its record.

{'seconds': the time between the reads, 'aer': [{'bdf', 'role' ('hca', 'gpu', 'hca_link' or 'gpu_link' - the port
above it, the other end of its link - or 'bridge'), 'rise': {count:
increase}}], 'cc': {counter: increase}, 'pause': {counter: increase}, 'roce': the HCA's port is RoCE,
'links': [{'bdf', 'role', 'seen': [[GT/s, width], ...]}] (the distinct values sampled while the step ran; a
GPU's only in a GPU-memory test: an idle GPU lowers its link speed), 'link_samples', 'reset': [what went
down], 'unread': [why a part was not read]}; only what rose is kept (an empty part is left out, and a link sampled at
one value).

A counter that went down between two reads was reset (a device re-enumerated, a driver reloaded, the
counters cleared): no increase is known, and it is said in ``reset`` - never a negative rise. Widths: the
AER counts are u64 (module_utils/_aer.py), the hw_counters and ethtool's 64 bit; the IB PortCounters'
saturation is _ib.COUNTER_BITS's and judged by _rates.py, not here.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _rates  # increases between two reads
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._shape import mapping, number, sequence, text
# What perftest_run sends with its first read only (the PCI paths, the RoCE HCAs): one owner, the node-side reader.
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._window import STATIC

Window = Dict[str, Any]


def _ints(values: Any) -> Dict[str, int]:
    return dict((str(k), v) for k, v in mapping(values).items() if isinstance(v, int) and not isinstance(v, bool))


def _rise(before: Any, after: Any, what: str, reset: List[str], zeros: bool = False) -> Dict[str, int]:
    """What rose from ``before`` to ``after``; ``zeros``: a name absent from a read that has the others was at 0 (the AER
    reads leave kinds at 0 out, module_utils/_aer.py read_aer)."""
    old = _ints(before)
    if zeros and isinstance(before, dict):
        old.update((name, 0) for name in _ints(after) if name not in old)
    rises, cleared = _rates.increases(old, _ints(after))
    reset.extend('%s %s' % (what, name) for name in cleared)
    return rises


def _roles(old: Dict[str, Any], hca: Optional[str], gpu_bdf: Optional[str]) -> Dict[str, str]:
    """{bdf: role} of the functions on this test's path: the HCA's and, for GPU memory, the GPU's."""
    roles: Dict[str, str] = {}
    chains = [(sequence(mapping(old.get('paths')).get(hca)) if hca else [], 'hca')]
    if gpu_bdf:
        chains.append((sequence(mapping(old.get('gpu_paths')).get(gpu_bdf)), 'gpu'))
    for chain, role in chains:
        for index, bdf in enumerate(chain):
            if not isinstance(bdf, str):
                continue
            # The port right above the device is the other end of the device's own link: errors of that link
            # may be counted there (kernel Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats).
            own = role if index == len(chain) - 1 else role + '_link' if index == len(chain) - 2 else 'bridge'
            roles[bdf] = own if roles.get(bdf) in (None, 'bridge') else roles[bdf]
    return roles


def _links(step: Any, roles: Dict[str, str]) -> List[Dict[str, Any]]:
    found = []
    for bdf, seen in sorted(mapping(mapping(step).get('links')).items()):
        if isinstance(bdf, str) and roles.get(bdf) in ('hca', 'gpu') and isinstance(seen, list):
            values = [list(v) for v in seen if isinstance(v, (list, tuple)) and len(v) == 2][:20]
            found.append({'bdf': bdf, 'role': roles[bdf], 'seen': values})
    return found


def carried(old: Any, new: Any) -> Any:
    """``new`` (a read's window) with the static parts of ``old`` where it has none of its own."""
    if not isinstance(new, dict) or not isinstance(old, dict):
        return new
    return dict(new, **dict((name, old[name]) for name in STATIC if name not in new and name in old))


def window_of(old: Any, new: Any, hca: Any, gpu_bdf: Any, seconds: Any, step: Any = None) -> Optional[Window]:
    """The window of one test on ``hca`` (and ``gpu_bdf`` for GPU memory) between two reads' windows; None when
    either read has none (an older perftest_run, or no counters_root)."""
    old, new = mapping(old), mapping(new)
    if not old or not new:
        return None
    hca, gpu_bdf = text(hca), text(gpu_bdf)
    reset: List[str] = []
    roles = _roles(old, hca, gpu_bdf)
    aer = []
    for bdf, role in sorted(roles.items()):
        rise = _rise(mapping(old.get('aer')).get(bdf), mapping(new.get('aer')).get(bdf), 'aer %s' % bdf, reset, zeros=True)
        if rise:
            aer.append({'bdf': bdf, 'role': role, 'rise': rise})
    pause_old = mapping(old.get('pause')).get(hca) if hca else None
    window: Window = {
        'seconds': number(seconds), 'aer': aer,
        'cc': _rise(mapping(old.get('cc')).get(hca), mapping(new.get('cc')).get(hca), 'cc', reset) if hca else {},
        'pause': _rise(pause_old, mapping(new.get('pause')).get(hca), 'pause', reset) if hca else {},
        'roce': hca in sequence(old.get('roce')) if hca else False, 'links': _links(step, roles),
        'link_samples': number(mapping(step).get('link_samples')), 'reset': reset,
        'unread': sorted(set(str(v) for k, v in mapping(new.get('unread')).items() if hca and str(k).endswith(' ' + hca)))}
    # Compact: a record of a healthy test keeps its seconds and link layer only (a 256-node mesh has a million records).
    window['links'] = [link for link in window['links'] if len(link['seen']) > 1]
    return dict((name, value) for name, value in window.items() if value not in ([], {}, None) or name in ('seconds', 'roce'))


def changes(seen: Any) -> int:
    """How many times a sampled link changed speed or width (None values, a read that failed, not counted)."""
    values = [tuple(v) for v in seen or [] if isinstance(v, (list, tuple)) and None not in v]
    return sum(1 for a, b in zip(values, values[1:]) if a != b)


def notable(window: Any) -> bool:
    """Does a window hold anything (a rise, a reset, a part not read, a link sampled at more than one value)?
    bench.json keeps only those: a healthy run's windows are empty, and a 256-node mesh has a million."""
    window = mapping(window)
    return bool(window.get('aer') or window.get('cc') or window.get('pause') or window.get('reset') or window.get('unread')
                or any(len(link.get('seen') or []) > 1 for link in window.get('links') or [] if isinstance(link, dict)))


def _counts(value: Any) -> Dict[str, int]:
    return dict((str(k)[:64], v) for k, v in mapping(value).items()
                if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1 << 64)


def _pair(value: Any) -> Optional[List[Any]]:
    if not isinstance(value, list) or len(value) != 2:
        return None
    return [number(value[0]), number(value[1])]


def checked(window: Any) -> Optional[Window]:
    """A record's window as the rules may read it (records travel through hostvars and files: typed again, as
    _bench._checked types the rest of a record); None when it is no mapping."""
    if not isinstance(window, dict):
        return None
    found: Window = {'seconds': number(window.get('seconds')), 'roce': window.get('roce') is True}
    aer = [{'bdf': item['bdf'][:32], 'role': str(item.get('role'))[:16], 'rise': _counts(item.get('rise'))}
           for item in sequence(window.get('aer')) if isinstance(item, dict) and isinstance(item.get('bdf'), str)]
    links = []
    for item in sequence(window.get('links')):
        if isinstance(item, dict) and isinstance(item.get('bdf'), str) and item.get('role') in ('hca', 'gpu'):
            seen = [pair for pair in (_pair(v) for v in sequence(item.get('seen'))[:20]) if pair is not None]
            links.append({'bdf': item['bdf'][:32], 'role': item['role'], 'seen': seen})
    parts = {'aer': [a for a in aer if a['rise']], 'cc': _counts(window.get('cc')), 'pause': _counts(window.get('pause')),
             'links': links, 'link_samples': number(window.get('link_samples')),
             'reset': [str(v)[:120] for v in sequence(window.get('reset'))[:50]],
             'unread': [str(v)[:300] for v in sequence(window.get('unread'))[:20]]}
    found.update((name, value) for name, value in parts.items() if value not in ([], {}, None))
    return found
