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
                  each a mapping), 'nccl_ib_hca' (NCCL_IB_HCA of its settings, or None);
    bench:        'bench' {'plan', 'tool', 'records', 'records_file', 'run_id'}: role fabric_bench's
                  plan, its check-mode perftest_run result, the records it kept (in hostvars, or
                  the path of the file perftest_collect wrote them to, and the run they are from);
    collective:   'collective_local': its own collective run (launcher local), or None;
    capture:      'capture_state': what capture.yml's snapshot of it came to ('ok', or why not), None
                  where it set none (it did not answer).

Nothing is copied: the values are the ones hostvars hold (read-only by convention), records stay
in their files (plugin_utils/_bench.py reads them one node at a time), and a part that was not
asked for is not read (a variable read through Ansible's hostvars is templated on every read).
"""

from __future__ import annotations

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _rails

PARTS = ('facts', 'run', 'bench', 'collective', 'capture')
# Where each fact module puts its result (under ansible_facts: their copies as top-level variables,
# INJECT_FACTS_AS_VARS, are deprecated from ansible-core 2.21 on and go in 2.24), and its name here.
FACT_KEYS = (('gpu_fabric_ib', 'ib'), ('gpu_fabric_gdr', 'gdr'), ('gpu_fabric_ib_fabric', 'fabric'), ('gpu_fabric_roce', 'roce'))
# The node's NCCL settings, in the order they win: the collective's environment, then what role
# nccl_conf writes (module_utils/_rails.py settings_ib_hca; role fabric_bench passes the same two).
SETTINGS = ('fabric_collective_env', 'nccl_conf_overrides')
# What playbooks/capture.yml sets on each node it reached: 'ok', or why its snapshot failed.
CAPTURE_STATE = '__gpu_fabric_capture_state'
# What roles/fabric_collective/tasks/local.yml registers on each node (launcher local).
COLLECTIVE_LOCAL = '__fabric_collective_local'


def _get(variables, name, default=None):
    try:
        value = variables.get(name, default)
    except (AttributeError, TypeError):
        return default
    return default if value is None else value


def _raw(variables):
    """The variables behind Ansible's view of one host (hostvars[host], a HostVarsVars: ansible-core
    2.16 to 2.21 keep them in ``_vars``), untemplated; any other mapping as it is. Templating a
    node's facts on every read is most of what a report over 1,024 nodes cost inside ansible-playbook
    (tests/bench/controller_scale.py --ansible); what modules and set_fact left holds no template
    (set_fact templates its arguments before it stores them), so it is read raw. A variable a user
    may set with a template (ansible_host, the NCCL settings) is read through the view."""
    raw = getattr(variables, '_vars', None)
    return raw if hasattr(raw, 'get') else variables


def _facts(variables, raw):
    facts = _get(raw, 'ansible_facts', {})
    present = {}
    if hasattr(facts, 'get'):
        for key, short in FACT_KEYS:
            if key in facts:
                present[short] = facts[key]
    return {'facts': present, 'address': _get(variables, 'ansible_host')}


def _run(variables, raw):
    # A record that is no mapping (a hand-written string) is kept as its message.
    failures = [r if isinstance(r, dict) else {'msg': str(r)} for r in _get(raw, 'gpu_fabric_failures', [])]
    settings = [_get(variables, name) for name in SETTINGS]
    return {'stages': list(_get(raw, 'gpu_fabric_stages', [])), 'failures': failures,
            'nccl_ib_hca': _rails.settings_ib_hca(*settings)}


def _bench(variables):
    bench = {'plan': _get(variables, 'fabric_bench_plan', {}), 'tool': _get(variables, '__fabric_bench_tool', {}),
             'records_file': _get(variables, 'fabric_bench_records_file') or None, 'records': []}
    if bench['records_file']:
        # Written by perftest_collect (fabric_bench_records_dir): the file is read when the pairs are judged.
        bench['run_id'] = _get(variables, 'fabric_bench_records_run')
    else:
        bench['records'] = _get(variables, 'fabric_bench_records', [])
    return bench


def read(hostvars, hosts, parts=PARTS):
    """The fleet model of ``hosts`` (inventory names) from ``hostvars`` (Ansible's, or any
    {host: {variable: value}}); ``parts``: which of PARTS to read. ValueError for hosts that are
    not a list of names or an unknown part."""
    if isinstance(hosts, (str, bytes, dict)) or not hasattr(hosts, '__iter__'):
        raise ValueError('hosts must be a list of inventory names, got %s' % type(hosts).__name__)
    hosts = list(hosts)
    if not all(isinstance(host, str) for host in hosts):
        raise ValueError('hosts must be a list of inventory names (strings)')
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError('no such part of the fleet model: %s' % ', '.join(sorted(unknown)))
    hostvars = hostvars if hostvars is not None else {}
    model = {'hosts': hosts, 'nodes': {}, 'collective': None, 'bench_fleet': None}
    for host in hosts:
        known = host in hostvars
        variables = hostvars[host] if known else {}
        node = {'known': known}
        raw = _raw(variables)
        if 'facts' in parts:
            node.update(_facts(variables, raw))
        if 'run' in parts:
            node.update(_run(variables, raw))
        if 'bench' in parts:
            node['bench'] = _bench(raw)
            # Every node holds the same fleet plan (a run_once set_fact): read from the first only.
            if model['bench_fleet'] is None:
                model['bench_fleet'] = _get(raw, 'fabric_bench_fleet') or None
        if 'capture' in parts:
            node['capture_state'] = _get(raw, CAPTURE_STATE)
        if 'collective' in parts:
            node['collective_local'] = _get(raw, COLLECTIVE_LOCAL)
            # The first node that holds one: a node left out of the benchmark (its facts failed)
            # holds none, and may come first in the inventory.
            if model['collective'] is None:
                model['collective'] = _get(raw, 'fabric_collective_result')
        model['nodes'][host] = node
    return model


def known(model):
    """The hosts of ``model`` that are in hostvars, in its order."""
    return [host for host in model['hosts'] if model['nodes'][host]['known']]


def facts_of(model, name):
    """{host: its ``name`` facts ('ib', 'gdr', ...)} for the nodes of ``model`` that have them, in its order."""
    return dict((host, model['nodes'][host]['facts'][name]) for host in model['hosts'] if name in model['nodes'][host]['facts'])


def bench_nodes(model):
    """{host: {'plan', 'records' or 'records_file' and 'run_id'}} of the known nodes: what
    plugin_utils/_bench.py report() judges."""
    nodes = {}
    for host in known(model):
        bench = model['nodes'][host]['bench']
        nodes[host] = {'plan': bench['plan'], 'records': bench['records']}
        if bench['records_file']:
            nodes[host].update(records_file=bench['records_file'], run_id=bench.get('run_id'))
    return nodes
