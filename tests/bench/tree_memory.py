# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The memory of a command and of every process it starts, together, sampled while it runs.

What a controller needs for a run is ansible-playbook and its forks (worker processes) at once:
the peak RSS of the largest process (controller_scale's peak_rss_mib) leaves the forks out, and a
sum of RSS counts the pages a fork shares with its parent (copy-on-write) once per fork. PSS
(proportional set size, /proc/PID/smaps_rollup, Linux 4.14+) shares each such page out among the
processes that map it, so that the PSS of all processes adds up to the memory they take together.

Every ``--interval`` seconds the PSS and RSS of the command and of every process below it (by
parent pid, whatever session it started) are summed. Printed (one JSON line): seconds (wall), peak_pss_mib (the
largest sum of PSS seen), peak_rss_sum_mib, peak_processes, samples, rc; with --match TEXT also
peak_pss_matched_mib and peak_processes_matched, over the processes whose command line holds TEXT.

Usage: python -m tests.bench.tree_memory [--interval 0.5] [--match TEXT] -- COMMAND [ARGS...]
(Environment variables reach the command as they are: ANSIBLE_FORKS=200 python -m ... sets the forks.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def _descendants(root):
    """The pids of ``root`` and of every process below it (a child that started a session of its own too)."""
    children = {}
    for name in os.listdir('/proc'):
        if name.isdigit():
            try:
                with open('/proc/%s/stat' % name) as handle:
                    # The name (field 2) may hold spaces: the fields after its closing parenthesis.
                    ppid = int(handle.read().rsplit(')', 1)[1].split()[1])
            except (IOError, OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def _memory_kib(pid):
    """(Pss, Rss) in KiB of one process, or None once it is gone."""
    values = {}
    try:
        with open('/proc/%s/smaps_rollup' % pid) as handle:
            for line in handle:
                key, _sep, rest = line.partition(':')
                if key in ('Pss', 'Rss'):
                    values[key] = int(rest.split()[0])
    except (IOError, OSError, ValueError):
        return None
    return values.get('Pss', 0), values.get('Rss', 0)


def _matches(pid, match):
    try:
        with open('/proc/%s/cmdline' % pid, 'rb') as handle:
            return match.encode() in handle.read()
    except (IOError, OSError):
        return False


def measure(argv, interval=0.5, match=None, stdout=None, cwd=None):
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=stdout, cwd=cwd)
    peak_pss = peak_rss = peak_count = peak_matched = peak_matched_count = samples = 0
    while proc.poll() is None:
        pss = rss = count = matched = matched_count = 0
        for pid in _descendants(proc.pid):
            memory = _memory_kib(pid)
            if memory is not None:
                pss, rss, count = pss + memory[0], rss + memory[1], count + 1
                if match and _matches(pid, match):
                    matched, matched_count = matched + memory[0], matched_count + 1
        peak_pss, peak_rss, peak_count = max(peak_pss, pss), max(peak_rss, rss), max(peak_count, count)
        peak_matched, peak_matched_count = max(peak_matched, matched), max(peak_matched_count, matched_count)
        samples += 1
        time.sleep(interval)
    row = {'seconds': round(time.monotonic() - start, 1), 'peak_pss_mib': round(peak_pss / 1024.0, 1),
           'peak_rss_sum_mib': round(peak_rss / 1024.0, 1), 'peak_processes': peak_count, 'samples': samples,
           'rc': proc.returncode}
    if match:
        row.update(match=match, peak_pss_matched_mib=round(peak_matched / 1024.0, 1), peak_processes_matched=peak_matched_count)
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--interval', type=float, default=0.5)
    parser.add_argument('--match', help='also the PSS of the processes whose command line holds this text (e.g. ansible-playbook: '
                                        'the controller and its forks, not the modules they run on local-connection nodes)')
    parser.add_argument('command', nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ['--'] else args.command
    if not command:
        parser.error('a command to run is needed')
    print(json.dumps(measure(command, args.interval, args.match)), flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
