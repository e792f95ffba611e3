# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

# Several filters live here: each is documented in its own plugins/filter/<name>.yml, which
# ansible-doc reads because this file has no DOCUMENTATION (as ansible-core's filter/core.py).
from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _rails
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils import _diagnose, _html, _nccl_env, _report


def _node_ib_hca(hv):
    """NCCL_IB_HCA of a node's settings: the collective's environment (fabric_collective_env), else
    what role nccl_conf writes (nccl_conf_overrides); None where neither names it. Role fabric_bench
    passes the same two to bench_node_plan, so the rails it tests are the ones judged here."""
    return _rails.settings_ib_hca(*[hv.get(name) if hasattr(hv, 'get') else None
                                    for name in ('fabric_collective_env', 'nccl_conf_overrides')])


def fabric_report(hostvars, hosts, bench=None, collective=None, generated_at=None, options=None):
    if not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError('fabric_report: hosts must be a list of inventory names')
    nodes, unreachable, stages, failures = {}, {}, {}, {}
    for host in hosts:
        hv = hostvars[host] if host in hostvars else {}
        facts = hv.get('ansible_facts') or {}
        # Tasks that failed on the node and were rescued (configure.yml, validate.yml, benchmark.yml); one marked
        # unreachable is the connection check of a node that did not answer, its message the connection's error.
        records = [r if isinstance(r, dict) else {'msg': str(r)} for r in hv.get('gpu_fabric_failures') or []]
        no_answer = [r for r in records if r.get('unreachable') is True]
        if no_answer and 'gpu_fabric_ib' not in facts and 'gpu_fabric_gdr' not in facts:
            records = [r for r in records if r.get('unreachable') is not True]
            unreachable[host] = no_answer[0].get('msg')
        if records:
            failures[host] = records
        if host in unreachable:
            continue
        if 'gpu_fabric_ib' in facts or 'gpu_fabric_gdr' in facts or host in failures:
            nodes[host] = {'ib': facts.get('gpu_fabric_ib'), 'gdr': facts.get('gpu_fabric_gdr')}
            if 'gpu_fabric_ib_fabric' in facts:   # the fabric beyond the node (ib_fabric_facts)
                nodes[host]['fabric'] = facts['gpu_fabric_ib_fabric']
            if 'gpu_fabric_roce' in facts:   # RoCE lossless facts (roce_qos_facts)
                nodes[host]['roce'] = facts['gpu_fabric_roce']
            # Where the node's NCCL settings name HCAs, they say which are its compute rails (module_utils/_rails.py).
            ib_hca = _node_ib_hca(hv)
            if ib_hca:
                nodes[host]['nccl_ib_hca'] = ib_hca
            # The stages each node got through (set at the end of each stage's play on the nodes).
            stages[host] = list(hv.get('gpu_fabric_stages') or [])
        else:
            unreachable[host] = None   # no facts and no record: left the run without a word (or marked offline)
    if not any(stages.values()):
        stages = None      # facts from elsewhere (a play without the stage marks): nothing to compare
    findings = _diagnose.diagnose(nodes, bench or None, collective or None, unreachable, stages, failures)
    # What NCCL should be told on each node, from the same facts (role nccl_conf writes it) and the
    # same roles as the diagnosis and the benchmark's rails (module_utils/_rails.py node_roles).
    nccl = dict((host, _nccl_env.recommend(node.get('ib'), node.get('gdr'), node.get('roce'), role_of=_rails.node_roles(node)))
                for host, node in nodes.items() if node.get('ib') is not None or node.get('gdr') is not None)
    return _report.build(nodes, findings, bench, collective, unreachable, generated_at, options, nccl)


def report_drift(report, baseline, regression_pct=10.0):
    try:
        return dict(report, drift=_report.drift(report, baseline, float(regression_pct)))
    except ValueError as exc:
        raise AnsibleFilterError('report_drift: %s' % exc)


def report_policy(report, expression=_report.DEFAULT_POLICY):
    try:
        return _report.policy(report, expression or _report.DEFAULT_POLICY)
    except ValueError as exc:
        raise AnsibleFilterError('report_policy: %s' % exc)


class FilterModule(object):

    def filters(self):
        return {
            'fabric_report': fabric_report,
            'report_drift': report_drift,
            'report_policy': report_policy,
            'report_markdown': _report.markdown,
            'report_html': _html.render,
            'report_junit': _report.junit,
            'report_prometheus': _report.prometheus,
        }
