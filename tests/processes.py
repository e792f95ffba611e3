# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What the tests of killed controllers and watched modules ask of a process: is it still running, and a bounded wait."""

from __future__ import annotations

import time


def alive(pid):
    """Is ``pid`` a process that still runs (not gone, not a zombie waiting for its parent, not dead)?"""
    try:
        with open('/proc/%d/stat' % pid) as handle:
            # The state follows the command name, which may hold ')' and blanks: split after the last ')'.
            return handle.read().rsplit(')', 1)[1].split()[0] not in ('Z', 'X')
    except (IOError, OSError, IndexError):
        return False


def wait_for(predicate, seconds):
    """Poll ``predicate`` every 50 ms for at most ``seconds``; its last answer."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()
