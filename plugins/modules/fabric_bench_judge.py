#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: fabric_bench_judge
short_description: Judge every pair of the pairwise benchmark and write bench.json
version_added: 0.2.0
description:
  - The judging of C(playbooks/benchmark.yml) in one task on the controller. Reads each node's records of role
    C(fabric_bench) - from the file M(hpc.gpu_fabric.perftest_collect) wrote on the controller, one node at a time, or
    from C(fabric_bench_records) - and its plan, and judges every pair - bandwidth against the rail's nominal rate (the
    most common rate of the ACTIVE ports of that rail and HCA model; a port trained down is named in
    C(degraded_ports)), GPU memory against host memory on the same pair, latency against a bound; the server side's
    failure as the cause of its client's; the pairs of a node lost mid-run as C(node_lost). Adds the N x N matrix per
    memory kind and rail, the error-counter increases per pair and link, and what was not tested and why.
  - With O(results) (C(playbooks/offline.yml)) - judges perftest outputs parsed by M(hpc.gpu_fabric.perftest_run)
    with C(from_log) instead, against the nodes' plans, the same way.
  - Writes the verdicts as C(bench.json) into O(dest), atomically, as M(hpc.gpu_fabric.fabric_output) writes (a file
    already right is left alone). Returns only the counts, a short summary for the console and the file's path - the
    pair list never becomes an Ansible variable. M(hpc.gpu_fabric.fabric_report_write) reads C(bench.json) back from
    the path of this task's result registered as C(gpu_fabric_bench); a C(bench.json) of an earlier run is never read.
  - Runs in the controller process through its action plugin; no module runs on any host.
author:
  - hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - hpc.gpu_fabric.output
attributes:
  check_mode:
    support: full
    details:
      - In check mode nothing is written (a C(bench.json) of an earlier run is kept), what would change is reported
        (with diff mode, the change), and the result has no RV(bench_json) - so the report of a C(--check) run reads no
        C(bench.json).
  diff_mode:
    support: full
  platform:
    platforms: posix
options:
  hosts:
    description:
      - The nodes of the benchmark, inventory names. A host that is not in the inventory is left out.
    type: list
    elements: str
    required: true
  results:
    description:
      - The results of a loop of M(hpc.gpu_fabric.perftest_run) with C(from_log) (its C(results)), each with its
        C(item) - the parsed file - named C(<server>__<client>__<rail>__<host|gpu>.txt). Judged instead of the
        nodes' records; C(bench.json) then lists which file gave which pair (C(imported_logs)).
      - Unset - the nodes' records.
    type: list
    elements: raw
  bw_ratio:
    description:
      - Share of the rail's nominal rate below which a pair's bandwidth is C(low). Unset or empty - C(BW_RATIO) of
        C(plugins/plugin_utils/bench/_bench.py). A number (a string such as V("0.9") from C(-e) is taken).
      - A threshold that is not a finite positive number fails the task (the same check as
        P(hpc.gpu_fabric.bench_threshold_errors#filter), which role C(fabric_bench) makes before any pair runs).
    type: raw
  gpu_ratio:
    description:
      - Share of the same pair's host-memory bandwidth below which a GPU-memory test is C(low). Unset or empty -
        C(GPU_RATIO) of C(plugins/plugin_utils/bench/_bench.py).
    type: raw
  lat_max_us:
    description:
      - Typical latency in microseconds above which a latency test is C(low). Unset or empty - C(LAT_MAX_US) of
        C(plugins/plugin_utils/bench/_bench.py).
    type: raw
  limit:
    description:
      - How many of the pairs that are not healthy RV(lines) names, the worst first; the rest are in C(bench.json).
    type: int
    default: 20
notes:
  - The file belongs to the user running C(ansible-playbook); C(become) has no effect on it.
  - Schema of C(bench.json) - the C(bench) of C(report.json), C(docs/report.md).
seealso:
  - module: hpc.gpu_fabric.fabric_report_write
  - module: hpc.gpu_fabric.perftest_collect
'''

EXAMPLES = r'''
# A judging that fails (a threshold refused) leaves the play going on: the report names it and fails the run.
- name: Judge the pairs and write bench.json
  hpc.gpu_fabric.fabric_bench_judge:
    hosts: "{{ groups['gpu_nodes'] }}"
    dest: ./fabric-report
    bw_ratio: 0.9
  register: gpu_fabric_bench
  ignore_errors: true

- name: Show the pairs that are not healthy
  hpc.gpu_fabric.fabric_console:
    lines: "{{ gpu_fabric_bench.lines | default(['the benchmark judging failed: ' ~ gpu_fabric_bench.msg]) }}"
'''

RETURN = r'''
dest:
  description: The directory, as an absolute path.
  returned: always
  type: str
  sample: /srv/fabric/out
bench_json:
  description: The path of C(bench.json), written or found already right by this task.
  returned: when the file was written (not in check mode, not when the write failed)
  type: str
  sample: /srv/fabric/out/bench.json
tests:
  description: How many pair tests were judged.
  returned: always
  type: int
  sample: 112
verdicts:
  description: How many pair tests got each verdict (C(ok), C(low), C(failed)).
  returned: always
  type: dict
  sample: {"ok": 110, "low": 1, "failed": 1}
not_run:
  description: Why the mesh did not run (fewer than two nodes can run perftest, no node reached the benchmark), or null.
  returned: always
  type: str
lines:
  description:
    - A short summary for the console - the counts, the nodes left out and why, records that could not be read, then
      the worst pairs that are not healthy (at most O(limit)), one plain line each.
  returned: always
  type: list
  elements: str
  sample: ["ib_write_bw: 112 pair test(s), 110 ok, 1 low, 1 failed", "2 pair test(s) not healthy, the worst first"]
msg:
  description: Why the task failed, else the first line of RV(lines).
  returned: always
  type: str
'''

from ansible.module_utils.basic import AnsibleModule


def main():
    # Only reached when the action plugin is bypassed (a copy of the module alone).
    module = AnsibleModule(argument_spec=dict(hosts=dict(type='list', elements='str', required=True),
                                              dest=dict(type='path', required=True),
                                              results=dict(type='list', elements='raw'),
                                              bw_ratio=dict(type='raw'), gpu_ratio=dict(type='raw'), lat_max_us=dict(type='raw'),
                                              limit=dict(type='int', default=20)),
                           supports_check_mode=True)
    module.fail_json(msg='fabric_bench_judge runs on the controller through its action plugin (hpc.gpu_fabric collection)')


if __name__ == '__main__':
    main()
