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
from typing import Any, Callable


def mapping(value: object) -> dict[Any, Any]:
    """``value`` if it is a dict, else {}."""
    return value if isinstance(value, dict) else {}


def sequence(value: object) -> list[Any]:
    """``value`` if it is a list, else []."""
    return value if isinstance(value, list) else []


def mappings(value: object) -> list[dict[Any, Any]]:
    """The dicts of a list (anything else in it is left out)."""
    return [item for item in sequence(value) if isinstance(item, dict)]


def number(value: object) -> float | None:
    """A finite float from an int or float (not a bool), else None: JSON integers have no
    bound, and float(10**400) raises OverflowError."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        found = float(value)
    except OverflowError:
        return None
    return found if math.isfinite(found) else None


def integer(value: object) -> int | None:
    """An int (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def text(value: object) -> str | None:
    """A str, else None."""
    return value if isinstance(value, str) else None


def key(value: object) -> str | int | float | bool | None:
    """A value usable in a dict key or a set (str, int, float, bool or None), else its repr."""
    return value if value is None or isinstance(value, (str, int, float, bool)) else repr(value)[:200]


def without_surrogates(value: Any, warn: Callable[[str], object], where: str = '') -> Any:
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
