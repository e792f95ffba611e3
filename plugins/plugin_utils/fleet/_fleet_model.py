# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The fleet model: what the controller knows of each node, read from hostvars once, here.

This is the one module that knows the shape of hostvars - which variable the roles and playbooks
keep what in (tests/unit/plugins/plugin_utils/test__fleet_model.py keeps every other file of
plugins/ from indexing hostvars). Every filter and action that works on the nodes' state calls
read() and works on the model it returns:

    {'hosts': [inventory names, in the order given],
     'nodes': {host: node},
     'collective': the collective's result (role fabric_collective keeps it on every node of its
                   play, offline.yml on every node): from the first node that holds one, or None,
     'bench_fleet': the benchmark's fleet plan (role fabric_bench: the nodes, those left out and
                    why, why nothing ran), from the first node that holds one, or None}

and per node (each part only where it was asked for, ``parts``):

    'known':      whether the host is in hostvars at all;
    facts:        'facts' {'ib', 'gdr', 'fabric', 'roce'}: the facts modules' results, only those
                  the node has (ib_link_facts, gdr_facts, ib_fabric_facts, roce_qos_facts), and
                  'address' (ansible_host, or None);
    run:          'stages' (the stages it got through), 'failures' (its rescued task failures,
                  each a mapping), 'nccl_ib_hca' (NCCL_IB_HCA of its settings, or None),
                  'expected' (gpu_fabric_expected as the node saw it, or None);
    bench:        'bench' {'plan', 'tool', 'records', 'records_file', 'run_id'}: role fabric_bench's
                  plan, its check-mode perftest_run result, the records it kept (in hostvars, or
                  the path of the file perftest_collect wrote them to, and the run they are from);
    collective:   'collective_local': its own collective run (launcher local), or None;
    capture:      'capture_state': what capture.yml's snapshot of it came to ('ok', or why not), None
                  where it set none (it did not answer).

Nothing is copied: the values are the ones hostvars hold (read-only by convention), records stay
in their files (plugin_utils/bench/_bench.py reads them one node at a time), and a part that was not
asked for is not read.

How: what the nodes' modules, register and set_fact left is read where Ansible keeps it (its fact
and set_fact caches, _stores()), untemplated; what a user may set with a template (ansible_host,
the NCCL settings) from what the node recorded of it (SEEN), else through Ansible's templated view
(hostvars[host]), which costs a merge of every variable layer of the host (_stores() says how much).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, cast

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _rails

PARTS = ('facts', 'run', 'bench', 'collective', 'capture')
# Where each fact module puts its result (under ansible_facts: their copies as top-level variables,
# INJECT_FACTS_AS_VARS, are deprecated from ansible-core 2.21 on and go in 2.24), and its name here.
FACT_KEYS = (('gpu_fabric_ib', 'ib'), ('gpu_fabric_gdr', 'gdr'), ('gpu_fabric_ib_fabric', 'fabric'), ('gpu_fabric_roce', 'roce'),
             ('gpu_fabric_gpu', 'gpu'),
             ('gpu_fabric_nccl', 'nccl'))
# The node's NCCL settings, in the order they win: the collective's environment, then what role
# nccl_conf writes (module_utils/_rails.py settings_ib_hca; role fabric_bench passes the same two).
SETTINGS = ('fabric_collective_env', 'nccl_conf_overrides')
# What playbooks/capture.yml sets on each node it reached: 'ok', or why its snapshot failed.
CAPTURE_STATE = '__gpu_fabric_capture_state'
# What playbooks/validate.yml and benchmark.yml record on each node of the variables a user may set
# with a template (in the inventory, group_vars, -e), as Ansible templated them there:
# {'address': ansible_host or '', 'nccl': [the SETTINGS, each a mapping]}. A node without it (its
# facts failed, or it never answered) is read through Ansible's templated view of its variables.
SEEN = '__gpu_fabric_seen'
# The inventory a user expects of a node (per group or host; plugin_utils/diagnosis/_inventory.py reads it).
EXPECTED = 'gpu_fabric_expected'
# What roles/fabric_collective/tasks/local.yml registers on each node (launcher local).
COLLECTIVE_LOCAL = '__fabric_collective_local'
# What its idle gate registers just before that run (gpu_state_facts parts=[processes], as_facts=false).
COLLECTIVE_GATE = '__fabric_collective_gpu_gate'

# (inventory, fact cache, set_fact cache, wrap_var or None): _stores().
_Stores = tuple[Any, Any, Any, Callable[[Any], Any] | None]


def _get(variables: Any, name: str, default: Any = None) -> Any:
    try:
        value = variables.get(name, default)
    except (AttributeError, TypeError):
        return default
    return default if value is None else value


class _Node(object):
    """One node's variables: ``raw``, what modules, register and set_fact left, untemplated (they
    hold no template: set_fact templates its arguments before it stores them); ``view()``, Ansible's
    templated view of all of them (hostvars[host]), built only when a variable a user may set with a
    template is needed and the node did not record it (SEEN)."""

    __slots__ = ('raw', '_hostvars', '_host', '_view')

    def __init__(self, hostvars: Any, host: str, raw: Any = None) -> None:
        self._hostvars, self._host = hostvars, host
        self._view: Any = None
        self.raw = raw if raw is not None else _behind(self.view())

    def view(self) -> Any:
        if self._view is None:
            self._view = self._hostvars[self._host] if self._host in self._hostvars else {}
        return self._view


def _behind(variables: Any) -> Any:
    """The variables behind Ansible's view of one host (hostvars[host], a HostVarsVars: ansible-core
    2.16 to 2.21 keep them in ``_vars``), untemplated; any other mapping as it is."""
    raw = getattr(variables, '_vars', None)
    return raw if hasattr(raw, 'get') else variables


def _stores(hostvars: Any) -> _Stores | None:
    """Where Ansible keeps what the nodes' tasks left, when ``hostvars`` is Ansible's (a HostVars:
    ansible-core 2.16 to 2.21 hold its inventory in ``_inventory`` and its VariableManager in
    ``_variable_manager``): the inventory (each host's own variables: what add_host gave it,
    playbooks/offline.yml's failure records), the fact cache (modules' ansible_facts) and the
    set_fact cache (set_fact and register), and how to mark facts read from a cache on disk as
    data, never templates (None: no need); None for any other mapping. Why not hostvars[host]:
    each one is a VariableManager.get_vars() of the host - every inventory, group and vars-plugin
    layer merged and the node's facts copied twice (namespaced, and again as top-level variables) -
    about 5 ms a node with this collection's facts: reading these stores instead took 16.6 s off
    the three controller tasks that read 1,024 nodes (tests/bench/controller_scale.py --ansible,
    ansible-core 2.21, 37.0 to 20.4 s). These are the layers get_vars() takes the
    variables read raw from (ansible-core lib/ansible/vars/manager.py), in its order; what a user
    may set with a template (SEEN) is not read from them."""
    manager = getattr(hostvars, '_variable_manager', None)
    inventory = getattr(hostvars, '_inventory', None)
    facts = getattr(manager, '_fact_cache', None)
    set_facts = getattr(manager, '_nonpersistent_fact_cache', None)
    if manager is None or not hasattr(inventory, 'get_host') or not hasattr(facts, 'get') or not hasattr(set_facts, 'get'):
        return None
    return inventory, facts, set_facts, _unsafe()


def _unsafe() -> Callable[[Any], Any] | None:
    """wrap_var, where facts read from the fact cache may be neither this run's module results nor
    marked unsafe: ansible-core before 2.19 marks a module's result unsafe (a string in it is never
    templated) before it reaches the cache, but facts a persistent cache plugin (jsonfile, redis)
    loads from an earlier run come back as plain strings; get_vars() wraps them on every read. From
    2.19 on no string is a template unless marked trusted. None where nothing is to be done."""
    try:
        from ansible import constants
        from ansible.release import __version__
        from ansible.utils.unsafe_proxy import wrap_var
    except ImportError:
        return None
    version = tuple(int(part) for part in __version__.split('.')[:2] if part.isdigit())
    if version >= (2, 19) or getattr(constants, 'CACHE_PLUGIN', 'memory') in ('memory', 'ansible.builtin.memory'):
        return None
    return cast('Callable[[Any], Any]', wrap_var)


def _raw_of(stores: _Stores, host: str) -> dict[str, Any]:
    inventory, facts, set_facts, unsafe = stores
    try:
        node_facts = facts.get(host)
    except KeyError:                 # a cache plugin other than memory may raise for a host it never saw
        node_facts = None
    entry = inventory.get_host(host)
    raw = dict(getattr(entry, 'vars', None) or {})
    raw.update(set_facts.get(host) or {})
    # As get_vars() namespaces them: ansible_facts.<name> (this collection's names have no ansible_ prefix).
    raw['ansible_facts'] = (unsafe(node_facts) if unsafe else node_facts) if node_facts else {}
    return raw


def _seen(node: _Node) -> dict[str, Any] | None:
    """What the node recorded of the variables a user may set with a template (SEEN), as Ansible
    templated them on the node, or None: the view is read."""
    seen = _get(node.raw, SEEN)
    return seen if isinstance(seen, dict) and 'address' in seen and isinstance(seen.get('nccl'), (list, tuple)) else None


def _facts(node: _Node) -> dict[str, Any]:
    facts = _get(node.raw, 'ansible_facts', {})
    present: dict[str, Any] = {}
    if hasattr(facts, 'get'):
        for key, short in FACT_KEYS:
            if key in facts:
                present[short] = facts[key]
    seen = _seen(node)
    return {'facts': present, 'address': (seen['address'] or None) if seen else _get(node.view(), 'ansible_host')}


def _run(node: _Node) -> dict[str, Any]:
    raw = node.raw
    # A record that is no mapping (a hand-written string) is kept as its message.
    failures = [r if isinstance(r, dict) else {'msg': str(r)} for r in _get(raw, 'gpu_fabric_failures', [])]
    seen = _seen(node)
    settings = list(seen['nccl']) if seen else [_get(node.view(), name) for name in SETTINGS]
    # The inventory the user expects of the node (plugin_utils/diagnosis/_inventory.py), as validate recorded it.
    # A record without it (written before the variable existed) stands for no expectation: no view for it alone.
    expected = seen.get('expected') if seen else _get(node.view(), EXPECTED)
    return {'stages': list(_get(raw, 'gpu_fabric_stages', [])), 'failures': failures,
            'nccl_ib_hca': _rails.settings_ib_hca(*settings), 'expected': expected}


def _bench(variables: Any) -> dict[str, Any]:
    bench: dict[str, Any] = {'plan': _get(variables, 'fabric_bench_plan', {}), 'tool': _get(variables, '__fabric_bench_tool', {}),
                             'records_file': _get(variables, 'fabric_bench_records_file') or None, 'records': []}
    if bench['records_file']:
        # Written by perftest_collect (fabric_bench_records_dir): the file is read when the pairs are judged.
        bench['run_id'] = _get(variables, 'fabric_bench_records_run')
    else:
        bench['records'] = _get(variables, 'fabric_bench_records', [])
    return bench


def read(hostvars: Any, hosts: Any, parts: Iterable[str] = PARTS) -> dict[str, Any]:
    """The fleet model of ``hosts`` (inventory names) from ``hostvars`` (Ansible's, or any
    {host: {variable: value}}); ``parts``: which of PARTS to read. ValueError for hosts that are
    not a list of names or an unknown part."""
    if isinstance(hosts, (str, bytes, dict)) or not hasattr(hosts, '__iter__'):
        raise ValueError('hosts must be a list of inventory names, got %s' % type(hosts).__name__)
    names: list[str] = list(hosts)
    if not all(isinstance(host, str) for host in names):
        raise ValueError('hosts must be a list of inventory names (strings)')
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError('no such part of the fleet model: %s' % ', '.join(sorted(unknown)))
    hostvars = hostvars if hostvars is not None else {}
    model: dict[str, Any] = {'hosts': names, 'nodes': {}, 'collective': None, 'bench_fleet': None}
    stores = _stores(hostvars)
    for host in names:
        known = host in hostvars
        node: dict[str, Any] = {'known': known}
        variables = _Node(hostvars, host, _raw_of(stores, host) if stores and known else None)
        raw = variables.raw
        if 'facts' in parts:
            node.update(_facts(variables))
        if 'run' in parts:
            node.update(_run(variables))
        if 'bench' in parts:
            node['bench'] = _bench(raw)
            # Every node holds the same fleet plan (a run_once set_fact): read from the first only.
            if model['bench_fleet'] is None:
                model['bench_fleet'] = _get(raw, 'fabric_bench_fleet') or None
        if 'capture' in parts:
            node['capture_state'] = _get(raw, CAPTURE_STATE)
        if 'collective' in parts:
            node['collective_local'] = _get(raw, COLLECTIVE_LOCAL)
            node['collective_gate'] = _get(raw, COLLECTIVE_GATE)
            # The first node that holds one: a node left out of the benchmark (its facts failed)
            # holds none, and may come first in the inventory.
            if model['collective'] is None:
                model['collective'] = _get(raw, 'fabric_collective_result')
        model['nodes'][host] = node
    return model


def known(model: dict[str, Any]) -> list[str]:
    """The hosts of ``model`` that are in hostvars, in its order."""
    return [host for host in model['hosts'] if model['nodes'][host]['known']]


def facts_of(model: dict[str, Any], name: str) -> dict[str, Any]:
    """{host: its ``name`` facts ('ib', 'gdr', ...)} for the nodes of ``model`` that have them, in its order."""
    return dict((host, model['nodes'][host]['facts'][name]) for host in model['hosts'] if name in model['nodes'][host]['facts'])


def bench_nodes(model: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{host: {'plan', 'records' or 'records_file' and 'run_id'}} of the known nodes: what
    plugin_utils/bench/_bench.py report() judges."""
    nodes: dict[str, dict[str, Any]] = {}
    for host in known(model):
        bench = model['nodes'][host]['bench']
        nodes[host] = {'plan': bench['plan'], 'records': bench['records']}
        if bench['records_file']:
            nodes[host].update(records_file=bench['records_file'], run_id=bench.get('run_id'))
    return nodes
