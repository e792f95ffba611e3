#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: collective_bench
short_description: Run or parse nccl-tests, rccl-tests and MetaX mccl tests (all_reduce_perf and the other *_perf)
version_added: 0.1.0
description:
  - Runs one of the collective benchmarks of nccl-tests, rccl-tests or the MetaX mccl tests on this
    node (O(launcher=local)) or across nodes (O(launcher=mpirun) or O(launcher=srun)) and returns
    the result table, the tool's average bus bandwidth, the ranks and devices it ran on, the
    versions, and the transport NCCL used (network, HCAs, GPUDirect RDMA) read from its INFO lines.
  - Uses the JSON output (C(-J)) when the binary offers it, the text table otherwise; both give the
    same result structure and the same numbers.
  - With O(from_log), parses an existing output (text or JSON, told apart by its content) instead of running.
  - The launcher runs in its own session, bounded by O(timeout), and is killed and reaped with its
    whole process group when the time is up or anything fails.
  - A failed benchmark is a result, not a task failure. The task returns RV(status=failed) with
    RV(failure) and succeeds, so that a sweep over many nodes keeps every record; set
    O(fail_on_error=true) to fail the task instead. Bad arguments always fail the task.
  - Running a benchmark changes nothing on the node, so C(changed) is always false.
author:
  - hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: partial
    details: In check mode nothing is run; the task is skipped and returns the command it would run. O(from_log) is parsed.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  benchmark:
    description:
      - The benchmark binary to run, looked up on E(PATH) unless O(binary) is given.
    type: str
    default: all_reduce_perf
    choices: [all_reduce_perf, all_gather_perf, reduce_scatter_perf, sendrecv_perf, alltoall_perf, broadcast_perf, reduce_perf]
  binary:
    description:
      - Path of the benchmark binary, for builds outside E(PATH) (for example C(/opt/nccl-tests/build/all_reduce_perf)).
    type: path
  launcher:
    description:
      - C(local) runs the binary here (use O(gpus_per_process) for several GPUs).
      - C(mpirun) starts O(processes) ranks over O(hosts) with Open MPI, passing O(env) with C(-x).
      - C(srun) starts the ranks with Slurm.
    type: str
    default: local
    choices: [local, mpirun, srun]
  hosts:
    description:
      - Hosts of the ranks (C(mpirun --host h1:slots,...), C(srun --nodelist)).
    type: list
    elements: str
    default: []
  slots_per_host:
    description:
      - Ranks per host, usually the GPUs of a node. With O(hosts) it sets C(-np) when O(processes) is not given.
    type: int
  processes:
    description:
      - Total number of ranks (C(mpirun -np), C(srun -n)).
    type: int
  nodes:
    description:
      - Number of nodes for C(srun -N); defaults to the number of O(hosts).
    type: int
  oob_cidr:
    description:
      - Network (CIDR) for MPI's own traffic and daemons (C(--mca btl_tcp_if_include), C(--mca oob_tcp_if_include)).
    type: str
  launcher_path:
    description:
      - Path of C(mpirun) or C(srun); looked up on E(PATH) when not given.
    type: path
  launcher_args:
    description:
      - Further arguments for the launcher, placed before the benchmark (for example C(--allow-run-as-root)).
    type: list
    elements: str
    default: []
  min_bytes:
    description: Smallest size (C(-b)), with an optional K, M or G suffix.
    type: str
  max_bytes:
    description: Largest size (C(-e)), with an optional K, M or G suffix.
    type: str
  step_factor:
    description: Multiplication factor between sizes (C(-f)).
    type: int
  step_bytes:
    description: Fixed increment between sizes (C(-i)); mutually exclusive with O(step_factor).
    type: int
  gpus_per_process:
    description: GPUs per process (C(-g)).
    type: int
  threads:
    description: Threads per process (C(-t)).
    type: int
  iterations:
    description: Timed iterations per size (C(-n)).
    type: int
  warmup_iters:
    description: Warm-up iterations per size (C(-w)).
    type: int
  datatype:
    description: Data type (C(-d)), for example C(float), C(bfloat16), C(half).
    type: str
  op:
    description: Reduction operation (C(-o)), for example C(sum), C(max).
    type: str
  root_rank:
    description: Root rank of rooted collectives (C(-r)) such as broadcast and reduce.
    type: int
    aliases: [root]
  check:
    description: Validation iterations (C(-c)); C(0) disables validation and the tool prints C(N/A) as C(#wrong).
    type: int
  blocking:
    description: Blocking collectives (C(-z)).
    type: bool
  cuda_graph:
    description: Number of CUDA graph launches (C(-G)).
    type: int
  test_timeout:
    description: The benchmark's own timeout in seconds (C(-T)), where the binary has it.
    type: int
  output_format:
    description:
      - C(auto) passes C(-J) when the binary's C(-h) lists it, C(json) always, C(text) never.
      - Across nodes the JSON file is written by rank 0, which may be on another node; when it is not
        found here, the text output is parsed.
    type: str
    default: auto
    choices: [auto, json, text]
  extra_args:
    description: Further arguments for the benchmark, after the others.
    type: list
    elements: str
    default: []
  env:
    description:
      - Library environment (C(NCCL_*), C(RCCL_*), C(MCCL_*) and the like) for every rank.
    type: dict
    default: {}
  debug:
    description:
      - Sets C(NCCL_DEBUG=INFO) and C(NCCL_DEBUG_SUBSYS=INIT,NET,ENV) (unless O(env) sets them), so that
        RV(transport) can be read from the output; with O(launcher=local) also C(GRAPH), whose topology lines give
        the GPUs' own interconnect (C(topology) in RV(transport)).
    type: bool
    default: true
  timeout:
    description: Seconds after which the launcher and every process of its group are killed.
    type: int
    default: 900
  fail_on_error:
    description: Fail the task when the benchmark failed, instead of returning RV(status=failed).
    type: bool
    default: false
  from_log:
    description:
      - Parse this saved output (the text, or the C(-J) JSON) instead of running.
    type: path
  expected_busbw_gbs:
    description:
      - Judge the run against this bus bandwidth in GB/s and return RV(verdict) - for an intra-node run the
        NVLink/xGMI figure of the platform, across nodes the NICs' (filter C(hpc.gpu_fabric.collective_expected)
        computes it from ib_link_facts; one 400 Gb/s NIC per rank is 50 GB/s).
      - Without it RV(verdict) still flags data corruption and failures, with C(status=unknown) otherwise.
    type: float
  healthy_ratio:
    description:
      - Share of O(expected_busbw_gbs) at or above which the run is healthy.
      - Left out, the share a healthy fabric carries of its NICs' bandwidth (C(HEALTHY_RATIO) of C(plugins/module_utils/_collective.py),
        which says why); RV(verdict) returns the share used.
    type: float
  warn_ratio:
    description:
      - Share at or above which a run below O(healthy_ratio) is a warning, below it low.
      - Left out, the share below which the configuration is suspect (C(WARN_RATIO) of C(plugins/module_utils/_collective.py)).
    type: float
requirements:
  - nccl-tests, rccl-tests or the MetaX mccl tests on the nodes, and Open MPI or Slurm across nodes (not for O(from_log)).
notes:
  - RV(avg_busbw_gbs) is the tool's own C(Avg bus bandwidth); numbers from C(-J) are rounded as the text table prints them.
  - The C(gdr) field of RV(transport) is C(true) when channels go C(via NET/IB/x/GDRDMA), C(false) when any rank reports
    C(GPU Direct RDMA Disabled), and null when the output cannot tell (no INFO lines).
'''

EXAMPLES = r'''
- name: All-reduce over the two GPUs of this node
  hpc.gpu_fabric.collective_bench:
    binary: /opt/nccl-tests/build/all_reduce_perf
    min_bytes: 8
    max_bytes: 1G
    step_factor: 2
    gpus_per_process: 2
  register: local_run

- name: All-reduce across two nodes, eight ranks each, MPI on the management network
  hpc.gpu_fabric.collective_bench:
    launcher: mpirun
    hosts: [node1, node2]
    slots_per_host: 8
    oob_cidr: 10.0.0.0/8
    binary: /opt/nccl-tests/build/all_reduce_perf
    min_bytes: 1K
    max_bytes: 1G
    datatype: bfloat16
    env:
      NCCL_IB_HCA: mlx5_0,mlx5_1
  run_once: true
  register: fleet

- name: Parse a saved output
  hpc.gpu_fabric.collective_bench:
    from_log: /srv/tickets/4711/all_reduce_perf.txt
  delegate_to: localhost
'''

RETURN = r'''
status:
  description: C(ok), C(failed) (see RV(failure)) or C(skipped) (check mode).
  returned: always
  type: str
  sample: ok
failure:
  description:
    - What failed - C(kind) (launch_failed, missing_binary, invalid_usage, nccl_init_failed, gpu_failed,
      data_corruption, truncated, exit_status, timeout, unparsed), C(message) and the tool's C(lines); null when ok.
    - For C(truncated) and C(unparsed), C(line) is the first entry of RV(problems) (null when every line was read).
  returned: always
  type: dict
  sample: {kind: invalid_usage, message: "Invalid number of GPUs: 3 requested but only 2 were found.", lines: []}
benchmark:
  description: The benchmark that ran (or that the log names).
  returned: always
  type: str
  sample: all_reduce_perf
results:
  description:
    - One entry per size - C(size_bytes), C(count), C(type), C(redop), C(root), and C(out_of_place) and C(in_place),
      each with C(time_us), C(algbw_gbs), C(busbw_gbs), C(wrong) (null where the tool printed N/A) and C(error)
      (the old nccl-tests error column, else null).
  returned: always
  type: list
  elements: dict
avg_busbw_gbs:
  description: The tool's C(Avg bus bandwidth) in GB/s, as printed.
  returned: always
  type: float
  sample: 87.6407
max_busbw_gbs:
  description: The highest bus bandwidth of any size, in or out of place.
  returned: always
  type: float
  sample: 327.22
out_of_bounds:
  description: The tool's out-of-bounds line - C(count) and C(ok).
  returned: always
  type: dict
  sample: {count: 0, ok: true}
verdict:
  description:
    - C(status) V(ok), V(warning), V(low), V(corrupt) (C(#wrong) > 0 or out-of-bounds values, always an error),
      V(failed) or V(unknown) (no O(expected_busbw_gbs)); C(ratio) of the peak busbw to the expectation, C(reasons).
  returned: always
  type: dict
  sample: {status: warning, ratio: 0.72, busbw_gbs: 36.0, expected_gbs: 50.0, reasons: ["max busbw 36.00 GB/s is 72 % of the expected 50.00 GB/s"]}
wrong_total:
  description: Sum of the C(#wrong) cells; null when the tool printed none (N/A, or the old error column).
  returned: always
  type: int
  sample: 0
header:
  description: The run's settings as the tool printed them (threads, gpus, min_bytes, max_bytes, step_factor, iters, ...).
  returned: always
  type: dict
ranks:
  description: The ranks - C(rank), C(group), C(pid), C(host), C(device), C(bus_id), C(name).
  returned: always
  type: list
  elements: dict
hosts:
  description: The hosts of the ranks, in rank order.
  returned: always
  type: list
  elements: str
versions:
  description: C(tool) (nccl-tests, rccl-tests), C(tests), C(headers), C(library) and C(library_version).
  returned: always
  type: dict
  sample: {tool: nccl-tests, tests: 2.19.6, headers: 22809, library: 22809, library_version: 2.28.9+cuda13.0}
env:
  description: The library environment the benchmark ran with (O(env) and the debug settings); absent when it did not run.
  returned: when the benchmark ran
  type: dict
  sample: {NCCL_DEBUG: INFO, NCCL_DEBUG_SUBSYS: 'INIT,NET,ENV,GRAPH', NCCL_P2P_DISABLE: '1'}
transport:
  description:
    - "C(net) (IB, Socket, AWS Libfabric, ...; the IB plugin builds IBext and IBext_v8 count as IB), C(net_name) (the
      name as NCCL printed it), C(hcas) (from C(NET/IB : Using) and C(GPU Direct RDMA Disabled|Enabled for HCA) lines),
      C(gdr), C(intra) (the intra-node transports seen in the connection lines - P2P, SHM, NVLS) and the C(evidence)
      lines they were read from."
    - "C(env): the C(NCCL_*) settings NCCL reports it saw (C(set by environment to)); C(nnodes); C(intra_by_host): per
      host, the connections between two of its own ranks by transport (C(P2P), C(SHM), C(NVLS), C(NET)) and C(via) (the
      first transports named, e.g. C(NET/Socket)); C(topology): per host, NCCL's C(total_bw_gbs) and C(max_bw_gbs)
      (C(=== System : maxBw totalBw ===)), the link kinds and C(nvlink_gbs) (GRAPH lines); C(ib_unavailable): why the IB
      transport could not be used (C(libibverbs), C(no_device), C(disabled)) with the line; C(dmabuf_available)."
  returned: always
  type: dict
  sample: {net: Socket, net_name: Socket, hcas: [], gdr: false, intra: [P2P], evidence: ["vm:1401:1413 [1] NCCL INFO Using network Socket"],
           env: {NCCL_P2P_DISABLE: '1'}, nnodes: 1, intra_by_host: {vm: {NET: 24, via: [NET/Socket]}},
           topology: {vm: {total_bw_gbs: 370.8, max_bw_gbs: 370.8, links: [PCI, NVL], nvlink_gbs: 370.8}},
           ib_unavailable: null, dmabuf_available: null}
problems:
  description:
    - Lines of the output that could not be read - C(line) (number, or null for a JSON field), C(text) (the line or the
      JSON field, truncated) and C(reason) (for example a result row with the wrong number of fields, an average line
      holding no number, a JSON value of the wrong type). Launcher prefixes (C([1,0]<stdout>:), C(srun --label)) are
      removed before reading. The first 50; past them, and past the caps on records, a line says how many more.
  returned: always
  type: list
  elements: dict
  sample: [{line: 17, text: "8 2 float sum -1 42.56 0.00 0.00 0", reason: "a result row has 9 fields, the table has 13 columns"}]
dropped:
  description:
    - Records past the parser's caps (module_utils/_nccl.py - 65,536 ranks, 4,096 result rows, 50 problems), counted
      and not kept; the verdict says it stands on the records kept.
  returned: when records were past a cap
  type: dict
  sample: {results: 12000}
format:
  description: C(json) or C(text), the output that was parsed.
  returned: always
  type: str
cmd:
  description: The command line that ran (or would run, in check mode).
  returned: when not from_log
  type: list
  elements: str
rc:
  description: Exit status of the launcher.
  returned: when a command ran
  type: int
stdout:
  description: Output of the run.
  returned: when a command ran
  type: str
stderr:
  description: Error output of the run.
  returned: when a command ran
  type: str
elapsed_s:
  description: Seconds the run took.
  returned: when a command ran
  type: float
'''

import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _argv, _collective, _nccl, _paths, _process

RESULT_KEYS = ('benchmark', 'header', 'ranks', 'hosts', 'versions', 'results', 'avg_busbw_gbs', 'max_busbw_gbs',
               'out_of_bounds', 'wrong_total', 'transport', 'format', 'problems')


class ArgumentError(Exception):
    pass


def validate(params):
    try:
        _argv.check_no_nul(params)
    except ValueError as exc:
        raise ArgumentError(str(exc))
    if params['from_log'] is not None:
        return
    for key in ('min_bytes', 'max_bytes'):
        if params[key] is not None and _nccl.parse_size(params[key]) is None:
            raise ArgumentError('%s must be a size such as 8, 1K, 64M or 1G, not %r' % (key, params[key]))
    for key in ('slots_per_host', 'processes', 'nodes', 'step_factor', 'step_bytes', 'gpus_per_process', 'threads',
                'iterations', 'timeout', 'test_timeout'):
        if params[key] is not None and params[key] < 1:
            raise ArgumentError('%s must be a positive integer' % key)
    if params['launcher'] == 'mpirun' and not (params['hosts'] or params['processes']):
        raise ArgumentError('launcher=mpirun needs hosts (with slots_per_host) or processes')
    if params['launcher'] == 'local':
        for key in ('hosts', 'slots_per_host', 'processes', 'nodes', 'oob_cidr', 'launcher_path'):
            if params[key]:
                raise ArgumentError('%s applies to launcher mpirun or srun, not local' % key)
    # Host names reach mpirun --host / srun --nodelist, the rest the command line itself (_argv).
    try:
        _argv.check_hosts(params['hosts'], 'hosts')
        _argv.check_env(params['env'], 'env')
    except ValueError as exc:
        raise ArgumentError(str(exc))


def result_of(parsed, status, failure):
    result = dict((key, parsed[key]) for key in RESULT_KEYS)
    result.update(status=status, failure=failure)
    if parsed.get('dropped'):
        # Records past the parser's caps (module_utils/_nccl.py): counted, and said in the verdict.
        result['dropped'] = dict(parsed['dropped'])
    return result


def parse_log(params):
    # Someone else's file, read here (on the controller, or the node): a FIFO would block the
    # read forever and /dev/zero or a sparse file of GBs exhaust the memory. Regular files only,
    # no symlink followed, at most _paths.LOG_LIMIT bytes.
    try:
        text = _paths.read_regular(params['from_log'], _paths.LOG_LIMIT).decode('utf-8', 'replace')
    except (OSError, ValueError) as exc:
        raise ArgumentError('cannot read from_log %s: %s' % (params['from_log'], getattr(exc, 'strerror', None) or exc))
    parsed = _nccl.parse_any(text)
    status, failure = _nccl.outcome(parsed)
    return result_of(parsed, status, failure)


def find_binary(module, params):
    if params['binary']:
        return params['binary'] if os.access(params['binary'], os.X_OK) else None
    return module.get_bin_path(params['benchmark'], required=False)


def wants_json(module, params, binary):
    if params['output_format'] != 'auto':
        return params['output_format'] == 'json'
    # -h prints the usage and exits (common.cu); builds before 2.17 have no -J.
    rc, out, err = module.run_command([binary, '-h'], environ_update={'LANG': 'C', 'LC_ALL': 'C'})
    return _nccl.help_has_json(out + err)


def run(module, params):
    binary = find_binary(module, params)
    missing = binary is None
    if missing:
        binary = params['binary'] or params['benchmark']
    launcher_options = dict((key, params[key]) for key in ('hosts', 'slots_per_host', 'processes', 'nodes', 'oob_cidr',
                                                           'launcher_args'))
    if params['launcher'] != 'local':
        path = params['launcher_path'] or module.get_bin_path(params['launcher'], required=False)
        if path is None:
            raise ArgumentError('%s not found on PATH: install it or give launcher_path' % params['launcher'])
        launcher_options['%s_path' % params['launcher']] = path
    # The user's env wins over the debug defaults (library_env applies it last).
    added = _nccl.library_env(params['env'], params['debug'], params['launcher'])
    bench_options = dict((key, params[key]) for key, _flag in _nccl.BENCH_FLAGS)
    bench_options['extra_args'] = params['extra_args']
    tmpdir = tempfile.mkdtemp(prefix='collective_bench.')
    try:
        if params['launcher'] == 'local':
            use_json = not missing and wants_json(module, params, binary)
        else:  # the binary is on the nodes, maybe not here: -J only when asked for
            use_json = params['output_format'] == 'json'
        json_path = os.path.join(tmpdir, '%s.json' % params['benchmark']) if use_json else None
        argv = _nccl.bench_argv(binary, bench_options, json_path)
        cmd = _nccl.launch_argv(params['launcher'], argv, launcher_options, sorted(added))
        if module.check_mode:
            parsed = _nccl.parse_text('')
            result = result_of(parsed, 'skipped', None)
            result.update(skipped=True, cmd=cmd, msg='the benchmark is not run in check mode')
            return result
        if missing and params['launcher'] == 'local':
            result = result_of(_nccl.parse_text(''), 'failed', {
                'kind': 'missing_binary', 'lines': [],
                'message': '%s not found (or not executable): build nccl-tests, rccl-tests or the mccl tests, '
                           'or give its path in binary' % binary})
            result['cmd'] = cmd
            return result
        return execute(cmd, added, params['timeout'], json_path)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def execute(cmd, added, timeout, json_path):
    env = _process.c_locale_env()
    env.update(added)
    launched = _process.run(cmd, timeout, env, 'benchmark')
    stdout, stderr = launched.output()
    parsed = _nccl.parse_text(stdout, stderr)
    if json_path and os.path.exists(json_path):
        # The tool's own -J file in this run's temporary directory, bounded all the same; one that
        # cannot be read leaves the results of the text output.
        try:
            from_json = _nccl.parse_json(_paths.read_regular(json_path, _paths.LOG_LIMIT).decode('utf-8', 'replace'))
        except (OSError, ValueError):
            from_json = {'results': []}
        if from_json['results']:
            parsed = _nccl.merge(from_json, parsed)
    if launched.timed_out or launched.killed:
        status, failure = 'failed', {'kind': 'timeout', 'lines': [],
                                     'message': '%s did not finish in %d s; its process group was killed'
                                                % (os.path.basename(cmd[0]), timeout)}
    else:
        status, failure = _nccl.outcome(parsed, launched.rc)
    result = result_of(parsed, status, failure)
    # The library settings of the run (env and the debug defaults), so that a finding can name the one
    # that made it slow (NCCL_P2P_DISABLE in env, say).
    result['env'] = dict(sorted(added.items()))
    result.update(cmd=cmd, rc=launched.rc, stdout=stdout, stderr=stderr,
                  elapsed_s=round(launched.ended - launched.started, 3))
    return result


def message(result):
    name = result['benchmark'] or 'benchmark'
    if result['status'] == 'skipped':
        return result['msg']
    if result['status'] == 'failed':
        return '%s failed (%s): %s' % (name, result['failure']['kind'], result['failure']['message'])
    text = '%s: avg bus bandwidth %s GB/s, max %s GB/s over %d sizes' % (
        name, result['avg_busbw_gbs'], result['max_busbw_gbs'], len(result['results']))
    verdict = result.get('verdict') or {}
    if verdict.get('status') not in (None, 'unknown'):
        text += '; %s%s' % (verdict['status'], (': ' + '; '.join(verdict['reasons'])) if verdict.get('reasons') else '')
    return text


def main():
    module = AnsibleModule(
        argument_spec=dict(
            benchmark=dict(type='str', default='all_reduce_perf', choices=list(_nccl.BENCHMARKS)),
            binary=dict(type='path'),
            launcher=dict(type='str', default='local', choices=list(_nccl.LAUNCHERS)),
            hosts=dict(type='list', elements='str', default=[]),
            slots_per_host=dict(type='int'),
            processes=dict(type='int'),
            nodes=dict(type='int'),
            oob_cidr=dict(type='str'),
            launcher_path=dict(type='path'),
            launcher_args=dict(type='list', elements='str', default=[]),
            min_bytes=dict(type='str'),
            max_bytes=dict(type='str'),
            step_factor=dict(type='int'),
            step_bytes=dict(type='int'),
            gpus_per_process=dict(type='int'),
            threads=dict(type='int'),
            iterations=dict(type='int'),
            warmup_iters=dict(type='int'),
            datatype=dict(type='str'),
            op=dict(type='str'),
            root_rank=dict(type='int', aliases=['root']),
            check=dict(type='int'),
            blocking=dict(type='bool'),
            cuda_graph=dict(type='int'),
            test_timeout=dict(type='int'),
            output_format=dict(type='str', default='auto', choices=['auto', 'json', 'text']),
            extra_args=dict(type='list', elements='str', default=[]),
            env=dict(type='dict', default={}),
            debug=dict(type='bool', default=True),
            timeout=dict(type='int', default=900),
            fail_on_error=dict(type='bool', default=False),
            from_log=dict(type='path'),
            expected_busbw_gbs=dict(type='float'),
            healthy_ratio=dict(type='float'),
            warn_ratio=dict(type='float'),
        ),
        mutually_exclusive=[('step_factor', 'step_bytes')],
        supports_check_mode=True,
    )
    params = module.params
    try:
        # Left out: the thresholds of the rule that judges; the one check (module_utils/_collective.py thresholds).
        try:
            params['healthy_ratio'], params['warn_ratio'] = _collective.thresholds(params['healthy_ratio'], params['warn_ratio'])
        except ValueError as exc:
            raise ArgumentError(str(exc))
        validate(params)
        result = parse_log(params) if params['from_log'] is not None else run(module, params)
    except ArgumentError as exc:
        module.fail_json(msg=str(exc))
    except (IOError, OSError) as exc:
        module.fail_json(msg='cannot run %s: %s' % (params['benchmark'], exc))
    except _process.Terminated as exc:
        module.fail_json(msg='collective_bench stopped by %s; every process it started was killed' % exc)
    # Explicit: Ansible counts a result with a non-zero rc and no 'failed' as failed.
    result['changed'] = False
    result['failed'] = False
    if result.get('status') != 'skipped':
        result['verdict'] = _collective.judge(result, params['expected_busbw_gbs'], params['healthy_ratio'], params['warn_ratio'])
    result['msg'] = message(result)
    if result['status'] == 'failed' and params['fail_on_error']:
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
