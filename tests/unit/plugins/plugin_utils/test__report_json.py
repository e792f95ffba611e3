# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""report.json and bench.json as text: the same JSON as ansible-core's encoder (to_nice_json) writes,
each pair test on a line of its own, one line beyond the pair limit."""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping

import pytest

from ansible.module_utils.common.json import AnsibleJSONEncoder

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _report_stage


class Facts(Mapping):
    """A mapping that is no dict (as Ansible's views are): the standard library cannot write it."""

    def __init__(self, data):
        self._data = data

    def __getitem__(self, key):
        return self._data[key]

    def __iter__(self):
        return iter(self._data)

    def __len__(self):
        return len(self._data)


def _pairs(count):
    return [{'server': 'gpu%02d' % (i % 7), 'client': 'gpu%02d' % (i % 5 + 7), 'rail': i % 8, 'memory': 'gpu',
             'verdict': 'ok' if i % 3 else 'slow', 'bw_gbps': 391.5 - i % 4, 'evidence': {'at': [i, None, True]}}
            for i in range(count)]


def _ansible(value, indent=True):
    if indent:
        return json.dumps(value, cls=AnsibleJSONEncoder, indent=4, sort_keys=True, separators=(',', ': ')) + '\n'
    return json.dumps(value, cls=AnsibleJSONEncoder, sort_keys=True) + '\n'


REPORT = {'summary': {'hosts': 3, 'roots': ['x']}, 'generated_at': datetime.datetime(2026, 11, 26, 17, 0, 0),
          'nodes': {'gpu01': {'facts': Facts({'b': 1, 'a': [1.5, 'é', '\x00pairs']})}},
          'findings': [{'code': 'LINK_DOWN', 'evidence': {'host': 'gpu01'}}]}


def test_without_pairs_the_text_is_ansible_core_s_byte_for_byte():
    assert _report_stage.report_json(REPORT) == _ansible(REPORT)
    bench = {'verdicts': {'ok': 0}, 'pairs': [], 'skipped': 'no pairs'}
    assert _report_stage.bench_json(bench) == _ansible(bench)


@pytest.mark.parametrize('count', [1, 2, 300])
def test_each_pair_on_its_own_line_the_same_json_and_the_value_unchanged(count):
    pairs = _pairs(count)
    report = dict(REPORT, bench={'verdicts': {'ok': count}, 'pairs': pairs, 'z': '\x00pairs'})
    text = _report_stage.report_json(report)
    assert json.loads(text) == json.loads(_ansible(report))
    assert report['bench']['pairs'] is pairs and report['bench']['z'] == '\x00pairs'
    lines = text.splitlines()
    # A line per pair test, at the pairs' depth (report.json: bench.pairs), keys sorted.
    pair_lines = [line for line in lines if line.lstrip().startswith('{"bw_gbps"')]
    assert len(pair_lines) == count and all(line.startswith(' ' * 12 + '{') and not line.startswith(' ' * 13) for line in pair_lines)
    assert json.loads(pair_lines[0].rstrip(',')) == pairs[0]
    bench = {'verdicts': {'ok': count}, 'pairs': pairs}
    text = _report_stage.bench_json(bench)
    assert json.loads(text) == bench and len([line for line in text.splitlines() if line.startswith(' ' * 8 + '{"bw_gbps"')]) == count


def test_beyond_the_pair_limit_one_line_as_ansible_core_writes_it(monkeypatch):
    monkeypatch.setattr(_report_stage, 'INDENT_MAX_PAIRS', 2)
    report = dict(REPORT, bench={'verdicts': {'ok': 3}, 'pairs': _pairs(3)})
    assert _report_stage.report_json(report) == _ansible(report, indent=False)
    assert _report_stage.report_json(report).count('\n') == 1


@pytest.mark.parametrize('read', [_report_stage.read_baseline, _report_stage.read_bench], ids=['baseline', 'bench'])
def test_a_file_nested_too_deep_is_refused_with_a_reason(tmp_path, read):
    # Found by tests/unit/fuzz (report_files): 20 kB of '[' made json.loads raise RecursionError.
    path = tmp_path / 'report.json'
    path.write_text('[' * 20000 + ']' * 20000)
    with pytest.raises(ValueError, match='nested too deep'):
        read(str(path))
