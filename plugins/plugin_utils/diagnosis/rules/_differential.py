# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The differential diagnosis: a slow node, GPU or HCA that no root on its path explains, compared
with its healthy peers - or, a lone node, with its own earlier healthy report given as
gpu_fabric_baseline - on every fact the run recorded that can shape its speed (_profile.py).

Two rules: ``lone_node_baseline`` judges a lone node's own collective run against its run in the
baseline report (COLLECTIVE_NODE_SLOW, basis baseline), refusing a baseline that cannot be used
(BASELINE_NOT_USED); ``differential`` is a late rule (_rule.Rule.late): it runs after the causes are
linked, so it sees which slow symptoms no root explains, and names what differs on each
(NODE_DIFFERS_FROM_PEERS, ranked by cost). Where nothing recorded differs, it says so in the
symptom's cause with what was not read, and makes no root: a cause that was not compared is never stated.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings as F
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _profile
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._findings import Finding, finding
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._rule import Fleet, rule
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._collective import HEALTHY_RATIO

# A node's collective symptoms (its own run, a culprit of the search) are compared on the whole node and their root
# sits on ('gpus', host), where every collective through the node went (rules/_collective.py, _linker.collective_path):
# it explains those, never a device of the pairwise benchmark, whose own comparison is on that device's facts.
# A node's own collective, and a culprit of the search: the sources each is compared on (a culprit ran in
# the fleet's run, whose NCCL settings are one for all nodes: its own run's are not there to compare).
_LOCAL_SOURCES = tuple(_profile.SOURCES)
_FACT_SOURCES = ('gpu', 'conf', 'ib', 'host')
# A device of the pairwise benchmark (perftest, no NCCL): what can shape that device's speed.
_DEVICE_SOURCES = {'hca': ('ib', 'host'), 'gpu': ('gpu', 'host'), 'gpu_nic': ('gpu', 'ib', 'host'), 'node': ('gpu', 'ib', 'host')}
# How many differences the cause names (evidence.differences holds them all, up to DIFFERENCES_MAX).
NAMED = 4
DIFFERENCES_MAX = 64


def _local(fleet: Fleet) -> Dict[str, Any]:
    local = (fleet.collective or {}).get('nodes')
    return local if isinstance(local, dict) else {}


def _runs(fleet: Fleet) -> Dict[str, Any]:
    hosts = _local(fleet).get('hosts')
    return dict((h, e) for h, e in hosts.items() if isinstance(e, dict)) if isinstance(hosts, dict) else {}


# ---------------------------------------------------------------------------- the baseline of a lone node

def _map(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _generated(fleet: Fleet) -> Optional[str]:
    """When the baseline report was made, as it says (another run's file: a short text, or None)."""
    value = (fleet.baseline or {}).get('generated_at')
    return str(value)[:40] if value is not None else None


def _lone_slow(host: str, entry: Dict[str, Any], run: Dict[str, Any], healthy: float, generated: Any) -> Optional[Finding]:
    mine, theirs = entry.get('busbw_gbs'), run['busbw_gbs']
    if not isinstance(mine, (int, float)) or mine >= healthy * theirs:
        return None
    ratio = round(mine / theirs, 3)
    return finding(F.COLLECTIVE_NODE_SLOW, host, entry.get('benchmark') or 'collective',
                   {'busbw_gbs': mine, 'baseline_gbs': theirs, 'baseline_ratio': ratio, 'basis': 'baseline',
                    'baseline_generated_at': generated, 'intra': entry.get('intra')},
                   'busbw %.2f GB/s over the GPUs of %s is %.0f %% of its own run in the baseline report (%.2f GB/s, %s; '
                   'below %.0f %% is slow)' % (mine, host, 100 * ratio, theirs, generated or 'undated', 100 * healthy),
                   path=[('node', host), ('gpus', host)])


@rule(produces=(F.COLLECTIVE_NODE_SLOW, F.BASELINE_NOT_USED), parts=('collective', 'baseline'))
def lone_node_baseline(fleet: Fleet, _findings: List[Finding]) -> List[Finding]:
    """A node whose own collective ran without peers to compare with, against its run in the baseline."""
    if fleet.baseline is None:
        return []
    local = _local(fleet)
    healthy = float(local['healthy_ratio']) if isinstance(local.get('healthy_ratio'), float) else HEALTHY_RATIO
    lone = [host for host, entry in sorted(_runs(fleet).items())
            if entry.get('peer_ratio') is None and entry.get('status') == 'ok' and isinstance(entry.get('busbw_gbs'), (int, float))]
    found = []
    if fleet.baseline.get('error'):
        return [finding(F.BASELINE_NOT_USED, None, 'baseline', {'why': str(fleet.baseline['error'])[:300]},
                        'the baseline report was not used: %s' % str(fleet.baseline['error'])[:300])]
    for host in lone:
        run, why = _profile.baseline_run(fleet.baseline, host)
        if run is None:
            found.append(finding(F.BASELINE_NOT_USED, host, 'baseline', {'why': why},
                                 'the baseline report was not used for %s: %s' % (host, why)))
            continue
        item = _lone_slow(host, _runs(fleet)[host], run, healthy, _generated(fleet))
        if item:
            found.append(item)
    return found


# ---------------------------------------------------------------------------- the differential

def _profiles(fleet: Fleet) -> Dict[str, _profile.Profile]:
    runs = _runs(fleet)
    return dict((host, _profile.profile(node, runs.get(host))) for host, node in fleet.judged.items())


def _baseline_profile(fleet: Fleet, host: str) -> Optional[_profile.Profile]:
    baseline = fleet.baseline or {}
    entry = _map(_map(baseline.get('hosts')).get(host))
    return _profile.from_report(entry.get('profile')) if _profile.baseline_run(baseline, host)[0] is not None else None


def _healthy_local(fleet: Fleet, host: str) -> List[str]:
    local = _local(fleet)
    bad = set(local.get('slow') or []) | set(local.get('failed') or [])
    return sorted(h for h, e in _runs(fleet).items() if h != host and h not in bad and h in fleet.judged
                  and (e.get('verdict') or {}).get('status') in _profile.HEALTHY_STATUS)


def _cleared(fleet: Fleet, host: str) -> List[str]:
    search = (fleet.collective or {}).get('search')
    search = search if isinstance(search, dict) else {}
    named = set(search.get('culprits') or []) | set(search.get('unresolved') or []) | set(
        n for p in search.get('pairs') or [] if isinstance(p, dict) for n in p.get('nodes') or [])
    cleared = [h for h in search.get('cleared') or [] if isinstance(h, str)]
    return sorted(h for h in (cleared or fleet.judged) if h != host and h not in named and h in fleet.judged)


def _words(item: Dict[str, Any]) -> str:
    return '%s: %s here, %s on %s' % (item['label'], item['mine'], item['theirs'], item['against'])


def _merged(diffs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The differences as said: one fact read from several sources (NCCL_PROTO in the node's settings and in
    NCCL's log of the run: 'NCCL_PROTO (the node's NCCL settings)') with the same values is one, its sources joined."""
    said: List[Dict[str, Any]] = []
    index: Dict[Tuple[str, str, str], Dict[str, Any]] = {}
    for item in diffs:
        name, _sep, source = str(item['label']).partition(' (')
        key = (name, str(item['mine']), str(item['theirs']))
        if key in index and source:
            index[key]['sources'].append(source.rstrip(')'))
            continue
        entry = dict(item, name=name, sources=[source.rstrip(')')] if source else [])
        index[key] = entry
        said.append(entry)
    return [dict(e, label='%s (%s)' % (e['name'], '; '.join(e['sources'])) if e['sources'] else e['name']) for e in said]


def _not_compared(missing: Dict[str, str]) -> str:
    return '; '.join('%s (%s)' % (_profile.SOURCES.get(source, source), why) for source, why in sorted(missing.items()))


def _unread(missing: Dict[str, str]) -> str:
    """What the cause says of the sources not compared: each with why, or that every source was."""
    return '; not compared: %s' % _not_compared(missing) if missing else '; every source it recorded was compared'


def _compare(fleet: Fleet, profiles: Dict[str, _profile.Profile], host: str, peers: List[str], sources: Sequence[str],  # pylint: disable=too-many-arguments
             devices: Optional[Tuple[str, ...]]) -> Tuple[List[Dict[str, Any]], Dict[str, str], str, Any]:
    """(differences, not compared, what it was compared with in words, basis)."""
    basis: Dict[str, Any]
    if peers:
        refs = [profiles[p] for p in peers]
        against, basis = 'its peers' if len(peers) > 1 else peers[0], {'peers': peers}
    else:
        base = _baseline_profile(fleet, host)
        if base is None:
            return [], {}, '', None
        refs, against = [base], 'its baseline'
        basis = {'baseline': _generated(fleet)}
    found: List[Dict[str, Any]] = []
    missing: Dict[str, str] = {}
    for device in devices or (None,):
        diffs, missing_now = _profile.differences(profiles[host], refs, sources, device)
        missing.update(missing_now)
        found.extend(d for d in diffs if d['key'] not in [f['key'] for f in found])
    found.sort(key=lambda item: _profile.COSTS.index(item['cost']))
    return [dict(d, against=against) for d in found[:DIFFERENCES_MAX]], missing, against, basis


def _root(host: str, subject: str, at: List[Tuple[Any, ...]], diffs: List[Dict[str, Any]], missing: Dict[str, str],  # pylint: disable=too-many-arguments
          basis: Any) -> Finding:
    worst, said = diffs[0], _merged(diffs)
    return finding(F.NODE_DIFFERS_FROM_PEERS, host, subject,
                   {'differences': [dict((k, d[k]) for k in ('key', 'label', 'cost', 'mine', 'theirs')) for d in diffs],
                    'compared_with': basis, 'not_compared': missing},
                   '%s differs from %s in %d recorded fact(s) that can shape its speed, the costliest first: %s%s%s' % (
                       host if subject in ('node', 'collective') else '%s of %s' % (subject, host), worst['against'], len(said),
                       '; '.join(_words(d) for d in said[:NAMED]), ' (and %d more in the evidence)' % (len(said) - NAMED) if len(said) > NAMED else '',
                       _unread(missing)),
                   severity='warning' if all(d['cost'] == 'low' for d in diffs) else None, first=worst['label'], at=at)


def _scope(symptom: Finding, fleet: Fleet, host: str,
           device_hosts: List[str]) -> Tuple[str, List[Tuple[Any, ...]], Sequence[str], Optional[Tuple[str, ...]], List[str]]:
    """(subject, places, sources, devices, peers) of the comparison a symptom asks for; ``device_hosts``: the
    hosts of a device of the pairwise benchmark that no root explains (no peer of another)."""
    if symptom['code'] == F.BENCH_DEVICE_UNEXPLAINED:
        place = tuple((symptom.get('at') or [['node', host]])[0])
        devices = tuple(str(p) for p in place[2:]) or None
        peers = sorted(h for h in fleet.judged if h != host and h not in device_hosts)
        return str(symptom.get('subject') or 'node'), [place], _DEVICE_SOURCES.get(str(place[0]), _FACT_SOURCES), devices, peers
    if symptom['code'] == F.COLLECTIVE_CULPRIT:
        return 'collective', [('gpus', host)], _FACT_SOURCES, None, _cleared(fleet, host)
    return 'collective', [('gpus', host)], _LOCAL_SOURCES, None, _healthy_local(fleet, host)


_OPEN = (F.COLLECTIVE_NODE_SLOW, F.COLLECTIVE_BUSBW_LOW, F.COLLECTIVE_CULPRIT, F.BENCH_DEVICE_UNEXPLAINED)


@rule(produces=(F.NODE_DIFFERS_FROM_PEERS,), reads=_OPEN, parts=('judged', 'collective', 'baseline'), late=True)
def differential(fleet: Fleet, findings: List[Finding]) -> List[Finding]:
    """NODE_DIFFERS_FROM_PEERS for each slow symptom no root explains; where nothing recorded differs, the
    symptom's cause says so (and what was not read)."""
    # Errors only: a node's run between the warn and the healthy share of its NVLink is no slow node to explain.
    open_ = [f for f in findings if f['explained_by'] is None and f['severity'] == 'error' and f.get('host')
             and f['host'] in fleet.judged and F.explains(F.NODE_DIFFERS_FROM_PEERS, f)]
    if not open_:
        return []
    device_hosts = sorted(set(f['host'] for f in open_ if f['code'] == F.BENCH_DEVICE_UNEXPLAINED))
    profiles = _profiles(fleet)
    made: Dict[str, Finding] = {}
    order = dict((code, index) for index, code in enumerate(_OPEN))
    for symptom in sorted(open_, key=lambda f: (order[f['code']], f['host'], str(f.get('subject')))):
        host = symptom['host']
        subject, at, sources, devices, peers = _scope(symptom, fleet, host, device_hosts)
        # One comparison of the node for its collective symptoms, one per device of the pairwise benchmark.
        key = '%s/%s' % (host, subject)
        if key in made:
            continue
        diffs, missing, against, basis = _compare(fleet, profiles, host, peers, sources, devices)
        if diffs:
            made[key] = _root(host, subject, at, diffs, missing, basis)
        elif not against:
            symptom['cause'] = '%s; no healthy peer or usable baseline to compare it with: nothing recorded was compared' % symptom['cause']
        else:
            symptom['cause'] = '%s; nothing recorded differs from %s%s' % (symptom['cause'], against, _unread(missing))
    return list(made.values())
