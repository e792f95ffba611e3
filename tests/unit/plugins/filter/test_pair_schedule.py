# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

import inspect
import os

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.filter import pair_schedule as plugin
from ansible_collections.hpc.gpu_fabric.plugins.filter.pair_schedule import FilterModule, pair_schedule, pair_schedule_summary

NODES = ['gpu01', 'gpu02', 'gpu03', 'gpu04', 'gpu05']
RAILS = ['mlx5_0', 'mlx5_1']


def test_both_filters_are_registered():
    assert FilterModule().filters() == {'pair_schedule': pair_schedule, 'pair_schedule_summary': pair_schedule_summary}


def test_one_round_expanded_as_a_play_asks_for_it():
    result = pair_schedule(NODES, RAILS, round=2, expand=True)
    assert [entry['round'] for entry in result['rounds']] == [2]
    entry = result['rounds'][0]
    assert entry['idle'] == ['gpu02']
    assert entry['tests'] == [
        {'server': server, 'client': client, 'rail': rail, 'server_hca': hca, 'client_hca': hca,
         'pair_id': '%s<>%s' % tuple(sorted((server, client)))}
        for server, client in zip(entry['servers'], entry['clients']) for rail, hca in enumerate(RAILS)]
    assert result['summary'] == pair_schedule_summary(NODES, RAILS)
    assert result['summary']['rounds'] == 5 and result['summary']['tests_per_round'] == [4] * 5


@pytest.mark.parametrize('expand, expanded', [(True, True), ('yes', True), ('true', True), (False, False), ('no', False)])
def test_expand_takes_ansible_booleans(expand, expanded):
    entry = pair_schedule(NODES, expand=expand)['rounds'][0]
    assert ('tests' in entry) is expanded


@pytest.mark.parametrize('call, args, kwargs, message', [
    (pair_schedule, ([],), {}, 'pair_schedule: nodes is empty: there is nothing to schedule'),
    (pair_schedule, (['a', 'a'],), {}, 'pair_schedule: duplicate node names: a (each node must appear once)'),
    (pair_schedule, (NODES,), {'mode': 'random', 'k': 0}, 'pair_schedule: k must be at least 1 (the number of random matchings), got 0'),
    (pair_schedule, (NODES,), {'mode': 'all'}, "pair_schedule: unknown mode 'all': choose one of full, ring, random, loopback"),
    (pair_schedule, (NODES,), {'expand': 'maybe'}, 'maybe'),
    (pair_schedule, (NODES,), {'round': 6}, 'pair_schedule: round 6 does not exist: this schedule has 5 round(s), numbered from 1'),
    (pair_schedule_summary, (None,), {}, 'pair_schedule_summary: nodes must be a list of inventory hostnames, got NoneType'),
    (pair_schedule_summary, (NODES, {'gpu01': 'mlx5_0'}), {}, 'pair_schedule_summary: rails[gpu01] must be a list of HCA names, got str'),
])
def test_bad_input_is_a_filter_error(call, args, kwargs, message):
    with pytest.raises(AnsibleFilterError) as error:
        call(*args, **kwargs)
    assert message in str(error.value)


def test_documentation_matches_the_filter():
    with open(os.path.join(os.path.dirname(plugin.__file__), 'pair_schedule.yml')) as handle:
        doc = yaml.safe_load(handle)
    documentation = doc['DOCUMENTATION']
    assert documentation['name'] == 'pair_schedule'
    options = dict(documentation['options'])
    assert options.pop('_input')['type'] == 'list'
    parameters = inspect.signature(pair_schedule).parameters
    assert list(options) == list(parameters)[1:]
    for name, option in options.items():
        if 'default' in option:
            assert option['default'] == parameters[name].default, name
    assert set(inspect.signature(pair_schedule_summary).parameters) <= set(parameters)
    assert set(doc['RETURN']['_value']['contains']) == set(pair_schedule(NODES))
    assert set(yaml.safe_load(doc['EXAMPLES'])[0]) == {'name', 'ansible.builtin.set_fact', 'run_once'}
