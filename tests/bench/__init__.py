# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The measurements: `python -m tests.bench.<name>` from the checkout's root (README, docs).

Run that way, with no PYTHONPATH, ansible_collections.hpc.gpu_fabric is not importable: this
package makes it so before any of its modules runs - the checkout's own link to itself
(.collections/ansible_collections/hpc/gpu_fabric, as ansible.cfg uses it), or, in a copy laid
out as ansible_collections/hpc/gpu_fabric (scripts/test.sh, an installed collection), the
directory above ansible_collections.
"""

from __future__ import annotations

import importlib.util
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _collection_path():
    """Where ansible_collections/ is found from this tree, or None."""
    linked = os.path.join(REPO, '.collections')
    if os.path.isdir(os.path.join(linked, 'ansible_collections', 'hpc', 'gpu_fabric')):
        return linked
    above = os.path.dirname(os.path.dirname(os.path.dirname(REPO)))
    if REPO == os.path.join(above, 'ansible_collections', 'hpc', 'gpu_fabric'):
        return above
    return None


try:
    _FOUND = importlib.util.find_spec('ansible_collections.hpc.gpu_fabric') is not None
except ImportError:     # no ansible_collections package at all
    _FOUND = False
if not _FOUND and _collection_path():
    sys.path.insert(0, _collection_path())
