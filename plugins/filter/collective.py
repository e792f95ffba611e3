# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

from typing import Any, Callable

# Several filters live here: each is documented in its own plugins/filter/<name>.yml, which
# ansible-doc reads because this file has no DOCUMENTATION (as ansible-core's filter/core.py).
from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _collective, _gpu_state
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _fleet_model, _tasks


def _model(name: str, hostvars: Any, hosts: Any, parts: tuple[str, ...]) -> dict[str, Any]:
    try:
        return _fleet_model.read(hostvars, hosts, parts)
    except ValueError as exc:
        raise AnsibleFilterError('%s: %s' % (name, exc))


def _ratios(name: str, healthy: Any, warn: Any) -> tuple[float, float]:
    """The collective's thresholds, checked by their one owner (module_utils/_collective.py thresholds)."""
    try:
        return _collective.thresholds(healthy, warn)
    except ValueError as exc:
        raise AnsibleFilterError('%s: %s' % (name, exc))


def collective_thresholds(healthy: Any = None, warn: Any = None) -> dict[str, float]:
    """{healthy_ratio, warn_ratio}: role fabric_collective's thresholds, checked once before any run and
    handed to every reader (the runs, the culprit search's runs, the local verdict)."""
    healthy, warn = _ratios('collective_thresholds', healthy, warn)
    return {'healthy_ratio': healthy, 'warn_ratio': warn}


def collective_verdict(result: Any, expected_gbs: Any, healthy: Any = None, warn: Any = None, metric: str = 'max') -> dict[str, Any]:
    healthy, warn = _ratios('collective_verdict', healthy, warn)
    if metric not in ('max', 'avg'):
        raise AnsibleFilterError('collective_verdict: metric must be max or avg, not %r' % (metric,))
    return _collective.judge(result, float(expected_gbs) if expected_gbs else None, float(healthy), float(warn), metric)


def _run_buses(run: Any) -> list[str]:
    """The PCI addresses of the GPUs a run used, as nccl-tests names them ('Using devices': '[0000:00:09]',
    tests/fixtures/real/h200x2/all_reduce_perf_g2.txt), lowercased; empty where it named none."""
    ranks = run.get('ranks') if isinstance(run, dict) else None
    return sorted(set(str(rank.get('bus_id')).lower() for rank in ranks or [] if isinstance(rank, dict) and rank.get('bus_id')))


def _on(process: dict[str, Any], buses: list[str]) -> bool:
    """Whether a process sits on one of the GPUs of ``buses`` (its bdf '0000:00:09.0' begins with '0000:00:09')."""
    bdf = str(process.get('bdf') or '').lower()
    return any(bdf == bus or bdf.startswith(bus + '.') for bus in buses)


def _gate(gate: Any, run: Any = None) -> dict[str, Any] | None:
    """A node's idle gate before its own run: the foreign compute processes on the GPUs the run used
    (module_utils/_gpu_state.py foreign_processes: monitoring agents left out; a node whose run named no GPU:
    every GPU nvidia-smi showed), None where it read nothing. The GPUs the run did not use are not its own
    (CUDA_VISIBLE_DEVICES in fabric_collective_env: a process there did not share its GPUs)."""
    state = gate.get('gpu_fabric_gpu') if isinstance(gate, dict) else None
    if not isinstance(state, dict):
        return None
    processes = [p for p in state.get('processes') or [] if isinstance(p, dict)]
    buses = _run_buses(run)
    if buses:
        processes = [p for p in processes if _on(p, buses)]
    agents = [str(name) for name in state.get('monitoring_agents') or []]
    return {'processes': _gpu_state.foreign_processes(processes, (), agents)[:20], 'not_read': state.get('not_read') or {},
            'gpus': buses}


def collective_local_verdict(hostvars: Any, hosts: Any, expected_gbs: Any = None, healthy: Any = None, warn: Any = None,
                             metric: str = 'max') -> dict[str, Any]:
    """Every node's own collective (launcher local), judged against its peers and the expectation."""
    healthy, warn = _ratios('collective_local_verdict', healthy, warn)
    model = _model('collective_local_verdict', hostvars, hosts, ('collective',))
    results = dict((host, node['collective_local']) for host, node in model['nodes'].items())
    verdict = _collective.judge_nodes(results, expected_gbs, float(healthy), float(warn), metric)
    # Each run's record says which other processes held its GPUs (rules/_collective.py and rules/_gpu.py read it).
    for host, node in model['nodes'].items():
        gate = _gate(node.get('collective_gate'), node.get('collective_local'))
        if gate is not None and host in verdict['hosts']:
            verdict['hosts'][host]['gpu_gate'] = gate
    return verdict


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


class FilterModule(object):

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            'collective_verdict': collective_verdict,
            'collective_thresholds': collective_thresholds,
            'collective_expected': collective_expected,
            'collective_fleet': collective_fleet,
            'collective_local_verdict': collective_local_verdict,
            'collective_outcome': collective_outcome,
            'collective_skipped': collective_skipped,
        }
