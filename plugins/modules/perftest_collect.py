#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: perftest_collect
short_description: Wait for a node's perftest sequence and keep its records, not its raw result
version_added: 0.1.0
description:
  - Waits for the M(hpc.gpu_fabric.perftest_run) O(hpc.gpu_fabric.perftest_run#module:sequence) task started on this node
    with C(async) and C(poll=0) (O(job)), as C(ansible.builtin.async_status) would, at most O(timeout) seconds, then
    turns its result into one record per test - as P(hpc.gpu_fabric.bench_sequence_records#filter) does - and returns
    those (RV(records)) or writes them into a file on the controller (O(dest), RV(records_file)).
  - The raw result (every test's parsed output, every step's error counters) is several times the size of its records
    and is never returned, so it never lands in hostvars. With O(dest) the records do not either; the judging
    (M(hpc.gpu_fabric.fabric_bench_judge), P(hpc.gpu_fabric.bench_report#filter)) reads each node's file in turn. A 256-node full mesh over 8 rails is about a
    million tests.
  - The job's result file on the node is removed once read (O(cleanup)).
  - A job that is still running after O(timeout) seconds, that failed as a whole, or that never started gives one
    failed record per test of O(steps), with the reason, so no pair goes missing from the report.
  - A connection that fails three times in a row makes the node unreachable, as with C(async_status).
author:
  - hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: partial
    details: Nothing is polled in check mode (no job was started); the records of O(job) are returned.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  job:
    description:
      - The registered result of the M(hpc.gpu_fabric.perftest_run) task started with C(async) and C(poll=0).
      - Without C(ansible_job_id) (the task failed to start, or was skipped) it is the result itself.
    type: dict
    required: true
  steps:
    description: The steps the sequence was given (P(hpc.gpu_fabric.bench_sequence#filter)).
    type: list
    elements: dict
    required: true
  timeout:
    description: Seconds to wait for the job, from 1 to 2592000 (30 days).
    type: float
    required: true
  delay:
    description: Seconds between two looks at the job, from 0.1 to 3600.
    type: float
    default: 1
  dest:
    description:
      - A directory on the controller to write the records into, one gzip-compressed JSON file per node named after its
        inventory name (characters other than letters, digits, C(.), C(_) and C(-) written as C(%XX)), mode 0600; created
        (mode 0700) when missing.
      - Unset or empty - the records are returned (RV(records)). When the file cannot be written they are returned too,
        with a warning.
    type: path
  run_id:
    description: The run's token, written into the file; the judging refuses a file of another run.
    type: str
  cleanup:
    description: Remove the job's result file from the node once it has been read.
    type: bool
    default: true
seealso:
  - module: hpc.gpu_fabric.perftest_run
  - module: hpc.gpu_fabric.perftest_watch
'''

EXAMPLES = r'''
- name: Start this node's steps
  hpc.gpu_fabric.perftest_run:
    test: ib_write_bw
    sequence: "{{ steps }}"
    address: "{{ oob_address }}"
    run_id: "{{ run_id }}"
  async: 3600
  poll: 0
  register: job

- name: Collect this node's records into a file on the controller
  hpc.gpu_fabric.perftest_collect:
    job: "{{ job }}"
    steps: "{{ steps }}"
    timeout: 3600
    dest: /srv/fabric/out/bench-records
    run_id: "{{ run_id }}"
  register: collected

- name: Keep where they are
  ansible.builtin.set_fact:
    fabric_bench_records_file: "{{ collected.records_file }}"
'''

RETURN = r'''
records:
  description:
    - One record per test asked for, as P(hpc.gpu_fabric.bench_sequence_records#filter) returns them.
    - Returned when O(dest) is unset or its file could not be written.
  returned: when no file was written
  type: list
  elements: dict
records_file:
  description: The absolute path of the file on the controller holding the records; null when none was written.
  returned: always
  type: str
  sample: /srv/fabric/out/bench-records/gpu01.records.json.gz
tests:
  description: How many tests (records) there are.
  returned: always
  type: int
  sample: 4080
not_ok:
  description: How many of them did not end with status ok.
  returned: always
  type: int
  sample: 0
finished:
  description: Whether the job ended (false when it was still running after O(timeout) seconds).
  returned: always
  type: bool
waited_s:
  description: Seconds spent waiting for the job.
  returned: always
  type: float
polls:
  description: How many times the job was looked at.
  returned: always
  type: int
'''

from ansible.module_utils.basic import AnsibleModule


def main():
    # Runs in the controller process through the action plugin of the same name; this is reached
    # only when the action plugin is not (a module run on its own).
    module = AnsibleModule(argument_spec=dict(job=dict(type='dict', required=True),
                                              steps=dict(type='list', elements='dict', required=True),
                                              timeout=dict(type='float', required=True), delay=dict(type='float', default=1),
                                              dest=dict(type='path'), run_id=dict(type='str'),
                                              cleanup=dict(type='bool', default=True)),
                           supports_check_mode=True)
    module.fail_json(msg='perftest_collect runs on the controller through its action plugin (hpc.gpu_fabric.perftest_collect)')


if __name__ == '__main__':
    main()
