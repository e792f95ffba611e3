# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The fleet model: hostvars read in one module, into plain data that copies nothing large; no
other file of plugins/ indexes hostvars."""

from __future__ import annotations

import glob
import io
import os
import tokenize

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.filter import collective, fabric_bench, fabric_summary, report
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _fleet_model

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
IB = {'devices': [{'name': 'mlx5_0', 'ports': [{'port': 1, 'state': 'ACTIVE', 'link_layer': 'InfiniBand', 'rate_gbps': 400.0}]}]}
GDR = {'gpus': [{'name': 'gpu0', 'vendor': 'nvidia'}, {'name': 'gpu1', 'vendor': 'nvidia'}], 'gdr_ready': True}
RECORDS = [{'side': 'server', 'server': 'a', 'client': 'b'}]
HOSTVARS = {
    'a': {'ansible_facts': {'gpu_fabric_ib': IB, 'gpu_fabric_gdr': GDR, 'gpu_fabric_ib_fabric': {'nodes': []}},
          'ansible_host': '10.0.0.1', 'gpu_fabric_stages': ['validate', 'benchmark'],
          'fabric_collective_env': {'NCCL_IB_HCA': ' =mlx5_0 '}, 'nccl_conf_overrides': {'NCCL_IB_HCA': 'mlx5_9'},
          'fabric_bench_plan': {'hcas': ['mlx5_0']}, '__fabric_bench_tool': {'status': 'skipped'},
          'fabric_bench_records': RECORDS, 'fabric_bench_fleet': {'nodes': ['a', 'b'], 'excluded': {}, 'skipped': None},
          '__fabric_collective_local': {'status': 'ok'}},
    'b': {'ansible_facts': {'gpu_fabric_gdr': {'gpus': [{'name': 'gpu0', 'vendor': 'amd'}]}},
          'gpu_fabric_failures': [{'stage': 'validate', 'msg': 'x'}, 'a plain string'],
          'fabric_bench_plan': {'hcas': ['mlx5_1']}, 'fabric_bench_records_file': '/out/bench-records/b.records.json.gz',
          'fabric_bench_records_run': 'gf-1', 'fabric_bench_records': [{'never': 'read'}],
          'fabric_collective_result': {'fleet': 'b first'}, 'gpu_fabric_offline_lost': 'unreachable'},
    'c': {'fabric_collective_result': {'fleet': 'c'}, 'fabric_bench_fleet': {'nodes': ['other']}},
}


def test_every_part_of_a_node_in_plain_data_and_nothing_copied():
    model = _fleet_model.read(HOSTVARS, ['a', 'b', 'gone', 'c'])
    assert model['hosts'] == ['a', 'b', 'gone', 'c'] and list(model['nodes']) == model['hosts']
    a, b, gone = model['nodes']['a'], model['nodes']['b'], model['nodes']['gone']
    # Facts referenced, not copied; only those the node has.
    assert a['facts']['ib'] is IB and a['facts']['gdr'] is GDR and sorted(a['facts']) == ['fabric', 'gdr', 'ib']
    assert a['address'] == '10.0.0.1' and b['address'] is None
    # Only what a reader uses: the GPU count is the collective's (plugin_utils/fleet/_tasks.py collective_fleet).
    assert 'gpus' not in a and 'offline_lost' not in b
    assert a['stages'] == ['validate', 'benchmark'] and b['stages'] == [] and a['failures'] == []
    assert b['failures'] == [{'stage': 'validate', 'msg': 'x'}, {'msg': 'a plain string'}]
    # NCCL_IB_HCA of the settings in the order they win: the collective's environment first.
    assert a['nccl_ib_hca'] == '=mlx5_0' and b['nccl_ib_hca'] is None
    # Records: in hostvars (by reference), or only the path of their file (the list in hostvars is not read).
    assert a['bench']['records'] is RECORDS and a['bench']['records_file'] is None
    assert b['bench'] == {'plan': {'hcas': ['mlx5_1']}, 'tool': {}, 'records': [],
                          'records_file': '/out/bench-records/b.records.json.gz', 'run_id': 'gf-1'}
    assert a['collective_local'] == {'status': 'ok'} and b['collective_local'] is None
    # A host hostvars does not know: marked, with empty parts.
    assert gone['known'] is False and gone['facts'] == {} and gone['failures'] == [] and gone['bench']['plan'] == {}
    # The fleet-wide values from the first node that holds them.
    assert model['collective'] == {'fleet': 'b first'} and model['bench_fleet'] is HOSTVARS['a']['fabric_bench_fleet']
    assert _fleet_model.known(model) == ['a', 'b', 'c']
    assert _fleet_model.facts_of(model, 'ib') == {'a': IB} and list(_fleet_model.facts_of(model, 'gdr')) == ['a', 'b']
    assert _fleet_model.bench_nodes(model) == {
        'a': {'plan': {'hcas': ['mlx5_0']}, 'records': RECORDS},
        'b': {'plan': {'hcas': ['mlx5_1']}, 'records': [], 'records_file': '/out/bench-records/b.records.json.gz', 'run_id': 'gf-1'},
        'c': {'plan': {}, 'records': []}}


class Counting(dict):
    """hostvars that count the variables read (Ansible templates each one on every read)."""

    def __init__(self, *args):
        super(Counting, self).__init__(*args)
        self.read = []

    def __getitem__(self, host):
        variables = dict.__getitem__(self, host)
        outer = self

        class Vars(dict):
            def get(self, name, default=None):
                outer.read.append((host, name))
                return dict.get(self, name, default)
        return Vars(variables)


def test_only_the_parts_asked_for_are_read():
    hostvars = Counting(HOSTVARS)
    model = _fleet_model.read(hostvars, ['a', 'b'], ('facts',))
    # The node's own record of its settings first (none here), then ansible_host.
    assert set(name for _host, name in hostvars.read) == {'ansible_facts', _fleet_model.SEEN, 'ansible_host'}
    assert sorted(model['nodes']['a']) == ['address', 'facts', 'known'] and model['collective'] is None
    hostvars = Counting(HOSTVARS)
    _fleet_model.read(hostvars, ['a', 'b', 'c'], ('bench', 'collective'))
    # The fleet plan and the collective's result: read until one node holds them, not from every node.
    assert [h for h, name in hostvars.read if name == 'fabric_bench_fleet'] == ['a']
    assert [h for h, name in hostvars.read if name == 'fabric_collective_result'] == ['a', 'b']
    # A records file: the records kept in hostvars are not read.
    assert ('b', 'fabric_bench_records') not in hostvars.read and ('a', 'fabric_bench_records') in hostvars.read


@pytest.mark.parametrize('hosts, parts, words', [
    ('a', ('facts',), 'hosts must be a list'),
    ({'a': 1}, ('facts',), 'hosts must be a list'),
    (['a', 1], ('facts',), 'strings'),
    (['a'], ('facts', 'secrets'), 'no such part of the fleet model: secrets'),
])
def test_bad_arguments_are_refused(hosts, parts, words):
    with pytest.raises(ValueError, match=words):
        _fleet_model.read(HOSTVARS, hosts, parts)


def test_the_filters_read_the_nodes_through_the_model():
    hosts = ['a', 'b', 'gone']
    fleet = fabric_bench.bench_fleet_plan(HOSTVARS, hosts)
    assert fleet['nodes'] == ['a'] and sorted(fleet['excluded']) == ['b', 'gone'] and fleet['skipped']
    # What the rounds need, from the same read: the plans and rails of the nodes to test, no round when nothing runs.
    assert fleet['plans'] == {'a': {'hcas': ['mlx5_0']}} and fleet['rails'] == {'a': ['mlx5_0']}
    assert fleet['summary'] == {'rounds': 0, 'tests_per_round': [0]}
    hostvars = dict(HOSTVARS, b=dict(HOSTVARS['b'], __fabric_bench_tool={'status': 'skipped'}))
    two = fabric_bench.bench_fleet_plan(hostvars, hosts, mode='full', k='1', seed=0)
    assert two['nodes'] == ['a', 'b'] and two['skipped'] is None and two['rails'] == {'a': ['mlx5_0'], 'b': ['mlx5_1']}
    assert two['plans']['b'] is HOSTVARS['b']['fabric_bench_plan'] and two['summary']['rounds'] >= 1
    assert collective.collective_fleet(HOSTVARS, hosts) == {
        'gpus': [2, 1, 0], 'min_gpus': 0, 'ranks': 0, 'vendors': ['amd', 'nvidia'], 'names': {'a': '10.0.0.1', 'b': 'b', 'gone': 'gone'},
        'expected': collective.collective_expected(HOSTVARS, hosts), 'result': {'fleet': 'b first'}}
    assert collective.collective_expected(HOSTVARS, hosts)['gbs'] is not None
    assert fabric_summary.fabric_summary(HOSTVARS, ['gone'])[0].startswith('gone: no facts')
    assert sorted(fabric_summary.fabric_facts_files(HOSTVARS, ['a', 'b'])) == ['a.json', 'b.json']
    built = report.fabric_report(HOSTVARS, hosts)
    assert sorted(built['hosts']) == ['a', 'b', 'gone'] and built['hosts']['gone']['status'] == 'unreachable'
    with pytest.raises(Exception, match='bench_fleet_plan: hosts must be a list'):
        fabric_bench.bench_fleet_plan(HOSTVARS, 'a')


@pytest.mark.parametrize('launcher, given, ranks, expected, want_ranks', [
    # A given figure wins, whatever the launcher; -e passes it as a string.
    ('mpirun', '12.5', None, {'gbs': 12.5, 'basis': 'given (fabric_collective_expected_busbw_gbs)'}, 1),
    ('local', 12.5, '4', {'gbs': 12.5, 'basis': 'given (fabric_collective_expected_busbw_gbs)'}, 4),
    # Per-node runs measure NVLink/PCIe, not the NICs: no expectation without a given figure.
    ('local', None, 0, {'gbs': None, 'basis': 'none given: each node is judged against the median of its peers'}, 1),
    ('srun', '', 2, 'nics', 2),
])
def test_the_collective_plan_in_one_read(launcher, given, ranks, expected, want_ranks):
    """role fabric_collective's expectation and ranks per node come from the one call of collective_fleet."""
    hosts = ['a', 'b']
    plan = collective.collective_fleet(HOSTVARS, hosts, launcher=launcher, expected_gbs=given, ranks_per_node=ranks)
    want = collective.collective_expected(HOSTVARS, hosts) if expected == 'nics' else expected
    assert plan['expected'] == want and plan['ranks'] == want_ranks and plan['min_gpus'] == 1


def _code_tokens(path):
    """The NAME and OP tokens of a Python file: strings and comments (documentation) left out."""
    with open(path, 'rb') as handle:
        source = handle.read().decode('utf-8')
    return [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type in (tokenize.NAME, tokenize.OP)]


def test_no_other_file_of_plugins_indexes_hostvars():
    """hostvars read in one module: elsewhere, hostvars may only be passed on (to the model, as an
    argument) - never indexed (hostvars[host]), searched (host in hostvars) or walked (hostvars.get,
    .items(), for ... in hostvars)."""
    offenders = []
    for path in sorted(glob.glob(os.path.join(REPO, 'plugins', '**', '*.py'), recursive=True)):
        if os.path.basename(path) == '_fleet_model.py':
            continue
        tokens = _code_tokens(path)
        for index, token in enumerate(tokens):
            if token.string != 'hostvars':
                continue
            before = tokens[index - 1].string if index else ''
            after = tokens[index + 1].string if index + 1 < len(tokens) else ''
            if after in ('[', '.') or before == 'in':
                offenders.append('%s:%d' % (os.path.relpath(path, REPO), token.start[0]))
    assert not offenders, 'hostvars indexed outside plugins/plugin_utils/fleet/_fleet_model.py: %s' % ', '.join(offenders)
    # The check sees what it looks for.
    tokens = [t.string for t in tokenize.generate_tokens(io.StringIO("x = hostvars[h] if h in hostvars else {}\n").readline)]
    assert tokens.count('hostvars') == 2


def test_no_play_or_role_extracts_from_hostvars():
    """The roles' and playbooks' Jinja reads the nodes' state through a filter over the model, not with
    map('extract', hostvars, ...)."""
    found = []
    for path in sorted(glob.glob(os.path.join(REPO, 'roles', '**', '*.yml'), recursive=True)
                       + glob.glob(os.path.join(REPO, 'playbooks', '**', '*.yml'), recursive=True)):
        with open(path, encoding='utf-8') as handle:
            for number, line in enumerate(handle, 1):
                if "'extract', hostvars" in line or '"extract", hostvars' in line:
                    found.append('%s:%d' % (os.path.relpath(path, REPO), number))
    assert not found, found


def test_capture_states_name_every_node_and_an_unreachable_one_as_such():
    from ansible_collections.hpc.gpu_fabric.plugins.filter.fabric_summary import capture_states
    hostvars = {'a': {'__gpu_fabric_capture_state': 'ok'}, 'b': {'__gpu_fabric_capture_state': 'tar exited 2'}, 'c': {}}
    assert capture_states(hostvars, ['b', 'a', 'c', 'gone']) == {'b': 'tar exited 2', 'a': 'ok', 'c': 'unreachable', 'gone': 'unreachable'}
    assert list(capture_states(hostvars, ['b', 'a'])) == ['b', 'a']


def test_what_modules_and_set_fact_left_is_read_raw_what_a_user_may_template_through_the_view():
    """Ansible's hostvars[host] (HostVarsVars) templates a variable on every read: a node's facts
    are read from the variables behind it (``_vars``), ansible_host and the NCCL settings, which an
    inventory may set with a template, through it."""
    from collections.abc import Mapping

    class View(Mapping):
        def __init__(self, variables):
            self._vars = variables
            self.templated = []

        def __getitem__(self, key):
            self.templated.append(key)
            value = self._vars[key]
            return value.replace('{{ addr }}', '10.0.0.7') if isinstance(value, str) else value

        def __iter__(self):
            return iter(self._vars)

        def __len__(self):
            return len(self._vars)
    view = View({'ansible_facts': {'gpu_fabric_ib': {'hcas': {}}}, 'ansible_host': '{{ addr }}', 'gpu_fabric_stages': ['validate'],
                 'fabric_collective_env': {'NCCL_IB_HCA': 'mlx5_0'}, 'fabric_collective_result': {'status': 'ok'}})
    model = _fleet_model.read({'a': view}, ['a'])
    node = model['nodes']['a']
    assert node['facts'] == {'ib': {'hcas': {}}} and node['stages'] == ['validate'] and model['collective'] == {'status': 'ok'}
    assert node['address'] == '10.0.0.7' and node['nccl_ib_hca'] is not None
    assert sorted(view.templated) == ['ansible_host', 'fabric_collective_env', 'gpu_fabric_expected', 'nccl_conf_overrides'], view.templated


def _ansible_hostvars(tmp_path, nodes):
    """Ansible's own hostvars (HostVars over a VariableManager and an inventory file), the nodes'
    facts and set_fact results put where the strategy puts them; every __getitem__ counted."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.hostvars import HostVars
    from ansible.vars.manager import VariableManager

    inventory = tmp_path / 'hosts.ini'
    inventory.write_text('[gpu]\n' + ''.join('%s ansible_host="{{ inventory_hostname }}.ib"\n' % host for host in nodes)
                         + '[gpu:vars]\nnccl_conf_overrides={"NCCL_IB_HCA": "=mlx5_{{ 1 + 2 }}"}\n')
    loader = DataLoader()
    manager = VariableManager(loader=loader, inventory=InventoryManager(loader=loader, sources=[str(inventory)]))
    for host, (facts, set_facts) in nodes.items():
        manager.set_host_facts(host, facts)
        manager.set_nonpersistent_facts(host, set_facts)
    # What add_host gives a host (playbooks/offline.yml: a snapshot refused, its failure record).
    manager._inventory.get_host('c').set_variable('gpu_fabric_failures', [{'stage': 'offline', 'msg': 'refused'}])

    class Counted(HostVars):
        views = []

        def __getitem__(self, key):
            Counted.views.append(key)
            return super(Counted, self).__getitem__(key)
    return Counted(inventory=manager._inventory, variable_manager=manager, loader=loader), Counted.views


def test_ansible_hostvars_are_read_from_its_caches_and_the_view_only_where_a_node_recorded_nothing(tmp_path):
    seen = {'address': '10.9.0.1', 'nccl': [{'NCCL_IB_HCA': 'mlx5_4'}, {}]}
    nodes = {
        # Through validate: its settings recorded there (playbooks/validate.yml), as Ansible templated them.
        'a': ({'gpu_fabric_ib': IB, 'gpu_fabric_gdr': GDR},
              {'gpu_fabric_stages': ['validate'], _fleet_model.SEEN: seen, 'fabric_bench_plan': {'hcas': ['mlx5_0']},
               'fabric_bench_fleet': {'nodes': ['a']}, 'fabric_collective_result': {'status': 'ok'}}),
        # Its facts failed: nothing recorded, read through the templated view.
        'b': ({'gpu_fabric_gdr': GDR}, {'gpu_fabric_failures': [{'stage': 'validate', 'msg': 'x'}]}),
        # Never answered: no facts, no set_fact.
        'c': ({}, {}),
    }
    hostvars, views = _ansible_hostvars(tmp_path, nodes)
    model = _fleet_model.read(hostvars, ['a', 'b', 'c', 'gone'])
    a, b, c, gone = (model['nodes'][host] for host in ('a', 'b', 'c', 'gone'))
    # From the caches: the facts and set_fact values; from the inventory, what add_host set.
    assert a['facts']['ib'] == IB and a['facts']['gdr'] == GDR and a['stages'] == ['validate']
    assert a['bench']['plan'] == {'hcas': ['mlx5_0']} and model['bench_fleet'] == {'nodes': ['a']}
    assert model['collective'] == {'status': 'ok'}
    # What the node recorded wins; the view is built for the nodes that recorded nothing, once each.
    assert a['address'] == '10.9.0.1' and a['nccl_ib_hca'] == 'mlx5_4'
    assert b['address'] == 'b.ib' and b['nccl_ib_hca'] == '=mlx5_3' and b['failures'] == [{'stage': 'validate', 'msg': 'x'}]
    assert c['address'] == 'c.ib' and c['facts'] == {} and c['stages'] == [] and c['failures'] == [{'stage': 'offline', 'msg': 'refused'}]
    assert gone['known'] is False and gone['address'] is None
    assert sorted(views) == ['b', 'c'], views
    # The same model as through the view of every node (what a plain mapping of the templated variables gives).
    plain = dict((host, dict(hostvars[host])) for host in ('a', 'b', 'c'))
    for host in plain:
        plain[host]['ansible_facts'] = dict(plain[host].get('ansible_facts', {}))
    assert _fleet_model.read(plain, ['a', 'b', 'c', 'gone']) == model
    # Parts that need no setting of a user build no view at all.
    del views[:]
    _fleet_model.read(hostvars, ['a', 'b', 'c'], ('bench', 'collective', 'capture'))
    assert views == []


@pytest.mark.parametrize('version, plugin, wraps', [
    ('2.16.3', 'jsonfile', True), ('2.18.1', 'redis', True), ('2.16.3', 'memory', False), ('2.19.0', 'jsonfile', False)])
def test_facts_from_a_cache_on_disk_are_marked_unsafe_before_2_19(monkeypatch, version, plugin, wraps):
    """A persistent fact cache hands back an earlier run's facts as plain strings: before 2.19 a
    plain string may be templated, so they are wrapped as get_vars() wraps them."""
    from ansible import constants, release
    from ansible.utils.unsafe_proxy import wrap_var
    monkeypatch.setattr(release, '__version__', version)
    monkeypatch.setattr(constants, 'CACHE_PLUGIN', plugin, raising=False)
    assert (_fleet_model._unsafe() is wrap_var) is wraps
