# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
name: fabric_report
author: hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
short_description: Diagnose the fleet and build report.json (the one source of truth of a run)
version_added: 0.1.0
description:
  - Runs the diagnosis rules over every host's facts (C(gpu_fabric_ib), C(gpu_fabric_gdr)), the pairwise benchmark
    (C(bench_report)) and the collective outcome (role fabric_collective), links each symptom to the lower-layer
    root cause that explains it, and returns the report (schema C(hpc.gpu_fabric/report), version 1).
  - Every host of O(hosts) is a node, whatever its name (C(localhost) included). Hosts without facts are reported
    unreachable, with nothing of theirs checked; a task that failed on a host and was rescued (C(gpu_fabric_failures))
    is a finding naming the task; a run in which no host returned facts is itself an error. A host with facts
    that did not get through a later stage (C(gpu_fabric_stages), set at the end of each stage) is reported lost
    mid-run (C(HOST_LOST)), with what was measured on the others kept.
  - The same file provides C(report_drift) (report, baseline report, percentage - new and cleared findings,
    regressions), C(report_policy) (report, JMESPath expression - what the exit policy matched),
    C(report_markdown), C(report_html) (one self-contained page with inline SVG plots, nothing loaded from anywhere),
    C(report_junit) and C(report_prometheus) (the renderings of a report).
options:
  _input:
    description: C(hostvars).
    type: dict
    required: true
  hosts:
    description: The nodes of the run (inventory names).
    type: list
    elements: str
    required: true
  bench:
    description: The pairwise benchmark's report (C(bench_report)), or null.
    type: dict
  collective:
    description: The collective outcome (C(fabric_collective_result)), or null.
    type: dict
  generated_at:
    description: Time stamp written into the report.
    type: str
'''

EXAMPLES = r'''
- name: Diagnose and report
  ansible.builtin.set_fact:
    report: "{{ hostvars | hpc.gpu_fabric.fabric_report(groups['gpu'], bench, collective, now(utc=true).isoformat()) }}"
  delegate_to: localhost
  run_once: true
'''

RETURN = r'''
_value:
  description: The report - C(schema), C(schema_version), C(summary), C(hosts), C(findings), C(bench), C(collective), C(drift).
  type: dict
'''

from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils import _diagnose, _html, _nccl_env, _report


def fabric_report(hostvars, hosts, bench=None, collective=None, generated_at=None, options=None):
    if not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError('fabric_report: hosts must be a list of inventory names')
    nodes, unreachable, stages, failures = {}, [], {}, {}
    for host in hosts:
        hv = hostvars[host] if host in hostvars else {}
        facts = hv.get('ansible_facts') or {}
        # Tasks that failed on the node and were rescued (validate.yml, benchmark.yml).
        if hv.get('gpu_fabric_failures'):
            failures[host] = list(hv['gpu_fabric_failures'])
        if 'gpu_fabric_ib' in facts or 'gpu_fabric_gdr' in facts or host in failures:
            nodes[host] = {'ib': facts.get('gpu_fabric_ib'), 'gdr': facts.get('gpu_fabric_gdr')}
            # The stages each node got through (set at the end of each stage's play on the nodes).
            stages[host] = list(hv.get('gpu_fabric_stages') or [])
        else:
            unreachable.append(host)
    if not any(stages.values()):
        stages = None      # facts from elsewhere (a play without the stage marks): nothing to compare
    findings = _diagnose.diagnose(nodes, bench or None, collective or None, unreachable, stages, failures)
    # What NCCL should be told on each node, from the same facts (role nccl_conf writes it).
    nccl = dict((host, _nccl_env.recommend(node.get('ib'), node.get('gdr'))) for host, node in nodes.items()
                if node.get('ib') is not None or node.get('gdr') is not None)
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
