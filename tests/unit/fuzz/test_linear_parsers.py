# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Every text parser is linear in its input: a run of 1 MiB of blanks or of digits inside its
lines takes at most a few thousand times as long as a run of 1 KiB (1,024 times the input).

A quadratic regular expression takes a million times as long (a snapshot with 128 KiB of blanks
in one port state file once held the offline run for 1,279 s; iblinkinfo's port line was cubic:
800 blanks 36 s). The lines are real ones: of each fixture directory of the parser the line
of its commonest shape, and lines of the shapes whose patterns were quadratic (KNOWN); the run
put in place of their blanks and at their end (with_runs), all in one text. A ratio, not a time:
the figure is the machine's own at both sizes. Each parser call is also bounded (_mutate.Clock),
so a parser gone quadratic fails here in seconds instead of hanging.
tests/unit/plugins/test_regex_backtracking.py checks the patterns' shapes.

Figures (this 2-core machine, python 3.11, shared with other jobs): ratios 226 to 2,239 (above
1,024 where a 1 MiB line no longer sits in the CPU's caches; below where the 1 KiB text pays
fixed costs), so the bound is ten times the input's growth; before the fixes, sysfs_values,
ibdiag, nccl_text and perftest ran past the 20 s bound on the 1 MiB text (10**5 times and more).
The file: 28 tests, 15.6 s of CPU.
"""

from __future__ import annotations

import re
import time

import pytest

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _nccl
from tests.unit.fuzz import _mutate
from tests.unit.fuzz.test_fuzz_parsers import PARSERS

SMALL, LARGE = 1 << 10, 1 << 20
# 1,024 times the input: linear code shows about 1,024 (less with fixed costs, more out of the
# caches), a quadratic one about 10**6.
RATIO_BOUND = 10 * 1024
SHAPES_PER_DIR = 1
CALL_LIMIT_S = 20.0

# Lines of the shapes whose patterns were quadratic or cubic, besides the fixtures' commonest.
KNOWN = {
    'nccl_text': (b'# Avg bus bandwidth    : 52.7691 \n'
                  b'#  Rank  0 Group  0 Pid   1401 on vm device  0 [0000:00:06] NVIDIA H200\n'
                  b'vm:1401:1401 [0] NCCL INFO Using network IB\n'
                  b'vm:1401:1401 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.1<0>\n'
                  b'vm:1401:1410 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n'
                  b'rccl-tests: Version develop:7d6b5c3\n'),
    'perftest': (b'                    RDMA_Write BW Test\n'
                 b' WARNING: CPU is not PCIe relaxed ordering compliant.\n'
                 b'> > RDMA_Write Bidirectional BW Test\n'
                 b' 65536      5000             11258.08            11257.48\t\t   0.180120\n'),
    'ibdiag': (b'CA: 0x0002c9030012f0a1 "node1 HCA-1":\n'
               b'PortXmitData:....................1234\n'),
    'roce_qos': (b'tc: 0 ratelimit: unlimited, tsa: ets, bw: 13%\n'
                 b'         priority:  1 2\n'),
}
LINEAR = dict((name, (parse, dirs, extra + ((KNOWN[name],) if name in KNOWN else ())))
              for name, (parse, dirs, extra) in PARSERS.items())
LINEAR['nccl_size'] = (_nccl.parse_size, (), (b'4G', b' 8 MB ', b'1024'))


_BLANKS_RE = re.compile(r'[ \t]+')


def _shape(line):
    return re.sub(r'[0-9]', '9', re.sub(r'[A-Za-z]', 'a', line.strip()[:10]))


def seed_lines(name):
    """Lines of the parser's corpus: the extra inputs' first lines, and of each fixture directory
    a line of each of its SHAPES_PER_DIR commonest shapes (the first ten characters with letters
    and digits folded: the port lines of iblinkinfo, the table rows of nccl-tests, ...)."""
    _parse, dirs, extra = LINEAR[name]
    lines = [line for data in extra for line in data.decode('utf-8', 'replace').splitlines()[:8] if line.strip()]
    for where in dirs:
        counts, first = {}, {}
        for data in _mutate.fixtures(where):
            for line in data.decode('utf-8', 'replace').splitlines():
                if line.strip() and len(line) < 400:
                    shape = _shape(line)
                    counts[shape] = counts.get(shape, 0) + 1
                    first.setdefault(shape, line)
        common = sorted(counts, key=lambda shape: (-counts[shape], shape))[:SHAPES_PER_DIR]
        lines += [first[shape] for shape in common if first[shape] not in lines]
    return lines


def with_runs(lines, run):
    """Each line cut at its first, middle and last run of blanks with ``run`` in its place (a
    pattern backtracks when the rest of the line fails it), ``run`` in place of its middle run
    of blanks, and at its end."""
    out = []
    for line in lines:
        gaps = [match.span() for match in _BLANKS_RE.finditer(line)]
        for start, _end in sorted(set([gaps[0], gaps[len(gaps) // 2], gaps[-1]] if gaps else [])):
            out.append(line[:start] + run)
        if gaps:
            start, end = gaps[len(gaps) // 2]
            out.append(line[:start] + run + line[end:])
        out.append(line + run)
    return '\n'.join(out) + '\n'


def _best(parse, text, times):
    clock = _mutate.Clock(CALL_LIMIT_S)
    best = None
    for _time in range(times):
        start = time.perf_counter()
        clock.run(parse, text, about=text[:200])
        took = time.perf_counter() - start
        best = took if best is None else min(best, took)
    return best


@pytest.mark.parametrize('char', [' ', '7'], ids=['blanks', 'digits'])
@pytest.mark.parametrize('name', sorted(LINEAR))
def test_parser_is_linear_in_a_long_run(name, char):
    parse = LINEAR[name][0]
    lines = seed_lines(name)
    assert lines
    if name == 'nccl_size':     # one value, not lines: a run around and inside a size
        small, large = ('%s4%sG%s' % (run, run, run) for run in (char * SMALL, char * LARGE))
    else:
        small, large = with_runs(lines, char * SMALL), with_runs(lines, char * LARGE)
    small_s = _best(parse, small, 5)
    large_s = ratio = None
    for _attempt in range(3):   # the least of up to three (a busy machine slows one)
        large_s = min(large_s or CALL_LIMIT_S, _best(parse, large, 1))
        ratio = large_s / max(small_s, 1e-6)
        if ratio < RATIO_BOUND:
            break
    assert ratio < RATIO_BOUND, '%s: %.4f s on 1 KiB runs, %.3f s on 1 MiB runs: %.0f times' % (name, small_s, large_s, ratio)
