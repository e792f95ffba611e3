# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What the playbooks' and roles' tasks would otherwise spell out in long Jinja: the failure record
of a rescue, what a path is in words, which node discovers the fabric, why kernel modules did not
load, why the collective benchmark did not run. Pure functions; the filters of
plugins/filter/fabric_summary.py and collective.py call them (tests/unit/test_playbook_limits.py
keeps the YAML short).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Sequence, TypeVar

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _collective
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._shape import mapping, mappings

# How much of a failed task's message the report keeps.
FAILURE_MSG_LENGTH = 2000

_N = TypeVar('_N', int, float)


def truncate(value: str, length: int, end: str = '...', leeway: int = 5) -> str:
    """Jinja2's truncate filter as the playbooks used it (jinja2/filters.py do_truncate, killwords
    false, the default leeway policy of 5): a text up to ``length + leeway`` long is kept whole,
    a longer one is cut at the last space before ``length - len(end)`` and ends in ``end``."""
    if len(value) <= length + leeway:
        return value
    return value[:length - len(end)].rsplit(' ', 1)[0] + end


# ansible-core 2.19 starts the message of an unreachable result with it; the report says it its own way.
_UNREACHABLE_PREFIX = 'Task failed: '


def failure_record(failed: Any, stage: object, task: Any = None, unreachable: bool = False) -> dict[str, Any]:
    """The record a rescue keeps in ``gpu_fabric_failures`` (read by the report: HOST_TASK_FAILED, or
    HOST_UNREACHABLE where ``unreachable``): {stage, task, msg, unreachable}.

    ``failed`` is the failed task's result (ansible_failed_result: its msg, else its stderr, else
    'failed', cut to FAILURE_MSG_LENGTH as the rescues cut it), the connection check's result of a
    node that did not answer, or a message of the playbook's own (kept whole); ``task`` the failed
    task (ansible_failed_task: its name) or a name."""
    if hasattr(failed, 'keys'):
        msg = truncate(str(failed['msg'] if 'msg' in failed else failed.get('stderr', 'failed')), FAILURE_MSG_LENGTH)
    else:
        msg = str(failed)
    if unreachable and msg.startswith(_UNREACHABLE_PREFIX):
        msg = msg[len(_UNREACHABLE_PREFIX):]
    name = task.get('name', '') if hasattr(task, 'get') else task
    return {'stage': str(stage), 'task': '' if name is None else str(name), 'msg': msg, 'unreachable': bool(unreachable)}


# ansible.builtin.stat's flags, in the order a path is named by them.
_KINDS = (('islnk', 'a symlink'), ('isdir', 'a directory'), ('isfifo', 'a FIFO'), ('ischr', 'a character device'),
          ('isblk', 'a block device'), ('issock', 'a socket'))


def file_kind(stat: object) -> str:
    """What a path is, in words, from the ``stat`` of ansible.builtin.stat: 'absent', 'a symlink'
    (only where the stat did not follow links), 'a directory', ... or 'not a regular file'. Said for a
    regular file too: Ansible evaluates an assertion's fail_msg even when the assertion holds."""
    found = mapping(stat)
    if not found.get('exists'):
        return 'absent'
    return next((words for flag, words in _KINDS if found.get(flag)), 'not a regular file')


def fabric_discovery(ib_by_node: Iterable[tuple[str, object]]) -> dict[str, Any]:
    """Which node discovers the fabric beyond the nodes (validate.yml, ib_fabric_facts) and the SM
    LIDs to ask: ``ib_by_node`` [(node, gpu_fabric_ib)] in play order -> {'node': the first node with
    an InfiniBand port, or None; 'sm_lids': every whole-number SM LID those ports name, first seen
    first (a port that names none counts as 0, as ib_link_facts reads an unset one)}."""
    node: str | None = None
    lids: list[int] = []
    for host, ib in ib_by_node:
        for device in mappings(mapping(ib).get('devices')):
            for port in mappings(device.get('ports')):
                if port.get('link_layer') != 'InfiniBand':
                    continue
                node = host if node is None else node
                lid = port.get('sm_lid', 0)
                if isinstance(lid, int) and not isinstance(lid, bool) and lid not in lids:
                    lids.append(lid)
    return {'node': node, 'sm_lids': lids}


def modules_not_loaded(failed: Sequence[str], modprobe_results: object, kernel_log: object = '', no_ofed_hint: str | None = None) -> str:
    """Role rdma_modules' message for the modules that did not load: each with modprobe's own words
    (or that it succeeded but the module is not in /proc/modules), the last five kernel log lines
    that name it (as ib_umad or ib-umad), and for nvidia_peermem on a node without MLNX OFED
    ``no_ofed_hint`` (unless modprobe did not find the module at all). ``failed`` a list of names,
    ``modprobe_results`` the results of the modprobe loop (each with its ``item``)."""
    results = dict((r.get('item'), r) for r in mappings(modprobe_results) if r.get('item') is not None)
    log = str(kernel_log or '').splitlines()
    reasons = []
    for name in failed:
        result = results.get(name, {})
        why = str(result.get('stderr') or result.get('msg') or '').strip().replace('\n', ' ')
        pattern = re.compile('%s|%s' % (re.escape(name), re.escape(name.replace('_', '-'))))
        lines = [line for line in log if pattern.search(line)]
        text = '%s: %s' % (name, why or 'modprobe succeeded but it is not in /proc/modules')
        if lines:
            text += ' (kernel log: %s)' % ' | '.join(lines[-5:])
        if name == 'nvidia_peermem' and 'not found' not in why and no_ofed_hint:
            text += '; ' + no_ofed_hint
        reasons.append(text)
    return '%d module(s) did not load: %s' % (len(failed), '; '.join(reasons))


def collective_skipped(hosts: Sequence[object], launcher: object, vendors: Sequence[object], check_mode: bool = False,
                       gpu_counts: Iterable[Any] | None = None) -> str:
    """Why role fabric_collective ran no collective, or '' when it ran: ``hosts`` the nodes of the
    play, ``vendors`` the GPU vendors among them, ``gpu_counts`` the GPUs of each node (read for
    launcher local only, where a node runs over its own GPUs)."""
    if check_mode:
        return 'check mode'
    if launcher == 'local':
        return 'no node has a GPU' if max([int(c or 0) for c in gpu_counts or []] or [0]) < 1 else ''
    if len(vendors) > 1:
        return ('GPUs of several vendors (%s) cannot run one collective job: run it per partition (--limit to the nodes of one vendor)'
                % ', '.join(str(v) for v in vendors))
    if len(hosts) < 2:
        return 'fewer than two nodes (launcher local runs the collective on each node over its own GPUs)'
    return ''


def _number(value: Any, kind: Callable[[Any], _N]) -> _N:
    """A number given as a role variable (every -e key=value arrives as a string), 0 when unset or
    not a number - as Jinja's int and float filters read it."""
    try:
        return kind(value) if value not in (None, '') else kind(0)
    except (TypeError, ValueError):
        return kind(0)


def collective_fleet(model: dict[str, Any], launcher: object = None, expected_gbs: object = None, ranks_per_node: object = None) -> dict[str, Any]:
    """What role fabric_collective reads of its nodes, from the fleet model (plugin_utils/fleet/_fleet_model.py,
    parts facts and collective): ``gpus`` (the GPUs of each node, in the model's order: 0 without GPU
    facts), ``min_gpus`` (the fewest), ``ranks`` (``ranks_per_node`` where given, else ``min_gpus``:
    the ranks per node of a fleet run), ``vendors`` (sorted), ``names`` ({node: the name mpirun/srun
    reach it by: ansible_host, else its inventory name}), ``expected`` ({gbs, basis}: ``expected_gbs``
    where given; else with ``launcher`` local none - each node is judged against its peers -; else
    the NICs of a typical node, module_utils/_collective.py expected_busbw) and ``result`` (the
    collective's result, from the first node that holds one, or None). One call for the role's
    whole plan: a task's vars entry is templated again at every reference."""
    gpus: list[int] = []
    vendors: set[str] = set()
    names: dict[str, str] = {}
    for host in model['hosts']:
        node = model['nodes'][host]
        found = mappings(mapping(node['facts'].get('gdr')).get('gpus'))
        gpus.append(len(found))
        vendors.update(str(gpu.get('vendor')) for gpu in found)
        names[host] = node['address'] or host
    given = _number(expected_gbs, float)
    if given:
        expected: dict[str, Any] = {'gbs': given, 'basis': 'given (fabric_collective_expected_busbw_gbs)'}
    elif launcher == 'local':
        # Per-node runs (local) measure NVLink/PCIe/xGMI, not the NICs: only a given figure applies.
        expected = {'gbs': None, 'basis': 'none given: each node is judged against the median of its peers'}
    else:
        expected = _collective.expected_busbw(dict((host, model['nodes'][host]['facts']['ib']) for host in model['hosts']
                                                   if 'ib' in model['nodes'][host]['facts']))
    min_gpus = min(gpus or [0])
    return {'gpus': gpus, 'min_gpus': min_gpus, 'ranks': _number(ranks_per_node, int) or min_gpus, 'vendors': sorted(vendors),
            'names': names, 'expected': expected, 'result': model['collective']}


# What the cross-host stages need, said in both refusals (playbooks/benchmark.yml prints it, the report keeps it).
_MESH_NEEDS = 'and the pair mesh, the collective benchmark and the culprit search need every node in one run'
# Left-out nodes named in the refusal; more are counted.
SPLIT_NAMED = 10


def _slice_count(value: Any) -> int:
    """A slice count as Jinja's int filter reads it (every -e value is a string): '2', 2, '2.0'; anything else 0."""
    for convert in (int, float):
        try:
            return int(convert(value))
        except (TypeError, ValueError, OverflowError):
            continue
    return 0


def split_reason(hosts: Any, nodes: Any, slices: Any = 1, number: Any = '?', limited: bool = False) -> str:
    """Why the cross-host stages (the pair mesh, the collective benchmark, the culprit search) cannot run in this
    run, or '': they need every node of gpu_fabric_hosts (``hosts``, inventory order) in one run, and ``nodes`` are
    the run's (within --limit). AWX / automation controller job slicing runs one job as several runs, each on a part
    of the inventory (https://docs.ansible.com/projects/awx/en/24.6.1/userguide/job_slices.html), and puts the slice in
    the extra variables awx_job_slice_number and awx_job_slice_count (tower_job_slice_* on Ansible Tower): ``slices``
    and ``number``; ``limited``: --limit was given."""
    count = _slice_count(slices)
    if count > 1:
        return ('this run is slice %s of %d of a sliced job (AWX job slicing), %s: run the benchmark from a job template '
                'whose job slicing is off (slice count 1)' % (number, count, _MESH_NEEDS))
    if not limited:
        return ''
    within = set(nodes or [])
    left = [host for host in hosts or [] if host not in within]
    if not left:
        return ''
    named = ', '.join(str(host) for host in left[:SPLIT_NAMED]) + (', ...' if len(left) > SPLIT_NAMED else '')
    return ('--limit leaves out %d node(s) of gpu_fabric_hosts (%s), %s: run without --limit, or name the nodes to '
            'benchmark in gpu_fabric_hosts (a group or host pattern)' % (len(left), named, _MESH_NEEDS))
