#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: fabric_console
short_description: Print lines on the console as they are, whatever the stdout callback's result format
version_added: 0.2.0
description:
  - Prints each line of O(lines) on the console through Ansible's display, one console line each. M(ansible.builtin.debug)
    prints through the stdout callback's result format - with ansible-core's default (json) a message of several lines is
    one quoted string with C(\n) escapes - so the per-node summary of C(playbooks/validate.yml) and the benchmark's worst
    pairs read the same from a checkout (whose C(ansible.cfg) sets C(callback_result_format = yaml)) and from an installed
    collection (no C(ansible.cfg)).
  - Control characters in a line (a value read from a node) are printed as their escapes (C(\x1b)), never sent to the
    terminal.
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
  lines:
    description: The lines to print, in order; an item with newlines is printed as several lines.
    type: list
    elements: str
    required: true
'''

EXAMPLES = r'''
- name: Show the summary
  hpc.gpu_fabric.fabric_console:
    lines: "{{ hostvars | hpc.gpu_fabric.fabric_summary(__gpu_fabric_nodes) }}"
'''

RETURN = r'''
printed:
  description: How many console lines were printed.
  returned: always
  type: int
  sample: 3
'''

from ansible.module_utils.basic import AnsibleModule


def main():
    # Only reached when the action plugin is bypassed (a copy of the module alone).
    module = AnsibleModule(argument_spec=dict(lines=dict(type='list', elements='str', required=True)), supports_check_mode=True)
    module.fail_json(msg='fabric_console runs on the controller through its action plugin (hpc.gpu_fabric collection)')


if __name__ == '__main__':
    main()
