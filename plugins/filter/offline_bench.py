# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

# Several filters live here: each is documented in its own plugins/filter/<name>.yml, which
# ansible-doc reads because this file has no DOCUMENTATION (as ansible-core's filter/core.py).
import os
from typing import Any, Callable

from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _collective
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils import _controller_watch
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _fleet_model, _offline


def offline_logs(files: Any) -> dict[str, Any]:
    # A directory is searched here (offline.yml): ansible.builtin.find fails the whole task on a
    # file name that is not UTF-8, where such a file must cost only itself.
    refused: list[dict[str, Any]] = []
    if isinstance(files, str):
        if not os.path.isdir(files):
            raise AnsibleFilterError('offline_logs: %s is not a directory of saved outputs' % _offline.printable(files))
        files, refused = _offline.find_logs(files)
    if not isinstance(files, (list, tuple)):
        raise AnsibleFilterError('offline_logs: expected a directory, or a list of paths (or the files of ansible.builtin.find)')
    paths, too_large = _offline.log_entries(files)
    refused = sorted(refused + too_large, key=lambda entry: entry['log'])
    return dict(_offline.classify(paths, [entry['log'] for entry in refused]), refused=refused)


def offline_snapshots(directory: Any, out_dir: Any) -> dict[str, Any]:
    # Runs on the controller and writes there: the unpacked trees are the controller's own
    # working copy, made in --check runs too (they change no node).
    if not isinstance(directory, str) or not os.path.isdir(directory):
        raise AnsibleFilterError('offline_snapshots: %r is not a directory of snapshots' % (directory,))
    if not isinstance(out_dir, str) or not out_dir:
        raise AnsibleFilterError('offline_snapshots: give the output directory')
    # Minutes of unpacking on a large fleet: not for a worker whose ansible-playbook is gone.
    _controller_watch.stop_with_controller()
    try:
        return _offline.unpack_snapshots(directory, out_dir)
    except OSError as exc:
        raise AnsibleFilterError('offline_snapshots: cannot unpack into %s: %s' % (out_dir, exc))


def offline_collective(results: Any, hostvars: Any, hosts: Any, healthy: Any = None, warn: Any = None, refused: Any = None) -> dict[str, Any] | None:
    try:
        model = _fleet_model.read(hostvars, hosts or [], ('facts',))
    except ValueError as exc:
        raise AnsibleFilterError('offline_collective: %s' % exc)
    # None: the rule's own thresholds; the one check (module_utils/_collective.py thresholds).
    try:
        healthy, warn = _collective.thresholds(healthy, warn)
    except ValueError as exc:
        raise AnsibleFilterError('offline_collective: %s' % exc)
    return _offline.collective_result(results or [], _fleet_model.facts_of(model, 'ib'), healthy, warn, refused or [])


class FilterModule(object):

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            'offline_logs': offline_logs,
            'offline_snapshots': offline_snapshots,
            'offline_collective': offline_collective,
        }
