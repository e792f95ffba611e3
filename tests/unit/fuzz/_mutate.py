# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Seeded mutations of captured tool outputs, for the fuzz tests.

A plain ``random.Random(seed)`` loop rather than hypothesis for the bulk: ten thousand
inputs per parser in a few seconds, the same inputs on every run.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import threading
import time

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), 'fixtures')

# What a damaged log or a hostile file holds in place of a number.
NUMBER_SUBSTITUTES = ('9' * 400, '1' * 5000, '1e999', '-1e999', 'nan', 'inf', '-1', '0', '-0', '1.5', '\u00b2',
                      '\u0663', '0x1f', '18446744073709551616', '', ' ')
# Bytes that break decoders, XML, terminals and line splitting.
NASTY = (b'\0', b'\xff', b'\xfe\xff', b'\xc3', b'\x1b[31m', b'\r', b'\x0b', b'\x0c', b'\x1c', b'\x85', b'\xe2\x80\xa8',
         b'\xc2\xb2', b'\t', b'#', b':', b'[', b']', b'{', b'}', b'"', b',', b'-', b'/', b'..', b'<script>', b'|')
# Runs a hostile line holds (blanks, tabs, digits, dots): a parser quadratic in one took minutes.
RUNS = (b' ', b'\t', b'7', b'.', b'0')
PREFIXES = (b'[1,0]<stdout>:', b' 0: ', b'[0] ', b'> ', b'# ', b'node1:123:456 [0] NCCL INFO ', b'\xef\xbb\xbf')
_DIGITS_RE = re.compile(rb'\d+(?:\.\d+)?')


def fixtures(*dirs):
    """Bytes of every file below the fixture directories ``dirs`` (relative to tests/fixtures)."""
    found = []
    for rel in dirs:
        base = os.path.join(FIXTURES, rel)
        paths = [base] if os.path.isfile(base) else sorted(
            os.path.join(top, name) for top, _dirs, names in os.walk(base) for name in names)
        for path in paths:
            if path.endswith(('.gz', '.tar')):
                continue
            with open(path, 'rb') as handle:
                found.append(handle.read())
    return found


def _lines(data):
    return data.split(b'\n')


def mutate(rng, data):
    """One damaged copy of ``data``: one to four of the edits below."""
    for _edit in range(rng.randint(1, 4)):
        op = rng.randrange(13)
        lines = _lines(data)
        if op == 0 and data:  # byte flips
            buf = bytearray(data)
            for _flip in range(rng.randint(1, 8)):
                buf[rng.randrange(len(buf))] = rng.randrange(256)
            data = bytes(buf)
        elif op == 1 and len(lines) > 1:  # line drops
            for _drop in range(rng.randint(1, 3)):
                if len(lines) > 1:
                    del lines[rng.randrange(len(lines))]
            data = b'\n'.join(lines)
        elif op == 2:  # line duplication (a line printed twice, or many times)
            index = rng.randrange(len(lines))
            lines[index:index] = [lines[index]] * rng.choice((1, 2, 50))
            data = b'\n'.join(lines)
        elif op == 3:  # truncation
            data = data[:rng.randrange(len(data) + 1)]
        elif op in (4, 5):  # a number replaced by a huge, non-finite or odd one
            matches = list(_DIGITS_RE.finditer(data))
            for _sub in range(rng.randint(1, 3)):
                if not matches:
                    break
                match = rng.choice(matches)
                data = data[:match.start()] + rng.choice(NUMBER_SUBSTITUTES).encode() + data[match.end():]
                matches = list(_DIGITS_RE.finditer(data))
        elif op == 6:  # nasty bytes inserted
            pos = rng.randrange(len(data) + 1)
            data = data[:pos] + rng.choice(NASTY) * rng.choice((1, 1, 3)) + data[pos:]
        elif op == 7:  # launcher / quote prefixes on some lines
            prefix = rng.choice(PREFIXES)
            data = b'\n'.join(prefix + line if rng.random() < 0.3 else line for line in lines)
        elif op == 8:  # lines swapped
            if len(lines) > 1:
                a, b = rng.randrange(len(lines)), rng.randrange(len(lines))
                lines[a], lines[b] = lines[b], lines[a]
                data = b'\n'.join(lines)
        elif op == 9:  # two lines glued
            if len(lines) > 1:
                index = rng.randrange(len(lines) - 1)
                lines[index:index + 2] = [lines[index] + lines[index + 1]]
                data = b'\n'.join(lines)
        elif op == 10:  # random bytes
            data = bytes(rng.randrange(256) for _byte in range(rng.randrange(64)))
        elif op == 11:  # a long run of one character inside a line
            pos = rng.randrange(len(data) + 1)
            data = data[:pos] + rng.choice(RUNS) * rng.choice((64, 700, 4096)) + data[pos:]
        else:  # a token of the text repeated into a long line
            tokens = data.split()
            if tokens:
                data += b'\n' + b' '.join([rng.choice(tokens)] * rng.randrange(1, 200))
    return data


def decode(rng, data):
    """As Ansible's run_command hands output over (surrogateescape), or as SysRoot.text reads a file."""
    return data.decode('utf-8', rng.choice(('surrogateescape', 'replace')))


def inputs(seed, corpus, count, random_share=0.1):
    """``count`` byte strings: mostly mutated corpus entries, some random, the corpus itself first."""
    rng = random.Random(seed)
    for data in corpus:
        yield rng, data
    for _index in range(count - len(corpus)):
        if rng.random() < random_share or not corpus:
            yield rng, bytes(rng.randrange(256) for _byte in range(rng.randrange(200)))
        else:
            yield rng, mutate(rng, rng.choice(corpus))


class Overran(BaseException):
    """An input still running at the bound (a hang, or a parser gone quadratic). A BaseException,
    so that no ``except Exception`` of the code under test or of a test's loop swallows it."""


class Clock(object):
    """Slowest call of a loop, and a bound on each call: every call runs under an interval timer
    (SIGALRM) that stops it at ``limit_s`` with Overran naming its input, so a hang fails the
    test instead of holding it until the CI job's own timeout. Timing after the call alone could
    never see a hang. The timer is set only in the main thread (signals are delivered there), and
    the previous handler and timer are put back after each call."""

    def __init__(self, limit_s=1.0):
        self.limit_s = limit_s
        self.slowest = (0.0, None)
        self.count = 0

    def run(self, func, *args, about=None):
        """``func(*args)``; ``about`` is what Overran shows of the input (default: ``args``)."""
        armed = hasattr(signal, 'setitimer') and threading.current_thread() is threading.main_thread()
        if armed:
            def expired(_signum, _frame):
                raise Overran('input still running after %.2f s (a hang or a quadratic parser): %s'
                              % (self.limit_s, repr(args if about is None else about)[:300]))
            previous = signal.signal(signal.SIGALRM, expired)
            outer = signal.setitimer(signal.ITIMER_REAL, self.limit_s)
        start = time.perf_counter()
        try:
            return func(*args)
        finally:
            took = time.perf_counter() - start
            if armed:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)
                if outer[0] > 0:  # someone else's timer: what was left of it
                    signal.setitimer(signal.ITIMER_REAL, max(outer[0] - took, 1e-6), outer[1])
            self.count += 1
            if took > self.slowest[0]:
                self.slowest = (took, args)


# Values a JSON document can hold in place of the one it should (wrong types, numbers past a
# float, past the int digit limit of str(), names with a run of digits past int()'s limit, nesting).
JSON_SUBSTITUTES = (None, True, False, 0, -1, 1, 1.5, 10 ** 400, -(10 ** 400), 2 ** 64, '', 'x', '1e999', 'nan', '\u00b2',
                    '\0', [], {}, [1], {'a': 1}, [[[[]]]], ['a', 5], 'mlx5_' + '7' * 5000, '7' * 5000 + ' ' * 700)


def mutate_json(rng, doc):
    """A copy of the decoded document ``doc`` with one to four values replaced, keys dropped
    or lists cut; serialised, sometimes with a float that JSON reads as infinity."""
    doc = _copy(doc)
    for _edit in range(rng.randint(1, 4)):
        holder, key = _pick(rng, doc)
        if holder is None:
            doc = rng.choice(JSON_SUBSTITUTES)
            continue
        op = rng.randrange(4)
        if op == 0 or op == 1:
            holder[key] = _copy(rng.choice(JSON_SUBSTITUTES))
        elif op == 2 and isinstance(holder, dict):
            del holder[key]
        elif isinstance(holder[key], list):
            del holder[key][rng.randrange(len(holder[key]) + 1):]
        else:
            holder[key] = _copy(rng.choice(JSON_SUBSTITUTES))
    text = json.dumps(doc)
    if rng.random() < 0.2:
        text = text.replace('1.5', '1e999').replace('-1', '-1e999')
    return text


def _copy(value):
    if isinstance(value, dict):
        return dict((k, _copy(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _pick(rng, doc):
    """(container, key) of a random value inside ``doc``; (None, None) for the document itself."""
    holder, key = None, None
    node = doc
    while isinstance(node, (dict, list)) and node and rng.random() < 0.8:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        holder, key = node, rng.choice(keys)
        node = node[key]
    return holder, key
