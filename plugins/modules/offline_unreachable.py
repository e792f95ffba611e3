#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: offline_unreachable
short_description: Mark a host unreachable in an offline analysis, without connecting to it
version_added: 0.1.0
description:
  - Playbook C(hpc.gpu_fabric.offline) analyses node snapshots taken by C(hpc.gpu_fabric.capture). A node the
    capture could not reach has no snapshot; this task makes the run treat it as the live run did - Ansible leaves
    it out of every later play, the recap counts it unreachable, and the report names it (C(HOST_UNREACHABLE)).
  - Playbook C(hpc.gpu_fabric.validate) uses it too. A node that did not answer is kept in the run (rescued, its
    connection's error kept for the report) until a play that localhost shares with it, where this task counts it
    unreachable; a play whose every host is unreachable would end the playbook before the report.
  - Runs on the controller through its action plugin; it never connects to the host.
author:
  - hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  msg:
    description: Why the host is unreachable, as the run shows it.
    type: str
    default: unreachable when the snapshots were captured
'''

EXAMPLES = r'''
- name: Nodes the capture could not reach
  hpc.gpu_fabric.offline_unreachable:
    msg: "{{ gpu_fabric_offline_lost }}"
  when: gpu_fabric_offline_lost is defined
'''

RETURN = r'''
msg:
  description: The reason given.
  returned: always
  type: str
  sample: "unreachable when the snapshots were captured (capture.json)"
'''

from ansible.module_utils.basic import AnsibleModule


def main():
    # Only reached when the action plugin is bypassed (a copy of the module alone).
    module = AnsibleModule(argument_spec=dict(msg=dict(type='str', default='unreachable when the snapshots were captured')),
                           supports_check_mode=True)
    module.fail_json(msg='offline_unreachable runs on the controller through its action plugin (hpc.gpu_fabric collection)')


if __name__ == '__main__':
    main()
