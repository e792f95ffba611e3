# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

# Several filters live here: each is documented in its own plugins/filter/<name>.yml, which
# ansible-doc reads because this file has no DOCUMENTATION (as ansible-core's filter/core.py).
from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _rails
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _schedule
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _fleet_model


def bench_node_plan(ib, gdr, hcas=None, nccl_ib_hca=None):
    # NCCL_IB_HCA as a string, or the node's settings in the order they win ([fabric_collective_env,
    # nccl_conf_overrides]), read as filter/report.py reads them for the diagnosis.
    if isinstance(nccl_ib_hca, (list, tuple)):
        nccl_ib_hca = _rails.settings_ib_hca(*nccl_ib_hca)
    elif nccl_ib_hca is not None and not isinstance(nccl_ib_hca, str):
        raise AnsibleFilterError('bench_node_plan: nccl_ib_hca must be a string or a list of settings dicts, not %s'
                                 % type(nccl_ib_hca).__name__)
    return _bench.node_plan(ib, gdr, hcas, nccl_ib_hca)


def bench_address(ib, cidr, ipv4_addresses=None, fallback=None):
    """The node's out-of-band address: the first in ``cidr``, or ``fallback`` without a CIDR."""
    candidates = _bench.address_candidates(ib, ipv4_addresses, fallback)
    if not cidr:
        return fallback
    try:
        address = _bench.pick_address(candidates, cidr)
    except ValueError as exc:
        raise AnsibleFilterError('bench_address: %s' % exc)
    if address is None:
        raise AnsibleFilterError('bench_address: no address of this node is in %s (candidates: %s)'
                                 % (cidr, ', '.join(candidates) or 'none'))
    return address


def bench_round_records(me, tests, client_results, server_results, before, after, round_number, memory):
    return _bench.round_records(me, tests, client_results, server_results, before, after, round_number, memory)


def bench_sequence(me, rounds, plans, memories, base_port):
    return _bench.sequence_steps(me, rounds or [], plans or {}, memories or [], base_port)


def bench_sequence_records(me, steps, result):
    return _bench.sequence_records(me, steps or [], result or {})


def _model(name, hostvars, hosts):
    try:
        return _fleet_model.read(hostvars, hosts, ('bench',))
    except ValueError as exc:
        raise AnsibleFilterError('%s: %s' % (name, exc))


def bench_fleet_plan(hostvars, hosts, test='ib_write_bw', mode='full', k=1, seed=0, thresholds=None):
    """The fleet plan (plugin_utils/bench/_bench.py fleet_plan) with what the rounds need of it, from one
    read of the nodes: ``plans`` and ``rails`` (node -> its plan, its HCAs) of the nodes to test and
    ``summary`` (pair_schedule_summary of the rounds; no round when nothing runs). Role fabric_bench
    keeps it as one fact: a task's vars entry is templated again at every reference.
    ``thresholds`` ({bw_ratio, gpu_ratio, lat_max_us}, None for the default) are checked here and kept
    in the plan, the values every reader of the pairs judges them with (_bench.py judged_with)."""
    if thresholds is not None and not isinstance(thresholds, dict):
        raise AnsibleFilterError('bench_fleet_plan: thresholds must be a mapping of %s' % ', '.join(_bench.THRESHOLDS))
    try:
        limits = _bench.thresholds(dict((name, _bench.threshold(name, (thresholds or {}).get(name))) for name in _bench.THRESHOLDS))
    except ValueError as error:
        raise AnsibleFilterError('bench_fleet_plan: %s' % error)
    model = _model('bench_fleet_plan', hostvars, hosts)
    fleet = _bench.fleet_plan(dict((host, {'plan': node['bench']['plan'], 'tool': node['bench']['tool']})
                                   for host, node in model['nodes'].items()), test)
    plans = dict((host, model['nodes'][host]['bench']['plan']) for host in fleet['nodes'])
    rails = dict((host, plan.get('hcas')) for host, plan in plans.items())
    summary = {'rounds': 0, 'tests_per_round': [0]}
    if fleet['skipped'] is None:
        try:
            summary = _schedule.summary(fleet['nodes'], rails, mode=mode, k=int(k), seed=seed)
        except (_schedule.ScheduleError, TypeError, ValueError) as error:
            raise AnsibleFilterError('bench_fleet_plan: %s' % error)
    return dict(fleet, plans=plans, rails=rails, summary=summary, thresholds=limits)


def bench_threshold_errors(given):
    """Why each of ``given`` ({variable: value}) is not a pair threshold, [] when all are: the check
    action fabric_bench_judge makes (plugin_utils/bench/_bench.py threshold), made before any pair runs."""
    if not isinstance(given, dict):
        raise AnsibleFilterError('bench_threshold_errors: expected a mapping of variable names to values')
    return _bench.threshold_errors(given)


def bench_report(hostvars, hosts, options=None):
    model = _model('bench_report', hostvars, hosts)
    return _bench.judge(_fleet_model.bench_nodes(model), model['bench_fleet'], options or {})


def bench_plan_line(fleet, summary, test, mode, memories, check_mode=False):
    """The line that says what the pairwise benchmark will run, or why it will not."""
    if not isinstance(fleet, dict) or not isinstance(summary, dict):
        raise AnsibleFilterError('bench_plan_line: expected the fleet plan (bench_fleet_plan) and the schedule summary')
    return _bench.plan_line(fleet, summary, test, mode, list(memories or []), bool(check_mode))


class FilterModule(object):

    def filters(self):
        return {
            'bench_report': bench_report,
            'bench_plan_line': bench_plan_line,
            'bench_threshold_errors': bench_threshold_errors,
            'bench_fleet_plan': bench_fleet_plan,
            'bench_node_plan': bench_node_plan,
            'bench_address': bench_address,
            'bench_round_records': bench_round_records,
            'bench_sequence': bench_sequence,
            'bench_sequence_records': bench_sequence_records,
        }
