# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Runs the module perftest_watch as ansible-core runs any module, in a worker that ends when its
ansible-playbook is killed (documentation: plugins/modules/perftest_watch.py; why:
plugins/plugin_utils/_controller_watch.py): the benchmark is followed step by step in a loop."""

from __future__ import annotations

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils._controller_watch import WatchedModuleAction


class ActionModule(WatchedModuleAction):
    pass
