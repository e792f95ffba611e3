# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The culprit search's steps as filters: each a call of plugins/plugin_utils/bench/_culprit_search.py,
which checks the arguments too (the action culprit_search drives the same functions)."""

from __future__ import annotations

# Several filters live here: each is documented in its own plugins/filter/<name>.yml, which
# ansible-doc reads because this file has no DOCUMENTATION (as ansible-core's filter/core.py).
from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _culprit_search


def _call(name, function, *args):
    try:
        return function(*args)
    except ValueError as exc:
        raise AnsibleFilterError('%s: %s' % (name, exc))


def culprit_search_start(nodes, reference=None, prior=None, pairs=None, strategy=_culprit_search.DEFAULT_STRATEGY):
    return _call('culprit_search_start', _culprit_search.begin, nodes, reference, prior, pairs, strategy)


def culprit_search_next(state):
    return _culprit_search.next_round(state)


def culprit_search_update(state, runs, verdicts, seconds=None):
    return _call('culprit_search_update', _culprit_search.fold, state, runs, verdicts, seconds)


def culprit_search_verdicts(started, finished):
    return _call('culprit_search_verdicts', _culprit_search.round_verdicts, started, finished)


class FilterModule(object):

    def filters(self):
        return {
            'culprit_search_start': culprit_search_start,
            'culprit_search_next': culprit_search_next,
            'culprit_search_update': culprit_search_update,
            'culprit_search_verdicts': culprit_search_verdicts,
        }
