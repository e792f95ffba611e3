# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

from typing import Any, Callable

# Several filters live here: each is documented in its own plugins/filter/<name>.yml, which
# ansible-doc reads because this file has no DOCUMENTATION (as ansible-core's filter/core.py).
from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _collective
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _group_search
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _culprit_search
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _fleet_model, _tasks


def _model(name: str, hostvars: Any, hosts: Any, parts: tuple[str, ...]) -> dict[str, Any]:
    try:
        return _fleet_model.read(hostvars, hosts, parts)
    except ValueError as exc:
        raise AnsibleFilterError('%s: %s' % (name, exc))


def _ratios(healthy: Any, warn: Any) -> tuple[float, float]:
    return (_collective.HEALTHY_RATIO if healthy is None else float(healthy)), (_collective.WARN_RATIO if warn is None else float(warn))


def collective_verdict(result: Any, expected_gbs: Any, healthy: Any = None, warn: Any = None, metric: str = 'max') -> dict[str, Any]:
    healthy, warn = _ratios(healthy, warn)
    if metric not in ('max', 'avg'):
        raise AnsibleFilterError('collective_verdict: metric must be max or avg, not %r' % (metric,))
    if not 0 < float(warn) <= float(healthy) <= 1.5:
        raise AnsibleFilterError('collective_verdict: need 0 < warn <= healthy (got warn=%s, healthy=%s)' % (warn, healthy))
    return _collective.judge(result, float(expected_gbs) if expected_gbs else None, float(healthy), float(warn), metric)


def collective_local_verdict(hostvars: Any, hosts: Any, expected_gbs: Any = None, healthy: Any = None, warn: Any = None,
                             metric: str = 'max') -> dict[str, Any]:
    """Every node's own collective (launcher local), judged against its peers and the expectation."""
    healthy, warn = _ratios(healthy, warn)
    model = _model('collective_local_verdict', hostvars, hosts, ('collective',))
    results = dict((host, node['collective_local']) for host, node in model['nodes'].items())
    return _collective.judge_nodes(results, expected_gbs, float(healthy), float(warn), metric)


def collective_outcome(result: Any) -> dict[str, Any]:
    """A collective_bench task result with a verdict, even when the task failed before it ran."""
    return _collective.normalize(result)


def collective_skipped(hosts: Any, launcher: Any, vendors: Any, check_mode: Any = False, gpu_counts: Any = None) -> str:
    """Why role fabric_collective ran no collective ('' when it ran)."""
    for name, value in (('the nodes', hosts), ('the vendors', vendors), ('the GPU counts', gpu_counts or [])):
        if isinstance(value, (str, dict)) or not hasattr(value, '__iter__'):
            raise AnsibleFilterError('collective_skipped: %s must be a list' % name)
    return _tasks.collective_skipped(list(hosts), launcher, list(vendors), bool(check_mode), list(gpu_counts or []))


def collective_expected(hostvars: Any, hosts: Any, hcas: Any = None) -> dict[str, Any]:
    model = _model('collective_expected', hostvars, hosts, ('facts',))
    return _collective.expected_busbw(_fleet_model.facts_of(model, 'ib'), hcas or None)


def collective_fleet(hostvars: Any, hosts: Any, launcher: Any = None, expected_gbs: Any = None, ranks_per_node: Any = None) -> dict[str, Any]:
    """What role fabric_collective needs to know of its nodes, in one read: the collective's result (from
    the first node that holds one), the GPU count and address of each node, the GPU vendors, the ranks
    per node and the expectation (plugin_utils/fleet/_tasks.py collective_fleet)."""
    model = _model('collective_fleet', hostvars, hosts, ('facts', 'collective'))
    return _tasks.collective_fleet(model, launcher, expected_gbs, ranks_per_node)


def culprit_search_start(nodes, reference=None, prior=None, pairs=None, strategy=_culprit_search.DEFAULT_STRATEGY):
    if not isinstance(nodes, (list, tuple)) or not all(isinstance(n, str) for n in nodes):
        raise AnsibleFilterError('culprit_search_start: the nodes must be a list of inventory names')
    if pairs is not None and not isinstance(pairs, (dict, list, tuple)):
        raise AnsibleFilterError('culprit_search_start: pairs must be a fabric_bench report or a list of [node, node]')
    if strategy not in _culprit_search.STRATEGIES:
        raise AnsibleFilterError('culprit_search_start: strategy must be one of %s' % ', '.join(_culprit_search.STRATEGIES))
    return _culprit_search.start(list(nodes), reference or None, list(prior or []), _group_search.bad_pairs(pairs), strategy)


def culprit_search_next(state):
    return _culprit_search.next_round(state)


def culprit_search_update(state, runs, verdicts, seconds=None):
    if len(runs or []) != len(verdicts or []):
        raise AnsibleFilterError('culprit_search_update: one verdict per run (%d runs, %d verdicts)' % (len(runs or []), len(verdicts or [])))
    return _culprit_search.update(state, runs, verdicts, seconds)


def culprit_search_verdicts(started, finished):
    """The verdict of each run of a round, in the order of the runs: started with async (poll 0),
    waited for with async_status. A run that did not start or did not finish is failed, never cleared."""
    if not isinstance(started, (list, tuple)) or not isinstance(finished, (list, tuple)):
        raise AnsibleFilterError('culprit_search_verdicts: the registered results of the loops (their .results)')
    done = dict((str(r.get('ansible_job_id')), r) for r in finished if isinstance(r, dict) and r.get('ansible_job_id'))
    verdicts = []
    for launch in started:
        launch = launch if isinstance(launch, dict) else {}
        job = launch.get('ansible_job_id')
        result = done.get(str(job), {'failed': True, 'msg': 'the run (job %s) did not report back' % job}) if job else launch
        verdicts.append(_culprit_search.verdict_of(dict(result, ansible_job_id=job) if job else result))
    return verdicts


class FilterModule(object):

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            'collective_verdict': collective_verdict,
            'collective_expected': collective_expected,
            'collective_fleet': collective_fleet,
            'collective_local_verdict': collective_local_verdict,
            'collective_outcome': collective_outcome,
            'collective_skipped': collective_skipped,
            'culprit_search_start': culprit_search_start,
            'culprit_search_next': culprit_search_next,
            'culprit_search_update': culprit_search_update,
            'culprit_search_verdicts': culprit_search_verdicts,
        }
