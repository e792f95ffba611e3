# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Limits on the YAML of roles/ and playbooks/, which keep the logic in Python (issue 23):

- at most MAX_SET_FACT ``set_fact`` tasks: a value only the next task uses is a task ``vars:``,
  a role var or a registered result; each set_fact also costs a pass over every host;
- no Jinja expression over MAX_JINJA_LINES lines of the file: a longer one is a filter (plugins/filter,
  its logic in plugin_utils or module_utils, unit-tested). An expression is one ``{{ }}``, one
  ``{% %}`` statement with everything up to its end tag (for/endfor, if/endif, ...), and tags that
  follow each other with only whitespace between count as one; folded scalars (``>-``) are measured
  in the file, where their lines are; bare conditions (when, that, ...) are expressions too;
- the failure record of a rescue (``gpu_fabric_failures``: stage, task, msg, unreachable) is built in
  one place: the filter failure_record, called by the one task that keeps it
  (playbooks/tasks/keep_failure.yml); no YAML writes the record's shape itself.

``PYTHONPATH=.collections python -m tests.unit.test_playbook_limits`` prints the counts.
"""

from __future__ import annotations

import glob
import os
import re

import jinja2
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAX_SET_FACT = 20
MAX_JINJA_LINES = 5
SET_FACT = ('ansible.builtin.set_fact', 'ansible.legacy.set_fact', 'set_fact')
# Keys whose value is a bare Jinja expression (no {{ }}), as Ansible evaluates it.
CONDITIONS = ('when', 'that', 'failed_when', 'changed_when', 'until', 'break_when')
# Statements that open a block closed by an end tag (jinja2's parser: parse_for, parse_if, ...).
OPENERS = ('for', 'if', 'macro', 'call', 'filter', 'with', 'block', 'autoescape', 'trans')
# A Jinja dict literal with a 'stage' key, as the rescues built the record.
STAGE_KEY = re.compile(r'''['"]stage['"]\s*:''')
FAILURE_TASKS = os.path.join('playbooks', 'tasks', 'keep_failure.yml')


def yaml_files():
    found = []
    for top in ('roles', 'playbooks'):
        for pattern in ('*.yml', '*.yaml'):
            found.extend(glob.glob(os.path.join(REPO, top, '**', pattern), recursive=True))
    return sorted(found)


def _nodes(node, parent_key=None):
    """(node, the key it is the value of) for every node below ``node``."""
    yield node, parent_key
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield from _nodes(key, None)
            yield from _nodes(value, key.value if isinstance(key, yaml.ScalarNode) else None)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _nodes(item, parent_key)


def _documents(path):
    with open(path, encoding='utf-8') as handle:
        text = handle.read()
    return text, [doc for doc in yaml.compose_all(text, Loader=yaml.SafeLoader) if doc is not None]


def _spans(source):
    """(first line, last line) of each Jinja expression in ``source`` (1-based, lines of ``source``).
    Raises jinja2.TemplateSyntaxError where ``source`` is no template."""
    spans, depth, start, end, gap = [], 0, None, None, False
    # lex() gives the raw tokens: whitespace inside a tag is a token of its own.
    tokens = [token for token in jinja2.Environment().lex(source) if token[1] != 'whitespace']
    for index, (lineno, kind, value) in enumerate(tokens):
        if kind in ('variable_begin', 'block_begin'):
            keyword = next((v for _line, k, v in tokens[index + 1:index + 2] if k == 'name'), '') if kind == 'block_begin' else ''
            if start is not None and depth == 0 and gap:
                spans.append((start, end))
                start = None
            if start is None:
                start = lineno
            # {% set x %}...{% endset %} is a block; {% set x = ... %} is not.
            if keyword in OPENERS or (keyword == 'set' and not any(
                    (k, v) == ('operator', '=') for _line, k, v in _until(tokens, index + 1, 'block_end'))):
                depth += 1
            elif keyword.startswith('end') and depth:
                depth -= 1
            gap = False
        elif kind in ('variable_end', 'block_end'):
            # Where the closing tag is: with '-' whitespace control its token also holds the whitespace after it.
            end = lineno
        elif kind == 'data' and value.strip():
            gap = True
    if start is not None:
        spans.append((start, end))
    return spans


def _until(tokens, index, kind):
    for token in tokens[index:]:
        if token[1] == kind:
            return
        yield token


def scan(path):
    """{'set_fact': [line], 'jinja': [(line, lines)], 'records': [line], 'failures_set': [line]} of one file."""
    found = {'set_fact': [], 'jinja': [], 'records': [], 'failures_set': []}
    text, documents = _documents(path)
    for document in documents:
        for node, key in _nodes(document):
            if isinstance(node, yaml.MappingNode):
                keys = dict((k.value, v) for k, v in node.value if isinstance(k, yaml.ScalarNode))
                module = next((name for name in SET_FACT if name in keys), None)
                if module:
                    found['set_fact'].append(node.start_mark.line + 1)
                    args = keys[module]
                    if isinstance(args, yaml.MappingNode) and any(k.value == 'gpu_fabric_failures' for k, _value in args.value):
                        found['failures_set'].append(node.start_mark.line + 1)
                if {'stage', 'msg'} <= set(keys):
                    found['records'].append(node.start_mark.line + 1)
            elif isinstance(node, yaml.ScalarNode) and isinstance(node.value, str):
                raw = text[node.start_mark.index:node.end_mark.index]
                first = node.start_mark.line + 1
                if key in CONDITIONS and '{{' not in node.value:
                    lines = raw.rstrip().count('\n') + 1
                    found['jinja'].append((first, lines))
                    continue
                if '{{' not in node.value and '{%' not in node.value:
                    continue
                if STAGE_KEY.search(node.value):
                    found['records'].append(first)
                try:
                    spans = _spans(raw)
                except jinja2.TemplateSyntaxError:
                    # A quoted scalar whose escapes are no Jinja (\"): its value, one line per line of it.
                    spans = _spans(node.value)
                found['jinja'].extend((first + start - 1, end - start + 1) for start, end in spans)
    return found


def scan_all():
    return dict((os.path.relpath(path, REPO), scan(path)) for path in yaml_files())


def _places(found, what):
    return ['%s:%s' % (path, line) for path, items in sorted(found.items()) for line in items[what]]


def test_at_most_twenty_set_fact_tasks():
    places = _places(scan_all(), 'set_fact')
    assert len(places) <= MAX_SET_FACT, '%d set_fact tasks (at most %d):\n%s' % (len(places), MAX_SET_FACT, '\n'.join(places))


def test_no_jinja_expression_over_five_lines():
    long = ['%s:%d (%d lines)' % (path, line, lines) for path, items in sorted(scan_all().items())
            for line, lines in items['jinja'] if lines > MAX_JINJA_LINES]
    assert not long, 'Jinja expressions over %d lines (make them filters):\n%s' % (MAX_JINJA_LINES, '\n'.join(long))


def test_the_failure_record_is_built_in_one_place():
    found = scan_all()
    literal = _places(found, 'records')
    assert not literal, 'failure records written out in YAML (use the failure_record filter):\n%s' % '\n'.join(literal)
    setters = _places(found, 'failures_set')
    assert setters == ['%s:%d' % (FAILURE_TASKS, found[FAILURE_TASKS]['set_fact'][0])] if FAILURE_TASKS in found else False, \
        'gpu_fabric_failures kept by more than the one task of %s:\n%s' % (FAILURE_TASKS, '\n'.join(setters))


def test_the_scanner_sees_what_it_must():
    """The measures above on known text: a folded scalar's lines, a for block, a literal record, set_fact."""
    text = ('- name: x\n  ansible.builtin.set_fact:\n    a: >-\n      {%- set ns = namespace(r=[]) -%}\n'
            '      {%- for i in x -%}\n      {%-   set ns.r = ns.r + [i] -%}\n      {%- endfor -%}\n'
            '      {{ ns.r }}\n    b: "{{ {\'stage\': 1, \'msg\': 2} }}"\n  when: >-\n    a\n    or b\n')
    spans = _spans(text)
    assert (4, 8) in spans
    assert (9, 9) in spans
    assert _spans('{{ a }} text {{ b\n }}') == [(1, 1), (1, 2)]
    assert _spans('{% set x %}a\nb{% endset %}{{ x }}') == [(1, 2)]


if __name__ == '__main__':
    FOUND = scan_all()
    print('set_fact tasks: %d' % len(_places(FOUND, 'set_fact')))
    for place in _places(FOUND, 'set_fact'):
        print('  ' + place)
    print('Jinja expressions over %d lines:' % MAX_JINJA_LINES)
    for file, items in sorted(FOUND.items()):
        for where, count in items['jinja']:
            if count > MAX_JINJA_LINES:
                print('  %s:%d (%d lines)' % (file, where, count))
    print('failure records written in YAML: %s' % _places(FOUND, 'records'))
    print('gpu_fabric_failures set by: %s' % _places(FOUND, 'failures_set'))
