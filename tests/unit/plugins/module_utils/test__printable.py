# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""module_utils/_printable.py, the one escaping of what a terminal, a browser or a report reader is
shown: a crafted HCA type, host name, failure message or file name reaches no output raw."""

from __future__ import annotations

import copy
import json
import unicodedata

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.filter.fabric_summary import fabric_summary
from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _printable
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.bench import _bench
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.fleet import _fleet_model, _offline
from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.report import _report_stage
from tests.bench import diagnosis_accuracy

# Clear the screen, ring the bell, a NUL, set the window title, reverse what follows, C1 CSI, DEL.
HOSTILE = 'x\x1b[2J\x07\x00\x1b]0;owned\x07\u202eevil\u2066\x9b\x7f\u200f\u061c\ufeff'
RAW = ('\x1b', '\x07', '\x00', '\u202e', '\u2066', '\x9b', '\x7f', '\u200f', '\u061c', '\ufeff')


def _categories():
    return set(c for c in range(0x110000) if unicodedata.category(chr(c)) in ('Cc', 'Cf', 'Cs', 'Zl', 'Zp'))


@pytest.mark.skipif(tuple(int(x) for x in unicodedata.unidata_version.split('.')) > (15, 1, 0),
                    reason='a Unicode newer than the table: add its new format characters to _UNSAFE_RANGES')
def test_every_control_format_separator_and_surrogate_is_escaped():
    text = ''.join(chr(c) for c in sorted(_categories() | {0xfffe, 0xffff}))
    shown = _printable.printable(text)
    assert shown.isascii() and all(c.isprintable() for c in shown)
    # Each one as its Python escape: nothing lost, and the escape reads back as the character.
    assert shown.encode('ascii').decode('unicode_escape') == text


@pytest.mark.parametrize('char', ['\x1b', '\x07', '\x00', '\x7f', '\x85', '\x9b', '\u061c', '\u200e', '\u200f', '\u202a',
                                  '\u202e', '\u2066', '\u2069', '\u2028', '\u2029', '\ufeff', '\udcff', '\U000e0041'])
def test_one_character_of_the_class_is_escaped_wherever_it_is(char):
    for text in (char, 'a' + char, char + 'b', 'a%sb%sc' % (char, char)):
        shown = _printable.printable(text)
        assert char not in shown and ascii(char)[1:-1] in shown and shown.replace(ascii(char)[1:-1], '') == text.replace(char, '')
        assert _printable.printable(text, _printable.LINES) == shown


def test_lines_and_tabs_are_kept_only_where_asked_and_the_rest_is_as_it_was():
    assert _printable.printable('a\nb\tc\rd') == 'a\\nb\\tc\\rd'
    assert _printable.printable('a\nb\tc\rd', _printable.LINES) == 'a\nb\tc\\rd'
    plain = 'mlx5_0 MT4129 ünïcödé 日本 \u00e9 \U0001f600 <b>&"\' 100 %'
    assert _printable.printable(plain) == plain and _printable.printable(None) == ''
    assert _printable.printable(7) == '7' and _printable.printable_lines(['a\x1b', 'b']) == ['a\\x1b', 'b']


# ------------------------------------------------------------------------------ every output

FACTS = diagnosis_accuracy.node_facts('nvidia_h100_8x_ndr')
HOST = 'node' + HOSTILE


def _hostvars():
    ib = copy.deepcopy(FACTS['ib'])
    for device in ib['devices']:
        device['hca_type'] = HOSTILE
        device['node_desc'] = HOSTILE
        device['fw_ver'] = HOSTILE
    # A port down: a finding on it names the device and the port.
    ib['devices'][0]['ports'][0].update(state='DOWN', state_code=1, phys_state='Disabled', phys_state_code=3)
    gdr = copy.deepcopy(FACTS['gdr'])
    gdr.setdefault('reasons', []).append('peer memory: ' + HOSTILE)
    good = {'ansible_facts': {'gpu_fabric_ib': ib, 'gpu_fabric_gdr': gdr}, 'gpu_fabric_stages': ['validate']}
    broken = {'gpu_fabric_failures': [{'stage': 'validate', 'task': 'Read HCAs ' + HOSTILE, 'msg': 'failed: ' + HOSTILE,
                                       'unreachable': False}]}
    return {HOST: good, 'b' + HOSTILE: broken, 'plain': copy.deepcopy(good)}


def _bench_result():
    pair = {'server': HOST, 'client': 'plain', 'rail': HOSTILE, 'server_hca': HOSTILE, 'client_hca': 'mlx5_0', 'memory': 'host',
            'status': 'failed', 'failure': {'kind': 'crashed' + HOSTILE, 'message': HOSTILE}, 'verdict': 'failed',
            'reasons': ['crashed: ' + HOSTILE], 'bw_avg_gbps': None, 'lat_typical_us': None}
    return {'test': 'ib_write_bw', 'pairs': [pair], 'verdicts': {'failed': 1}, 'excluded': {HOST: HOSTILE},
            'records_unreadable': {HOST: HOSTILE},
            'records_malformed': {HOST: {'source': HOSTILE, 'dropped': 1, 'records': ['record 0: ' + HOSTILE]}}}


def _report():
    hostvars = _hostvars()
    model = _fleet_model.read(hostvars, sorted(hostvars), ('facts', 'run', 'collective'))
    return _report_stage.from_model(model, None, None, '2026-11-28T00:00:00')


def _files():
    return dict((name, data.decode('utf-8')) for name, data in _report_stage.render(_report(), '/out/report.html', 0))


OUTPUTS = {
    'report.html': lambda: _files()['report.html'],
    'report.md': lambda: _files()['report.md'],
    'junit.xml': lambda: _files()['junit.xml'],
    'gpu_fabric.prom': lambda: _files()['gpu_fabric.prom'],
    'console summary': lambda: '\n'.join(_report_stage.console_lines(_report(), '/out/report.html\x1b[2J')),
    'fabric_summary': lambda: '\n'.join(fabric_summary(_hostvars(), sorted(_hostvars()))),
    'bench judge console': lambda: '\n'.join(_bench.console_lines(_bench_result(), 20, 'bench.json')),
    'offline log labels': lambda: '\n'.join(_offline.classify(['/logs/a%s__b__0__host.txt' % HOSTILE, '/logs/%s.log' % HOSTILE])['labels'].values()),
}


@pytest.mark.parametrize('name', sorted(OUTPUTS))
def test_hostile_text_reaches_no_output_raw(name):
    text = OUTPUTS[name]()
    raw = [ascii(c) for c in RAW if c in text]
    assert not raw, '%s holds %s raw' % (name, ', '.join(raw))
    # It reached the output, shown: ESC as its escape (in report.md with its backslash escaped too).
    assert '\\x1b' in text and '\\u202e' in text, text[:2000]
    # Whatever a line structure a format has, no other control character or override is in it.
    assert all(c in '\t\n' or (c.isprintable() and unicodedata.category(c) not in ('Cf', 'Zl', 'Zp')) for c in text)


def test_the_report_json_keeps_the_text_as_it_was():
    """report.json is data, not a display: the text as the node gave it (JSON escapes controls itself)."""
    report = json.loads(dict(_report_stage.render(_report(), None, 0))['report.json'])
    assert HOST in report['hosts']
