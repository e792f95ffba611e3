#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: fabric_report_write
short_description: Diagnose every node, write the report in every format and apply the exit policy
version_added: 0.1.0
description:
  - The report stage of C(playbooks/report.yml) in one task on the controller. Reads the nodes' facts, the stages
    they got through, their rescued task failures and unreachable marks from C(hostvars), once, through the fleet model
    (C(plugins/plugin_utils/fleet/_fleet_model.py)); the collective's result from the first node that holds
    C(fabric_collective_result), and the benchmark's verdicts from the C(bench.json) that this run's
    M(hpc.gpu_fabric.fabric_bench_judge) wrote (its result registered as C(gpu_fabric_bench) on the controller), where
    those ran. A C(bench.json) of an earlier run is never read; one that cannot be read (not a regular file, larger than
    1 GiB, not JSON), or a judging that failed (C(gpu_fabric_bench) failed - the playbooks let the report run after
    it), fails the task after the report is written without the verdicts, naming why.
  - Diagnoses them (the findings, each symptom linked to the root that explains it), builds C(report.json), compares
    it with O(baseline) when one is given, and writes C(report.json), C(report.html), C(report.md), C(junit.xml) and
    C(gpu_fabric.prom) into O(dest), each atomically, as M(hpc.gpu_fabric.fabric_output) writes (a file already
    right is left alone).
  - Whatever happened to the nodes - every one unreachable, every one failed, a check-mode run - the report is
    written. Prints a short summary (the counts, the root causes, where the full report is).
  - Fails the task, after writing, when the exit policy O(exit_policy) matches (naming what it matched), when no
    node was validated (whatever the policy), when the baseline cannot be used, or when a file cannot be written.
  - Runs in the controller process through its action plugin; no module runs on any host, and the report never
    becomes an Ansible variable.
author:
  - hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - hpc.gpu_fabric.output
attributes:
  check_mode:
    support: full
    details:
      - In check mode nothing is written, and what would change is reported.
      - C(playbooks/report.yml) turns check mode off for the task - the report is the controller's own output and
        changes no node - so a C(--check) run writes its report too.
  diff_mode:
    support: full
  platform:
    platforms: posix
options:
  hosts:
    description:
      - The nodes of the run, inventory names in inventory order. A listed host without facts is reported
        unreachable, or failed where a rescued task says why.
    type: list
    elements: str
    required: true
  baseline:
    description:
      - A C(report.json) of an earlier run (a regular file, at most 1 GiB; a relative path is relative to the
        directory C(ansible-playbook) runs in). C(report.json) then has its C(drift) - new and cleared findings,
        measured values that fell by more than O(regression_pct).
      - A node whose own collective ran with no peer to compare with is judged against its own run there, and, when
        slow, its recorded facts against the baseline's C(hosts.<node>.profile) (matched by inventory name; a baseline
        whose run of the node was not healthy is refused, finding C(BASELINE_NOT_USED)).
      - Unset or empty - no comparison. A baseline that cannot be read, or is no report, fails the task after the
        report is written without drift.
    type: path
  regression_pct:
    description:
      - With O(baseline) - how many percent below the baseline a pair's bandwidth or the collective's bus bandwidth
        must fall to be a regression. A number from 0 to 100 (a string such as V("10") from C(-e) is taken).
    type: raw
    default: 10
  exit_policy:
    description:
      - A JMESPath expression over C(report.json); a non-empty match fails the task (and the run).
      - Unset or empty - the default, V(findings[?severity=='error' && explained_by==null]), any error that is a
        root cause.
    type: str
notes:
  - The files belong to the user running C(ansible-playbook); C(become) has no effect on them.
  - Schema of C(report.json) and every finding code - C(docs/report.md).
seealso:
  - module: hpc.gpu_fabric.fabric_output
  - module: hpc.gpu_fabric.fabric_bench_judge
'''

EXAMPLES = r'''
- name: Diagnose, write the report and apply the exit policy (in --check runs too)
  hpc.gpu_fabric.fabric_report_write:
    hosts: "{{ groups['gpu_nodes'] }}"
    dest: ./fabric-report
    baseline: "{{ gpu_fabric_baseline | default('') }}"
    exit_policy: "findings[?severity=='error']"
  check_mode: false
  register: report
'''

RETURN = r'''
dest:
  description: The directory, as an absolute path.
  returned: always
  type: str
  sample: /srv/fabric/out
files:
  description: Every file written or found already right (as M(hpc.gpu_fabric.fabric_output) returns them).
  returned: when the task did not fail (a failed task's result is printed whole; the summary lines already were)
  type: list
  elements: dict
  sample: [{"name": "report.json", "path": "/srv/fabric/out/report.json", "size": 20480, "changed": true}]
summary:
  description: C(report.json)'s summary - hosts, hosts_ok, hosts_failed, hosts_unreachable, errors, warnings, roots.
  returned: when the task did not fail
  type: dict
  sample: {"hosts": 2, "hosts_ok": 1, "hosts_failed": 1, "hosts_unreachable": 0, "errors": 1, "warnings": 0, "roots": 1}
matched:
  description: What the exit policy matched - the findings' ids (other values as the expression gave them); on failure
    the message names the first 20.
  returned: when the task did not fail
  type: list
  sample: ["GDR_PEERMEM_NOT_LOADED@n2/node"]
not_checked:
  description: The hosts whose checks did not all run - a task failed on them, they did not answer, or they left the
    run (findings C(HOST_TASK_FAILED), C(HOST_UNREACHABLE), C(HOST_LOST)).
  returned: always
  type: list
  elements: str
  sample: [n3]
msg:
  description: Why the task failed, else the first line of the summary printed on the console.
  returned: always
  type: str
'''

from ansible.module_utils.basic import AnsibleModule


def main():
    # Only reached when the action plugin is bypassed (a copy of the module alone).
    module = AnsibleModule(argument_spec=dict(hosts=dict(type='list', elements='str', required=True),
                                              dest=dict(type='path', required=True), baseline=dict(type='path'),
                                              regression_pct=dict(type='raw', default=10), exit_policy=dict(type='str')),
                           supports_check_mode=True)
    module.fail_json(msg='fabric_report_write runs on the controller through its action plugin (hpc.gpu_fabric collection)')


if __name__ == '__main__':
    main()
