# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment(object):

    # The one root every hardware read goes through: / on a live node, an unpacked snapshot or a
    # simulated node otherwise (module_utils/_sysroot.py keeps every read below it).
    DOCUMENTATION = r'''
options:
  root:
    description:
      - Filesystem root that C(/sys), C(/proc), C(/usr/src) and C(/usr/bin) are read below.
      - Keep the default C(/) on a live node. Point it at an unpacked snapshot of a node
        (see the capture playbook) or at a simulated node to analyse it offline.
    type: path
    default: /
'''

    # The attributes of the facts modules; their descriptions come from
    # ansible.builtin.action_common_attributes (and its .facts), which the modules extend too.
    FACTS = r'''
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  facts:
    support: full
  platform:
    platforms: posix
'''
