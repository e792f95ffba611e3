# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Fuzzing the controller-side handling of what nodes return: collective results judged
(_collective) and benchmark records (_bench). Every value a node sent may be of any type.

Figures (this 2-core machine): 2,000 structure mutations (_mutate.mutate_json: wrong types,
dropped keys, cut lists, 10**400, infinity) of realistic inputs for each of eight functions,
about 3 s; before _shape, 30 distinct tracebacks (TypeError, AttributeError, KeyError,
OverflowError) came out of _collective.judge, judge_nodes, expected_busbw and _bench.report,
sequence_records, round_records and counter_delta.
"""

from __future__ import annotations

import gzip
import json
import os
import random

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _collective, _nccl
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench
from tests.unit.conftest import fixture_text
from tests.unit.fuzz import _mutate
# A fixture (tmpfs when there is one), used as an argument.
from tests.unit.fuzz.test_fuzz_readers import scratch  # noqa: F401 pylint: disable=unused-import
from tests.unit.plugins.plugin_utils import test__bench as bench_cases

PER_FUNCTION = 2000


def _result():
    result = json.loads(json.dumps(_nccl.parse_text(fixture_text('real', 'h200x2', 'all_reduce_perf_g2.txt'))))
    result['status'] = 'ok'
    return result


def _cases():
    result = _result()
    ib = {'devices': [{'name': 'mlx5_0', 'ports': [{'state': 'ACTIVE', 'rate_gbps': 400.0, 'counters': {'symbol_error': 1},
                                                    'hw_counters': {}}]}]}
    steps = _bench.sequence_steps('b', bench_cases.ROUNDS, bench_cases.PLANS, ['host'], 18515)
    ok = dict(steps[0]['tests'][0], status='ok', summary={'bw_avg_gbps': 390.0}, results=[{'bytes': 8}], elapsed_s=1.5)
    record = bench_cases._record
    return {
        # name: (per host: False = the argument as a whole is the node's, True = {host: node's}, document, call)
        'judge': (False, result, lambda doc: _collective.judge(doc, 50.0)),
        'judge_nodes': (True, {'a': result, 'b': result, 'c': {'failed': True, 'msg': 'x'}},
                        lambda doc: _collective.judge_nodes(doc, None)),
        'judge_nodes_expected': (True, {'a': result, 'b': result}, lambda doc: _collective.judge_nodes(doc, 40.0)),
        'expected_busbw': (True, {'a': ib, 'b': ib}, _collective.expected_busbw),
        'report': (True, {'a': {'plan': bench_cases._plan(400.0), 'records': [dict(record('b', 'a', 'host', 1.0), side='server')]},
                          'b': {'plan': bench_cases._plan(400.0),
                                'records': [record('a', 'b', 'host', 392.0), record('a', 'b', 'gpu', 250.0)]},
                          'd': {'plan': bench_cases._plan(100.0), 'records': [record('a', 'd', 'host', None, 'failed')]}},
                   lambda doc: _bench.report(doc, {})),
        'sequence_records': (False, {'counters_start': ib, 'steps': [{'step': 1, 'tests': [ok], 'counters': ib}]},
                             lambda doc: _bench.sequence_records('b', steps, doc)),
        'round_records': (False, [{'item': {'item': bench_cases.TESTS[0]}, 'status': 'ok', 'summary': {'bw_avg_gbps': 390.0}}],
                          lambda doc: _bench.round_records('b', bench_cases.TESTS, doc, [], ib, ib, 3, 'host')),
        'counter_delta': (True, {'before': ib, 'after': ib}, lambda doc: _bench.counter_delta(doc['before'], doc['after'], 'mlx5_0')),
    }


CASES = _cases()


@pytest.mark.parametrize('name', sorted(CASES))
def test_node_data_of_any_shape_is_judged_not_raised(name):
    per_host, doc, call = CASES[name]
    rng = random.Random(sum(map(ord, name)))
    for _index in range(PER_FUNCTION):
        if per_host:
            mutated = dict((host, json.loads(_mutate.mutate_json(rng, value))) for host, value in doc.items())
        else:
            mutated = json.loads(_mutate.mutate_json(rng, doc))
        try:
            json.dumps(call(mutated))
        except Exception as exc:
            pytest.fail('%s raised %r on %r' % (name, exc, json.dumps(mutated)[:400]))


READ_RECORDS_INPUTS = 10000


def _records_inputs(rng, doc):
    """Bytes of a records file: the document's JSON damaged (structure or bytes) and compressed,
    the compressed bytes themselves damaged, or bytes that are no gzip at all."""
    plain = json.dumps(doc).encode('utf-8')
    choice = rng.randrange(4)
    if choice == 0:
        return gzip.compress(_mutate.mutate_json(rng, doc).encode('utf-8'), compresslevel=1, mtime=0)
    if choice == 1:
        return gzip.compress(_mutate.mutate(rng, plain), compresslevel=1, mtime=0)
    if choice == 2:
        return _mutate.mutate(rng, gzip.compress(plain, compresslevel=1, mtime=0))
    return _mutate.mutate(rng, plain)


def test_records_file_of_any_bytes_is_read_or_refused_with_a_reason(scratch):  # noqa: F811
    """_bench.read_records on 10,000 damaged records files: the records, or ValueError saying why;
    never another exception, never a second on one file."""
    records = [bench_cases._record('a', 'b', 'host', 392.0), bench_cases._record('a', 'b', 'gpu', 250.0),
               dict(bench_cases._record('b', 'a', 'host', 1.0), side='server')]
    good = _bench.write_records(scratch, 'b', records, run_id='r1')
    with open(good, 'rb') as handle:
        doc = json.loads(gzip.decompress(handle.read()))
    assert _bench.read_records(good, 'b', 'r1') == doc['records']
    rng = random.Random(25)
    clock = _mutate.Clock(1.0)
    path = os.path.join(scratch, 'fuzzed.records.json.gz')
    refused = 0
    for _index in range(READ_RECORDS_INPUTS):
        data = _records_inputs(rng, doc)
        with open(path, 'wb') as handle:
            handle.write(data)
        try:
            json.dumps(clock.run(_bench.read_records, path, 'b', 'r1', about=data[:300]))
        except ValueError as exc:
            refused += 1
            assert str(exc)
        except Exception as exc:  # the point of the test: name the input that raised
            pytest.fail('read_records raised %r on %r' % (exc, data[:300]))
    assert clock.count == READ_RECORDS_INPUTS
    assert 0 < refused < READ_RECORDS_INPUTS
    assert clock.slowest[0] < 1.0, 'slowest file took %.2f s' % clock.slowest[0]
