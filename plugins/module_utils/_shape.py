# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Typed reads of data another node sent: a module result, facts, a benchmark record.

What a node returns is JSON of any shape (a damaged or hostile node, a task that failed
half-way), so the controller-side code reads every field through these: a value of the wrong
type reads as absent (None, {} or []) instead of raising in the middle of a report.
"""

from __future__ import annotations

import math


def mapping(value):
    """``value`` if it is a dict, else {}."""
    return value if isinstance(value, dict) else {}


def sequence(value):
    """``value`` if it is a list, else []."""
    return value if isinstance(value, list) else []


def mappings(value):
    """The dicts of a list (anything else in it is left out)."""
    return [item for item in sequence(value) if isinstance(item, dict)]


def number(value):
    """A finite float from an int or float (not a bool), else None: JSON integers have no
    bound, and float(10**400) raises OverflowError."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def integer(value):
    """An int (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def text(value):
    """A str, else None."""
    return value if isinstance(value, str) else None


def key(value):
    """A value usable in a dict key or a set (str, int, float, bool or None), else its repr."""
    return value if value is None or isinstance(value, (str, int, float, bool)) else repr(value)[:200]


def without_surrogates(value, warn, where=''):
    """``value`` with every str that holds a lone surrogate made valid: Python reads a file
    name that is not UTF-8 (os.listdir, os.readlink) with surrogateescape (PEP 383), and such
    a str cannot be written as UTF-8 - the module's result, a report, the fact cache. The
    bytes become U+FFFD and ``warn`` is called once per place, naming it."""
    if isinstance(value, str):
        try:
            value.encode('utf-8')
        except UnicodeEncodeError:
            fixed = value.encode('utf-8', 'surrogateescape').decode('utf-8', 'replace')
            warn('%s: %r is not valid UTF-8, reported as %r' % (where or 'a value', fixed, fixed))
            return fixed
        return value
    if isinstance(value, dict):
        return dict((without_surrogates(k, warn, '%s (a key)' % where), without_surrogates(v, warn, '%s.%s' % (where, k)))
                    for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [without_surrogates(v, warn, '%s[%d]' % (where, i)) for i, v in enumerate(value)]
    return value
