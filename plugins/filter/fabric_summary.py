# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

from typing import Any, Callable

# Several filters live here: each is documented in its own plugins/filter/<name>.yml, which
# ansible-doc reads because this file has no DOCUMENTATION (as ansible-core's filter/core.py).
from ansible.errors import AnsibleFilterError
from ansible.plugins.filter.core import to_nice_json

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _printable  # what a terminal may be shown
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _rails  # what each HCA is for
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis import _diagnose  # the one judge of a port
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _fleet_model  # the nodes' state, read from hostvars
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _tasks  # the playbooks' and roles' small helpers


def _port_line(device: dict[str, Any], port: dict[str, Any]) -> str:
    rate = '%g Gb/s' % port['rate_gbps'] if port.get('rate_gbps') is not None else 'rate unknown'
    return '%s/%s %s %s/%s %s %s' % (device['name'], port.get('port'), port.get('link_layer') or '?',
                                     port.get('state') or '?', port.get('phys_state') or '?', rate,
                                     port.get('width') or '')


def _problem(item: dict[str, Any]) -> str:
    counters = (item.get('evidence') or {}).get('counters') if item['code'] == 'IB_ERROR_COUNTERS' else None
    return '%s %s%s' % (item['code'], item['cause'], ' (%s)' % ', '.join('%s=%s' % kv for kv in sorted(counters.items()))
                        if counters else '')


def _node_line(host: str, ib: dict[str, Any] | None, gdr: dict[str, Any] | None, ports: list[tuple[Any, Any]]) -> str:
    """The node's first line: its devices, ports, GPUs and whether GPUDirect RDMA is ready."""
    active = [x for x in ports if x[1].get('state') == 'ACTIVE']
    gpus = (gdr or {}).get('gpus', [])
    vendors = sorted(set(g['vendor'] for g in gpus))
    ready = (gdr or {}).get('gdr_ready')
    return '%s: %d RDMA device(s), %d/%d port(s) ACTIVE; %d GPU(s)%s; GPUDirect RDMA %s' % (
        host, len((ib or {}).get('devices', [])), len(active), len(ports), len(gpus),
        ' (%s)' % ', '.join(vendors) if vendors else '',
        'ready' if ready else ('NOT ready' if ready is False else 'unknown'))


def node_summary(host: str, ib: dict[str, Any] | None, gdr: dict[str, Any] | None) -> list[str]:
    """Lines for one node; ``ib``/``gdr`` are the facts or None when they were not gathered."""
    if ib is None and gdr is None:
        return ['%s: no facts (unreachable, or the facts tasks failed on it)' % host]
    ports = [(d, p) for d in (ib or {}).get('devices', []) for p in d.get('ports', [])]
    lines = [_node_line(host, ib, gdr, ports)]
    # The port's findings as the diagnosis judges them (_diagnose.ib_findings: down, slower than its
    # peers of one model and role, error counters, no RoCE v2 GID), not a second judgement here;
    # what is only info there (a storage card's uncabled port) is marked '-', not '!'.
    judged: dict[str, list[dict[str, Any]]] = {}
    for item in _diagnose.ib_findings(host, ib, _rails.roles(ib, gdr)) if ib else []:
        judged.setdefault(item['subject'], []).append(item)
    for device, port in ports:
        found = judged.get('%s/%s' % (device['name'], port.get('port'))) or []
        if found:
            lines.append('  %s %s: %s' % ('!' if any(f['severity'] != 'info' for f in found) else '-', _port_line(device, port),
                                          '; '.join(_problem(f) for f in found)))
    for reason in (gdr or {}).get('reasons', []):
        lines.append('  ! %s' % reason)
    for note in (gdr or {}).get('notes', []):
        lines.append('  - %s' % note)
    return lines


def _model(name: str, hostvars: Any, hosts: Any) -> dict[str, Any]:
    # A node's facts as the fleet model reads them from hostvars (plugin_utils/fleet/_fleet_model.py).
    if not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError('%s: hosts must be a list of inventory names, got %s' % (name, type(hosts).__name__))
    try:
        return _fleet_model.read(hostvars, hosts, ('facts',))
    except ValueError as exc:
        raise AnsibleFilterError('%s: %s' % (name, exc))


def fabric_summary(hostvars: Any, hosts: Any) -> list[str]:
    model = _model('fabric_summary', hostvars, hosts)
    lines: list[str] = []
    for host in model['hosts']:
        facts = model['nodes'][host]['facts']
        lines.extend(node_summary(host, facts.get('ib'), facts.get('gdr')))
    # Host names, HCA types and reasons are the nodes' own text: printed, they must not drive the terminal.
    return _printable.printable_lines(lines)


def fabric_facts_files(hostvars: Any, hosts: Any) -> dict[str, str]:
    """{'<host>.json': its facts as JSON text}: validate.yml's facts/ directory, written in one
    task (hpc.gpu_fabric.fabric_output) instead of one copy per node."""
    model = _model('fabric_facts_files', hostvars, hosts)
    files: dict[str, str] = {}
    for host in model['hosts']:
        facts = model['nodes'][host]['facts']
        written = {'ib': facts.get('ib'), 'gdr': facts.get('gdr')}
        if 'gpu' in facts:   # the GPUs' own state (gpu_state_facts), where it was read
            written['gpu'] = facts['gpu']
        files['%s.json' % host] = to_nice_json(written) + '\n'
    return files


# The playbooks' and roles' helpers that would otherwise be long Jinja (plugin_utils/fleet/_tasks.py).
def failure_record(failed: Any, stage: object, task: Any = None, unreachable: bool = False) -> dict[str, Any]:
    if not isinstance(stage, str) or not stage:
        raise AnsibleFilterError('failure_record: give the stage (validate, configure, benchmark, offline)')
    return _tasks.failure_record(failed, stage, task, unreachable)


def file_kind(stat: Any) -> str:
    if not hasattr(stat, 'get'):
        raise AnsibleFilterError('file_kind: expected the stat of ansible.builtin.stat, not %s' % type(stat).__name__)
    return _tasks.file_kind(dict(stat))


def fabric_discovery(hostvars: Any, hosts: Any) -> dict[str, Any]:
    model = _model('fabric_discovery', hostvars, hosts)
    return _tasks.fabric_discovery([(host, model['nodes'][host]['facts'].get('ib')) for host in model['hosts']])


def capture_states(hostvars: Any, hosts: Any) -> dict[str, Any]:
    """{host: what capture.yml's snapshot of it came to}: 'ok', why it failed, or 'unreachable'
    where the node set no state (it did not answer)."""
    if not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError('capture_states: hosts must be a list of inventory names, got %s' % type(hosts).__name__)
    try:
        model = _fleet_model.read(hostvars, hosts, ('capture',))
    except ValueError as exc:
        raise AnsibleFilterError('capture_states: %s' % exc)
    return dict((host, model['nodes'][host]['capture_state'] or 'unreachable') for host in model['hosts'])


def hosts_within(hosts: Any, among: Any = None) -> list[Any]:
    """The names of ``hosts`` that are in ``among`` (None: every one), in the order of ``hosts``
    (playbooks/vars/nodes.yml: the nodes of a run within --limit). One set of ``among``: Jinja's
    select('in', list) walks the list for every host, and from ansible-core 2.19 on each walk
    goes through a lazily templated list: 3.5 s for 1,024 hosts, in every task naming the nodes
    (tests/bench/controller_scale.py --ansible: "Write the collective results" went from 5.1 to 0.3 s)."""
    for name, value in (('hosts', hosts), ('among', among)):
        if value is not None and (isinstance(value, (str, bytes, dict)) or not hasattr(value, '__iter__')):
            raise AnsibleFilterError('hosts_within: %s must be a list of inventory names, got %s' % (name, type(value).__name__))
    if hosts is None:
        raise AnsibleFilterError('hosts_within: hosts must be a list of inventory names, got None')
    if among is None:
        return list(hosts)
    keep = set(among)
    return [host for host in hosts if host in keep]


def modules_not_loaded(failed: Any, modprobe_results: Any, kernel_log: object = '', no_ofed_hint: str | None = None) -> str:
    if isinstance(failed, str) or not hasattr(failed, '__iter__'):
        raise AnsibleFilterError('modules_not_loaded: expected a list of module names, not %s' % type(failed).__name__)
    return _tasks.modules_not_loaded(list(failed), list(modprobe_results or []), kernel_log, no_ofed_hint)


def split_reason(hosts: Any, nodes: Any, slices: Any = 1, number: Any = '?', limited: Any = False) -> str:
    """Why the cross-host stages cannot run in this run (a slice of a sliced AWX job, a --limit that leaves nodes of
    gpu_fabric_hosts out), or '' (playbooks/vars/nodes.yml __gpu_fabric_split)."""
    for name, value in (('hosts', hosts), ('nodes', nodes)):
        if isinstance(value, (str, bytes, dict)) or not hasattr(value, '__iter__'):
            raise AnsibleFilterError('split_reason: %s must be a list of inventory names, got %s' % (name, type(value).__name__))
    return _tasks.split_reason(list(hosts), list(nodes), slices, number, bool(limited))


class FilterModule(object):

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {'fabric_summary': fabric_summary, 'fabric_facts_files': fabric_facts_files, 'failure_record': failure_record,
                'file_kind': file_kind, 'fabric_discovery': fabric_discovery, 'modules_not_loaded': modules_not_loaded,
                'capture_states': capture_states, 'hosts_within': hosts_within, 'split_reason': split_reason}
