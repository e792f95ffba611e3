# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Rules over the GPUs' own state (facts gpu_fabric_gpu of module gpu_state_facts, short key 'gpu';
the idle gate's processes of a node's own collective): another job on a GPU, clocks held down,
NVLinks down or counting errors, XID events, row remaps pending, and what was not read.

Each root sits on its GPU, ('gpu', host, name) with the name gdr_facts gives it (GPU0, ...: the
place a GPU-memory pair test goes through), and on the node's GPUs ('gpus', host) (the place of
the node's own collective): it explains only symptoms whose path goes through them."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings as F
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._findings import Finding, finding
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._rule import Fleet, rule
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _gpu_state

# Clock event reasons that are faults (nvml.h nvmlClocksEventReasons: HW slowdown "engaged by
# temperature being too high, external power brake assertion or power draw too high"; SW thermal
# slowdown "the GPU is kept below its max operating temperature"). gpu_idle,
# applications_clocks_setting, sync_boost, display_clock_setting and sw_power_cap (the power limit an
# administrator set: policy) are not.
THROTTLE_FAULTS = ('hw_slowdown', 'hw_thermal_slowdown', 'hw_power_brake_slowdown', 'sw_thermal_slowdown')
# A GPU whose SM clock such a reason holds within this share of its maximum is said as information only, on no
# path: a 2-GPU H200 under matrix products read sw_thermal_slowdown at 1965 of 1980 MHz (99 %), on the real 4-GPU
# node of this repository's device runs; the collective's verdicts start at a 20 % shortfall
# (module_utils/_collective.py HEALTHY_RATIO 0.8), which a clock within 10 % of its maximum cannot account for.
CLOCK_HELD_RATIO = 0.9
# NVLink error counters (nvidia-smi nvlink -e) count since the driver loaded: a healthy H200 node reads 0
# on every counter of its 36 links (tests/fixtures/real/h200x2/state/nvsmi_nvlink_e.txt). Any count is
# said, as a warning: a few replays after years of uptime are not a broken link, one that keeps counting is.
NVLINK_ERRORS_MIN = 1


def _mapping(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> List[Any]:
    return value if isinstance(value, list) else []


def _names(node: Dict[str, Any]) -> Dict[str, str]:
    """{bdf: the GPU's name in gdr_facts (GPU0, ...)}: the name the benchmark's paths use."""
    return dict((str(gpu.get('pci_address')).lower(), str(gpu.get('name'))) for gpu in _list(_mapping(node.get('gdr')).get('gpus'))
                if isinstance(gpu, dict) and gpu.get('pci_address') and gpu.get('name'))


def _at(host: str, bdf: Optional[str], names: Dict[str, str]) -> List[Tuple[str, ...]]:
    places: List[Tuple[str, ...]] = []
    if bdf:
        places.append(('gpu', host, names.get(bdf, bdf)))
    places.append(('gpus', host))
    return places


def _label(bdf: Optional[str], names: Dict[str, str]) -> str:
    return '%s (%s)' % (names[bdf], bdf) if bdf in names else 'the GPU at %s' % bdf if bdf else 'a GPU nvidia-smi did not name'


def _process_words(process: Dict[str, Any]) -> str:
    used = process.get('used_mib') if process.get('used_mib') is not None else '?'
    return 'pid %s %s of %s, %s MiB' % (process.get('pid'), process.get('name') or '?', process.get('user') or 'an unknown user', used)


def _busy(host: str, node: Dict[str, Any], gate: Optional[Dict[str, Any]], names: Dict[str, str]) -> List[Finding]:
    """GPU_BUSY per GPU: the facts' processes (validate) and the idle gate's (before the benchmark, contaminated)."""
    facts = _mapping(node.get('gpu'))
    extra = tuple(str(name) for name in _list(facts.get('monitoring_agents')))
    seen: Dict[Any, Dict[str, Any]] = {}
    # Facts read just before the pairwise benchmark (role fabric_bench): its GPU-memory tests shared the GPU.
    sources = [(facts.get('before_benchmark') is True, _list(facts.get('processes')))]
    if gate:
        sources.append((True, _list(gate.get('processes'))))
    for contaminated, processes in sources:
        for process in _gpu_state.foreign_processes([p for p in processes if isinstance(p, dict)], gate.get('own_pids') if gate else (), extra):
            entry = seen.setdefault(process.get('bdf'), {'processes': [], 'contaminated': False})
            entry['contaminated'] = entry['contaminated'] or contaminated
            if all(p.get('pid') != process.get('pid') for p in entry['processes']):
                entry['processes'].append(process)
    found = []
    for bdf, entry in sorted(seen.items(), key=lambda item: str(item[0])):
        words = '; '.join(_process_words(p) for p in entry['processes'][:5])
        when = ('when the node\'s benchmark ran over it: its results on this GPU are contaminated, not a hardware verdict'
                if entry['contaminated'] else 'when the facts were read: a benchmark over it now would measure a shared GPU')
        evidence = {'processes': entry['processes'][:20], 'contaminated': entry['contaminated'], 'gpu': names.get(bdf or '')}
        found.append(finding(F.GPU_BUSY, host, bdf or 'gpu', evidence,
                             'another compute process holds %s (%s) %s' % (_label(bdf, names), words, when),
                             at=_at(host, bdf, names), process=words))
    return found


def _throttled(host: str, gpu: Dict[str, Any], names: Dict[str, str]) -> Optional[Finding]:
    reasons = [r for r in _list(gpu.get('clock_reasons')) if r in THROTTLE_FAULTS]
    if not reasons:
        return None
    severity = 'warning' if reasons == ['sw_thermal_slowdown'] else None
    clock, most = gpu.get('sm_clock_mhz'), gpu.get('sm_clock_max_mhz')
    slight = (isinstance(clock, (int, float)) and isinstance(most, (int, float)) and not isinstance(clock, bool)
              and most > 0 and clock >= CLOCK_HELD_RATIO * most)
    if slight:
        severity = 'info'
    return finding(F.GPU_CLOCKS_THROTTLED, host, gpu.get('bdf') or 'gpu',
                   {'reasons': reasons, 'all_reasons': gpu.get('clock_reasons'), 'sm_clock_mhz': gpu.get('sm_clock_mhz'),
                    'sm_clock_max_mhz': gpu.get('sm_clock_max_mhz'), 'temperature_c': gpu.get('temperature_c'),
                    'power_w': gpu.get('power_w'), 'power_limit_w': gpu.get('power_limit_w')},
                   '%s runs its SM clock at %s of %s MHz, held down by %s (%s C, %s W)' % (
                       _label(gpu.get('bdf'), names), gpu.get('sm_clock_mhz'), gpu.get('sm_clock_max_mhz'), ', '.join(reasons),
                       gpu.get('temperature_c'), gpu.get('power_w')),
                   severity=severity,
                   # Only said: a place of its own that no test's path holds (it explains nothing).
                   at=[('gpu_clock', host, names.get(gpu.get('bdf') or '', gpu.get('bdf') or 'gpu'))] if slight else _at(host, gpu.get('bdf'), names))


def _peer_links(gpus: Sequence[Dict[str, Any]], fleet_gpus: Sequence[Dict[str, Any]]) -> Dict[Any, int]:
    """{model: the most active NVLinks a GPU of that model has} over the node and the fleet."""
    best: Dict[Any, int] = {}
    for gpu in list(gpus) + list(fleet_gpus):
        link = _mapping(gpu.get('nvlink'))
        if isinstance(link.get('active'), int):
            best[gpu.get('name')] = max(best.get(gpu.get('name'), 0), link['active'])
    return best


def _nvlink(host: str, gpu: Dict[str, Any], best: Dict[Any, int], names: Dict[str, str]) -> List[Finding]:
    link = _mapping(gpu.get('nvlink'))
    if not link:
        return []
    found = []
    peers = best.get(gpu.get('name'), 0)
    active: int = link['active'] if isinstance(link.get('active'), int) else 0
    if peers and active < peers:
        found.append(finding(F.GPU_NVLINK_DOWN, host, gpu.get('bdf') or 'gpu',
                             {'active': active, 'links': link.get('links'), 'inactive': link.get('inactive'),
                              'peers_active': peers, 'model': gpu.get('name')},
                             '%s has %d of %s NVLinks active (inactive: %s) where other %s GPUs have %d: its traffic to '
                             'the other GPUs shares fewer links' % (
                                 _label(gpu.get('bdf'), names), active, link.get('links'),
                                 ', '.join(str(n) for n in _list(link.get('inactive'))[:18]) or 'all', gpu.get('name'), peers),
                             at=_at(host, gpu.get('bdf'), names)))
    errors = dict((k, v) for k, v in _mapping(link.get('errors')).items() if isinstance(v, int) and v >= NVLINK_ERRORS_MIN)
    if errors:
        found.append(finding(F.GPU_NVLINK_ERRORS, host, gpu.get('bdf') or 'gpu', {'errors': errors},
                             'the NVLinks of %s counted %s since the driver loaded' % (
                                 _label(gpu.get('bdf'), names), ', '.join('%d %s' % (v, k) for k, v in sorted(errors.items()))),
                             at=_at(host, gpu.get('bdf'), names)))
    return found


def _remap(host: str, gpu: Dict[str, Any], names: Dict[str, str]) -> Optional[Finding]:
    failed = gpu.get('remapped_rows_failure') is True
    pending = [name for name in ('remapped_rows_pending', 'retired_pages_pending') if gpu.get(name) is True]
    if not (failed or pending):
        return None
    return finding(F.GPU_MEMORY_REMAP_PENDING, host, gpu.get('bdf') or 'gpu',
                   {'remapped_rows_failure': failed, 'pending': pending, 'ecc_uncorrected': gpu.get('ecc_uncorrected')},
                   '%s: %s' % (_label(gpu.get('bdf'), names),
                               'the row remapper failed (no spare row left)' if failed else
                               '%s: the memory with errors is still in use until the GPU is reset' % ' and '.join(pending)),
                   severity='error' if failed else None, at=_at(host, gpu.get('bdf'), names))


def _xid(host: str, events: Sequence[Any], names: Dict[str, str]) -> List[Finding]:
    found = []
    for event in events:
        if not isinstance(event, dict) or not isinstance(event.get('xid'), int):
            continue
        severity = event.get('severity') if event.get('severity') in ('info', 'warning', 'error') else 'warning'
        bdf = event.get('bdf')
        # An application's own error (the catalog's 13, 31, 43, 45, ...) says nothing of the GPU: on no path.
        at = [('services', host)] if severity == 'info' else _at(host, bdf, names)
        found.append(finding(F.GPU_XID, host, '%s/xid%d' % (bdf or 'gpu', event['xid']),
                             {'xid': event['xid'], 'kind': event.get('kind'), 'count': event.get('count'), 'text': event.get('text'),
                              'meaning': event.get('meaning')},
                             'XID %d on %s (%s, seen %s time(s)): %s - NVIDIA\'s XID catalog: %s' % (
                                 event['xid'], _label(bdf, names), event.get('kind'), event.get('count'),
                                 str(event.get('text') or '')[:200], event.get('meaning')),
                             severity=None if severity == 'error' else severity, at=at, xid=event['xid']))
    return found


def _not_read(host: str, node: Dict[str, Any]) -> Optional[Finding]:
    facts = _mapping(node.get('gpu'))
    missing = _mapping(facts.get('not_read'))
    has_gpus = bool(_list(facts.get('gpus')) or _names(node))
    if not missing or not has_gpus:
        return None
    return finding(F.GPU_STATE_NOT_READ, host, 'gpu_state', {'not_read': missing, 'tool': facts.get('tool')},
                   'not read on %s: %s' % (host, '; '.join('%s (%s)' % (part, why) for part, why in sorted(missing.items()))))


def _gate(fleet: Fleet, host: str) -> Optional[Dict[str, Any]]:
    """The idle gate of the node's own collective (role fabric_collective): {'processes', 'own_pids'} or None."""
    hosts = _mapping(_mapping(_mapping(fleet.collective).get('nodes')).get('hosts'))
    gate = _mapping(hosts.get(host)).get('gpu_gate')
    return gate if isinstance(gate, dict) else None


def gpu_findings(host: str, node: Dict[str, Any], fleet_gpus: Sequence[Dict[str, Any]], gate: Optional[Dict[str, Any]] = None) -> List[Finding]:
    """The findings of one node's GPU state."""
    facts = _mapping(node.get('gpu'))
    names = _names(node)
    gpus = [gpu for gpu in _list(facts.get('gpus')) if isinstance(gpu, dict)]
    found = _busy(host, node, gate, names)
    best = _peer_links(gpus, fleet_gpus)
    for gpu in gpus:
        found.extend(item for item in (_throttled(host, gpu, names), _remap(host, gpu, names)) if item)
        found.extend(_nvlink(host, gpu, best, names))
    found.extend(_xid(host, _list(facts.get('xid')), names))
    missing = _not_read(host, node)
    if missing:
        found.append(missing)
    return found


@rule(produces=(F.GPU_BUSY, F.GPU_CLOCKS_THROTTLED, F.GPU_NVLINK_DOWN, F.GPU_NVLINK_ERRORS, F.GPU_XID, F.GPU_MEMORY_REMAP_PENDING,
                F.GPU_STATE_NOT_READ), parts=('judged', 'collective'))
def gpu_state(fleet: Fleet, _findings: List[Finding]) -> List[Finding]:
    every = [gpu for node in fleet.judged.values() for gpu in _list(_mapping(_mapping(node).get('gpu')).get('gpus')) if isinstance(gpu, dict)]
    return [item for host in sorted(fleet.judged) for item in gpu_findings(host, fleet.judged[host], every, _gate(fleet, host))]
