# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Rewrite the codes table of docs/report.md from the registry (plugins/plugin_utils/diagnosis/_findings.py).

    PYTHONPATH=.collections python -m tests.docs_table          # rewrite
    PYTHONPATH=.collections python -m tests.docs_table --check  # exit 1 when it differs
"""

from __future__ import annotations

import os
import sys

from ansible_collections.hpc.gpu_fabric.plugins.plugin_utils.diagnosis._findings import markdown_rows

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'docs', 'report.md')
HEADER = '| code | layer | severity | found from | explained by |'


def table_span(lines):
    """(first, end) line indexes of the codes table in docs/report.md."""
    first = lines.index(HEADER)
    end = first
    while end < len(lines) and lines[end].startswith('|'):
        end += 1
    return first, end


def rendered(text):
    lines = text.split('\n')
    first, end = table_span(lines)
    return '\n'.join(lines[:first] + markdown_rows() + lines[end:])


def main(argv):
    with open(DOC, encoding='utf-8') as handle:
        text = handle.read()
    new = rendered(text)
    if '--check' in argv:
        return 0 if new == text else 1
    with open(DOC, 'w', encoding='utf-8') as handle:
        handle.write(new)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
