# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Mark a host unreachable without touching it (documentation: plugins/modules/offline_unreachable.py).

Offline, a node the capture could not reach has no snapshot. Returning ``unreachable``
makes Ansible treat it exactly as the live run did: it is left out of every later play,
the recap counts it unreachable, and the report names it (HOST_UNREACHABLE) because no
facts came back from it.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(('msg',))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        msg = self._task.args.get('msg') or 'unreachable when the snapshots were captured'
        result.update(unreachable=True, changed=False, msg=str(msg))
        return result
