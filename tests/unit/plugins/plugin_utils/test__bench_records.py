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

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils import _bench
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
    # A gzip bomb: 128 MiB and one byte of zeros compress to about 130 kB.
    (gzip.compress(b'\0' * ((128 << 20) + 1), compresslevel=9), ('larger than 128 MiB once decompressed',)),
    # A few hundred bytes that inflate to JSON nested 100,000 deep.
    (gzip.compress(b'[' * 100000 + b']' * 100000, compresslevel=9), ('nested deeper',)),
    # Within json's recursion limit, deeper than any records file.
    (gzip.compress(b'{"format":"hpc.gpu_fabric.bench_records/1","host":"b","records":[' + b'[' * 500 + b']' * 500 + b']}'),
     ('nested deeper than 16 levels',)),
], ids=['gzip_bomb', 'nested_100000', 'nested_500'])
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
