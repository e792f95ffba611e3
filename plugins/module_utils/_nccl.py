# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""nccl-tests, rccl-tests and MetaX mccl tests (*_perf): command lines, output parsing
(text table and -J JSON, one result structure), the transport NCCL reports, and failure
classification.

Parsing is pure (``parse_text``, ``parse_json``, ``parse_any``, ``outcome``) and tested on
captured outputs. The text format is that of NVIDIA/nccl-tests src/common.cu (the
'# nThread ...' header, '#  Rank ...' device lines, the result table printed by
PrintHeader / writeResultLine, '# Out of bounds values' and '# Avg bus bandwidth'),
including its older form with an 'error' column instead of '#wrong' and no 'root'
column, rccl-tests' copy of it, and the MCCL tests' form with '# '-prefixed rows.
"""

from __future__ import annotations

import json
import os
import re

BENCHMARKS = ('all_reduce_perf', 'all_gather_perf', 'reduce_scatter_perf', 'sendrecv_perf', 'alltoall_perf',
              'broadcast_perf', 'reduce_perf')
LAUNCHERS = ('local', 'mpirun', 'srun')
# Environment prefixes of the libraries (NCCL, RCCL reads NCCL_* and RCCL_*, MetaX MCCL_*).
ENV_PREFIXES = ('NCCL_', 'RCCL_', 'MCCL_')
DEBUG_ENV = {'NCCL_DEBUG': 'INFO', 'NCCL_DEBUG_SUBSYS': 'INIT,NET'}

_HEADER_RE = re.compile(
    r'nThread\s+(?P<threads>\d+)\s+nGpus\s+(?P<gpus>\d+)\s+minBytes\s+(?P<min>\d+)\s+maxBytes\s+(?P<max>\d+)\s+'
    r'step:\s*(?P<step>\d+)\((?P<step_kind>factor|bytes)\)\s+warmup iters:\s*(?P<warmup>\d+)\s+iters:\s*(?P<iters>\d+)'
    r'(?:\s+agg iters:\s*(?P<agg>\d+))?\s+validation:\s*(?P<validation>\d+)(?:\s+graph:\s*(?P<graph>\d+))?')
# '#  Rank  0 Group  0 Pid   1401 on vm device  0 [0000:00:06] NVIDIA H200' (nccl-tests >= 2.13)
# and '# Rank 0 Pid 545654 on mx-sh-demo device 0 [0x08] MetaX C500' (older, and MCCL).
_DEVICE_RE = re.compile(
    r'^#\s*Rank\s+(?P<rank>\d+)(?:\s+Group\s+(?P<group>\d+))?\s+Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)\s+'
    r'device\s+(?P<device>\d+)\s+\[(?P<bus>[^\]]*)\]\s*(?P<name>.*?)\s*$')
_TESTS_VERSION_RE = re.compile(r'#\s*nccl-tests version (?P<version>\S+)(?: nccl-headers=(?P<headers>\d+))?(?: nccl-library=(?P<library>\d+))?')
# rccl-tests prints its name misspelt: 'rcccl-tests: Version Unknown'.
_RCCL_VERSION_RE = re.compile(r'^rc+l-tests: Version (?P<version>.+?)\s*$')
_LIB_VERSION_RE = re.compile(r'\b(?P<lib>[NRM]CCL) version (?P<version>\S+)')
_STARTING_RE = re.compile(r'#\s*Collective test starting: (?P<name>\S+)')
_AVG_RE = re.compile(r'^#\s*Avg bus bandwidth\s*:\s*(?P<value>[-+0-9.eE]+|nan|inf)')
_OOB_RE = re.compile(r'^#\s*Out of bounds values\s*:\s*(?P<count>\d+)\s+(?P<verdict>\w+)')
_INFO_RE = re.compile(r'\b(?P<lib>[NRM]CCL) INFO (?P<text>.*)$')
_USING_NETWORK_RE = re.compile(r'^Using network (?P<net>\S+)')
_NET_USING_RE = re.compile(r'^NET/(?P<net>\w+)\s*: Using (?P<devices>.*?)(?:\s*;\s*OOB .*)?$')
# '[0]mlx5_0:1/IB [1]mlx5_3:1/RoCE': device:port, the link layer after the slash left out.
_NET_DEVICE_RE = re.compile(r'\[\d+\](?P<name>[^\s\[;/]+)')
_GDR_CHANNEL_RE = re.compile(r'via NET/\w+/\d+(?:\(\d+\))?/GDRDMA')
_NET_CHANNEL_RE = re.compile(r'via NET/\w+/\d+')
_GDR_DISABLED_RE = re.compile(r'GPU Direct RDMA Disabled')
_NET_NOTE_RE = re.compile(r'^(?:NET/\w+\s*: No device found|Failed to initialize NET plugin|NET/\w+\s*: GPU Direct RDMA)')
EVIDENCE_MAX = 20

# First kind that matches wins (a missing binary is also a failed launch); each (kind, pattern) names what failed. Texts: Open MPI
# help-ras-base.txt / help-orte-rmaps-base.txt ('not enough slots'), Open MPI
# help-orterun.txt ('was unable to launch', 'could not find an executable'), Slurm
# srun ('execve(): ... No such file or directory'), nccl-tests common.cu
# (NCCLCHECK -> 'Test NCCL failure', 'Invalid number of GPUs', CUDACHECK -> 'Cuda failure').
FAILURE_RULES = (
    ('missing_binary', re.compile(r'unable to find the (?:specified )?executable|could not find an executable|execvp error on file|'
                                  r'execve\(\): .*No such file or directory|: command not found|'
                                  r'^\S*_perf: No such file or directory')),
    ('launch_failed', re.compile(r'There are not enough slots available in the system|'
                                 r'(?:mpirun|prterun|ORTE|PRTE) (?:was unable to (?:launch|start)|does not know how to)|'
                                 r'ssh: connect to host|ssh: Could not resolve hostname|Host key verification failed|'
                                 r'srun: error: (?:Unable to allocate|Unable to create step)|'
                                 r'An ORTE daemon has unexpectedly failed')),
    ('invalid_usage', re.compile(r'Invalid number of GPUs|invalid option|unrecognized option|Invalid value|'
                                 r'invalid (?:type|redop|operation)')),
    ('nccl_init_failed', re.compile(r'Test NCCL failure|NCCL WARN|[NRM]CCL failure|ncclCommInitRank.*failed|'
                                    r'unhandled (?:system|cuda) error|ncclInternalError|ncclSystemError')),
    ('gpu_failed', re.compile(r'Cuda failure|CUDA failure|HIP failure|hip failure|no CUDA-capable device')),
)
FAILURE_KINDS = tuple(kind for kind, _pattern in FAILURE_RULES) + (
    'data_corruption', 'truncated', 'exit_status', 'timeout', 'unparsed')

_SIZE_SUFFIX = {'': 1, 'K': 1024, 'M': 1024 ** 2, 'G': 1024 ** 3, 'T': 1024 ** 4}


def parse_size(value):
    """nccl-tests size argument ('8', '1K', '64M', '1G'; common.cu parsesize) -> bytes, or None."""
    match = re.match(r'^\s*(\d+)\s*([KMGT]?)B?\s*$', str(value), re.I)
    if not match:
        return None
    return int(match.group(1)) * _SIZE_SUFFIX[match.group(2).upper()]


def _int(token):
    try:
        return int(token)
    except (TypeError, ValueError):
        return None


def _float(token):
    try:
        return float(token)
    except (TypeError, ValueError):
        return None


def _wrong(token):
    """'#wrong' cell: an int, or None where the tool printed N/A (validation off).
    rccl-tests marks cells over its threshold with an asterisk."""
    token = token.rstrip('*')
    return _int(token)


def _empty():
    return {
        'benchmark': None, 'header': {}, 'ranks': [], 'hosts': [],
        'versions': {'tool': None, 'tests': None, 'headers': None, 'library': None, 'library_version': None},
        'results': [], 'avg_busbw_gbs': None, 'max_busbw_gbs': None, 'out_of_bounds': None, 'wrong_total': None,
        'transport': {'net': None, 'hcas': [], 'gdr': None, 'evidence': []},
        'format': None, 'columns': None, 'complete': False, 'failure': None,
    }


def _header(match):
    header = {
        'threads': int(match.group('threads')), 'gpus': int(match.group('gpus')),
        'min_bytes': int(match.group('min')), 'max_bytes': int(match.group('max')),
        'step_factor': None, 'step_bytes': None,
        'warmup_iters': int(match.group('warmup')), 'iters': int(match.group('iters')),
        'agg_iters': _int(match.group('agg')), 'validation': int(match.group('validation')),
        'graph': _int(match.group('graph')),
    }
    header['step_factor' if match.group('step_kind') == 'factor' else 'step_bytes'] = int(match.group('step'))
    return header


def _columns(tokens):
    """The table's column header ('size count type redop [root] time algbw busbw #wrong|error ...')."""
    if len(tokens) < 8 or tokens[0] != 'size' or 'count' not in tokens or 'busbw' not in tokens:
        return None
    return {'root': 'root' in tokens, 'check': 'error' if 'error' in tokens else 'wrong'}


def _side(values, check):
    side = {'time_us': _float(values[0]), 'algbw_gbs': _float(values[1]), 'busbw_gbs': _float(values[2]),
            'wrong': None, 'error': None}
    if check == 'error':  # old nccl-tests: the max relative error, a float
        side['error'] = _float(values[3])
    else:
        side['wrong'] = _wrong(values[3])
    return side


def _row(tokens, columns):
    width = 13 if columns['root'] else 12
    if len(tokens) != width or _int(tokens[0]) is None or _int(tokens[1]) is None:
        return None
    fixed = 5 if columns['root'] else 4
    sides = (_side(tokens[fixed:fixed + 4], columns['check']), _side(tokens[fixed + 4:fixed + 8], columns['check']))
    if any(side['time_us'] is None or side['busbw_gbs'] is None for side in sides):
        return None
    return {'size_bytes': int(tokens[0]), 'count': int(tokens[1]), 'type': tokens[2], 'redop': tokens[3],
            'root': _int(tokens[4]) if columns['root'] else None, 'out_of_place': sides[0], 'in_place': sides[1]}


def _transport(info_lines):
    """The network NCCL used, its HCAs and whether GPUDirect RDMA was, from INFO lines
    (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET): 'Using network IB', 'NET/IB : Using
    [0]mlx5_0:1/IB ...', channels 'via NET/IB/0/GDRDMA', 'GPU Direct RDMA Disabled'."""
    transport = {'net': None, 'hcas': [], 'gdr': None, 'evidence': []}
    seen = set()
    gdr_used = gdr_disabled = False

    def note(line, text):
        if text not in seen and len(transport['evidence']) < EVIDENCE_MAX:
            seen.add(text)
            transport['evidence'].append(line.strip())

    for line, text in info_lines:
        match = _USING_NETWORK_RE.match(text)
        if match:
            transport['net'] = match.group('net')
            note(line, text)
            continue
        match = _NET_USING_RE.match(text)
        if match:
            if match.group('net') == 'IB':
                for device in _NET_DEVICE_RE.findall(match.group('devices')):
                    if device not in transport['hcas']:
                        transport['hcas'].append(device)
            note(line, text)
            continue
        if _GDR_DISABLED_RE.search(text):
            gdr_disabled = True
            note(line, text)
        elif _GDR_CHANNEL_RE.search(text):
            gdr_used = True
            note(line, re.sub(r'^Channel \d+/\d+ : ', '', text))
        elif _NET_CHANNEL_RE.search(text) or _NET_NOTE_RE.match(text):
            note(line, re.sub(r'^Channel \d+/\d+ : ', '', text))
    # One rank without GDR is enough to drag the ring down: 'Disabled' anywhere wins.
    if gdr_disabled:
        transport['gdr'] = False
    elif gdr_used:
        transport['gdr'] = True
    return transport


def find_failure(lines):
    """The first line naming a known failure, as {kind, message, lines}, or None."""
    for kind, pattern in FAILURE_RULES:
        for index, line in enumerate(lines):
            if pattern.search(line):
                context = [text.strip() for text in lines[index:index + 3] if text.strip() and not text.startswith('#')]
                return {'kind': kind, 'message': line.strip(), 'lines': context or [line.strip()]}
    return None


def summarize(parsed):
    """avg is the tool's; max and the #wrong total are over both placements of every size."""
    results = parsed['results']
    busbw = [row[side]['busbw_gbs'] for row in results for side in ('out_of_place', 'in_place')]
    parsed['max_busbw_gbs'] = max(busbw) if busbw else None
    wrongs = [row[side]['wrong'] for row in results for side in ('out_of_place', 'in_place') if row[side]['wrong'] is not None]
    parsed['wrong_total'] = sum(wrongs) if wrongs else None
    parsed['hosts'] = []
    for rank in parsed['ranks']:
        if rank['host'] not in parsed['hosts']:
            parsed['hosts'].append(rank['host'])
    return parsed


def parse_text(stdout, stderr=''):
    """Parse the text output of a *_perf binary (with any launcher and NCCL INFO noise)."""
    parsed = _empty()
    parsed['format'] = 'text'
    text = (stdout or '') + ('\n' + stderr if stderr else '')
    lines = text.splitlines()
    info = []
    columns = None
    for line in lines:
        stripped = line.strip()
        match = _INFO_RE.search(line)
        if match:
            info.append((line, match.group('text').strip()))
            lib = _LIB_VERSION_RE.search(match.group('text'))
            if lib and parsed['versions']['library_version'] is None:
                parsed['versions']['library_version'] = lib.group('version')
            if parsed['versions']['tool'] is None and match.group('lib') == 'MCCL':
                parsed['versions']['tool'] = 'mccl-tests'
            continue
        match = _HEADER_RE.search(stripped)
        if match and stripped.startswith('#'):
            parsed['header'] = _header(match)
            continue
        match = _DEVICE_RE.match(stripped)
        if match:
            parsed['ranks'].append({'rank': int(match.group('rank')), 'group': _int(match.group('group')),
                                    'pid': int(match.group('pid')), 'host': match.group('host'),
                                    'device': int(match.group('device')), 'bus_id': match.group('bus'),
                                    'name': match.group('name')})
            continue
        match = _TESTS_VERSION_RE.match(stripped)
        if match:
            parsed['versions'].update(tool='nccl-tests', tests=match.group('version'), headers=_int(match.group('headers')),
                                      library=_int(match.group('library')))
            continue
        match = _RCCL_VERSION_RE.match(stripped)
        if match:
            parsed['versions'].update(tool='rccl-tests', tests=match.group('version'))
            continue
        match = _STARTING_RE.match(stripped)
        if match:
            parsed['benchmark'] = match.group('name')
            continue
        match = _AVG_RE.match(stripped)
        if match:
            parsed['avg_busbw_gbs'] = float(match.group('value'))
            parsed['complete'] = True
            continue
        match = _OOB_RE.match(stripped)
        if match:
            parsed['out_of_bounds'] = {'count': int(match.group('count')), 'ok': match.group('verdict') == 'OK'}
            continue
        if not stripped.startswith('#'):
            lib = _LIB_VERSION_RE.match(stripped)  # 'NCCL version 2.16.2+cuda11.6' printed by rank 0
            if lib and parsed['versions']['library_version'] is None:
                parsed['versions']['library_version'] = lib.group('version')
                continue
        tokens = stripped.lstrip('#').split()
        if columns is None:
            columns = _columns(tokens)
            if columns is not None:
                parsed['columns'] = columns
            continue
        row = _row(tokens, columns)
        if row is not None:
            parsed['results'].append(row)
    parsed['transport'] = _transport(info)
    # A run that printed its Avg line finished: a stray 'NCCL WARN' before it was not fatal.
    parsed['failure'] = None if parsed['complete'] else find_failure(lines)
    return summarize(parsed)


def _json_side(side, validation):
    # The text table prints time and bandwidths with two decimals (common.cu
    # writeResultLine '%7.2f' / '%6.2f'); rounding the same way makes -J and text runs
    # give the same numbers, whichever path the module took.
    wrong = side.get('nwrong')
    wrong = int(wrong) if isinstance(wrong, (int, float)) and wrong >= 0 and validation != 0 else None
    return {'time_us': round(float(side['time']), 2), 'algbw_gbs': round(float(side['alg_bw']), 2),
            'busbw_gbs': round(float(side['bus_bw']), 2), 'wrong': wrong, 'error': None}


def _library_version(code):
    """NCCL_VERSION_CODE (22809 = 2.28.9, 2708 = 2.7.8; nccl.h: major*10000+minor*100+patch from 2.9)."""
    if not isinstance(code, int) or code <= 0:
        return None
    if code >= 10000:
        return '%d.%d.%d' % (code // 10000, code // 100 % 100, code % 100)
    return '%d.%d.%d' % (code // 1000, code // 100 % 10, code % 100)


def parse_json(text):
    """Parse the -J output of nccl-tests (JSON 'version' 3) into the structure of parse_text."""
    parsed = _empty()
    parsed['format'] = 'json'
    try:
        doc = json.loads(text)
    except ValueError as exc:
        parsed['failure'] = {'kind': 'unparsed', 'message': 'not JSON: %s' % exc, 'lines': []}
        return parsed
    if not isinstance(doc, dict) or not isinstance(doc.get('results'), list):
        parsed['failure'] = {'kind': 'unparsed', 'message': 'JSON without a results list', 'lines': []}
        return parsed
    config = doc.get('config') or {}
    args = doc.get('args') or []
    if args:
        parsed['benchmark'] = os.path.basename(str(args[0]))
    parsed['header'] = {
        'threads': config.get('nthreads'), 'gpus': config.get('ngpus'), 'min_bytes': config.get('minimum_bytes'),
        'max_bytes': config.get('maximum_bytes'), 'step_factor': config.get('step_factor'), 'step_bytes': config.get('step_bytes'),
        'warmup_iters': config.get('warmup_iters'), 'iters': config.get('iterations'),
        'agg_iters': config.get('aggregated_iterations'), 'validation': config.get('validation'), 'graph': config.get('graph'),
    }
    for device in config.get('devices') or []:
        parsed['ranks'].append({'rank': device.get('rank'), 'group': device.get('group'), 'pid': device.get('pid'),
                                'host': device.get('hostname'), 'device': device.get('device'),
                                'bus_id': device.get('device_hex'), 'name': device.get('device_info')})
    code = doc.get('nccl_version')
    parsed['versions'].update(tool='nccl-tests', library=code if isinstance(code, int) else None,
                              library_version=_library_version(code))
    validation = config.get('validation')
    for row in doc['results']:
        try:
            parsed['results'].append({
                'size_bytes': int(row['size']), 'count': int(row['count']), 'type': row.get('type'), 'redop': row.get('redop'),
                'root': _int(str(row.get('root', '')).strip()),
                'out_of_place': _json_side(row['out_of_place'], validation), 'in_place': _json_side(row['in_place'], validation)})
        except (KeyError, TypeError, ValueError):
            continue
    oob = doc.get('out_of_bounds')
    if isinstance(oob, dict) and 'count' in oob:
        parsed['out_of_bounds'] = {'count': int(oob['count']), 'ok': str(oob.get('okay')).lower() == 'true'}
    avg = doc.get('average_bus_bandwidth')
    if isinstance(avg, dict) and isinstance(avg.get('bandwidth'), (int, float)):
        # The text prints it with '%g' (six significant digits): 87.640711 -> 87.6407.
        parsed['avg_busbw_gbs'] = float('%g' % avg['bandwidth'])
        parsed['complete'] = True
    errors = [str(error).strip() for error in doc.get('errors') or [] if str(error).strip()]
    if errors:
        parsed['failure'] = find_failure(errors) or {'kind': 'nccl_init_failed', 'message': errors[0], 'lines': errors}
    return summarize(parsed)


def parse_any(text):
    """Text or JSON, told apart by the first non-blank character."""
    return parse_json(text) if (text or '').lstrip().startswith('{') else parse_text(text)


def merge(from_json, from_text):
    """A run with -J: numbers from the JSON; what only the text has (the tool version, every
    rank's device, the transport, failure lines) from the text."""
    merged = dict(from_json)
    merged['versions'] = dict(from_text['versions'])
    for key, value in from_json['versions'].items():
        if merged['versions'].get(key) is None:
            merged['versions'][key] = value
    if len(from_text['ranks']) > len(from_json['ranks']):
        merged['ranks'] = from_text['ranks']
    merged['transport'] = from_text['transport']
    merged['failure'] = from_json['failure'] or from_text['failure']
    return summarize(merged)


def outcome(parsed, rc=None):
    """(status, failure): a known failure first, then data corruption, then a table cut off."""
    if parsed['failure']:
        return 'failed', parsed['failure']
    if parsed['wrong_total'] or (parsed['out_of_bounds'] and not parsed['out_of_bounds']['ok']):
        return 'failed', {'kind': 'data_corruption', 'lines': [],
                          'message': '#wrong total %s, out of bounds values %s: the collective returned wrong data'
                                     % (parsed['wrong_total'], (parsed['out_of_bounds'] or {}).get('count'))}
    if parsed['columns'] is not None or parsed['results'] or parsed['header']:
        if not parsed['complete']:
            return 'failed', {'kind': 'truncated', 'lines': [],
                              'message': 'output ends after %d result rows without "# Avg bus bandwidth"' % len(parsed['results'])}
    elif not parsed['complete']:
        return 'failed', {'kind': 'unparsed', 'lines': [], 'message': 'no nccl-tests header or result table in the output'}
    if rc:
        return 'failed', {'kind': 'exit_status', 'lines': [], 'message': 'the benchmark exited with status %s' % rc}
    return 'ok', None


# ---------------------------------------------------------------------------- command lines

# Benchmark options -> nccl-tests flags (common.cu longopts).
BENCH_FLAGS = (
    ('min_bytes', '-b'), ('max_bytes', '-e'), ('step_factor', '-f'), ('step_bytes', '-i'), ('gpus_per_process', '-g'),
    ('threads', '-t'), ('iterations', '-n'), ('warmup_iters', '-w'), ('datatype', '-d'), ('op', '-o'), ('root', '-r'),
    ('check', '-c'), ('blocking', '-z'), ('cuda_graph', '-G'), ('test_timeout', '-T'),
)


def _flag_value(value):
    if isinstance(value, bool):
        return '1' if value else '0'
    return str(value)


def bench_argv(binary, options, json_path=None):
    """[binary, -b ..., -e ..., ...] with only the options given, then -J and extra_args."""
    argv = [binary]
    for key, flag in BENCH_FLAGS:
        if options.get(key) is not None:
            argv.extend([flag, _flag_value(options[key])])
    if json_path:
        argv.extend(['-J', json_path])
    argv.extend(options.get('extra_args') or [])
    return argv


def launch_argv(launcher, argv, options, env_names=()):
    """The whole command line: argv alone (local), or behind mpirun / srun."""
    if launcher == 'local':
        return list(argv)
    hosts = options.get('hosts') or []
    slots = options.get('slots_per_host')
    if launcher == 'mpirun':
        cmd = [options.get('mpirun_path') or 'mpirun']
        processes = options.get('processes') or (len(hosts) * slots if hosts and slots else None)
        if processes:
            cmd.extend(['-np', str(processes)])
        if hosts:
            cmd.extend(['--host', ','.join('%s:%d' % (host, slots) if slots else host for host in hosts)])
        if options.get('oob_cidr'):
            # Out-of-band traffic (MPI's own TCP and its daemons) on the management network,
            # as seed 000's cluster.sh does with -mca btl_tcp_if_include / oob_tcp_if_include.
            cmd.extend(['--mca', 'btl_tcp_if_include', options['oob_cidr'], '--mca', 'oob_tcp_if_include', options['oob_cidr']])
        for name in env_names:
            cmd.extend(['-x', name])
        cmd.extend(options.get('launcher_args') or [])
        return cmd + list(argv)
    cmd = [options.get('srun_path') or 'srun']
    nodes = options.get('nodes') or (len(hosts) if hosts else None)
    if nodes:
        cmd.extend(['-N', str(nodes)])
    processes = options.get('processes') or (nodes * slots if nodes and slots else None)
    if processes:
        cmd.extend(['-n', str(processes)])
    if hosts:
        cmd.append('--nodelist=%s' % ','.join(hosts))
    cmd.extend(options.get('launcher_args') or [])
    return cmd + list(argv)


def library_env(env, debug):
    """The environment additions: the user's library variables, plus INFO logging of INIT
    and NET (the subsystems that print the network, HCAs and GDR) when debug is on."""
    added = {}
    if debug:
        added.update(DEBUG_ENV)
    for name, value in (env or {}).items():
        added[str(name)] = _flag_value(value)
    return added


def help_has_json(help_text):
    """Does the binary's -h list -J / --output_file (nccl-tests >= 2.17)?"""
    return re.search(r'(?:^|[\s\[])(?:-J\b|--output_file\b)', help_text or '', re.M) is not None
