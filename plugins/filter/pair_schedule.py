# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

# Several filters live here: each is documented in its own plugins/filter/<name>.yml, which
# ansible-doc reads because this file has no DOCUMENTATION (as ansible-core's filter/core.py).
from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _schedule


def pair_schedule(nodes, rails=None, mode='full', k=1, seed=0, direction='alternate', round=None, expand=False, node=None):
    try:
        return _schedule.schedule(nodes, rails, mode=mode, k=k, seed=seed, direction=direction,
                                  round_number=round, expand=boolean(expand, strict=True), node=node)
    except (_schedule.ScheduleError, TypeError) as error:
        raise AnsibleFilterError('pair_schedule: %s' % error)


def pair_schedule_summary(nodes, rails=None, mode='full', k=1, seed=0, direction='alternate'):
    try:
        return _schedule.summary(nodes, rails, mode=mode, k=k, seed=seed, direction=direction)
    except _schedule.ScheduleError as error:
        raise AnsibleFilterError('pair_schedule_summary: %s' % error)


class FilterModule(object):

    def filters(self):
        return {'pair_schedule': pair_schedule, 'pair_schedule_summary': pair_schedule_summary}
