# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Findings of the culprit search (plugins/plugin_utils/bench/_group_search.py, role fabric_collective):
the nodes it named, the pairs of nodes bad only together, the nodes it could neither clear nor name."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings as F
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._findings import Finding, finding
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._rule import Fleet, rule


def _culprit(host: str, runs: List[Dict[str, Any]], basis: Dict[str, Any]) -> Finding:
    if basis.get(host) == 'facts':
        # Named without a run of its own: the search does not re-prove what the facts show.
        trial: Dict[str, Any] = next((r for r in runs if r.get('step') == 'trial'), {})
        return finding(F.COLLECTIVE_CULPRIT, host, 'node', {'basis': 'facts', 'run': trial},
                       'a lower-layer error on %s (its facts); the fleet without the nodes the facts blame ran %s'
                       % (host, trial.get('status') or 'not at all (too few nodes left)'))
    run: Dict[str, Any] = next((r for r in reversed(runs) if r.get('group') == [host] and r.get('status') not in (None, 'ok')), {})
    return finding(F.COLLECTIVE_CULPRIT, host, 'node', {'basis': 'runs', 'run': run},
                   'runs that include %s are %s; the same runs without it are healthy'
                   % (host, run.get('status', 'not healthy')))


def _pair(pair: Any, runs: List[Dict[str, Any]]) -> Optional[Finding]:
    """COLLECTIVE_PAIR_SLOW for a pair of nodes bad only together, or None where it does not name two."""
    nodes = sorted(pair.get('nodes') or []) if isinstance(pair, dict) else []
    if len(nodes) != 2:
        return None
    together: Dict[str, Any] = next((r for r in reversed(runs) if set(nodes) <= set(r.get('hosts') or []) and r.get('status') not in (None, 'ok')), {})
    how = 'the pairwise benchmark found this pair bad' if pair.get('basis') == 'pairwise benchmark' else \
        'runs with both are %s' % together.get('status', 'not healthy')
    item = finding(F.COLLECTIVE_PAIR_SLOW, nodes[0], '%s-%s' % tuple(nodes), {'basis': pair.get('basis'), 'run': together},
                   '%s and %s: %s, and each runs healthy without the other' % (nodes[0], nodes[1], how), peer=nodes[1],
                   # A root of the fleet's collective, which ran through both nodes.
                   at=[('node', nodes[0]), ('node', nodes[1])])
    item['hosts'] = nodes
    return item


def search_findings(search: Any) -> List[Finding]:
    """COLLECTIVE_CULPRIT per named node, COLLECTIVE_PAIR_SLOW per pair, COLLECTIVE_SUSPECT per
    unresolved node, from fabric_collective_result.search (None: nothing)."""
    search = search if isinstance(search, dict) else {}
    runs = [r for r in search.get('runs') or [] if isinstance(r, dict)]
    basis = search.get('basis') if isinstance(search.get('basis'), dict) else {}
    found = [_culprit(host, runs, basis) for host in search.get('culprits') or []]
    found.extend(item for item in (_pair(pair, runs) for pair in search.get('pairs') or []) if item)
    for host in search.get('unresolved') or []:
        found.append(finding(F.COLLECTIVE_SUSPECT, host, 'node', {'notes': search.get('notes') or []},
                             'no healthy group to compare with: %s is among the suspects' % host))
    return found


@rule(produces=(F.COLLECTIVE_CULPRIT, F.COLLECTIVE_PAIR_SLOW, F.COLLECTIVE_SUSPECT), parts=('collective',))
def culprit_search(fleet: Fleet, _findings: List[Finding]) -> List[Finding]:
    return search_findings((fleet.collective or {}).get('search')) if fleet.collective else []
