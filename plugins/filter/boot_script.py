# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
name: boot_script
author: hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
short_description: A module's boot plan as the body of a POSIX sh script
version_added: 0.2.0
description:
  - Turns the C(boot_plan) that M(hpc.gpu_fabric.roce_qos) and M(hpc.gpu_fabric.acs_disable) return into the lines of a
    POSIX sh script - C(status=0), one line per step in the plan's order, C(exit $status). The roles C(roce_qos) and
    C(pcie_acs) write their boot scripts with it, so the script runs the commands the module planned.
  - A step C({argv}) runs the command (stdout dropped, stderr to the unit's journal); C({write, value, skip_if_absent})
    writes the value and a newline into the file (with C(skip_if_absent) only where the file exists); C({mkdir}) makes
    the directory unless it is there. A step that fails sets C(status=1) and the others still run.
  - Every word is quoted with Python's C(shlex.quote) and nothing of the plan goes into a comment, so a name with quotes,
    a newline or C($()) stays one argument. A step of another kind, a relative path or a NUL byte fails the filter.
  - The result has no C(#!) line; the template puts it, and its own comments, above.
options:
  _input:
    description: The C(boot_plan) of a registered M(hpc.gpu_fabric.roce_qos) or M(hpc.gpu_fabric.acs_disable) result.
    type: list
    elements: dict
    required: true
'''

EXAMPLES = r'''
- name: Write the boot script from what the module planned
  ansible.builtin.copy:
    content: "#!/bin/sh\n{{ result.boot_plan | hpc.gpu_fabric.boot_script }}"
    dest: /usr/local/sbin/apply-at-boot
    mode: "0755"
'''

RETURN = r'''
_value:
  description: The script's lines, each ending with a newline.
  type: str
'''

from typing import Any, Callable

from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils import _boot_script


def boot_script(plan: Any) -> str:
    try:
        return _boot_script.render(plan)
    except _boot_script.PlanError as exc:
        raise AnsibleFilterError('boot_script: %s' % exc)


class FilterModule(object):

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'boot_script': boot_script}
