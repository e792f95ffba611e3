# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The diagnosis engine: runs every rule (declared with _rule.rule) over the fleet, in an order
that follows from what each rule reads, then links causes (_linker.py).

A rule that reads a code runs after every rule that produces it, and is handed the findings so
far of the codes it reads, nothing else; no rule calls another. A cycle, or a finding of a code
its rule does not declare, is a bug and raises.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _rails  # what role each HCA plays
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._findings import LAYERS, Finding
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._rule import RULES, Fleet, Rule
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _linker
# The rule modules: importing one registers its rules (_rule.RULES).
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis.rules import _bench, _collective, _gpu, _node, _run, _window, _differential  # noqa: F401 pylint: disable=unused-import
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis.rules import _nccl_settings  # noqa: F401 pylint: disable=unused-import
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _fabric, _fleet, _pcie_rules, _roce_rules, _search_findings  # noqa: F401 pylint: disable=unused-import
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _inventory  # noqa: F401 pylint: disable=unused-import


def ordered(rules: Optional[List[Rule]] = None) -> List[Rule]:
    """The rules in an order where each runs after every rule producing a code it reads (ties by name)."""
    rules = sorted(RULES if rules is None else rules, key=lambda item: item.name)
    producers: Dict[str, List[str]] = {}
    for item in rules:
        for code in item.produces:
            producers.setdefault(code, []).append(item.name)
    needs = dict((item.name, set(name for code in item.reads for name in producers.get(code, ()) if name != item.name))
                 for item in rules)
    done: List[Rule] = []
    while len(done) < len(rules):
        ready = [item for item in rules if item not in done and needs[item.name] <= set(r.name for r in done)]
        if not ready:
            raise ValueError('the rules read each other\'s codes in a cycle: %s'
                             % ', '.join(item.name for item in rules if item not in done))
        done.append(ready[0])
    return done


def run_rules(fleet: Fleet, rules: Optional[List[Rule]] = None, late: bool = False,
              findings: Optional[List[Finding]] = None) -> List[Finding]:
    """The findings the rules make, each rule handed the findings so far of the codes it reads.
    ``late``: the late rules only (Rule.late), over ``findings`` (those of the first pass, linked);
    else the others."""
    so_far: List[Finding] = list(findings or [])
    made: List[Finding] = []
    for item in ordered(rules):
        if item.late != late:
            continue
        reads = set(item.reads)
        found = item.run(fleet, [f for f in so_far + made if f['code'] in reads])
        stray = sorted(set(f['code'] for f in found) - set(item.produces))
        if stray:
            raise ValueError('rule %s made findings of codes it does not declare: %s' % (item.name, ', '.join(stray)))
        made.extend(found)
    return made


def _sort(findings: List[Finding]) -> None:
    order = dict((layer, index) for index, layer in enumerate(LAYERS))
    findings.sort(key=lambda f: (order.get(f['layer'], 9), f['host'] or '', f['code'], f['subject'] or ''))


def diagnose(nodes: Dict[str, Any], bench: Optional[Dict[str, Any]] = None, collective: Optional[Dict[str, Any]] = None,
             unreachable: Any = None, stages: Optional[Dict[str, Any]] = None,
             failures: Optional[Dict[str, Any]] = None, baseline: Optional[Dict[str, Any]] = None) -> List[Finding]:
    """All findings, bottom-up, causes linked. ``nodes``: {host: {'ib': ..., 'gdr': ...}}
    (both None for a node whose facts tasks failed: ``failures`` says why); ``baseline``: an earlier
    report.json (gpu_fabric_baseline) as a mapping, {'error': why} where it could not be read."""
    # Only nodes with facts are judged by the rules; a node without is named by its failure.
    judged = dict((host, node) for host, node in nodes.items() if node.get('ib') is not None or node.get('gdr') is not None)
    # What each HCA is for (compute rail, storage, management): one decision per node, for every rule.
    roles = dict((host, _rails.node_roles(node)) for host, node in judged.items())
    fleet = Fleet(nodes, judged, roles, bench, collective, unreachable, stages, failures, baseline)
    findings = run_rules(fleet)
    _linker.complete_paths(findings, judged, bench, collective, roles)
    _sort(findings)
    _linker.link_causes(findings)
    # What no root on its path explains: once, on the device its tests share (or said to share none).
    unexplained = _linker.unexplained_findings(findings, bench)
    if unexplained:
        findings.extend(unexplained)
        _sort(findings)
        _linker.link_causes(findings)
    # What still no root explains, judged by the late rules (a slow node against its peers: rules/_differential.py).
    late = run_rules(fleet, late=True, findings=findings)
    if late:
        findings.extend(late)
        _sort(findings)
        _linker.link_causes(findings)
    return findings
