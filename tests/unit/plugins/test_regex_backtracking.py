# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Every regular expression of plugins/module_utils and plugins/plugin_utils, checked once for
the shapes that make Python's backtracking matcher quadratic or worse on a long run of one
character (a line of blanks or digits in a hostile file):

* nested: an unbounded quantifier inside a group repeated without bound, e.g. ``(\\s+\\S+)*``;
* adjacent: two unbounded quantifiers with nothing but optional or zero-width items between
  them, over character sets that share a character, e.g. ``\\s*\\s+``, ``.*\\s+.*``,
  ``(?P<name>\\S.*?)\\s*$``: on a run of that character the matcher tries every split of it.

A bounded quantifier ({0,64}) is no run; a possessive one (``*+``, ``++``, Python 3.11) or an
atomic group gives nothing back, so neither counts. The patterns are the module-level and
class-level compiled patterns found by importing each module, and the literal patterns passed to
re.compile/match/search/... anywhere in its source (found with ast, evaluated in the module).
tests/unit/fuzz/test_linear_parsers.py times the parsers themselves on such lines.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import sys

import pytest

try:  # Python 3.11 and later; sre_parse before (deprecated since 3.11)
    from re import _constants as C, _parser as P
except ImportError:  # pragma: no cover
    import sre_constants as C  # pylint: disable=deprecated-module
    import sre_parse as P  # pylint: disable=deprecated-module

PLUGINS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))), 'plugins')
PACKAGES = ('module_utils', 'plugin_utils')
RE_FUNCTIONS = ('compile', 'match', 'search', 'fullmatch', 'findall', 'finditer', 'sub', 'subn', 'split')

# (module, pattern) -> why it is linear although the check flags it. Keep it small.
ALLOWED = {
    ('_offline', r'^(?P<server>.+?)__(?P<client>.+?)__(?P<rail>.+?)__(?P<memory>host|gpu)\.(?:txt|log)$'):
        'matched on file names of at most 255 characters only (NAME_MAX, _offline.classify): a constant bound',
}
# re calls whose pattern is built at run time -> why it is linear.
UNRESOLVED_ALLOWED = {
    '_perftest help_lists': "(?:^|\\s)FLAG(?:[=\\s]|$): the flag re.escape'd, no quantifier",
    '_tasks modules_not_loaded': "NAME|NAME-WITH-DASHES, both re.escape'd: no quantifier",
    '_printable _pattern': "[RANGES]: one character class of code-point ranges, no quantifier",
}

# Characters an overlap is looked for among: ASCII, a few Latin-1, Unicode digits and spaces.
PROBE = [chr(c) for c in range(128)] + ['\x85', '\xa0', '\xb2', '\xe9', '\u0663', '\u2028', '\u3000', '\U0001f600']
_UNBOUNDED = C.MAXREPEAT
_REPEATS = tuple(op for op in (C.MAX_REPEAT, C.MIN_REPEAT) if op is not None)
_POSSESSIVE = getattr(C, 'POSSESSIVE_REPEAT', None)
_ATOMIC = getattr(C, 'ATOMIC_GROUP', None)


def _category(name, char, flags):
    probe = {'CATEGORY_DIGIT': r'\d', 'CATEGORY_NOT_DIGIT': r'\D', 'CATEGORY_SPACE': r'\s', 'CATEGORY_NOT_SPACE': r'\S',
             'CATEGORY_WORD': r'\w', 'CATEGORY_NOT_WORD': r'\W', 'CATEGORY_LINEBREAK': r'\n',
             'CATEGORY_NOT_LINEBREAK': r'[^\n]'}[str(name)]
    return re.match(probe, char, flags & (re.ASCII | re.UNICODE)) is not None


def _chars(op, av, flags):
    """The set of PROBE characters the one-character item (op, av) matches, or None when it is no
    one-character item."""
    fold = (lambda c: {c, c.lower(), c.upper()}) if flags & re.IGNORECASE else (lambda c: {c})
    if op == C.LITERAL:
        return set(PROBE) & fold(chr(av))
    if op == C.NOT_LITERAL:
        return set(PROBE) - fold(chr(av))
    if op == C.ANY:
        return set(PROBE) if flags & re.DOTALL else set(PROBE) - {'\n'}
    if op == C.CATEGORY:
        return set(c for c in PROBE if _category(av, c, flags))
    if op == C.IN:
        negate, found = False, set()
        for item_op, item_av in av:
            if item_op == C.NEGATE:
                negate = True
            elif item_op == C.RANGE:
                found |= set(c for c in PROBE if item_av[0] <= ord(c) <= item_av[1] or (
                    flags & re.IGNORECASE and any(item_av[0] <= ord(x) <= item_av[1] for x in fold(c))))
            else:
                found |= _chars(item_op, item_av, flags) or set()
        return set(PROBE) - found if negate else found
    return None


def _consumed(items, flags):
    """Every PROBE character ``items`` (a parsed sequence) may consume."""
    found = set()
    for op, av in items:
        one = _chars(op, av, flags)
        if one is not None:
            found |= one
        elif op in _REPEATS or op == _POSSESSIVE:
            found |= _consumed(av[2], flags)
        elif op == C.SUBPATTERN:
            found |= _consumed(av[-1], flags)
        elif op == _ATOMIC:
            found |= _consumed(av, flags)
        elif op == C.BRANCH:
            for alternative in av[1]:
                found |= _consumed(alternative, flags)
        elif op == C.GROUPREF:
            found |= set(PROBE)
    return found


def _first(items, flags):
    """The PROBE characters a match of ``items`` may begin with."""
    found = set()
    for op, av in items:
        one = _chars(op, av, flags)
        if one is not None:
            return found | one
        if op in _REPEATS or op == _POSSESSIVE:
            found |= _first(av[2], flags)
        elif op == C.SUBPATTERN:
            found |= _first(av[-1], flags)
        elif op == _ATOMIC:
            found |= _first(av, flags)
        elif op == C.BRANCH:
            for alternative in av[1]:
                found |= _first(alternative, flags)
        elif op == C.GROUPREF:
            found |= set(PROBE)
        if not _nullable(op, av):
            break
    return found


def _nullable(op, av):
    if op in (C.AT, C.ASSERT, C.ASSERT_NOT):
        return True
    if op in _REPEATS or op == _POSSESSIVE:
        return av[0] == 0 or all(_nullable(*item) for item in av[2])
    if op == C.SUBPATTERN:
        return all(_nullable(*item) for item in av[-1])
    if op == _ATOMIC:
        return all(_nullable(*item) for item in av)
    if op == C.BRANCH:
        return any(all(_nullable(*item) for item in alternative) for alternative in av[1])
    return False


def _ends(op, av, flags, last):
    """[(set, description)] of the unbounded quantifiers that may end (``last``) or begin a match
    of the item (op, av), with what comes after (before) them able to match nothing."""
    if op in _REPEATS:
        if av[1] == _UNBOUNDED:
            return [(_consumed(av[2], flags), 'unbounded repeat')]
        return _seq_ends(av[2], flags, last)
    if op == C.SUBPATTERN:
        return _seq_ends(av[-1], flags, last)
    if op == C.BRANCH:
        return [end for alternative in av[1] for end in _seq_ends(alternative, flags, last)]
    return []   # a one-character item, an anchor, an assertion, a possessive repeat, an atomic group


def _seq_ends(items, flags, last):
    items = list(items)
    order = reversed(items) if last else items
    found = []
    for op, av in order:
        found += _ends(op, av, flags, last)
        if not _nullable(op, av):
            break
    return found


def _leading_run(items, flags):
    """Does a match of ``items`` begin with an unbounded run that something after it can fail?
    search() tries the pattern at every position of such a run and rescans the rest of it each
    time. A lookbehind refusing the run's characters before it ((?<!\\s)\\s+x) starts it at the
    first character of a run only."""
    items = list(items)
    for index, (op, av) in enumerate(items):
        if op == C.AT and av in (C.AT_BEGINNING, C.AT_BEGINNING_STRING):
            return False
        if op == C.ASSERT_NOT and av[0] == -1:
            guard = _consumed(av[1], flags)
            heads = _seq_ends(items[index + 1:], flags, False)
            return bool(heads) and not all(head <= guard for head, _what in heads) and not _rest_nullable(items[index + 1:])
        if op == C.BRANCH:
            return any(_leading_run(list(alternative) + items[index + 1:], flags) for alternative in av[1])
        if op == C.SUBPATTERN:
            return _leading_run(list(av[-1]) + items[index + 1:], flags)
        if _ends(op, av, flags, False):
            return not _rest_nullable(items[index + 1:])
        if not _nullable(op, av):
            return False
    return False


def _rest_nullable(items):
    """Can nothing in ``items`` fail (only optional repeats: no anchor, no assertion, no character)?"""
    for op, av in items:
        if op in _REPEATS or op == _POSSESSIVE:
            if av[0] != 0:
                return False
        elif op == C.SUBPATTERN:
            if not _rest_nullable(av[-1]):
                return False
        else:
            return False
    return True


def problems(pattern, flags=0, searched=False):
    """Descriptions of the nested and adjacent unbounded quantifiers of ``pattern``; with
    ``searched`` (it is used with search/finditer/findall/sub/split), of a leading run too."""
    parsed = P.parse(pattern, flags)
    flags = parsed.state.flags
    found = []
    if searched and _leading_run(list(parsed), flags):
        found.append('searched, begins with an unbounded run that what follows can fail')

    def walk(items, inside_unbounded):
        items = list(items)
        for index, (op, av) in enumerate(items):
            # Adjacent: what may end this item against what may begin a later one, across nullable items.
            # A separator between them counts only with characters neither quantifier can take:
            # in \s*\s\s* the middle \s may be either run's, in .*'\s+ the quote is no blank.
            tails = [tail for tail, _what in _ends(op, av, flags, True)]
            for later_op, later_av in items[index + 1:] if tails else ():
                for tail in tails:
                    for head, _what in _ends(later_op, later_av, flags, False):
                        if tail & head:
                            found.append('adjacent unbounded quantifiers sharing %r' % ''.join(sorted(tail & head))[:20])
                if not _nullable(later_op, later_av):
                    taken = _first([(later_op, later_av)], flags)
                    tails = [tail & taken for tail in tails if tail & taken]
                    if not tails:
                        break
            if op in _REPEATS:
                unbounded = av[1] == _UNBOUNDED
                if unbounded and inside_unbounded is None and any(
                        sub_op in _REPEATS and sub_av[1] == _UNBOUNDED for sub_op, sub_av in _all_items(av[2])):
                    found.append('unbounded quantifier nested in an unbounded repeat')
                if av[1] > 1 and av[1] != _UNBOUNDED:
                    # A bounded repeat is its body written out: the end of one copy meets the start of the next.
                    tails = _seq_ends(av[2], flags, True)
                    heads = _seq_ends(av[2], flags, False)
                    if any(t & h for t, _a in tails for h, _b in heads):
                        found.append('unbounded quantifiers meeting across the copies of a bounded repeat')
                walk(av[2], True if unbounded else inside_unbounded)
            elif op == _POSSESSIVE:
                walk(av[2], inside_unbounded)
            elif op == C.SUBPATTERN:
                walk(av[-1], inside_unbounded)
            elif op == _ATOMIC:
                walk(av, inside_unbounded)
            elif op == C.BRANCH:
                for alternative in av[1]:
                    walk(alternative, inside_unbounded)
            elif op in (C.ASSERT, C.ASSERT_NOT):
                walk(av[1], inside_unbounded)

    walk(parsed, None)
    return sorted(set(found))


def _all_items(items):
    for op, av in items:
        yield op, av
        if op in _REPEATS or op == _POSSESSIVE:
            yield from _all_items(av[2])
        elif op == C.SUBPATTERN:
            yield from _all_items(av[-1])
        elif op == _ATOMIC:
            yield from _all_items(av)
        elif op == C.BRANCH:
            for alternative in av[1]:
                yield from _all_items(alternative)
        elif op in (C.ASSERT, C.ASSERT_NOT):
            yield from _all_items(av[1])


def _function_at(tree, lineno):
    """Name of the function of ``tree`` around line ``lineno``."""
    names = [node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
             and node.lineno <= lineno <= node.end_lineno]
    return names[-1] if names else '<module>'


def _module_names():
    for package in PACKAGES:
        for folder, _dirs, files in sorted(os.walk(os.path.join(PLUGINS, package))):
            dotted = os.path.relpath(folder, PLUGINS).replace(os.sep, '.')
            for name in sorted(files):
                if name.endswith('.py') and name != '__init__.py':
                    yield dotted, name[:-3]


SEARCHING = ('search', 'finditer', 'findall', 'sub', 'subn', 'split')


def _uses(tree):
    """{name: set of methods called on it} for ``NAME.method(`` and ``x.NAME.method(`` in ``tree``."""
    uses = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            holder = node.func.value
            name = holder.id if isinstance(holder, ast.Name) else holder.attr if isinstance(holder, ast.Attribute) else None
            if name:
                uses.setdefault(name, set()).add(node.func.attr)
    return uses


def collect():
    """({(module, pattern source, flags): where}, {same key: searched}) of every pattern of the two
    packages, and the re calls whose pattern could not be evaluated (built from local values).
    A pattern is searched unless it is a named one called with match/fullmatch only."""
    found, searched, unresolved = {}, {}, []
    for package, name in _module_names():
        module = importlib.import_module('ansible_collections.hpc.gpu_fabric.plugins.%s.%s' % (package, name))
        with open(module.__file__, encoding='utf-8') as handle:
            tree = ast.parse(handle.read())
        uses = _uses(tree)

        def add(key, where, how):
            found.setdefault(key, where)
            searched[key] = searched.get(key, False) or how

        for attr, value in vars(module).items():
            if isinstance(value, re.Pattern):
                add((name, value.pattern, value.flags), attr, not uses.get(attr) or bool(uses[attr] - {'match', 'fullmatch'}))
            elif isinstance(value, type) and value.__module__ == module.__name__:
                for class_attr, class_value in vars(value).items():
                    if isinstance(class_value, re.Pattern):
                        add((name, class_value.pattern, class_value.flags), '%s.%s' % (attr, class_attr),
                            not uses.get(class_attr) or bool(uses[class_attr] - {'match', 'fullmatch'}))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in RE_FUNCTIONS
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == 're' and node.args):
                try:
                    pattern = eval(compile(ast.Expression(node.args[0]), module.__file__, 'eval'), dict(vars(module)))  # pylint: disable=eval-used
                    flag_node = ([k.value for k in node.keywords if k.arg == 'flags']
                                 or node.args[{'compile': 1, 'sub': 3, 'subn': 3, 'split': 2}.get(node.func.attr, 2):][:1])
                    namespace = dict(vars(module))
                    flags = eval(compile(ast.Expression(flag_node[0]), module.__file__, 'eval'), namespace) if flag_node else 0  # pylint: disable=eval-used
                except Exception:  # pylint: disable=broad-except
                    unresolved.append('%s %s' % (name, _function_at(tree, node.lineno)))
                    continue
                compiled = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, flags)
                pattern, flags = compiled.pattern, compiled.flags
                key = (name, pattern, int(flags))
                if node.func.attr == 'compile':
                    add(key, 'line %d' % node.lineno, searched.get(key, True) if key not in found else searched[key])
                else:
                    add(key, 'line %d' % node.lineno, node.func.attr in SEARCHING)
    return found, searched, unresolved


PATTERNS, SEARCHED, UNRESOLVED = collect()


def test_the_check_sees_the_known_shapes():
    for bad in (r'\s*\s+', r'.*\s+.*', r'(\s+\S+)*', r'^(?P<name>\S.*?)\s*$', r':\s*([\d\s]+)$', r'(a|\s+)*x',
                r'(?:\s*x?\s*){5}', r'(\w+)+$', r'\s+(?:foo)?\s+', r'\s*\s\s*', r'\d+0\d*x'):
        assert problems(bad), bad
    for bad in (r'\s+WARNING:|\t', r'[\d.]+ != ', r'x|\s{3,}(?=\S)'):
        assert problems(bad, searched=True) and not problems(bad), bad
    for good in (r'^\s+x', r'\s+', r'-{20,}', r'(?<!\s)\s+WARNING:|\t|(?<!\s)\s{3,}(?=\S)', r'Gb/sec\s*\('):
        assert not problems(good, searched=True), good
    for good in (r'\s+\S+', r'^(\d{1,9})\s*:\s*(\S+)$', r'\s{0,8}\s+', r'(?:\d\s+){7}\d', r'[^"]*"\s*', r'\s*+\s+',
                 r'(?>\s*)\s+', r'(\S+)\s+(\S+)', r'^\s*(\S(?:.*\S)?)\s*$', r".*'\s+", r'\s*:\s*'):
        assert not problems(good), good


def test_patterns_were_found():
    modules = set(module for module, _pattern, _flags in PATTERNS)
    assert {'_ib', '_ibdiag', '_nccl', '_perftest', '_roce', '_gdr', '_pcie', '_host'} <= modules
    assert len(PATTERNS) > 100


def test_every_re_call_has_a_pattern_the_check_reads():
    assert sorted(UNRESOLVED) == sorted(UNRESOLVED_ALLOWED)


def test_no_pattern_backtracks_on_a_run():
    flagged = dict(('%s: %s %r' % (module, where, pattern), problems(pattern, flags, SEARCHED[(module, pattern, flags)]))
                   for (module, pattern, flags), where in sorted(PATTERNS.items())
                   if (module, pattern) not in ALLOWED and problems(pattern, flags, SEARCHED[(module, pattern, flags)]))
    assert flagged == {}


def test_allow_list_is_small_and_current():
    assert len(ALLOWED) <= 5
    for (module, pattern), why in ALLOWED.items():
        assert why and any(m == module and p == pattern for m, p, _f in PATTERNS), (module, pattern)


if __name__ == '__main__':  # pragma: no cover
    sys.exit(pytest.main([__file__]))
