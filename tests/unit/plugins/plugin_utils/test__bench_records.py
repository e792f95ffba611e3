# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""bench_report's records files: read bounded, of regular files only; a file that cannot be read
makes that node's pairs node_lost with the reason, and never stops the report of the others."""

from __future__ import annotations

import gzip
import os
import threading

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench
from tests.unit import special_files
from tests.unit.plugins.plugin_utils.test__bench import _mesh


def _nodes(tmp_path):
    nodes = _mesh()
    for host in nodes:
        nodes[host]['records_file'] = _bench.write_records(str(tmp_path / 'records'), host, nodes[host].pop('records'), 'run-1')
        nodes[host]['run_id'] = 'run-1'
    return nodes


def _report_in_time(nodes):
    """The report, or a failure when it does not come back within 20 s (a FIFO blocked it forever)."""
    out = {}
    worker = threading.Thread(target=lambda: out.setdefault('result', _bench.report(nodes, {})), daemon=True)
    worker.start()
    worker.join(20)
    assert 'result' in out, 'the report did not finish: a records file blocked it'
    return out['result']


def _node_lost(result, host, *words):
    assert host in result['records_unreadable'], result.get('records_unreadable')
    reason = result['records_unreadable'][host]
    assert 'cannot be read' in reason and all(word in reason for word in words), reason
    mine = [pair for pair in result['pairs'] if pair['client'] == host]
    assert mine and all(pair['verdict'] == 'failed' and pair['failure']['kind'] == 'node_lost' for pair in mine)
    others = [pair for pair in result['pairs'] if pair['client'] not in result['records_unreadable']]
    assert others and any(pair['verdict'] != 'failed' for pair in others)  # the others are still judged
    return reason


@pytest.mark.parametrize('kind', special_files.ALL)
def test_a_records_file_that_is_no_regular_file_is_node_lost(tmp_path, kind):
    nodes = _nodes(tmp_path)
    os.unlink(nodes['b']['records_file'])
    special_files.make(tmp_path / 'records', kind, os.path.basename(nodes['b']['records_file']))
    reason = _node_lost(_report_in_time(nodes), 'b')
    assert ('not a regular file' if kind in special_files.KINDS else 'a symlink (not followed)') in reason


@pytest.mark.parametrize('content, words', [
    # A gzip bomb: 64 MiB and one byte of zeros compress to about 65 kB.
    (gzip.compress(b'\0' * ((64 << 20) + 1), compresslevel=9), ('larger than 64 MiB once decompressed',)),
    # 6 MB of '{},' parsed would be 2.1 million dicts (11.4 MiB of them took 279 MiB): refused before json.loads.
    (gzip.compress(b'{"format":"hpc.gpu_fabric.bench_records/1","host":"b","records":[' + b'{},' * 2100000 + b'{}]}'),
     ('more JSON values than', '2000000 lists or mappings')),
    # 16 MB of '0,': 8 million values.
    (gzip.compress(b'{"format":"hpc.gpu_fabric.bench_records/1","host":"b","records":[' + b'0,' * 8000001 + b'0]}'),
     ('more JSON values than', '8000000 values')),
    # A few hundred bytes that inflate to JSON nested 100,000 deep.
    (gzip.compress(b'[' * 100000 + b']' * 100000, compresslevel=9), ('nested deeper',)),
    # Within json's recursion limit, deeper than any records file.
    (gzip.compress(b'{"format":"hpc.gpu_fabric.bench_records/1","host":"b","records":[' + b'[' * 500 + b']' * 500 + b']}'),
     ('nested deeper than 16 levels',)),
], ids=['gzip_bomb', 'empty_dicts', 'values', 'nested_100000', 'nested_500'])
def test_a_records_file_that_would_exhaust_the_controller_is_node_lost(tmp_path, content, words):
    nodes = _nodes(tmp_path)
    with open(nodes['b']['records_file'], 'wb') as handle:
        handle.write(content)
    _node_lost(_report_in_time(nodes), 'b', *words)


def test_a_records_file_larger_than_the_cap_is_not_read(tmp_path, monkeypatch):
    nodes = _nodes(tmp_path)
    monkeypatch.setattr(_bench, 'RECORDS_MAX_BYTES', 64)
    with pytest.raises(ValueError, match='records file .* of a cannot be read: larger than 64 bytes$'):
        _bench.read_records(nodes['a']['records_file'], 'a', 'run-1')


def test_the_caps_hold_a_1024_node_full_mesh_with_every_message_size():
    """The figures behind RECORDS_MAX_BYTES, _VALUES and _CONTAINERS, from record_of itself: a node
    of a 1,024-node full mesh over 8 rails, host and GPU memory, each side once per pair, with the
    23 sizes of fabric_bench_all_sizes; the caps hold it with a margin and stay far below 128 MiB."""
    import json
    test = {'round': 1023, 'memory': 'gpu', 'rail': '7', 'server': 'gpu-node-1023.cluster.example', 'client': 'gpu-node-0001.cluster.example',
            'server_hca': 'mlx5_11', 'client_hca': 'mlx5_10', 'gpu': {'index': 7, 'name': 'GPU-7', 'bdf': '0000:df:00.0'}}
    row = {'iterations': 5000, 'bw_peak_gbps': 392.41, 'bw_avg_gbps': 391.87, 'msg_rate_mpps': 0.005839}
    outcome = {'status': 'ok', 'summary': {'bytes': 8388608, 'bw_peak_gbps': 392.41, 'bw_avg_gbps': 391.87},
               'results': [dict(row, bytes=2 ** size) for size in range(1, 24)], 'elapsed_s': 3.21, 'attempts': 1,
               'tool_warnings': ['Conflicting CPU frequency values detected: 1500.000000 != 3700.000000. CPU Frequency is not max.']}
    changes = ({'port_rcv_errors': 3, 'symbol_error': 12, 'link_downed': 1}, 3.4)
    pair = ''.join(json.dumps(_bench.record_of(dict(test, side=side), outcome, None, None, changes), separators=(',', ':'))
                   for side in ('server', 'client'))
    pairs = 1023 * 8 * 2
    assert 50 << 20 < len(pair) * pairs < _bench.RECORDS_MAX_BYTES <= 64 << 20
    assert pair.count(',') * pairs * 2 < _bench.RECORDS_MAX_VALUES
    assert (pair.count('{') + pair.count('[')) * pairs * 2 < _bench.RECORDS_MAX_CONTAINERS


@pytest.mark.parametrize('levels', [0, 1, 15, 16, 17, 40])
def test_the_depth_limit_is_exact_for_lists_and_mappings(levels):
    from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench._bench import _deeper_than
    value = 'leaf'
    for level in range(levels):
        value = [1, value] if level % 2 else {'a': 1, 'b': value}
    assert _deeper_than(value, 16) is (levels > 16)
    # A wide level counts once: depth, not size.
    assert _deeper_than([[{}] * 50] * 50, 3) is False and _deeper_than([[{'a': []}]], 3) is True


# One record that cannot be placed in a pair (every field report() keys pairs, the matrix and their
# sort orders by), in a records file or in hostvars: it alone is dropped, counted and named.
_MALFORMED = [
    ('server', 'drop', 'server is missing'),
    ('server', None, 'server is null'),
    ('server', 3, 'server is 3'),
    ('server', '', "server is ''"),
    ('client', None, 'client is null'),
    ('client', ['b'], 'client is a list'),
    ('memory', None, 'memory is null'),
    ('memory', 'vram', "memory is 'vram'"),
    ('side', 'drop', 'side is missing'),
    ('rail', {'x': 1}, 'rail is a dict'),
    ('rail', True, 'rail is True'),
]


@pytest.mark.parametrize('from_file', [True, False], ids=['records_file', 'hostvars'])
@pytest.mark.parametrize('field, value, words', _MALFORMED, ids=['%s-%s' % (f, v) for f, v, _w in _MALFORMED])
def test_a_malformed_record_is_named_and_costs_only_itself(tmp_path, from_file, field, value, words):
    nodes = _mesh()
    healthy = _bench.report(_mesh(), {})
    bad = dict(nodes['c']['records'][0])
    if value == 'drop':
        bad.pop(field)
    else:
        bad[field] = value
    # c's one good record stays, a second (its malformed copy) and a non-mapping come after it.
    nodes['c']['records'] = nodes['c']['records'] + [bad, 'junk']
    if from_file:
        nodes = dict((host, dict(node, records=[], run_id='r', records_file=_bench.write_records(
            str(tmp_path), host, node['records'], 'r'))) for host, node in nodes.items())
    result = _bench.report(nodes, {})
    entry = result['records_malformed']['c']
    assert entry['dropped'] == 2 and list(result['records_malformed']) == ['c']
    assert entry['records'][0].startswith('record 1: ' + words) and entry['records'][1] == 'record 2: not a mapping (str)'
    assert entry['source'] == (nodes['c']['records_file'] if from_file else 'hostvars')
    # Every other pair is judged as without the bad record.
    assert result['pairs'] == healthy['pairs'] and result['verdicts'] == healthy['verdicts']
    lines = _bench.console_lines(result)
    assert any(line.startswith('2 malformed record(s) of c dropped') and 'record 1: ' + words in line for line in lines), lines


def test_malformed_records_are_named_up_to_a_few_and_all_counted():
    nodes = _mesh()
    nodes['b']['records'] = nodes['b']['records'] + [{'side': 'client'}] * 40
    entry = _bench.report(nodes, {})['records_malformed']['b']
    assert entry['dropped'] == 40 and len(entry['records']) == _bench.MALFORMED_NAMED
    assert entry['records'][0] == 'record 2: server is missing, not a node name'
    line = [x for x in _bench.console_lines(_bench.report(nodes, {})) if 'malformed' in x][0]
    assert line.startswith('40 malformed record(s) of b dropped') and line.endswith('; ...)')
