# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""perftest (ib_write_bw, ib_read_bw, ib_send_bw and the *_lat tools): command lines,
output parsing, failure classification, and running a server/client pair that
never outlives its test.

Parsing is pure (``parse_output``, ``outcome``) and tested on real captured outputs;
the output format is that of linux-rdma/perftest src/perftest_parameters.[ch]
(ctx_print_test_info, print_full_bw_report, print_report_lat, RESULT_* / REPORT_*
formats). The I/O (``run_single``, ``run_client``, ``run_loopback``) starts every perftest
process through _process (own session, bounded by a deadline, its whole process group
killed and reaped whatever happened) and turns what it printed into a ``side_report``.
"""

from __future__ import annotations

import os
import re
import time

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _argv, _process

TESTS = ('ib_write_bw', 'ib_read_bw', 'ib_send_bw', 'ib_write_lat', 'ib_read_lat', 'ib_send_lat')
# perftest_parameters.h DEF_PORT: the out-of-band TCP port of the server.
DEFAULT_TCP_PORT = 18515
# perftest_parameters.h MIN_ITER / MAX_ITER (-n is checked against them).
MIN_ITERATIONS = 5
MAX_ITERATIONS = 100000000

# Bandwidth units of the result table. perftest prints MB/sec up to 6.06 and MiB/sec
# from 6.07 on, both 2**20 bytes per second (print_report_bw: format_factor = 0x100000
# for MBS, 125000000 for GBS); --report_gbits prints Gb/sec, 10**9 bits per second.
GBPS_PER_UNIT = {
    'Gb/sec': 1.0,
    'MB/sec': 8.0 * 2 ** 20 / 1e9,
    'MiB/sec': 8.0 * 2 ** 20 / 1e9,
}

# Columns of the result tables (RESULT_FMT, RESULT_FMT_G, RESULT_FMT_PER_PORT,
# RESULT_FMT_QOS, RESULT_FMT_LAT, RESULT_FMT_LAT_DUR, RESULT_EXT_CPU_UTIL).
_COLUMN_RE = re.compile(
    r'#bytes|#sl|#iterations'
    r'|BW peak\[(?P<peak>[^\]]+)\]|BW average\[(?P<avg>[^\]]+)\]|MsgRate\[Mpps\]'
    r'|BW Port(?P<bwport>\d)\[(?P<portunit>[^\]]+)\]|MsgRate Port(?P<mrport>\d)\[Mpps\]'
    r'|t_(?P<lat>min|max|typical|avg|stdev)\[(?P<latunit>usec|cycles)\]'
    r'|(?P<pct>99|99\.9)% percentile\[(?P<pctunit>usec|cycles)\]'
    r'|tps average|CPU_Util\[%\]')
_LAT_KEYS = {'min': 'lat_min', 'max': 'lat_max', 'typical': 'lat_typical', 'avg': 'lat_avg', 'stdev': 'lat_stdev'}
_UNIT_SUFFIX = {'usec': '_us', 'cycles': '_cycles'}
# A table value: perftest prints %lu and %.2f/%.6f (REPORT_FMT*). The length bound keeps
# int()/float() finite and within Python's int-from-string limit on damaged logs.
_NUMBER_RE = re.compile(r'^-?\d{1,20}(?:\.\d{1,12})?$')
_NUMERIC_START_RE = re.compile(r'^-?\d')
# Pasted into a markdown quote ('> ' before every line), e.g. linux-rdma/perftest issue 132. The
# indentation before a '>' bounded: a run without bound inside the repeated group is the nested
# shape tests/unit/plugins/test_regex_backtracking.py refuses.
_QUOTE_RE = re.compile(r'^(?:[ \t]{0,64}>(?: |$))+')
# RESULT_LINE is 87 dashes; documents sometimes glue it to the text around it.
_DASHES_RE = re.compile(r'-{20,}')

# ctx_print_test_info(): the title is "<verb> [Bidirectional |Post List ]BW|Latency Test". The words
# between bounded (64 characters, four words after the kind): searched in a line, an unbounded lazy
# run is tried from every verb of it, quadratic on a line of them.
_TITLE_RE = re.compile(r'\b(?P<title>(?P<verb>RDMA_Write|RDMA_Read|Send|Atomic)\b[A-Za-z_ ]{0,64}?\b(?P<kind>BW|Latency)(?: [A-Za-z]{1,32}){0,4} ?Test)\b')
_VERBS = {'RDMA_Write': 'write', 'RDMA_Read': 'read', 'Send': 'send', 'Atomic': 'atomic'}

# Banner fields of ctx_print_test_info() -> (settings key, conversion). Values end at the
# next field, at a WARNING, or at the end of the line (two fields share a line there).
_BANNER_FIELDS = (
    ('Dual-port', 'dual_port', 'onoff'),
    ('Device', 'device', 'str'),
    ('Number of qps', 'qps', 'int'),
    ('Transport type', 'transport', 'str'),
    ('Connection type', 'connection_type', 'str'),
    ('Using SRQ', 'srq', 'onoff'),
    ('PCIe relax order', 'pcie_relaxed_ordering', 'onoff'),
    ('Lock-free', 'lock_free', 'onoff'),
    ('ibv_wr* API', 'ibv_wr_api', 'onoff'),
    ('Using DDP', 'ddp', 'onoff'),
    ('Using Enhanced Reorder', 'enhanced_reorder', 'onoff'),
    ('TX depth', 'tx_depth', 'int'),
    ('RX depth', 'rx_depth', 'int'),
    ('Post List', 'post_list', 'int'),
    ('Recv Post List', 'recv_post_list', 'int'),
    ('CQ Moderation', 'cq_moderation', 'int'),
    ('CQE Poll Batch', 'cqe_poll_batch', 'str'),
    ('Mtu', 'mtu_bytes', 'bytes'),
    ('Link type', 'link_type', 'str'),
    ('Buffer size', 'buffer_bytes', 'bytes'),
    ('GID index', 'gid_index', 'int'),
    # perftest before 3.x printed 'Gid index' (zrlio/softiwarp issue 23).
    ('Gid index', 'gid_index', 'int'),
    ('GID index2', 'gid_index2', 'int'),
    ('Max inline data', 'max_inline_bytes', 'bytes'),
    ('Outstand reads', 'outstanding_reads', 'int'),
    ('rdma_cm QPs', 'rdma_cm', 'onoff'),
    ('Data ex. method', 'data_exchange', 'str'),
    ('NUMA node', 'numa_node', 'int'),
)
_FIELD_BY_NAME = dict((name, (key, conv)) for name, key, conv in _BANNER_FIELDS)
# Longest names first so that 'GID index2' is not read as 'GID index'.
_FIELD_RE = re.compile(r'(?<![\w*])(?P<name>%s|Use (?P<mem>\w+) memory)\s*:\s*' % '|'.join(
    re.escape(name) for name in sorted(_FIELD_BY_NAME, key=len, reverse=True)))
# Searched: a run of blanks is tried from its first blank only ((?<!\s)); from every blank of it,
# a line ending in a long run of blanks took time quadratic in the run.
_VALUE_END_RE = re.compile(r'(?<!\s)\s+WARNING:|\t|(?<!\s)\s{3,}(?=\S)')

# GPU memory, printed before the banner: CUDA (perftest_resources.c pp_init_gpu /
# cuda_memory.c), ROCm (pp_init_rocm), MetaX MACA fork (its 'Using maca Device' line).
_GPU_USING_RE = re.compile(r'Using (?P<vendor>\w+) Device with ID: (?P<index>\d{1,9}), Name: (?P<name>.*?), PCI Bus ID: (?P<bus>0x[0-9a-fA-F]+)')
_CUDA_PICK_RE = re.compile(r'Picking (?:device No\.|GPU number) (?P<index>\d{1,9})')
# perftest before 4.x: 'There are 2 devices supporting CUDA, picking first...' (device 0;
# linux-rdma/perftest issue 31).
_CUDA_FIRST_RE = re.compile(r'There (?:are|is) \d{1,9} devices? supporting CUDA, picking first')
# CUDA set-up lines without a device line (a paste that starts later: perftest issue 346).
_CUDA_CTX_RE = re.compile(r'^\s*(?:initializing CUDA|creating CUDA Ctx|making it the current CUDA Ctx)\b')
_CUDA_NAME_RE = re.compile(r'\[pid = \d+, dev = \d+\] device name = \[(?P<name>[^\]]*)\]')
_DMABUF_RE = re.compile(r'using DMA-BUF for GPU buffer|ibv_reg_dmabuf_mr\(')

# Warnings the tools print, most specific first. Each is cut out of a line, so they are
# found inside the result table (the CPU-frequency one goes to stderr while the table
# is being printed: get_clock.c proc_get_cpu_mhz()) and in documents that glued lines.
_WARNING_RES = (
    # get_clock.c proc_get_cpu_mhz(); suppressed by -F.
    re.compile(r'Conflicting CPU frequency values detected: [\d.]+ != [\d.]+\. CPU Frequency is not max\.'),
    # perftest_parameters.c ctx_print_test_info() under HAVE_RO.
    re.compile(r'WARNING: CPU is not PCIe relaxed ordering compliant\.'),
    re.compile(r'WARNING: You should disable PCIe RO with `--disable_pcie_relaxed` for both server and client\.'),
    # perftest_parameters.c parser(): --run_infinitely (and -N) leave BW peak at 0.00.
    re.compile(r"WARNING: BW peak won't be measured in this run\."),
    # perftest_parameters.c check_mtu(): the requested MTU is above the port's.
    re.compile(r'Requested mtu is higher than active mtu'),
    re.compile(r'Changing to active mtu - \d+'),
)
_GENERIC_WARNING_RE = re.compile(r'^\s*WARNING:\s*(?P<text>\S(?:.*\S)?)\s*$')

# Failures: (kind, pattern) in the order a run goes through them. The message reported
# is the first line of the output that matches the kind found first. Sources are
# linux-rdma/perftest 6.06 (src/...); see the unit tests for the verbatim texts.
FAILURE_RULES = (
    # perftest_resources.c ctx_find_dev(); <tool>.c main(); rdma-core ibv_get_device_list.
    ('no_device', re.compile(r'Did not detect devices|If device exists, check if driver is up|IB device \S+ not found|No IB devices found'
                             r'|Unable to find the Infiniband/RoCE device|Failed to get IB devices list')),
    # perftest_parameters.c set_link_layer() / check_link(); <tool>.c main();
    # perftest_resources.c ctx_init() GPU initialisation.
    ('context_failed', re.compile(r"Port number \d+ state is|Unable to query port \d+ attributes|Link layer on port \d+ is Unknown"
                                  r"|Couldn't set the link layer|Couldn't get context for the device"
                                  r"|There are no available device\(s\) that support CUDA|No such device ID \(\d+\) exists in system"
                                  r"|Couldn't init GPU context|Requested ROCm device \d+ but found only|Couldn't initialize ROCm device"
                                  r"|DMA-BUF is not supported on this GPU|cuInit\(0\) returned|Couldn't allocate PD|Couldn't create CQ")),
    # perftest_resources.c create_single_mr() / create_mr() / alloc work buffers.
    ('mr_failed', re.compile(r"Couldn't allocate MR|Failed to create MR|failed to create mr|Couldn't allocate work buf"
                             r"|Failed to allocate hugepage|cuMemAlloc error|hipMalloc error")),
    # perftest_communication.c ethernet_client_connect() / ethernet_server_connect() /
    # establish_connection() and the rdma_cm variants.
    ('connect_failed', re.compile(r"Couldn't connect to \S+|Couldn't listen to port \d+|Unable to open file descriptor for socket connection"
                                  r"|Problem in resolving basic address and port|accept\(\) failed|Failed to bind socket"
                                  r"|Unable to init the socket connection|Unable to perform rdma_(?:client|server) function"
                                  r"|Unable to connect \(retries|rdma_resolve_addr failed|rdma_resolve_route failed"
                                  r"|Failed to create RDMA CM connection")),
    # perftest_resources.c ctx_connect() / modify_qp_to_init(); <tool>.c main().
    ('qp_transition_failed', re.compile(r"Failed to modify QP(?: \d+)? to (?:INIT|RTR|RTS)|Unable to Connect the HCA's through the link"
                                        r"|Found Incompatibility issue with GID types")),
    # perftest_communication.c ctx_hand_shake() / ethernet_read_keys() / xchg reports.
    ('exchange_failed', re.compile(r"Failed to exchange data between server and clients|Couldn't read remote address|Couldn't send local address"
                                   r"|Couldn't parse line|Unable to (?:read|write) (?:from|to) socket/rd(?:ma|am)_cm|Couldn't (?:read|send) reports"
                                   r"|Unable to set up socket connection|Failed to sync between server and client"
                                   r"|Failed to close connection between server and client")),
    # perftest_resources.h NOTIFY_COMP_ERROR_SEND/RECV (e.g. status 12, retry exceeded).
    ('completion_error', re.compile(r'Completion with error at (?:client|server)|Failed status \d+:|Failed to complete run_iter_bw'
                                    r'|Test exited with Error|poll CQ failed|Poll Receive CQ failed')),
    # perftest_parameters.c parser(): a flag this binary does not know, a bad value, or
    # options that exclude each other ('CUDA DMA-BUF cannot be used without CUDA', issue 336).
    ('bad_arguments', re.compile(r'cannot be used without|Parser function exited with Error|unrecognized option|invalid option --'
                                 r'|option requires an argument')),
)
FAILURE_KINDS = tuple(kind for kind, _pattern in FAILURE_RULES) + ('timeout', 'unparsed')


# ---------------------------------------------------------------------------- parsing

def _numbered_segments(text):
    """[(line number, segment)] of ``text``: each line split where a dashes line was glued
    to it (dashes -> None), without a markdown quote prefix."""
    out = []
    for number, line in enumerate((text or '').splitlines(), 1):
        line = _QUOTE_RE.sub('', line)
        pos = 0
        for match in _DASHES_RE.finditer(line):
            if line[pos:match.start()].strip():
                out.append((number, line[pos:match.start()]))
            out.append((number, None))
            pos = match.end()
        if pos == 0 or line[pos:].strip():
            out.append((number, line[pos:]))
    return out


def _segments(text):
    """Lines of ``text``, each split where a dashes line was glued to it; dashes -> None."""
    return [segment for _number, segment in _numbered_segments(text)]


def _cut_warnings(segment, found):
    """``segment`` without the known warnings in it (appended to ``found``)."""
    for pattern in _WARNING_RES:
        for match in pattern.finditer(segment):
            found.append(match.group(0))
        segment = pattern.sub(' ', segment)
    generic = _GENERIC_WARNING_RE.match(segment)
    if generic:
        found.append('WARNING: ' + generic.group('text'))
        return ''
    return segment


def _number(token):
    return float(token) if '.' in token else int(token)


def _parse_header(segment):
    """Columns of a result table header -> ([(key, factor)], rest of the segment, bandwidth unit)."""
    start = segment.index('#bytes')
    columns = []
    unit = None
    pos = start
    for match in _COLUMN_RE.finditer(segment, start):
        if segment[pos:match.start()].strip():
            break
        pos = match.end()
        text = match.group(0)
        if text == '#bytes':
            columns.append(('bytes', None))
        elif text == '#sl':
            columns.append(('sl', None))
        elif text == '#iterations':
            columns.append(('iterations', None))
        elif match.group('peak'):
            columns.append(('bw_peak_gbps', GBPS_PER_UNIT.get(match.group('peak'), 0)))
        elif match.group('avg'):
            unit = match.group('avg')
            columns.append(('bw_avg_gbps', GBPS_PER_UNIT.get(unit, 0)))
        elif text == 'MsgRate[Mpps]':
            columns.append(('msg_rate_mpps', None))
        elif match.group('bwport'):
            columns.append(('bw_port%s_gbps' % match.group('bwport'), GBPS_PER_UNIT.get(match.group('portunit'), 0)))
        elif match.group('mrport'):
            columns.append(('msg_rate_port%s_mpps' % match.group('mrport'), None))
        elif match.group('lat'):
            columns.append((_LAT_KEYS[match.group('lat')] + _UNIT_SUFFIX[match.group('latunit')], None))
        elif match.group('pct'):
            columns.append(('lat_p%s' % match.group('pct').replace('.', '') + _UNIT_SUFFIX[match.group('pctunit')], None))
        elif text == 'tps average':
            columns.append(('tps_avg', None))
        else:
            columns.append(('cpu_util_pct', None))
    return columns, segment[pos:], unit


def _row(columns, values):
    row = {}
    for (key, factor), token in zip(columns, values):
        value = _number(token)
        if factor is not None:
            # Unknown units stay None rather than being guessed.
            value = round(float(value) * factor, 6) if factor else None
        row[key] = value
    # A peak that was not measured (--run_infinitely, -N/--noPeak) prints as 0.00.
    if row.get('bw_peak_gbps') == 0 and (row.get('bw_avg_gbps') or 0) > 0:
        row['bw_peak_gbps'] = None
    return row


def _banner_value(conv, raw):
    raw = raw.strip()
    if conv == 'onoff':
        word = raw.split()[0] if raw else ''
        return {'ON': True, 'OFF': False}.get(word)
    if conv == 'int':
        match = re.match(r'-?\d{1,18}(?!\d)', raw)
        return int(match.group(0)) if match else None
    if conv == 'bytes':
        match = re.match(r'(\d{1,18})\s*\[B\]', raw)
        return int(match.group(1)) if match else None
    return raw or None


def _parse_banner_segment(segment, settings, raw):
    matches = list(_FIELD_RE.finditer(segment))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(segment)
        value = segment[match.end():end]
        stop = _VALUE_END_RE.search(value)
        if stop:
            value = value[:stop.start()]
        value = value.strip()
        name = match.group('name')
        if match.group('mem'):
            raw[name] = value
            if value.split()[:1] == ['ON']:
                settings['memory'] = match.group('mem').lower()
            continue
        raw[name] = value
        key, conv = _FIELD_BY_NAME[name]
        settings[key] = _banner_value(conv, value)


def _gpu_lines(segments, settings):
    gpu = None
    for segment in segments:
        using = _GPU_USING_RE.search(segment)
        if using:
            gpu = {'vendor': using.group('vendor').lower(), 'index': int(using.group('index')),
                   'name': using.group('name'), 'pci_bus_id': using.group('bus')}
            continue
        pick = _CUDA_PICK_RE.search(segment)
        first = _CUDA_FIRST_RE.search(segment)
        if pick or first:
            gpu = dict(gpu or {}, vendor='cuda', index=int(pick.group('index')) if pick else 0)
            gpu.setdefault('name', None)
            gpu.setdefault('pci_bus_id', None)
            continue
        if _CUDA_CTX_RE.search(segment):
            settings['memory'] = 'cuda'

        name = _CUDA_NAME_RE.search(segment)
        if name and gpu is not None:
            gpu['name'] = name.group('name')
        if _DMABUF_RE.search(segment):
            settings['dmabuf'] = True
    if gpu is not None:
        settings['gpu'] = gpu
        settings['memory'] = gpu['vendor']


def _find_failure(segments):
    """(kind, message, [all recognised error lines]) of the first recognised error, or None."""
    first = None
    lines = []
    for segment in segments:
        text = segment.strip()
        for kind, pattern in FAILURE_RULES:
            match = pattern.search(text)
            if match:
                lines.append(text)
                if first is None:
                    first = (kind, text)
                break
    if first is None:
        return None
    return {'kind': first[0], 'message': first[1], 'lines': lines}


# Caps on records (the readers cap bytes, _paths.LOG_LIMIT, which is no cap on records): what is
# past a cap is not kept, counted in the parse's ``dropped`` and said in ``tool_warnings``.
# - Result rows: -a prints 23 sizes (2 B to 8 MiB); --run_infinitely one row per interval
#   (perftest's -D duration, 5 s by default): 8,192 rows are over 11 hours of it.
RESULTS_MAX = 8192
# - Rows that could not be read, and distinct tool warnings: the first few tell.
UNREAD_MAX = 50
WARNINGS_MAX = 50
# How the note of what was dropped starts among the tool's warnings (the pair's report shows it).
DROPPED_NOTE = 'hpc.gpu_fabric: '


def parse_output(stdout, stderr=''):
    """Parse what a perftest tool printed (or a saved log, given as ``stdout``).

    Returns a dict: ``test`` (tool name derived from the banner title, or None),
    ``settings`` (banner fields, GPU memory), ``results`` (one dict per table row,
    bandwidth in Gb/s whatever the printed unit), ``tool_warnings``, ``error`` (the
    first recognised failure, or None), ``units`` (the printed bandwidth unit) and
    ``banner`` (raw banner fields as printed), ``table_line`` (line number of the last
    result table header, None without one) and ``unread`` (lines of the table that look
    like rows but could not be read: ``line``, ``text``, ``reason``).
    """
    numbered = _numbered_segments(stdout)
    out_segments = [segment for _number, segment in numbered]
    err_segments = _segments(stderr)
    warnings = []
    unread = []
    dropped = {}
    settings = {}
    raw = {}
    results = []
    columns = None
    header_line = None
    units = None
    title = None
    for segment in err_segments:
        if segment is not None:
            _cut_warnings(segment, warnings)
    for number, segment in numbered:
        if segment is None:
            continue
        segment = _cut_warnings(segment, warnings)
        if not segment.strip():
            continue
        if '#bytes' in segment and _COLUMN_RE.search(segment, segment.index('#bytes')):
            found, rest, unit = _parse_header(segment)
            # Every RESULT_FMT* has #bytes and at least one measured column after it.
            if len(found) >= 2:
                columns, segment, units, header_line = found, rest, units or unit, number
        if columns is None:
            if title is None:
                title = _TITLE_RE.search(segment)
            _parse_banner_segment(segment, settings, raw)
            continue
        tokens = segment.split()
        if not tokens:
            continue
        if all(_NUMBER_RE.match(t) for t in tokens) and len(tokens) % len(columns) == 0:
            for pos in range(0, len(tokens), len(columns)):
                if len(results) < RESULTS_MAX:
                    results.append(_row(columns, tokens[pos:pos + len(columns)]))
                else:
                    dropped['results'] = dropped.get('results', 0) + 1
        elif _NUMERIC_START_RE.match(tokens[0]):
            # Looks like a row but is not one of this table: say where and why.
            bad = [t for t in tokens if not _NUMBER_RE.match(t)]
            if bad and re.match(r'^-?[\d.]+$', bad[0]):
                why = 'number out of range (%d characters): %s...' % (len(bad[0]), bad[0][:20])
            elif bad:
                why = 'not a number: %s' % bad[0][:40]
            else:
                why = '%d values for the %d columns of the header on line %d' % (len(tokens), len(columns), header_line)
            if len(unread) < UNREAD_MAX:
                unread.append({'line': number, 'text': segment.strip()[:200], 'reason': why})
            else:
                dropped['unread'] = dropped.get('unread', 0) + 1
    _gpu_lines([s for s in out_segments + err_segments if s is not None], settings)
    test = None
    if title is not None:
        settings['title'] = title.group('title').strip()
        verb = _VERBS[title.group('verb')]
        test = 'ib_%s_%s' % (verb, 'bw' if title.group('kind') == 'BW' else 'lat')
        settings['bidirectional'] = 'Bidirectional' in settings['title']
    if (settings or raw) and 'memory' not in settings:
        settings['memory'] = 'host'
    error = _find_failure([s for s in err_segments + out_segments if s is not None])
    seen, distinct = [], set()     # a list's 'in' over every warning line was quadratic
    for warning in warnings:
        if warning not in distinct:
            distinct.add(warning)
            if len(seen) < WARNINGS_MAX:
                seen.append(warning)
            else:
                dropped['tool_warnings'] = dropped.get('tool_warnings', 0) + 1
    caps = {'results': RESULTS_MAX, 'unread': UNREAD_MAX, 'tool_warnings': WARNINGS_MAX}
    for kind, count in sorted(dropped.items()):
        seen.append(DROPPED_NOTE + '%d more %s past the first %d not kept (module_utils/_perftest.py)' % (count, kind, caps[kind]))
    parsed = {'test': test, 'settings': settings, 'banner': raw, 'results': results,
              'tool_warnings': seen, 'error': error, 'units': units, 'unread': unread,
              'table_line': header_line}
    if dropped:
        parsed['dropped'] = dropped
    return parsed


def summarize(results, test=None):
    """Summary of a result table: bandwidth at the largest size, latency at the smallest.

    Several rows of one size (--run_infinitely prints one per interval) are averaged.
    """
    if not results:
        return {}
    is_bw = any('bw_avg_gbps' in row for row in results) if test is None else test.endswith('_bw')
    size = max(r['bytes'] for r in results) if is_bw else min(r['bytes'] for r in results)
    rows = [r for r in results if r['bytes'] == size]
    summary = {'bytes': size, 'rows': len(rows)}
    keys = ('bw_avg_gbps', 'bw_peak_gbps', 'msg_rate_mpps') if is_bw else (
        'lat_typical_us', 'lat_avg_us', 'lat_min_us', 'lat_max_us', 'lat_p99_us', 'lat_p999_us')
    for key in keys:
        values = [r[key] for r in rows if r.get(key) is not None]
        if not values:
            summary[key] = None
        elif key in ('bw_peak_gbps', 'lat_max_us', 'lat_p99_us', 'lat_p999_us'):
            summary[key] = max(values)
        elif key == 'lat_min_us':
            summary[key] = min(values)
        else:
            summary[key] = round(sum(values) / len(values), 6)
    return summary


def outcome(parsed, rc, role=None, stderr=''):
    """(status, failure) of a finished run: rc None means a log of unknown exit status.

    A run that printed its banner and exited 0 without a table is ok only as a server:
    passive servers (ib_read_lat) print no table (read_lat.c main()).
    """
    error = parsed['error']
    if rc is not None and rc != 0:
        if error:
            return 'failed', dict(error)
        last = [line.strip() for line in (stderr or '').splitlines() if line.strip()]
        return 'failed', {'kind': 'unparsed', 'message': last[-1] if last else 'exit status %d with no message' % rc,
                          'lines': last[-5:]}
    if parsed['results']:
        if error and rc is None:
            return 'failed', dict(error)
        return 'ok', None
    if error:
        return 'failed', dict(error)
    if role == 'server' and parsed['settings'].get('title'):
        return 'ok', None
    unread = parsed.get('unread') or []
    if unread:
        first = unread[0]
        return 'failed', {'kind': 'unparsed', 'message': 'line %d of the result table could not be read (%s): %s'
                          % (first['line'], first['reason'], first['text']), 'lines': [u['text'] for u in unread[:5]]}
    if parsed.get('table_line') is not None:
        return 'failed', {'kind': 'unparsed', 'lines': [],
                          'message': 'the result table header on line %d has no rows (output cut short?)' % parsed['table_line']}
    return 'failed', {'kind': 'unparsed', 'message': 'no perftest result table in the output', 'lines': []}


# ---------------------------------------------------------------------------- commands

def build_argv(binary, test, options, server_address=None):
    """The perftest command line (a list) for one side; ``server_address`` makes it the client.

    ``options`` keys (None or False when unset): device, ib_port, gid_index, tcp_port,
    size, all_sizes, iterations, duration, qps, bidirectional, report_gbits,
    disable_pcie_relaxed, use_cuda, use_rocm, use_maca, use_cuda_dmabuf, extra_args.
    """
    # Raises ValueError on a device or server address that would be read as an option (_argv).
    if options.get('device') is not None:
        _argv.check_host(options['device'], 'device')
    if server_address:
        _argv.check_host(server_address, 'peer')
    _argv.check_args(options.get('extra_args'), 'extra_args')
    argv = [binary]
    for flag, key in (('-d', 'device'), ('-i', 'ib_port'), ('-x', 'gid_index'), ('-p', 'tcp_port')):
        if options.get(key) is not None:
            argv += [flag, str(options[key])]
    if options.get('all_sizes'):
        argv.append('-a')
    elif options.get('size') is not None:
        argv += ['-s', str(options['size'])]
    if options.get('iterations') is not None:
        argv += ['-n', str(options['iterations'])]
    elif options.get('duration') is not None:
        argv += ['-D', str(options['duration'])]
    if options.get('qps') is not None:
        argv += ['-q', str(options['qps'])]
    if options.get('bidirectional'):
        argv.append('-b')
    if options.get('report_gbits'):
        argv.append('--report_gbits')
    if options.get('disable_pcie_relaxed'):
        argv.append('--disable_pcie_relaxed')
    for key in ('use_cuda', 'use_rocm', 'use_maca'):
        if options.get(key) is not None:
            argv.append('--%s=%d' % (key, options[key]))
    if options.get('use_cuda_dmabuf'):
        argv.append('--use_cuda_dmabuf')
    argv += [str(arg) for arg in options.get('extra_args') or []]
    if server_address:
        argv.append(server_address)
    return argv


def help_lists(help_text, flag):
    """Does a tool's --help output offer ``flag`` (e.g. '--use_cuda_dmabuf')? Options that
    the build lacks (HAVE_CUDA_DMABUF, HAVE_ROCM, ...) are not printed (usage())."""
    return re.search(r'(?:^|\s)%s(?:[=\s]|$)' % re.escape(flag), help_text or '', re.M) is not None


# ---------------------------------------------------------------------------- running

def side_report(launched, role=None):
    """Result of one finished side (a _process.Launched): cmd, rc, stdout, stderr, parsed
    output, status, failure, killed, elapsed_s."""
    stdout, stderr = launched.output()
    parsed = parse_output(stdout, stderr)
    if launched.timed_out or launched.killed:
        status, failure = 'failed', {
            'kind': 'timeout', 'lines': [],
            'message': '%s %s did not finish in time and was killed' % (os.path.basename(launched.argv[0]), launched.name)}
    else:
        status, failure = outcome(parsed, launched.rc, role, stderr)
    return {'cmd': launched.argv, 'rc': launched.rc, 'stdout': stdout, 'stderr': stderr, 'parsed': parsed,
            'status': status, 'failure': failure, 'killed': launched.killed,
            'elapsed_s': round((launched.ended or time.time()) - launched.started, 3)}


def run_single(argv, timeout, env=None, role='client'):
    """Run one side (client or server) to completion or ``timeout`` seconds; always reaped."""
    return side_report(_process.run(argv, timeout, env, role), role)


def refused(report):
    """Did a client fail only because nothing listened yet (connection refused)?"""
    failure = report['failure'] or {}
    return failure.get('kind') == 'connect_failed' and failure.get('message', '').startswith("Couldn't connect to")


# perftest's server could not listen on its TCP port: perftest_communication.c ethernet_server_connect()
# prints "Couldn't listen to port %d" after bind() failed (the port in use), rdma_server_connect() "Failed to
# bind socket" (both filed under connect_failed by FAILURE_RULES). No RDMA resource was exchanged: the test
# never started.
_LISTEN_FAILED_RE = re.compile(r"Couldn't listen to port|Failed to bind socket")


def listen_failed(failure: object) -> bool:
    """Did a side fail because its server could not listen on its TCP port (the port in use)? ``failure``: a side's
    {'kind', 'message'} (its report's failure, or a record's, whatever its source: anything else is no)."""
    if not isinstance(failure, dict) or failure.get('kind') != 'connect_failed':
        return False
    message = failure.get('message')
    return isinstance(message, str) and bool(_LISTEN_FAILED_RE.search(message))


def run_client(argv, timeout, wait_for_server=0, env=None, step=0.25):
    """run_single for a client that may start before its server listens: while the
    connection is refused, start it again for up to ``wait_for_server`` seconds. perftest
    itself tries once (ethernet_client_connect())."""
    start = time.time()
    attempts = 0
    while True:
        attempts += 1
        report = run_single(argv, max(0.1, timeout - (time.time() - start)), env, 'client')
        if not refused(report) or time.time() + step >= start + min(wait_for_server, timeout):
            break
        time.sleep(step)
    report['attempts'] = attempts
    report['elapsed_s'] = round(time.time() - start, 3)
    return report


def _rdma_cm(argv):
    return any(arg in ('-R', '--rdma_cm') for arg in argv)


def run_loopback(server_argv, client_argv, tcp_port, timeout, env=None, ready_grace=2.0, server_linger=5.0):
    """Server and client on this node: start the server, wait until it listens on
    ``tcp_port`` (or ``ready_grace`` seconds with rdma_cm, whose listener is no TCP
    socket), run the client, then collect the server. Returns (server, client) reports;
    client is None when the server never got ready.
    """
    env = env if env is not None else _process.c_locale_env()
    deadline = time.time() + timeout
    server = client = None
    with _process.Guard():
        try:
            server = _process.Launched(server_argv, env, 'server')
            ready = False
            grace_end = time.time() + ready_grace
            while not server.exited() and time.time() < deadline:
                if _rdma_cm(server_argv):
                    ready = time.time() >= grace_end
                else:
                    state = _process.listening(tcp_port, server.proc.pid)
                    ready = state if state is not None else time.time() >= grace_end
                if ready:
                    break
                time.sleep(0.02)
            if not ready:
                server.timed_out = not server.exited()
            else:
                client = _process.Launched(client_argv, env, 'client')
                if not client.wait_until(deadline):
                    client.timed_out = True
                client.finish()
                # A server whose client failed may wait for it forever (accept, handshake).
                linger = deadline if client.rc == 0 else min(deadline, time.time() + server_linger)
                if not server.wait_until(linger):
                    server.timed_out = client.rc == 0
        finally:
            for launched in (client, server):
                if launched is not None:
                    launched.finish()
    return side_report(server, 'server'), (side_report(client, 'client') if client is not None else None)
