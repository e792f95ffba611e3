# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The pairwise fabric benchmark's bookkeeping: per-node plan, per-round records, the N x N report.

Pure functions over the facts (gpu_fabric_ib, gpu_fabric_gdr) and perftest_run results;
the fabric_bench role calls them through filters.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import zlib
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import ERROR_COUNTERS, HW_ERROR_COUNTERS
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._pci import DISTANCE_CLASSES
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._perftest import DROPPED_NOTE, listen_failed
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _paths  # bounded reads of regular files
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _printable  # what a console line may hold
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _rates  # counter-rate rules
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _rails  # compute rails in position order
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _window  # each test's window of counters
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report._files import write_atomic
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._shape import integer, key, mapping, mappings, number, sequence, text

# One test's record as a node returns it and report() reads it (record_of): JSON values.
Record = Dict[str, Any]

# Which perftest flag puts the buffer on which vendor's GPU.
GPU_FLAGS = {'nvidia': 'use_cuda', 'amd': 'use_rocm', 'metax': 'use_maca'}


def _device_rates(devices: List[Dict[str, Any]]) -> Tuple[Dict[str, Optional[float]], Dict[str, Optional[float]], Dict[str, Optional[str]]]:
    """Each device's port rate, its ACTIVE ports' rate and its model."""
    rates, active, models = {}, {}, {}
    for device in devices:
        rated = [p.get('rate_gbps') for p in device.get('ports', []) if p.get('rate_gbps') is not None]
        rates[device['name']] = max(rated) if rated else None
        # What the rail's nominal rate is made of (report(): the fleet's most common rate per rail and
        # model): a port that is down reads a rate it does not run at (10 Gb/sec (4X SDR) while Polling).
        up = [p.get('rate_gbps') for p in device.get('ports', []) if p.get('state') == 'ACTIVE' and p.get('rate_gbps') is not None]
        active[device['name']] = max(up) if up else None
        kind = _rails.model(device)
        models[device['name']] = ' '.join(str(part) for part in kind if part) if kind else None
    return rates, active, models


def _nearest_gpus(gdr: Optional[Dict[str, Any]], names: Sequence[str]) -> Dict[str, Optional[Dict[str, Any]]]:
    """Each HCA of ``names``: its nearest GPU (the smallest distance class, then the name), or None."""
    gpus = (gdr or {}).get('gpus') or []
    vendor_index: Dict[str, List[int]] = {}
    for gpu in gpus:
        # CUDA/ROCm/MACA number the GPUs of one vendor in PCI order when CUDA_DEVICE_ORDER=PCI_BUS_ID
        # (the role sets it); gdr_facts lists GPUs in PCI order.
        gpu['_index'] = vendor_index.setdefault(gpu['vendor'], [0])[0]
        vendor_index[gpu['vendor']][0] += 1
    nearest = {}
    for hca in names:
        best = None
        for gpu in gpus:
            distance = ((gdr or {}).get('matrix') or {}).get(gpu['name'], {}).get(hca)
            if distance is None:
                continue
            rank = (DISTANCE_CLASSES.index(distance), gpu['name'])
            if best is None or rank < best[0]:
                best = (rank, {'gpu': gpu['name'], 'index': gpu['_index'], 'vendor': gpu['vendor'],
                               'flag': GPU_FLAGS[gpu['vendor']], 'distance': distance, 'bdf': gpu.get('pci_address')})
        nearest[hca] = best[1] if best else None
    for gpu in gpus:
        gpu.pop('_index', None)
    return nearest


def node_plan(ib: Optional[Dict[str, Any]], gdr: Optional[Dict[str, Any]], hcas: Any = None, nccl_ib_hca: Any = None) -> Dict[str, Any]:
    """This node's rails (HCA names in order), their rate and each HCA's nearest GPU.

    Rail i is the i-th name: ``hcas`` (fabric_bench_hcas) in the user's order where given, else
    the node's compute rails in position order (module_utils/_rails.py: PCI address, NUMA, the
    name in natural order), so that rail i is the same slot on every node of a kind - never the
    names' text order (mlx5_10 before mlx5_2) - and a storage or management card is no rail.
    ``nccl_ib_hca``: the node's NCCL_IB_HCA where its settings name one (what the report's
    diagnosis and NCCL recommendation read, filter/report.py): the rails are the same there and here."""
    if isinstance(hcas, str):      # -e fabric_bench_hcas=mlx5_0,mlx5_1 arrives as a string
        hcas = [name.strip() for name in hcas.split(',') if name.strip()]
    names = list(hcas) if hcas else _rails.compute(ib, gdr, role_of=_rails.node_roles({'ib': ib, 'gdr': gdr, 'nccl_ib_hca': nccl_ib_hca}))
    rates, active, models = _device_rates((ib or {}).get('devices') or [])
    nearest = _nearest_gpus(gdr, names)
    return {'hcas': names, 'rate_gbps': rates, 'active_rate_gbps': active, 'model': models, 'gpu_by_hca': nearest}


def fleet_plan(candidates: Any, test: str = 'ib_write_bw') -> Dict[str, Any]:
    """Which nodes the mesh can test, and why the others cannot.

    ``candidates``: {host: {'plan': node_plan(...), 'tool': the check-mode perftest_run result}}.
    Returns {'nodes': [hosts], 'excluded': {host: reason}, 'skipped': reason or None}: a node
    without an HCA or without perftest is left out with its reason; with fewer than two nodes
    left nothing runs and ``skipped`` says why.
    """
    nodes, excluded = [], {}
    for host in sorted(candidates or {}):
        entry = candidates[host] or {}
        tool = entry.get('tool') or {}
        if not (entry.get('plan') or {}).get('hcas'):
            excluded[host] = 'no RDMA device (HCA) to test on this node'
        elif tool.get('failed') or tool.get('status') != 'skipped':
            excluded[host] = 'perftest cannot run here: %s' % (tool.get('msg') or '%s not found' % test)
        else:
            nodes.append(host)
    skipped = None
    if len(nodes) < 2:
        skipped = ('%d node(s) can run perftest with an RDMA device (%s); a pair needs two'
                   % (len(nodes), ', '.join(nodes) or 'none'))
    return {'nodes': nodes, 'excluded': excluded, 'skipped': skipped, 'test': test}


def pick_address(candidates: Iterable[Any], cidr: Any) -> Optional[str]:
    """First candidate address inside ``cidr`` (netaddr), or None."""
    from netaddr import AddrFormatError, IPAddress, IPNetwork  # controller-side only (requirements: netaddr)
    try:
        network = IPNetwork(cidr)
    except (AddrFormatError, ValueError, TypeError):
        raise ValueError('%r is not a network in CIDR notation (e.g. 10.7.96.0/24)' % (cidr,))
    for candidate in candidates:
        try:
            if candidate and IPAddress(candidate) in network:
                return str(candidate)
        except (AddrFormatError, ValueError, TypeError):
            continue
    return None


def address_candidates(ib: Optional[Dict[str, Any]], ipv4_addresses: Optional[Iterable[Any]] = None, fallback: Optional[str] = None) -> List[str]:
    """RoCE GID IPv4s, then the node's IPv4 addresses, then the inventory address."""
    found = []
    for device in (ib or {}).get('devices') or []:
        for port in device.get('ports', []):
            for gid in port.get('gids', []):
                if gid.get('ipv4') and gid['ipv4'] not in found:
                    found.append(gid['ipv4'])
    for address in ipv4_addresses or []:
        if address not in found:
            found.append(address)
    if fallback and fallback not in found:
        found.append(fallback)
    return found


def _snapshot(ib: Any) -> Dict[str, Tuple[Dict[str, Any], Optional[float]]]:
    """Every HCA's first-port error counters and read time ({hca: (counters, read_at)}) in one pass
    over the facts, the first device of a name winning; the facts a node returned may hold any
    type in any field (_shape), and a counter that is no integer is not known. A sequence step's read serves the 8 tests of the step and the next
    step's 8 (as their "before"): read once, not 32 times."""
    found = {}
    for device in mappings(mapping(ib).get('devices')):
        name = device.get('name')
        ports = mappings(device.get('ports'))
        if isinstance(name, str) and ports and name not in found:
            port = ports[0]
            values = dict((k, integer(mapping(port.get('counters')).get(k))) for k in ERROR_COUNTERS)
            values.update((k, integer(mapping(port.get('hw_counters')).get(k))) for k in HW_ERROR_COUNTERS)
            found[name] = (values, number(port.get('counters_read_at')))
    return found


def _changes(old: Dict[str, Tuple[Dict[str, Any], Optional[float]]], new: Dict[str, Tuple[Dict[str, Any], Optional[float]]],
             hca: Any) -> Tuple[Dict[str, int], Optional[float]]:
    """(counter_delta, counter_seconds) of the HCA between two _snapshot()s."""
    old_values, old_at = old.get(hca) or ({}, None)
    new_values, new_at = new.get(hca) or ({}, None)
    delta = {}
    for name, value in new_values.items():
        if value is not None and old_values.get(name) is not None and value > old_values[name]:
            delta[name] = value - old_values[name]
    seconds = round(new_at - old_at, 3) if old_at is not None and new_at is not None and new_at > old_at else None
    return delta, seconds


def counter_seconds(before: Any, after: Any, hca: Any) -> Optional[float]:
    """Seconds between the two counter reads of the HCA's first port (None when a read has no time)."""
    return _changes(_snapshot(before), _snapshot(after), hca)[1]


def counter_delta(before: Any, after: Any, hca: Any) -> Dict[str, int]:
    """Increase of each error counter of the HCA's first port between two ib_link_facts reads."""
    return _changes(_snapshot(before), _snapshot(after), hca)[0]


def round_records(me: str, tests: Any, client_results: Any, server_results: Any, before: Any, after: Any, round_number: int, memory: str) -> List[Record]:
    """One record per test this node took part in this round.

    The client's record carries the perftest result; both sides carry the increase of
    their HCA's error counters during the round (each HCA runs one test per round, so
    the increase belongs to that test's link).
    """
    by_pair = {}
    for side, results in (('client', client_results), ('server', server_results)):
        for found in mappings(results):
            test = _test_of(found)
            if test:
                by_pair[(side, key(test['pair_id']), key(test.get('rail')))] = found
    records = []
    for test in tests or []:
        for side in ('server', 'client'):
            if test[side] != me:
                continue
            result = by_pair.get((side, key(test['pair_id']), key(test.get('rail'))))
            if result is None:
                outcome = {'status': 'not_run', 'failure': {'kind': 'peer_unreachable',
                                                            'message': 'the peer was not reachable when the round started'}}
            else:
                outcome = dict(result, status=result.get('status') or ('failed' if result.get('failed') else 'unknown'))
                if result.get('failed') and not result.get('failure'):
                    outcome.update(status='failed', failure={'kind': 'task_failed', 'message': result.get('msg')})
            records.append(record_of(dict(test, side=side, round=round_number, memory=memory), outcome, before, after))
    return records


def sequence_steps(me: str, rounds: Any, plans: Dict[str, Any], memories: Sequence[str], base_port: int) -> List[Dict[str, Any]]:
    """This node's steps for perftest_run's ``sequence``: every memory kind, every round.

    ``rounds``: the expanded schedule rounds (pair_schedule expand=true, node=me), each
    {'round', 'tests'}; ``plans``: {host: fabric_bench_plan}. Every node gets
    len(memories) x len(rounds) steps, empty ones included, so that step numbers agree
    across nodes (the beacons compare them).
    """
    steps = []
    for memory in memories:
        for entry in rounds:
            tests = []
            for test in entry.get('tests') or []:
                if me not in (test['server'], test['client']):
                    continue
                side = 'server' if test['server'] == me else 'client'
                other = test['client'] if side == 'server' else test['server']
                hca = test['%s_hca' % side]
                step_test = dict(test, side=side, peer=(plans.get(other) or {}).get('address') or other, peer_name=other,
                                 device=hca, tcp_port=int(base_port) + int(test['rail']), memory=memory,
                                 round=entry['round'])
                if memory == 'gpu':
                    gpu = ((plans.get(me) or {}).get('gpu_by_hca') or {}).get(hca)
                    if gpu:
                        step_test[gpu['flag']] = gpu['index']
                        step_test['gpu'] = gpu
                if step_test.get('device') is None:
                    step_test.pop('device')
                tests.append(step_test)
            steps.append({'round': entry['round'], 'memory': memory, 'tests': tests})
    return steps


def sequence_records(me: str, steps: Any, result: Any) -> List[Record]:
    """Records (as round_records makes them) from one perftest_run ``sequence`` result.

    ``steps``: what was asked (sequence_steps); ``result``: the task's result, or its
    async_status. A node whose task failed as a whole gets one failed record per test.
    """
    result = mapping(result)
    done = mappings(result.get('steps'))
    records = []
    if not done:
        kind = 'task_failed' if result.get('failed') or result.get('msg') else 'not_run'
        # perftest_run says by kind why the sequence could not start (SETUP_KINDS: its beacon port taken,
        # perftest missing): that, not a task that failed somehow.
        own = text(mapping(result.get('failure')).get('kind'))
        kind = own if result.get('failed') and own in SETUP_KINDS else kind
        message = text(result.get('msg')) or 'the sequence did not run on %s' % me
        if result.get('unreachable'):
            kind = 'node_lost'
        for step in steps:
            for test in step.get('tests') or []:
                records.append(record_of(test, {'status': 'failed', 'failure': {'kind': kind, 'message': message}}, None, None))
        return records
    before = result.get('counters_start')
    old = _snapshot(before) if before is not None else None
    old_window = mapping(before).get('window')
    for step in done:
        after = step.get('counters')
        same_at = number(step.get('counters_same_at'))
        new_window = _window.carried(old_window, mapping(after).get('window')) if after is not None \
            else old_window if same_at is not None else None
        if after is not None:
            new = _snapshot(after)
        elif same_at is not None and old is not None:
            # No error counter changed during the step: perftest_run sent only when it read them.
            new = dict((hca, (values, same_at)) for hca, (values, _at) in old.items())
        else:
            new = None
        records.extend(_step_records(step, old, new, old_window, new_window))
        if new is not None:
            old = new
        if new_window is not None:
            old_window = new_window
    return records


def _step_records(step: Dict[str, Any], old: Any, new: Any, old_window: Any, new_window: Any) -> List[Record]:
    """The records of one step's tests: each with its HCA's error counters' change and its window (plugin_utils/bench/_window.py)
    between the reads around the step."""
    records = []
    for test in mappings(step.get('tests')):
        if test.get('side') in ('server', 'client'):
            hca = key(test.get('%s_hca' % test['side']))
            changes = _changes(old, new, hca) if old is not None and new is not None else None
            record = record_of(test, test, None, None, changes)
            gpu_bdf = mapping(test.get('gpu')).get('bdf') if test.get('memory') == 'gpu' else None
            window = _window.window_of(old_window, new_window, hca, gpu_bdf, changes[1] if changes else None, step)
            if window is not None:
                record['window'] = window
            records.append(record)
    return records


def record_of(test: Dict[str, Any], outcome: Dict[str, Any], before: Any, after: Any,
              changes: Optional[Tuple[Dict[str, int], Optional[float]]] = None) -> Record:
    """The record of one test. ``outcome`` (and, from a sequence, ``test``) is what a node
    returned: the fields the report computes with are typed here (_shape), once.

    ``changes``: (counter_delta, counter_seconds) when already known (_changes), else they are
    computed from ``before`` and ``after``.

    perftest's banner (``settings``: about 60 % of a record's bytes) is not kept: report() reads
    none of it, and every node's records stay for the rest of the run, in hostvars or in a file
    (a 256-node full mesh over 8 rails is about a million records: tests/bench/controller_scale.py)."""
    side = test['side']
    hca = key(test.get('%s_hca' % side))
    summary = dict((k, number(v) if k != 'bytes' else integer(v)) for k, v in mapping(outcome.get('summary')).items())
    failure = outcome.get('failure')
    if failure is not None:
        failure = mapping(failure)
        failure = {'kind': text(failure.get('kind')) or 'failed', 'message': text(failure.get('message')) or ''}
    status = outcome.get('status')
    if changes is None and before is not None and after is not None:
        changes = (counter_delta(before, after, hca), counter_seconds(before, after, hca))
    record = {'round': test.get('round'), 'memory': key(test.get('memory')), 'side': side, 'rail': key(test.get('rail')),
              'server': key(test.get('server')), 'client': key(test.get('client')), 'hca': hca,
              'peer_hca': key(test.get('client_hca' if side == 'server' else 'server_hca')),
              'counters_delta': changes[0] if changes else {}, 'counters_seconds': changes[1] if changes else None,
              'status': status if isinstance(status, str) and status else 'failed', 'summary': summary or None,
              'failure': failure,
              'warnings': sequence(outcome.get('tool_warnings')), 'gpu': mapping(test.get('gpu') or outcome.get('gpu')) or None,
              'elapsed_s': number(outcome.get('elapsed_s')),
              'attempts': outcome.get('attempts')}
    if side == 'client':
        record['results'] = mappings(outcome.get('results'))
    return record


def _sizes(results: Any) -> Optional[List[Dict[str, Any]]]:
    """The curve of one pair (every message size of an all-sizes run), compact: the report
    draws bandwidth vs message size from it."""
    sizes = []
    for row in mappings(results):
        size = integer(row.get('bytes'))
        if size is None:
            continue
        entry: Dict[str, float] = {'bytes': size}
        for name in ('bw_avg_gbps', 'bw_peak_gbps', 'lat_typical_us'):
            value = number(row.get(name))
            if value is not None:
                entry[name] = value
        sizes.append(entry)
    return sizes


def _test_of(result: Any) -> Optional[Dict[str, Any]]:
    """The schedule entry behind an async_status result (item of item) or a direct result."""
    item = mapping(result).get('item') or {}
    if isinstance(item, dict) and 'pair_id' in item:
        return item
    inner = item.get('item') if isinstance(item, dict) else None
    return inner if isinstance(inner, dict) and 'pair_id' in inner else None


# What report() keys pairs, the matrix and its sort orders by: a record without one of them (or
# with a null, a number for a node name, a memory kind that is neither) cannot be placed, and
# one such record made the sort of every pair fail (TypeError between str and None). It is
# dropped, counted and named (MALFORMED_NAMED of them per node); the others are judged.
MEMORIES = ('host', 'gpu')
MALFORMED_NAMED = 5


def record_problem(record: Any) -> Optional[str]:
    """Why ``record`` (one entry of a node's records) cannot be judged, or None."""
    if not isinstance(record, dict):
        return 'not a mapping (%s)' % type(record).__name__
    if record.get('side') not in ('server', 'client'):
        return 'side is %s, not server or client' % _shown(record.get('side'), 'side' in record)
    for name in ('server', 'client'):
        value = record.get(name)
        if not isinstance(value, str) or not value:
            return '%s is %s, not a node name' % (name, _shown(value, name in record))
    if record.get('memory') not in MEMORIES:
        return 'memory is %s, not host or gpu' % _shown(record.get('memory'), 'memory' in record)
    rail = record.get('rail')
    if rail is not None and (isinstance(rail, bool) or not isinstance(rail, (str, int))):
        return 'rail is %s, not a rail number or HCA name' % _shown(rail, True)
    return None


def _shown(value: Any, present: bool) -> str:
    if not present:
        return 'missing'
    if value is None:
        return 'null'
    return repr(value)[:60] if isinstance(value, (str, int, float)) else 'a %s' % type(value).__name__


# ---------------------------------------------------------------------------- why a pair failed
#
# Kinds of a side's failure that say the test never reached the hardware: the benchmark could not set it
# up. perftest_run's own (setup_failed: the sequence's beacon could not listen, its port taken by another
# run or a leftover server; tool_missing: no perftest binary), and perftest's parser refusing its arguments
# (bad_arguments, module_utils/_perftest.py); and a sequence stopped because its controller was gone (stopped:
# module_utils/_sequence.py, the controller's lease): the tests it did not run, or cut short. No device verdict
# follows from such a test.
SETUP_KINDS = ('setup_failed', 'tool_missing', 'bad_arguments', 'stopped')
# A client's failure that only shows its server's: it read EOF (exchange_failed) or waited (timeout) when the
# server exited, was refused (connect_failed) when the server never listened, or lost or passed the server's
# beacon (the sequence engine's peer_lost, peer_moved_on). The server's own failure then is the cause
# (as perftest_run's combine_loopback decides for one node).
FOLLOW_ON_KINDS = ('exchange_failed', 'timeout', 'connect_failed', 'peer_lost', 'peer_moved_on', 'unparsed')


def never_reached(failure: Any) -> bool:
    """Does one side's failure say its test never reached the hardware (SETUP_KINDS, or perftest's server could not listen)?"""
    failure = mapping(failure)
    kind = text(failure.get('kind'))
    # perftest's server could not listen on its TCP port: module_utils/_perftest.py listen_failed says which failures.
    return kind in SETUP_KINDS or listen_failed({'kind': kind, 'message': text(failure.get('message')) or ''})


def failure_cause(pair: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The failure that made a failed pair (report()'s entry) fail, as {'side', 'host', 'kind', 'message', 'hosts'}:
    the server's own failure where the client's only shows its effect (FOLLOW_ON_KINDS), else the client's; ``hosts``:
    the ends that failed so themselves (both, where both sides report that kind). None where neither side reported one."""
    pair = mapping(pair)
    client, server = mapping(pair.get('failure')), mapping(pair.get('server_failure'))
    if server and (not client or (text(client.get('kind')) in FOLLOW_ON_KINDS
                                  and (text(server.get('kind')) not in FOLLOW_ON_KINDS or never_reached(server)))):
        side, failure = 'server', server
    elif client:
        side, failure = 'client', client
    else:
        return None
    kind = text(failure.get('kind')) or 'failed'
    ends = [key(pair.get(end)) for end, own in (('server', server), ('client', client))
            if own and (text(own.get('kind')) or 'failed') == kind]
    return {'side': side, 'host': key(pair.get(side)), 'kind': kind, 'message': text(failure.get('message')) or '',
            'hosts': ends}


def not_reached(pair: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """failure_cause() of a failed pair whose test never reached the hardware (the benchmark could not set it up:
    SETUP_KINDS, or perftest's server could not listen on its TCP port), else None. Such a pair is the run's
    failure, never a device's."""
    if mapping(pair).get('verdict') != 'failed':
        return None
    cause = failure_cause(pair)
    return cause if cause is not None and never_reached(cause) else None


def _checked(record: Any) -> Optional[Record]:
    """A record as report() reads it, or None (record_problem() says why): records travel
    through hostvars and files, so they are typed again here (_shape) rather than trusted to be
    what record_of made."""
    if record_problem(record) is not None:
        return None
    checked = dict(record)
    for name in ('memory', 'rail', 'server', 'client', 'hca', 'peer_hca'):
        checked[name] = key(record.get(name))
    checked['status'] = text(record.get('status')) or 'failed'
    checked['summary'] = dict((k, number(v) if k != 'bytes' else integer(v)) for k, v in mapping(record.get('summary')).items())
    failure = record.get('failure')
    checked['failure'] = None if failure is None else {
        'kind': text(mapping(failure).get('kind')) or 'failed', 'message': text(mapping(failure).get('message')) or ''}
    checked['gpu'] = mapping(record.get('gpu'))
    checked['counters_delta'] = mapping(record.get('counters_delta'))
    checked['counters_seconds'] = number(record.get('counters_seconds'))
    checked['elapsed_s'] = number(record.get('elapsed_s'))
    checked['window'] = _window.checked(record.get('window'))
    return checked


# ---------------------------------------------------------------------------- records as files
#
# A node's records can live in a file on the controller instead of in hostvars (the action
# hpc.gpu_fabric.perftest_collect writes them, report() reads them back one node at a time): a
# 256-node full mesh over 8 rails is about a million records, more than a controller should hold
# at once (tests/bench/controller_scale.py).
RECORDS_FORMAT = 'hpc.gpu_fabric.bench_records/1'


def records_file_name(host: str) -> str:
    """The file of ``host``'s records: its inventory name with every character outside
    [A-Za-z0-9._-] (a "/" included) written as %XX, so that any name stays one plain file in the
    directory; "." and ".." cannot come out (the suffix)."""
    safe = ''.join(c if c.isascii() and (c.isalnum() or c in '._-') else ''.join('%%%02X' % b for b in c.encode('utf-8'))
                   for c in text(host) or '_')
    return safe + '.records.json.gz'


def write_records(directory: str, host: str, records: List[Record], run_id: Optional[str] = None) -> str:
    """Write ``host``'s records into ``directory`` (created, mode 0700, when missing), atomically
    (a temporary file renamed over the old one); returns the file's absolute path."""
    directory = os.path.abspath(os.path.expanduser(directory))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.join(directory, records_file_name(host))
    # Level 1: a few times smaller (the records repeat their keys), at a small cost in time.
    data = gzip.compress(json.dumps({'format': RECORDS_FORMAT, 'host': host, 'run_id': run_id, 'records': records},
                                    separators=(',', ':')).encode('utf-8'), compresslevel=1, mtime=0)
    write_atomic(path, data, 0o600)
    return path


# A records file, compressed and decompressed. A node's records in a full mesh are (nodes - 1) x
# rails x 2 memories (fabric_bench_memory: host, gpu) x 2 sides; record_of's JSON (write_records:
# no blanks) is about 570 bytes for a server side, 680 for a client with one message size and 2.9 kB
# with fabric_bench_all_sizes (23 sizes). A 1,024-node mesh over 8 rails: 32,736 records, about
# 20 MB, and 57 MB with every size; hence 64 MiB. The cap keeps a gzip bomb (a few kB that
# inflate to GBs) or /dev/zero from exhausting the controller.
RECORDS_MAX_BYTES = 64 << 20
# Parsed, 64 MiB of '{},' would still be 22 million dicts (about 3 GB): the values are counted
# before json.loads builds them, by their separators (a ',' before every value but the first of
# a list or mapping, a '{' or '[' for every container; those inside strings count too, so this
# is an upper bound). The same mesh with every size: about 2.6 million ',' and 560,000
# containers (record_of: 22 and 5 for a server side, 137 and 29 for an all-sizes client).
RECORDS_MAX_VALUES = 8000000
RECORDS_MAX_CONTAINERS = 2000000
# A record is a mapping of mappings of values (counters, a failure): a few levels. JSON nested
# deeper raises RecursionError in json.loads, and deep values would in what later walks them.
RECORDS_MAX_DEPTH = 16


_CONTAINERS = frozenset((dict, list))


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` (json.loads' lists and dicts) nests deeper than ``limit`` levels; without
    recursion, a level at a time, by exact type (a stack of every container, each checked with
    isinstance, was a third of the judging of a 1,024-node ring under a profiler)."""
    level: List[Any] = [value] if value.__class__ in _CONTAINERS else []
    depth = 1
    while level:
        if depth > limit:
            return True
        deeper = []
        for item in level:
            deeper += [child for child in (item.values() if item.__class__ is dict else item) if child.__class__ in _CONTAINERS]
        level, depth = deeper, depth + 1
    return False


def _read_records_file(path: str) -> Any:
    """The decoded content of the records file ``path``: a regular file (a FIFO would block the
    read forever), at most RECORDS_MAX_BYTES compressed and decompressed, holding at most
    RECORDS_MAX_CONTAINERS lists or mappings and RECORDS_MAX_VALUES values. Raises OSError,
    EOFError or ValueError, saying why."""
    fd = _paths.open_regular(path)
    with os.fdopen(fd, 'rb') as raw:
        if os.fstat(fd).st_size > RECORDS_MAX_BYTES:
            raise _paths.TooLarge('larger than %s' % _paths.size_text(RECORDS_MAX_BYTES))
        with gzip.GzipFile(fileobj=raw, mode='rb') as handle:
            try:
                data = handle.read(RECORDS_MAX_BYTES + 1)
            except zlib.error as exc:   # a damaged deflate stream inside a well-formed gzip header
                raise ValueError('damaged gzip data: %s' % exc)
    if len(data) > RECORDS_MAX_BYTES:
        raise _paths.TooLarge('larger than %s once decompressed' % _paths.size_text(RECORDS_MAX_BYTES))
    containers = data.count(b'{') + data.count(b'[')
    if containers > RECORDS_MAX_CONTAINERS or data.count(b',') > RECORDS_MAX_VALUES:
        raise ValueError('more JSON values than a records file of a 1,024-node mesh holds (%d lists or mappings at most, '
                         '%d values at most), not read' % (RECORDS_MAX_CONTAINERS, RECORDS_MAX_VALUES))
    try:
        content = json.loads(data.decode('utf-8'))
    except RecursionError:
        raise ValueError('JSON nested deeper than a records file ever is')
    except MemoryError:
        raise ValueError('its JSON does not fit in memory')
    if _deeper_than(content, RECORDS_MAX_DEPTH):
        raise ValueError('JSON nested deeper than %d levels (a records file is a few)' % RECORDS_MAX_DEPTH)
    return content


def read_records(path: str, host: str, run_id: Optional[str] = None) -> List[Any]:
    """The records ``write_records`` wrote for ``host``; ValueError, saying why, for a file that is
    missing, unreadable, no regular file, too large, nested too deep, not ours, or written for
    another host or another run."""
    try:
        content = _read_records_file(text(path) or '')
    except (OSError, EOFError, ValueError) as exc:
        raise ValueError('the records file %s of %s cannot be read: %s' % (path, host, getattr(exc, 'strerror', None) or exc))
    content = mapping(content)
    if content.get('format') != RECORDS_FORMAT or not isinstance(content.get('records'), list):
        raise ValueError('%s is not a records file of hpc.gpu_fabric (format %r)' % (path, content.get('format')))
    if content.get('host') != host:
        raise ValueError('the records file %s holds the records of %r, not of %s' % (path, content.get('host'), host))
    if run_id is not None and content.get('run_id') != run_id:
        raise ValueError('the records file %s is from run %r, not from this run (%s)' % (path, content.get('run_id'), run_id))
    records: List[Any] = content['records']
    return records


def _node_records(host: str, node: Any, unreadable: Dict[str, str], malformed: Optional[Dict[str, Any]] = None) -> Iterator[Record]:
    """A node's records one at a time, checked (a checked copy of every node's records at once
    doubled what the judging holds for a full mesh); from its records file when it has one. A file
    that cannot be read gives no record, and its reason in ``unreadable``; a record that cannot be
    judged (record_problem) is dropped and counted in ``malformed[host]``: {'source', 'dropped',
    'records': the first MALFORMED_NAMED, each 'record <index>: <what is wrong>'}."""
    node = mapping(node)
    records = node.get('records')
    if node.get('records_file'):
        try:
            records = read_records(node['records_file'], host, node.get('run_id'))
        except ValueError as exc:
            unreadable[host] = str(exc)
            return
    for index, record in enumerate(sequence(records)):
        checked = _checked(record)
        if checked is not None:
            yield checked
        elif malformed is not None:
            entry = malformed.setdefault(host, {'source': text(node.get('records_file')) or 'hostvars', 'dropped': 0, 'records': []})
            entry['dropped'] += 1
            if len(entry['records']) < MALFORMED_NAMED:
                entry['records'].append('record %d: %s' % (index, record_problem(record)))


def _rate(plan: Any, hca: str) -> Optional[float]:
    rate = number(mapping(mapping(plan).get('rate_gbps')).get(hca))
    return rate if rate and rate > 0 else None


def _active_rate(plan: Any, hca: Any) -> Optional[float]:
    """The rate ``hca`` runs at: its fastest ACTIVE port's (node_plan), or where the plan does not say
    which ports are ACTIVE (a plan made before it did), its fastest port's."""
    if not isinstance(mapping(plan).get('active_rate_gbps'), dict):
        return _rate(plan, hca)
    rate = number(plan['active_rate_gbps'].get(hca))
    return rate if rate and rate > 0 else None


def _rail_kind(plan: Any, rail: Any, hca: Any) -> Tuple[str, Optional[str]]:
    """A port's peers for the nominal rate: the ports of its rail of the same model (node_plan's
    hca_type, board_id, link layers; unknown models are peers of each other), so that a rail of
    nodes of two kinds (a 200 Gb/s card on some, a 400 Gb/s one on others) is not one bar."""
    return ('%s' % (key(rail),), text(mapping(mapping(plan).get('model')).get(hca)) or None)


def rail_nominal(nodes: Dict[str, Any]) -> Dict[Tuple[str, Optional[str]], float]:
    """{(rail, model): the rate the fleet's ports of that rail and model are meant to run at}: the
    most common ACTIVE rate among the nodes' ports of it (ties: the higher). A port trained down
    (1X: 100 of 400 Gb/s) is one node's, the nominal rate the fleet's; judged against the slower
    port of the pair, its tests looked healthy at 97 Gb/s. The rails are the plans' (node_plan:
    the compute rails in position order, or fabric_bench_hcas), so a storage card is no rail."""
    seen: Dict[Tuple[str, Optional[str]], Dict[float, int]] = {}
    for host in sorted(nodes or {}):
        plan = mapping(mapping(nodes[host]).get('plan'))
        for rail, hca in enumerate(sequence(plan.get('hcas'))):
            rate = _active_rate(plan, key(hca))
            if rate:
                counts = seen.setdefault(_rail_kind(plan, rail, key(hca)), {})
                counts[rate] = counts.get(rate, 0) + 1
    # The most common rate, the higher of two as common (a rate is a key: no two tie on (count, rate)).
    return dict((kind, max(counts.items(), key=lambda item: (item[1], item[0]))[0]) for kind, counts in seen.items())


def _end(nominal: Dict[Tuple[str, Optional[str]], float], host: str, plan: Any, hca: str, rail: Any,
         known: Dict[Any, Any]) -> Tuple[Optional[float], Optional[float], Optional[float]]:
    """(its port's rate, the nominal rate of its rail and model, the rate it runs at) of one end of
    a pair; ``known``: {(host, hca, rail): that}, filled as ends are met (a node's ports are the
    ends of thousands of pairs in a full mesh)."""
    end = known.get((host, hca, rail))
    if end is None:
        mine = nominal.get(_rail_kind(plan, rail, hca)) if hca is not None else None
        end = known[(host, hca, rail)] = (_rate(plan, hca), mine, _active_rate(plan, hca) if mine else None)
    return end


def _judged_rate(nominal: Dict[Tuple[str, Optional[str]], float], ends: Sequence[Tuple[str, Any, str, Any]],
                 known: Optional[Dict[Any, Any]] = None) -> Tuple[Optional[float], Optional[float], List[Dict[str, Any]], List[float]]:
    """(the rate a pair is judged against, the rail's nominal rate or None, its degraded ports, the
    rates of its ports that are known). ``ends``: [(host, plan, hca, rail)] of the pair; ``known``: _end()'s. Against the nominal rate of
    the slower end's kind; where no nominal rate is known, against the slower port's rate (None
    where neither is known)."""
    rates, nominals, degraded = [], [], []
    known = {} if known is None else known
    for host, plan, hca, rail in ends:
        rate, mine, running = _end(nominal, host, plan, hca, rail, known)
        if rate:
            rates.append(rate)
        if mine:
            nominals.append(mine)
            if running and running < mine:
                degraded.append({'host': host, 'hca': hca, 'rate_gbps': running})
    rail_rate = min(nominals) if nominals else None
    return (rail_rate or (min(rates) if rates else None)), rail_rate, degraded, rates


def degraded_text(entry: Dict[str, Any]) -> str:
    """The ports of a pair below its rail's nominal rate, for people ('' where none)."""
    ports = mapping(entry).get('degraded_ports') or []
    if not ports:
        return ''
    return 'below the rail\'s nominal %g Gb/s: %s' % (entry.get('rail_nominal_gbps') or 0, ', '.join(
        '%s %s at %g Gb/s' % (port.get('host'), port.get('hca'), port.get('rate_gbps') or 0) for port in ports))


# The pair thresholds; the role fabric_bench, the playbooks and the filters leave them to these
# (null). Bandwidth: a healthy link reaches at least this share of the rail's nominal rate (a
# 400 Gb/sec 4X NDR port: 360 Gb/s; ib_write_bw reaches 98 % at 8 MiB, HDR 196.55 of 200 Gb/s in
# tests/fixtures/public/perftest/aks_ib_write_bw_hdr_sweep_gbits.txt). GPU memory: with GPUDirect
# RDMA working it runs at host memory's rate (392.57 against 392.25 Gb/s, the metax_ib_write_bw
# sweeps in tests/fixtures/public/perftest/). Latency: bare-metal InfiniBand ib_send_lat is
# ~1.1 us at 2 B; 5 us leaves room for switches (an SR-IOV VF measures 5.5-7 us:
# tests/fixtures/public/perftest/aks_ib_read_lat_hdr_vf.txt - raise it there).
BW_RATIO = 0.9
GPU_RATIO = 0.9
LAT_MAX_US = 5.0


THRESHOLDS = ('bw_ratio', 'gpu_ratio', 'lat_max_us')


def threshold(name: str, value: Any) -> Optional[float]:
    """A threshold as given (``name`` names it in the message): None for unset (None or '': the default
    above), else a finite positive number - every -e key=value arrives as a string. ValueError
    otherwise. The one check: action fabric_bench_judge and filter bench_threshold_errors (role
    fabric_bench, before any pair runs) both call it."""
    if value is None or value == '':
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if isinstance(value, bool) or number is None or not math.isfinite(number) or number <= 0:
        raise ValueError('%s must be a positive number, got %r' % (name, value))
    return number


def threshold_errors(given: Dict[str, Any]) -> List[str]:
    """Why each of ``given`` ({name: value}) is not a threshold (threshold()), in the order given; [] when all are."""
    errors = []
    for name, value in given.items():
        try:
            threshold(name, value)
        except ValueError as exc:
            errors.append(str(exc))
    return errors


def thresholds(options: Optional[Mapping[str, Any]]) -> Dict[str, float]:
    """The thresholds of a run: ``options``' where given (not None), else the defaults above."""
    options = options or {}
    given = dict((name, options.get(name)) for name in ('bw_ratio', 'gpu_ratio', 'lat_max_us'))
    return {'bw_ratio': float(BW_RATIO if given['bw_ratio'] is None else given['bw_ratio']),
            'gpu_ratio': float(GPU_RATIO if given['gpu_ratio'] is None else given['gpu_ratio']),
            'lat_max_us': float(LAT_MAX_US if given['lat_max_us'] is None else given['lat_max_us'])}


def _counters_entry(host: str, plan: Any, record: Record) -> Dict[str, Any]:
    """A record's counter increase, judged by the same rules as the fabric's switch ports (module_utils/_rates.py)."""
    return {'host': host, 'hca': record['hca'], 'round': record['round'], 'memory': record['memory'],
            'pair': '%s->%s' % (record['server'], record['client']), 'rail': record['rail'],
            'increase': record['counters_delta'],
            'verdicts': _rates.judge(record['counters_delta'], record.get('counters_seconds'), _rate(plan, record['hca']))}


def _window_entry(host: str, record: Record) -> Dict[str, Any]:
    """A record's window (plugin_utils/bench/_window.py) with the test it belongs to: the rules of
    plugin_utils/diagnosis/rules/_window.py read them."""
    return {'host': host, 'side': record['side'], 'hca': record['hca'], 'peer_hca': record['peer_hca'], 'round': record['round'],
            'memory': record['memory'], 'server': record['server'], 'client': record['client'], 'rail': record['rail'],
            'gpu': text(record['gpu'].get('gpu')) or None, 'window': record['window']}


def _judge_entry(entry: Dict[str, Any], record: Record, expected: Optional[float], rail_rate: Optional[float], limits: Dict[str, float]) -> None:
    """The client's verdict of a pair: failed, low (bandwidth below bw_ratio of its rate, latency above lat_max_us) or ok."""
    bw_ratio, lat_max = limits['bw_ratio'], limits['lat_max_us']
    if record['status'] != 'ok':
        entry['verdict'] = 'failed'
        entry['reasons'].append('%s: %s' % ((record.get('failure') or {}).get('kind', 'failed'),
                                            (record.get('failure') or {}).get('message', '')))
    elif entry['bw_avg_gbps'] is not None and expected:
        entry['bw_ratio'] = round(entry['bw_avg_gbps'] / expected, 3)
        if entry['bw_ratio'] < bw_ratio:
            entry['verdict'] = 'low'
            entry['reasons'].append('%.1f Gb/s is %.0f %% of the %g Gb/s %s (threshold %.0f %%)' % (
                entry['bw_avg_gbps'], 100 * entry['bw_ratio'], float(expected),
                'nominal rate of rail %s' % record['rail'] if rail_rate else 'port rate', 100 * bw_ratio))
    elif entry['lat_typical_us'] is not None and entry['lat_typical_us'] > lat_max:
        entry['verdict'] = 'low'
        entry['reasons'].append('typical latency %.2f us above %.2f us' % (entry['lat_typical_us'], lat_max))


def _client_entry(host: str, plan: Any, record: Record, nodes: Dict[str, Any], nominal: Dict[Tuple[str, Optional[str]], float], known: Dict[Any, Any],
                  limits: Dict[str, float]) -> Dict[str, Any]:
    """A pair as its client's record shows it, judged."""
    server_plan = mapping(mapping(nodes.get(record['server'])).get('plan'))
    ends = [(record['server'], server_plan, record['peer_hca'], record['rail']), (host, plan, record['hca'], record['rail'])]
    # Against the rail's nominal rate (rail_nominal), not the slower port's: a 1X port's 97 Gb/s is low.
    expected, rail_rate, degraded, rates = _judged_rate(nominal, ends, known)
    summary = record.get('summary') or {}
    entry = {'server': record['server'], 'client': record['client'], 'rail': record['rail'],
             'server_hca': record['peer_hca'], 'client_hca': record['hca'], 'memory': record['memory'],
             'status': record['status'], 'failure': record.get('failure'),
             'bw_avg_gbps': summary.get('bw_avg_gbps'), 'lat_typical_us': summary.get('lat_typical_us'),
             'port_rate_gbps': min(rates) if rates else None, 'rail_nominal_gbps': rail_rate, 'degraded_ports': degraded,
             'elapsed_s': record.get('elapsed_s'), 'verdict': 'ok', 'reasons': [],
             'bytes': summary.get('bytes'), 'sizes': _sizes(record.get('results'))}
    if record['memory'] == 'gpu':
        # The client's side; the server's is added below (the farther of the two distances).
        entry['gpu_distance'] = record['gpu'].get('distance')
        # The GPU each side used (node_plan's gpu_by_hca): a GPU-memory test's path runs through it.
        entry['server_gpu'], entry['client_gpu'] = None, text(record['gpu'].get('gpu')) or None
    _judge_entry(entry, record, expected, rail_rate, limits)
    # Said on top of the verdict, never instead of it: a failed test stays failed, a latency
    # test through a degraded port is still judged.
    if degraded:
        entry['reasons'].append(degraded_text(entry))
    # Rows or warnings past the parser's caps on records (module_utils/_perftest.py): judged on those kept.
    entry['reasons'].extend(w for w in sequence(record.get('warnings')) if isinstance(w, str) and w.startswith(DROPPED_NOTE))
    return entry


def _add_server_sides(pairs: List[Dict[str, Any]], server_side: Dict[Tuple[Any, ...], Tuple[Any, ...]]) -> None:
    """What each client's pair takes from its server's record."""
    for entry in pairs:
        server = server_side.get((entry['memory'], entry['server'], entry['client'], entry['rail']))
        if entry['memory'] == 'gpu':
            distances = [d for d in (entry['gpu_distance'], server[0] if server else None) if d in DISTANCE_CLASSES]
            entry['gpu_distance'] = max(distances, key=DISTANCE_CLASSES.index) if distances else None
            entry['server_gpu'] = server[5] if server else None
        if entry['status'] != 'ok' and server and server[1]:
            # The server's own failure is often the cause (a busy port, no device, MR failed):
            # the client then only sees a refused connection, a broken exchange or a hang.
            entry['server_failure'] = server[1]
            entry['reasons'].insert(1, 'server side %s: %s' % (server[1].get('kind'), server[1].get('message')))


def _lost_client_pairs(pairs: List[Dict[str, Any]], matrix: Dict[str, Any], server_side: Dict[Tuple[Any, ...], Tuple[Any, ...]], reported: Set[str],
                       unreadable: Dict[str, str], malformed: Dict[str, Any]) -> None:
    """A client node lost mid-run leaves only its server's record: the pair still shows, failed."""
    seen = set((p['memory'], p['server'], p['client'], p['rail']) for p in pairs)
    for pair, (_distance, seen_by_server, status, hca, peer_hca, gpu) in server_side.items():
        memory, server, client, rail_name = pair
        if pair in seen or client == server:
            continue
        lost = client not in reported
        failure = {'kind': 'node_lost' if lost else 'no_client_record',
                   'message': 'the client %s returned no result%s; the server side: %s' % (
                       client, (' (%s)' % unreadable[client]) if client in unreadable
                       else (' (%d malformed record(s) of its file dropped)' % malformed[client]['dropped']) if client in malformed
                       else ' (node lost or its task failed)' if lost else '',
                       '%s: %s' % (seen_by_server.get('kind'), seen_by_server.get('message')) if seen_by_server
                       else status)}
        pairs.append({'server': server, 'client': client, 'rail': rail_name,
                      'server_hca': hca, 'client_hca': peer_hca, 'memory': memory, 'server_gpu': gpu if memory == 'gpu' else None,
                      'status': 'failed', 'failure': failure, 'bw_avg_gbps': None, 'lat_typical_us': None,
                      'port_rate_gbps': None, 'rail_nominal_gbps': None, 'degraded_ports': [], 'elapsed_s': None, 'verdict': 'failed',
                      'reasons': ['%s: %s' % (failure.get('kind', 'failed'), failure.get('message', ''))]})
        rail = matrix.setdefault(memory, {}).setdefault(str(rail_name), {})
        rail.setdefault(server, {})[client] = None


def _judge_gpu_vs_host(pairs: List[Dict[str, Any]], gpu_ratio: float) -> None:
    """GPU memory against host memory on the same pair and rail: low below gpu_ratio."""
    host_bw = dict(((p['server'], p['client'], p['rail']), p['bw_avg_gbps']) for p in pairs if p['memory'] == 'host')
    for entry in pairs:
        if entry['memory'] != 'gpu' or entry['bw_avg_gbps'] is None:
            continue
        host = host_bw.get((entry['server'], entry['client'], entry['rail']))
        if host:
            entry['gpu_vs_host'] = round(entry['bw_avg_gbps'] / host, 3)
            if entry['gpu_vs_host'] < gpu_ratio and entry['verdict'] == 'ok':
                entry['verdict'] = 'low'
            if entry['gpu_vs_host'] < gpu_ratio:
                entry['reasons'].append('GPU memory %.1f Gb/s is %.0f %% of host memory %.1f Gb/s on the same pair '
                                        '(threshold %.0f %%)' % (entry['bw_avg_gbps'], 100 * entry['gpu_vs_host'],
                                                                 host, 100 * gpu_ratio))


def report(nodes: Dict[str, Any], options: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """The controller's view: every pair's verdict and an N x N matrix per memory and rail.

    ``nodes``: {host: {'records': [...], 'plan': node_plan(...)}}, or 'records_file' (and
    'run_id') instead of 'records' for records written by write_records; ``options``: thresholds().
    """
    limits = thresholds(options)
    nominal = rail_nominal(nodes)
    pairs = []
    matrix: Dict[str, Dict[str, Dict[str, Dict[str, Optional[float]]]]] = {}
    counters: List[Dict[str, Any]] = []
    windows: List[Dict[str, Any]] = []
    windowed: Set[str] = set()
    # What a client's record needs from its server's (the GPU distance, the failure) and what a
    # pair without a client record is shown with, per pair. Each node's records are read once, one
    # node at a time, and never held together (a 256-node full mesh over 8 rails and two memory
    # kinds is about a million records: tests/bench/controller_scale.py): a client's pair is
    # judged as its record is read, and what its server's record adds is added once all are read
    # (reading every file twice, once for the server sides, was half of the judging).
    server_side: Dict[Tuple[Any, ...], Tuple[Any, ...]] = {}
    reported: Set[str] = set()
    unreadable: Dict[str, str] = {}
    malformed: Dict[str, Any] = {}
    known: Dict[Any, Any] = {}
    for host in sorted(nodes):
        plan = mapping(mapping(nodes[host]).get('plan'))
        for record in _node_records(host, nodes[host], unreadable, malformed):
            reported.add(host)
            if record.get('counters_delta'):
                counters.append(_counters_entry(host, plan, record))
            if record.get('window') is not None:
                windowed.add(host)
                if _window.notable(record['window']):
                    windows.append(_window_entry(host, record))
            if record['side'] == 'server':
                server_side[(record['memory'], record['server'], record['client'], record['rail'])] = (
                    record['gpu'].get('distance'), record['failure'], record['status'], record['hca'], record['peer_hca'],
                    text(record['gpu'].get('gpu')) or None)
                continue
            entry = _client_entry(host, plan, record, nodes, nominal, known, limits)
            pairs.append(entry)
            value = entry['bw_avg_gbps'] if entry['bw_avg_gbps'] is not None else entry['lat_typical_us']
            rail = matrix.setdefault(record['memory'], {}).setdefault(str(record['rail']), {})
            rail.setdefault(record['server'], {})[record['client']] = value
    _add_server_sides(pairs, server_side)
    _lost_client_pairs(pairs, matrix, server_side, reported, unreadable, malformed)
    _judge_gpu_vs_host(pairs, limits['gpu_ratio'])
    verdicts: Dict[str, int] = {}
    for entry in pairs:
        verdicts[entry['verdict']] = verdicts.get(entry['verdict'], 0) + 1
    result = {'pairs': pairs, 'matrix': matrix, 'counters': counters, 'windows': windows, 'windowed': sorted(windowed),
              'verdicts': verdicts,
              'thresholds': {'bw_ratio': limits['bw_ratio'], 'gpu_ratio': limits['gpu_ratio'], 'lat_max_us': limits['lat_max_us']}}
    if unreadable:
        result['records_unreadable'] = unreadable
    if malformed:
        result['records_malformed'] = malformed
    return result


# Why nothing was tested when no node left a fleet plan (role fabric_bench sets it on every node it ran on).
NOT_REACHED = 'no node reached the benchmark stage (unreachable, or failed before it)'


def judged_with(fleet: Any, options: Optional[Mapping[str, Any]] = None) -> Dict[str, float]:
    """The thresholds every reader of the pairs judges them with: ``options``' where given (not None:
    the judging's own arguments), else those role fabric_bench checked and kept in its fleet plan
    (``fleet['thresholds']``, filter bench_fleet_plan), else the defaults above. One owner: the
    judging (bench.json) and the culprit search (its pairs found bad) both take them from here."""
    given = dict(mapping(mapping(fleet).get('thresholds')))
    given.update((name, value) for name, value in mapping(options).items() if value is not None)
    return thresholds(given)


def judge(nodes: Dict[str, Any], fleet: Any, options: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """report() of ``nodes`` (plugin_utils/fleet/_fleet_model.py bench_nodes), with what was not tested and
    why from ``fleet`` (role fabric_bench's fleet plan: fleet_plan(); None when no node reached the
    benchmark, which fails closed as skipped), judged with judged_with(fleet, options)."""
    fleet = mapping(fleet) or {'skipped': NOT_REACHED, 'excluded': {}}
    result = report(nodes, judged_with(fleet, options))
    result.update(skipped=fleet.get('skipped'), excluded=mapping(fleet.get('excluded')), test=fleet.get('test'))
    if fleet.get('split') is True:
        result['split'] = True    # refused in a run that holds part of the nodes (playbooks/benchmark.yml)
    return result


def _pair_badness(entry: Dict[str, Any]) -> Tuple[Any, ...]:
    """Worst first: a failed test, then a low one by how far below its bound (the lowest ratio)."""
    ratios: List[float] = [entry[name] for name in ('bw_ratio', 'gpu_vs_host') if isinstance(entry.get(name), (int, float))]
    if entry.get('verdict') == 'low' and not ratios and entry.get('lat_typical_us'):
        ratios = [-entry['lat_typical_us']]        # latency: the slowest first
    return (0 if entry.get('verdict') == 'failed' else 1, min(ratios) if ratios else 0.0,
            _rails.natural_key(entry.get('server')), _rails.natural_key(entry.get('client')),
            _rails.natural_key(entry.get('rail')), text(entry.get('memory')) or '')


def pair_line(entry: Dict[str, Any]) -> str:
    """One pair test as a person reads it: 'n1 mlx5_0 -> n2 mlx5_0, host memory 300.0 of 400 Gb/s (low)'."""
    rail = 'rail %s' % entry.get('rail')
    line = '%s %s -> %s %s, %s memory' % (
        entry.get('server'), entry.get('server_hca') or rail, entry.get('client'), entry.get('client_hca') or rail, entry.get('memory'))
    bandwidth, expected = number(entry.get('bw_avg_gbps')), number(entry.get('rail_nominal_gbps') or entry.get('port_rate_gbps'))
    if entry.get('verdict') == 'failed':
        cause = not_reached(entry)
        if cause is not None:
            # Not a device's failure: the benchmark could not set the test up (BENCH_RUN_BROKEN says why).
            reason = '%s on %s: %s' % (cause['kind'], cause['host'], cause['message'])
            return '%s, not tested: the benchmark could not set it up (%s)' % (line, reason if len(reason) <= 160 else reason[:157] + '...')
        reason = text((sequence(entry.get('reasons')) or [None])[0]) or 'no reason given'
        return '%s, failed (%s)' % (line, reason if len(reason) <= 160 else reason[:157] + '...')
    if bandwidth is not None:
        line += ' %.1f%s Gb/s' % (bandwidth, ' of %g' % expected if expected else '')
        if isinstance(entry.get('gpu_vs_host'), (int, float)) and entry.get('bw_ratio', 1) >= entry['gpu_vs_host']:
            line += ', %.0f %% of host memory' % (100 * entry['gpu_vs_host'])
    elif number(entry.get('lat_typical_us')) is not None:
        line += ' %.2f us typical latency' % float(entry['lat_typical_us'])
    if entry.get('degraded_ports'):
        line += ', through a degraded port'
    return '%s (%s)' % (line, entry.get('verdict'))


def plan_line(fleet: Dict[str, Any], summary: Dict[str, Any], test: str, mode: str, memories: Sequence[str], check_mode: bool = False) -> str:
    """What role fabric_bench says before the rounds: the test, the mode, the rounds and their largest
    number of concurrent tests, the nodes and memories (or why nothing runs), then the nodes left out
    and why. ``fleet`` is fleet_plan's result, ``summary`` the schedule's (pair_schedule_summary)."""
    fleet, summary = mapping(fleet), mapping(summary)
    if fleet.get('skipped') is not None:
        line = 'not run: %s' % fleet['skipped']
    else:
        line = '%s %s: %s round(s) of up to %s concurrent tests over %d node(s), in %s memory%s' % (
            test, mode, summary.get('rounds'), max(summary.get('tests_per_round') or [], default=0), len(sequence(fleet.get('nodes'))),
            ' and '.join(str(m) for m in memories), ' (check mode: no perftest is run)' if check_mode else '')
    excluded = mapping(fleet.get('excluded'))
    if excluded:
        line += '; left out: %s' % '; '.join('%s: %s' % item for item in excluded.items())
    return line


def console_lines(bench: Dict[str, Any], limit: int = 20, where: str = 'bench.json') -> List[str]:
    """What the console shows of a benchmark (playbooks/benchmark.yml): the counts, what was not
    tested and why, then the worst pairs one plain line each, at most ``limit`` of them; the rest
    is in ``where``. A list of strings, joined into one message by the playbook."""
    bench = mapping(bench)
    limit = max(0, int(limit))
    if bench.get('skipped'):
        lines = ['pair benchmark not run: %s' % bench['skipped']]
    else:
        counts = mapping(bench.get('verdicts'))
        order = [v for v in ('ok', 'low', 'failed') if v in counts] + sorted(v for v in counts if v not in ('ok', 'low', 'failed'))
        lines = ['%s: %d pair test(s), %s' % (bench.get('test') or 'pair benchmark', sum(counts.values()),
                                              ', '.join('%d %s' % (counts[v], v) for v in order) or 'none judged')]
    for host in sorted(mapping(bench.get('excluded')), key=_rails.natural_key):
        lines.append('left out %s (%s)' % (host, bench['excluded'][host]))
    for host in sorted(mapping(bench.get('records_unreadable')), key=_rails.natural_key):
        lines.append('records of %s unreadable (%s)' % (host, bench['records_unreadable'][host]))
    for host in sorted(mapping(bench.get('records_malformed')), key=_rails.natural_key):
        entry = mapping(bench['records_malformed'][host])
        named = sequence(entry.get('records'))
        lines.append('%s malformed record(s) of %s dropped, not judged (%s: %s%s)' % (
            entry.get('dropped'), host, entry.get('source'), '; '.join(text(r) or '' for r in named),
            '; ...' if (integer(entry.get('dropped')) or 0) > len(named) else ''))
    bad = sorted((p for p in mappings(bench.get('pairs')) if p.get('verdict') != 'ok'), key=_pair_badness)
    if bad and limit:
        lines.append('%d pair test(s) not healthy, the worst first' % len(bad))
        lines.extend(pair_line(entry) for entry in bad[:limit])
    if len(bad) > limit:
        lines.append('... and %d more not healthy, every pair in %s' % (len(bad) - limit, where))
    # Node names, HCAs and failure messages are the nodes' (or a log's) own text.
    shown: List[str] = _printable.printable_lines(lines)
    return shown
