# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Text from other people's nodes and files, made safe to show: the one escaping of every
console line, loop label and report format (html, md, junit, prom, the console summaries).

Host names, HCA types, file names and failure messages are someone else's bytes. A terminal acts
on C0/C1 controls (ESC [ 2 J clears the screen, ESC ] 0 ; ... BEL sets the window title: ECMA-48
and xterm's ctlseqs), and a bidirectional override (U+202E) reorders what follows it on screen
and in a browser, so that a name reads as another (Unicode UAX #9; CVE-2021-42574 'Trojan
Source'). printable() writes each such character as its visible Python escape ('\\x1b',
'\\u202e'), so that nothing is lost and nothing acts.
"""

from __future__ import annotations

import re
from typing import Iterable

# Every character of Unicode 15.1's general categories Cc (controls: C0, DEL, C1), Cf (format:
# the bidirectional marks, embeddings, overrides and isolates U+061C, U+200E/F, U+202A-202E,
# U+2066-2069, the zero-width characters, U+FEFF, the tag characters), Cs (lone surrogates: a
# file name byte that is not UTF-8, read with surrogateescape, PEP 383), Zl and Zp (U+2028,
# U+2029, which end a line in some terminals and in JavaScript), and the noncharacters U+FFFE,
# U+FFFF (not XML 1.0 'Char', section 2.2). A table rather than unicodedata at import (a scan of
# 1.1 million code points on every module start); the test (tests/unit/plugins/module_utils/
# test__printable.py) checks that it holds every such character the running Python knows.
_UNSAFE_RANGES = (
    (0x0000, 0x001f), (0x007f, 0x009f), (0x00ad, 0x00ad), (0x0600, 0x0605), (0x061c, 0x061c), (0x06dd, 0x06dd),
    (0x070f, 0x070f), (0x0890, 0x0891), (0x08e2, 0x08e2), (0x180e, 0x180e), (0x200b, 0x200f), (0x2028, 0x202e),
    (0x2060, 0x2064), (0x2066, 0x206f), (0xd800, 0xdfff), (0xfeff, 0xfeff), (0xfff9, 0xfffb), (0xfffe, 0xffff),
    (0x110bd, 0x110bd), (0x110cd, 0x110cd), (0x13430, 0x1343f), (0x1bca0, 0x1bca3), (0x1d173, 0x1d17a),
    (0xe0001, 0xe0001), (0xe0020, 0xe007f),
)
# Where a text is several lines on purpose (a report's paragraph, the text of a junit failure),
# the caller keeps '\n' (and '\t'); everywhere else they are escaped too: a label or a console
# line is one line.
LINES = '\t\n'

_PATTERNS: dict[str, re.Pattern[str]] = {}


def _pattern(keep: str) -> re.Pattern[str]:
    pattern = _PATTERNS.get(keep)
    if pattern is None:
        parts: list[str] = []
        for low, high in _UNSAFE_RANGES:
            kept = [ord(c) for c in keep if low <= ord(c) <= high]
            start = low
            for code in sorted(kept) + [high + 1]:
                if start <= code - 1:
                    parts.append('\\U%08x-\\U%08x' % (start, code - 1) if start != code - 1 else '\\U%08x' % start)
                start = code + 1
        pattern = _PATTERNS[keep] = re.compile('[%s]' % ''.join(parts))
    return pattern


def _escaped(match: re.Match[str]) -> str:
    return ascii(match.group())[1:-1]


def printable(value: object, keep: str = '') -> str:
    """``value`` as text (None: ''), with every control, format, bidirectional, line or paragraph
    separator character and lone surrogate written as its Python escape; the characters of
    ``keep`` (LINES: tab and newline) are left as they are."""
    return _pattern(keep).sub(_escaped, '' if value is None else '%s' % (value,))


def printable_lines(lines: Iterable[object]) -> list[str]:
    """Each line of ``lines`` printable() as one line: what goes to the console."""
    return [printable(line) for line in lines]
