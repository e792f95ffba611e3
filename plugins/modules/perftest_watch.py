#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: perftest_watch
short_description: Follow a perftest sequence that runs on this node, step by step
version_added: 0.1.0
description:
  - Follows a sequence started on this node with M(hpc.gpu_fabric.perftest_run) O(hpc.gpu_fabric.perftest_run#module:sequence)
    (asynchronously) instead of running anything - waits until its beacon (O(address), O(beacon_port), O(run_id))
    reports a step past O(step), at most O(timeout) seconds, and returns where it is (RV(progress)).
  - One call per step shows a run's progress (step k of N) without polling every node.
  - A beacon that stops answering means the run ended on this node (finished, or it died); before step 1 it may
    take O(start_grace) seconds to appear.
  - Starts no process and changes nothing, so C(changed) is always false.
author:
  - hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: partial
    details: Nothing runs in check mode, so there is nothing to follow; the task is skipped.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  step:
    description:
      - The step to wait past (steps count from 1).
    type: int
    required: true
  address:
    description: The out-of-band address the sequence's beacon listens on (its O(hpc.gpu_fabric.perftest_run#module:address)).
    type: str
    required: true
  beacon_port:
    description: The TCP port of the beacon (the same on every node), 1 to 65535.
    type: int
    default: 18514
  run_id:
    description:
      - The token of the run (its O(hpc.gpu_fabric.perftest_run#module:run_id)); a beacon answering with another token
        (a previous run, another service) does not count.
    type: str
    required: true
  timeout:
    description:
      - Seconds to wait for the sequence to get past O(step); after them C(timed_out) in RV(progress) is true.
    type: int
    default: 120
  start_grace:
    description: Seconds the beacon may take to appear before step 1 (nodes start at different times).
    type: int
    default: 60
seealso:
  - module: hpc.gpu_fabric.perftest_run
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

- name: Follow the first node, one step per loop item
  hpc.gpu_fabric.perftest_watch:
    step: "{{ item }}"
    address: "{{ oob_address }}"
    run_id: "{{ run_id }}"
    timeout: 300
  loop: "{{ range(1, steps | length + 1) | list }}"
  run_once: true
'''

RETURN = r'''
progress:
  description:
    - Where the followed sequence is - C(step) (the step its beacon reports, null once finished), C(finished)
      (its beacon said every step is done), C(gone) (its beacon stopped answering - the run ended there, finished
      or dead), C(timed_out) (still at or before O(step) after O(timeout)), C(waited_s); C(stopped) (true, with
      C(gone)) when the node stopped the run because its controller lease ran out (see
      C(controller_lease) of M(hpc.gpu_fabric.perftest_run)).
    - While it follows the node, it renews the run's controller lease there.
  returned: when not in check mode
  type: dict
  sample: {step: 4, finished: false, gone: false, timed_out: false, waited_s: 2.31}
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _argv, _process, _sequence


def validate(params):
    """What is wrong with the arguments (a sentence), or None."""
    try:
        _argv.check_no_nul(params)
        _argv.check_host(params['address'], 'address')
    except ValueError as exc:
        return str(exc)
    if not params['run_id']:
        return "run_id must not be empty: it tells this run's beacon from others"
    if params['step'] < 1:
        return 'step must be a positive integer (steps count from 1)'
    if not 1 <= params['beacon_port'] <= 65535:
        return 'beacon_port must be a TCP port, 1 to 65535 (got %d)' % params['beacon_port']
    return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            step=dict(type='int', required=True),
            address=dict(type='str', required=True),
            beacon_port=dict(type='int', default=18514),
            run_id=dict(type='str', required=True),
            timeout=dict(type='int', default=120),
            start_grace=dict(type='int', default=60),
        ),
        supports_check_mode=True,
    )
    params = module.params
    problem = validate(params)
    if problem:
        module.fail_json(msg=problem)
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg='nothing runs in check mode, so there is nothing to follow')
    try:
        # Guard: a killed controller ends this watch within a second (_process.ParentWatch), so that it stops
        # renewing the run's lease and the run stops too (perftest_run controller_lease).
        with _process.Guard():
            progress = _sequence.watch(params['address'], params['beacon_port'], params['run_id'], params['step'],
                                       params['timeout'], params['start_grace'], lease=_sequence.lease_path(params['run_id'], params['address']))
    except _process.Terminated as exc:
        module.fail_json(msg='stopped following the beacon at %s:%d: %s' % (params['address'], params['beacon_port'], exc))
    except (IOError, OSError) as exc:
        module.fail_json(msg='cannot follow the beacon at %s:%d: %s' % (params['address'], params['beacon_port'], exc))
    module.exit_json(changed=False, progress=progress)


if __name__ == '__main__':
    main()
