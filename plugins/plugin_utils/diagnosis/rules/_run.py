# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Rules over the run itself: nodes lost mid-run, tasks that failed and were rescued, nodes
that did not answer, a run that validated nothing."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _findings as F
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._findings import Finding, finding
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._rule import Fleet, rule


def lost_findings(stages: Optional[Dict[str, Any]]) -> List[Finding]:
    """Nodes that answered at the start and dropped out of a later stage (unreachable, or a task
    failed on them): what that stage would have checked on them is missing, and says why.
    ``stages``: {host: [stages it completed]}, from gpu_fabric_stages."""
    found: List[Finding] = []
    ran: List[Any] = []
    stages = stages or {}
    for done in stages.values():
        ran.extend(stage for stage in done or [] if stage not in ran)
    for host in sorted(stages):
        missing = [stage for stage in ran if stage not in (stages[host] or [])]
        if missing and stages[host]:
            found.append(finding(F.HOST_LOST, host, 'node', {'completed': stages[host], 'missing': missing},
                                 '%s completed %s but not %s: it stopped answering or a task failed on it mid-run, so '
                                 'what %s checks on it is missing (its pairs show node_lost or peer_lost)' % (
                                     host, ', '.join(stages[host]), ', '.join(missing), ', '.join(missing))))
    return found


def failure_findings(failures: Optional[Dict[str, Any]]) -> List[Finding]:
    """Tasks that failed on a node and were rescued: ``failures`` {host: [{stage, task, msg}]}."""
    found: List[Finding] = []
    failures = failures or {}
    for host in sorted(failures):
        for index, failure in enumerate(failures[host] or []):
            failure = failure if isinstance(failure, dict) else {'msg': str(failure)}
            found.append(finding(F.HOST_TASK_FAILED, host,
                                 '%s%s' % (failure.get('stage') or 'run', '#%d' % index if index else ''),
                                 {'stage': failure.get('stage'), 'task': failure.get('task'), 'msg': failure.get('msg')},
                                 'task "%s" failed on %s during %s: %s' % (
                                     failure.get('task') or '?', host, failure.get('stage') or 'the run', failure.get('msg'))))
    return found


@rule(produces=(F.HOST_TASK_FAILED,), parts=('failures',))
def failed_tasks(fleet: Fleet, _findings: List[Finding]) -> List[Finding]:
    return failure_findings(fleet.failures)


@rule(produces=(F.HOST_LOST,), parts=('stages', 'failures'))
def lost_nodes(fleet: Fleet, _findings: List[Finding]) -> List[Finding]:
    """A node whose benchmark task failed is named by that failure (HOST_TASK_FAILED), not a second time as lost."""
    failed_stages = dict((host, set((f or {}).get('stage') for f in items if isinstance(f, dict)))
                         for host, items in (fleet.failures or {}).items())
    return [f for f in lost_findings(fleet.stages) if not set(f['evidence']['missing']) & failed_stages.get(f['host'], set())]


@rule(produces=(F.RUN_NOTHING_VALIDATED,), parts=('nodes', 'judged', 'unreachable'))
def nothing_validated(fleet: Fleet, _findings: List[Finding]) -> List[Finding]:
    """Fail closed: a run that validated nothing is not a pass."""
    if fleet.judged:
        return []
    nodes, unreachable = fleet.nodes, fleet.unreachable
    return [finding(F.RUN_NOTHING_VALIDATED, None, 'run',
                    {'hosts': sorted(set(nodes) | set(unreachable or []))},
                    'no node returned facts, so nothing was validated: %s' % (
                        'the host pattern (gpu_fabric_hosts, --limit) matched no inventory host'
                        if not nodes and not unreachable else
                        'every node was unreachable or failed (%s)' % ', '.join(sorted(set(nodes) | set(unreachable or []))[:20])))]


@rule(produces=(F.HOST_UNREACHABLE,), parts=('unreachable',))
def unreachable_hosts(fleet: Fleet, _findings: List[Finding]) -> List[Finding]:
    """``unreachable``: the hosts, or {host: why} where the run kept the connection's error (validate.yml's check)."""
    found: List[Finding] = []
    for host in sorted(fleet.unreachable or []):
        why = fleet.unreachable.get(host) if isinstance(fleet.unreachable, dict) else None
        found.append(finding(F.HOST_UNREACHABLE, host, 'node', {'msg': why} if why else {},
                             'no facts came back from %s: it did not answer (%s)' % (host, why) if why else
                             'no facts came back from %s (unreachable, or its facts tasks failed)' % host, at=[('node', host)]))
    return found
