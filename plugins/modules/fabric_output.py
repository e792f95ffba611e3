#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: fabric_output
short_description: Write a run's output files (collective.json, facts/, ...) on the controller
version_added: 0.1.0
description:
  - Writes text files into a directory of the controller, the machine running C(ansible-playbook), whichever host
    the task runs for. The playbooks use it for C(collective.json), C(facts/<host>.json) and C(capture.json);
    C(bench.json) and the report files are written the same way (the same code, C(plugins/plugin_utils/report/_files.py)) by
    M(hpc.gpu_fabric.fabric_bench_judge) and M(hpc.gpu_fabric.fabric_report_write).
  - Each file is written atomically - a temporary file in the same directory renamed over the old one - so a
    reader (a dashboard, a CI job collecting C(junit.xml)) never sees half a file. A file whose content and mode
    are already right is left alone.
  - Runs in the controller process through its action plugin; no module runs on any host. Writing two files with
    C(ansible.builtin.copy) on the controller cost 2.6 s of a 16-node mesh benchmark (two modules per file, each a
    new Python process); this costs milliseconds.
  - One file that cannot be written does not stop the others; the task fails afterwards and names it.
author:
  - hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - hpc.gpu_fabric.output
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
options:
  files:
    description:
      - File name to content. A name is a plain file name (no C(/), not C(.) or C(..)); the content is text.
    type: dict
    required: true
  mode:
    description:
      - Permissions of the files written - an octal string (V("0644")) or an integer from 0 to 07777 (YAML reads
        an unquoted V(0644) as the integer 420).
      - A boolean, or anything else, fails the task.
    type: raw
    default: "0644"
notes:
  - The files belong to the user running C(ansible-playbook); C(become) has no effect on them.
'''

EXAMPLES = r'''
- name: Write the collective results
  hpc.gpu_fabric.fabric_output:
    dest: "{{ gpu_fabric_output_dir }}"
    files:
      collective.json: "{{ fabric_collective_result | to_nice_json }}\n"
  run_once: true

- name: Write the report in every format, in --check runs too (they change no node)
  hpc.gpu_fabric.fabric_output:
    dest: "{{ gpu_fabric_output_dir }}"
    files:
      report.json: "{{ gpu_fabric_report | to_nice_json }}\n"
      report.md: "{{ gpu_fabric_report | hpc.gpu_fabric.report_markdown }}"
  check_mode: false
'''

RETURN = r'''
dest:
  description: The directory, as an absolute path.
  returned: always
  type: str
  sample: /srv/fabric/out
files:
  description: Every file written or found already right.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The file name.
      type: str
      sample: bench.json
    path:
      description: Its absolute path.
      type: str
      sample: /srv/fabric/out/bench.json
    size:
      description: Its size in bytes.
      type: int
      sample: 20480
    changed:
      description: Whether it was (or in check mode would be) written.
      type: bool
      sample: true
'''

from ansible.module_utils.basic import AnsibleModule


def main():
    # Only reached when the action plugin is bypassed (a copy of the module alone).
    module = AnsibleModule(argument_spec=dict(dest=dict(type='path', required=True), files=dict(type='dict', required=True),
                                              mode=dict(type='raw', default='0644')),
                           supports_check_mode=True)
    module.fail_json(msg='fabric_output runs on the controller through its action plugin (hpc.gpu_fabric collection)')


if __name__ == '__main__':
    main()
