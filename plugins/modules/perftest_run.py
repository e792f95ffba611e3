#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
module: perftest_run
short_description: Run or parse perftest (ib_write_bw, ib_read_bw, ib_send_bw and the *_lat tools)
version_added: 0.1.0
description:
  - Runs one side of a perftest test (O(role=server) or O(role=client)), or both on this node
    (O(role=loopback)), and returns the result table normalised to Gb/s and microseconds, the
    settings the tool's banner reported, its warnings, and on failure what failed, by kind.
  - With O(from_log), parses an existing perftest output instead of running anything.
  - With O(sequence), runs this node's whole share of a pairwise benchmark in one process - step after step,
    the tests of one step (one per rail) at once - and keeps in step with the other nodes through a small TCP
    beacon on O(address) (see O(sequence)). This is how the C(fabric_bench) role runs a full mesh with one
    async task per node instead of several tasks per round; M(hpc.gpu_fabric.perftest_watch) follows such a
    run step by step.
  - Every perftest process runs in its own session, bounded by O(timeout), and is killed
    and reaped with its whole process group when the time is up or anything fails; it also
    dies with the module (Linux C(PR_SET_PDEATHSIG)). A server never outlives its test.
  - A failed test is a result, not a task failure. The task returns RV(status=failed) with
    RV(failure) and succeeds, so that a benchmark over many pairs keeps every record; set
    O(fail_on_error=true) to fail the task instead. Bad arguments always fail the task.
  - Running a benchmark changes nothing on the node, so C(changed) is always false.
author:
  - hpc.gpu_fabric maintainers (@hpc-gpu-fabric)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: partial
    details: In check mode no tool is run; the task is skipped and returns the commands it would run. O(from_log) is parsed.
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  test:
    description:
      - The perftest tool to run. Required unless O(from_log) is given.
    type: str
    choices: [ib_write_bw, ib_read_bw, ib_send_bw, ib_write_lat, ib_read_lat, ib_send_lat]
  role:
    description:
      - C(server) waits for one client and runs until that client finished or O(timeout).
      - C(client) connects to the server at O(peer).
      - C(loopback) starts the server on this node, waits until it listens on O(tcp_port),
        runs the client against O(peer) (default C(127.0.0.1)) and returns both outputs.
      - Required unless O(from_log) is given; with O(from_log), C(server) accepts an output
        without a result table (passive servers such as C(ib_read_lat) print none).
    type: str
    choices: [server, client, loopback]
  peer:
    description:
      - Address of the server (the out-of-band TCP exchange). Required with O(role=client).
    type: str
  device:
    description:
      - RDMA device (C(-d)), for example C(mlx5_0). The tool's default is the first device.
    type: str
  ib_port:
    description:
      - Port of the device (C(-i)).
    type: int
  gid_index:
    description:
      - GID index (C(-x)), needed on RoCE to pick a RoCE v2 GID.
    type: int
  tcp_port:
    description:
      - TCP port of the out-of-band exchange (C(-p)).
    type: int
    default: 18515
  client_device:
    description:
      - Device of the client side with O(role=loopback) (two HCAs of one node). Defaults to O(device).
    type: str
  client_ib_port:
    description:
      - Port of the client side with O(role=loopback). Defaults to O(ib_port).
    type: int
  client_gpu:
    description:
      - GPU index of the client side with O(role=loopback), for the memory kind of
        O(use_cuda), O(use_rocm) or O(use_maca). Defaults to the same GPU.
    type: int
  size:
    description:
      - Message size in bytes (C(-s)). Mutually exclusive with O(all_sizes).
    type: int
  all_sizes:
    description:
      - Sweep all message sizes from 2 bytes to 8 MiB (C(-a)).
    type: bool
    default: false
  iterations:
    description:
      - Number of iterations (C(-n)), at least 5. Mutually exclusive with O(duration).
    type: int
  duration:
    description:
      - Run each size for this many seconds (C(-D)).
    type: int
  qps:
    description:
      - Number of queue pairs (C(-q)). Bandwidth tests only.
    type: int
  bidirectional:
    description:
      - Bidirectional test (C(-b)), on both sides. Bandwidth tests only.
    type: bool
    default: false
  report_gbits:
    description:
      - Let the tool print Gb/sec (C(--report_gbits)) instead of MB/sec or MiB/sec.
        RV(results) are in Gb/s either way. Bandwidth tests only.
    type: bool
    default: false
  disable_pcie_relaxed:
    description:
      - Disable PCIe relaxed ordering (C(--disable_pcie_relaxed)), as perftest asks for on CPUs
        that are not relaxed-ordering compliant.
    type: bool
    default: false
  use_cuda:
    description:
      - Use the memory of this CUDA GPU (C(--use_cuda=N)). Needs a perftest built with CUDA.
    type: int
  use_cuda_dmabuf:
    description:
      - Register the CUDA memory through dma-buf (C(--use_cuda_dmabuf)) instead of a peer-memory
        module. Needs O(use_cuda) and a perftest built with dma-buf support; the module checks
        the tool's C(--help) for the option and fails the task when it is missing.
    type: bool
    default: false
  use_rocm:
    description:
      - Use the memory of this ROCm GPU (C(--use_rocm=N)). Needs a perftest built with ROCm.
    type: int
  use_maca:
    description:
      - Use the memory of this MetaX GPU (C(--use_maca=N)), in MetaX' perftest build.
    type: int
  extra_args:
    description:
      - More arguments for the tool, each one list element, on both sides with O(role=loopback).
    type: list
    elements: str
    default: []
  timeout:
    description:
      - Hard limit in seconds for the whole test (both sides with O(role=loopback)). When it
        is reached, every perftest process the module started is killed and reaped, and the
        result is a failure of kind C(timeout).
    type: int
    default: 120
  wait_for_server:
    description:
      - With O(role=client), start the client again while the server does not listen yet
        (connection refused), for up to this many seconds of O(timeout). perftest itself tries
        once, so a client started together with its server needs this.
    type: int
    default: 0
  fail_on_error:
    description:
      - Fail the task when the test failed. By default a failed test returns RV(status=failed)
        and the task succeeds, so that a benchmark over many pairs keeps every record.
    type: bool
    default: false
  from_log:
    description:
      - Parse this saved perftest output (stdout and stderr together) instead of running.
    type: path
  sequence:
    description:
      - This node's steps of a pairwise benchmark, in order; every node of the run gets the same number of steps
        (a step without tests for this node is an empty list). Each step is a dict with C(tests), a list of dicts
        with C(side) (C(server) or C(client)), C(peer) (the other node's out-of-band address, where its beacon
        listens and, for a client, its server), and optionally C(device), C(tcp_port), C(use_cuda), C(use_rocm),
        C(use_maca) for that test; any other key (C(round), C(memory), C(pair_id), C(rail), ...) is returned as
        given. The other options (O(test), O(size), O(iterations), O(timeout), O(wait_for_server), ...) apply to
        every test.
      - A client starts when its server's beacon reports the same step, and again while its connection is
        refused (up to O(wait_for_server) seconds). A server whose client is still in an earlier step waits for
        it; O(timeout) counts from the client's arrival. A peer whose beacon stops answering for O(dead_after)
        seconds (or never answers within O(start_grace)) is lost - its tests fail with kind C(peer_lost) and the
        node goes on.
      - Mutually exclusive with O(role) and O(from_log). Needs O(address) and O(run_id).
    type: list
    elements: dict
  address:
    description: With O(sequence), this node's out-of-band address; the beacon listens on it.
    type: str
  beacon_port:
    description: With O(sequence), the TCP port of the beacon (the same on every node).
    type: int
    default: 18514
  run_id:
    description:
      - With O(sequence), a token shared by all nodes of one run; a beacon answering with another token (a
        previous run, another service) does not count.
    type: str
  dead_after:
    description:
      - With O(sequence), seconds a peer's beacon, once seen, may refuse or be unreachable before the peer is lost.
      - A beacon that accepts the connection but answers late belongs to a busy node (its process holds the socket)
        and is waited for up to 6 x O(dead_after) seconds without an answer.
    type: int
    default: 10
  start_grace:
    description: With O(sequence), seconds a peer's beacon may take to appear at the start (nodes start at different times).
    type: int
    default: 60
  controller_lease:
    description:
      - With O(sequence), seconds without a renewal of the controller's lease after which the run stops; V(0) never
        stops it.
      - The sequence runs as an async job, which outlives a killed C(ansible-playbook). The lease counts from the start
        of the run; while the controller follows a node (M(hpc.gpu_fabric.perftest_watch)), it renews a lease file of
        that node's in its temporary directory. Every node learns of the newest renewal from its own file and from
        O(anchors) (each beacon says it) and, once that is older than this, stops its tests, fails the rest with kind
        C(stopped), and answers so on its beacon. Should the node's loop not get there, the module ends itself 15 s later.
      - Role C(fabric_bench) gives O(start_grace) + the worst case of one step + 60 unless C(fabric_bench_controller_lease) says.
    type: int
    default: 0
    version_added: 0.2.0
  anchors:
    description:
      - With O(sequence) and O(controller_lease), the out-of-band addresses of the nodes that say when the lease was
        last renewed, among them the node the controller follows (role C(fabric_bench) gives the first three of the play).
        This node asks their beacons every second and stops at once when one says it stopped. Anchors that are gone or
        hang give no news, and no news runs the lease out.
    type: list
    elements: str
    version_added: 0.2.0
  counters_root:
    description:
      - With O(sequence), read the ports' error counters below this filesystem root (V(/) on a live node) before
        the first step and after each step (RV(counters_start), and C(counters) of each of RV(steps)); V(null)
        reads none.
      - With it, each read also holds C(window) (module_utils/_window.py) - the PCIe AER counts of every HCA, of
        every GPU the sequence's tests use and of each bridge on their path, the ports' congestion counters and,
        on RoCE ports, the per-priority pause counters of C(ethtool -S) (one run per netdev and read, 5 s at
        most; without ethtool the window says so) - and each step C(links), the PCIe speed and width of the HCAs
        and GPUs sampled while its tests ran.
    type: path
    aliases: [root]
  keep_output:
    description:
      - With O(sequence), return C(stdout), C(stderr), C(settings) (perftest's banner) and C(cmd) of every test, not
        only of those that did not end C(ok).
      - A large mesh returns a result per test to the controller; without these, a result is about 40 % smaller.
    type: bool
    default: false
requirements:
  - perftest on the node for running tests (not for O(from_log)).
notes:
  - Results are normalised whatever the tool printed - C(Gb/sec), C(MB/sec) (perftest up to
    6.06) or C(MiB/sec) (later); perftest's MB are 2**20 bytes, like its MiB.
  - The readiness of a loopback server is read from C(/proc/net/tcp), not probed by a
    connection, because the server accepts exactly one connection. With rdma_cm
    (C(-R) in O(extra_args)) the client starts two seconds after the server instead.
  - Tool warnings are returned in RV(tool_warnings), not as Ansible warnings (a benchmark
    over hundreds of pairs would repeat them hundreds of times).
seealso:
  - module: hpc.gpu_fabric.perftest_watch
  - name: perftest
    description: The RDMA performance tests.
    link: https://github.com/linux-rdma/perftest
'''

EXAMPLES = r'''
- name: Host-memory write bandwidth of mlx5_0 to itself, all sizes
  hpc.gpu_fabric.perftest_run:
    test: ib_write_bw
    role: loopback
    device: mlx5_0
    all_sizes: true
    report_gbits: true
  register: loop

- name: Server and client on two nodes
  hpc.gpu_fabric.perftest_run:
    test: ib_write_bw
    role: "{{ 'server' if inventory_hostname == pair_server else 'client' }}"
    peer: "{{ hostvars[pair_server].ansible_host }}"
    device: mlx5_0
    use_cuda: 0
    size: 1048576
    timeout: 60

- name: Fail the play when the latency test fails
  hpc.gpu_fabric.perftest_run:
    test: ib_send_lat
    role: client
    peer: 10.0.0.11
    fail_on_error: true

- name: Parse a result someone sent
  hpc.gpu_fabric.perftest_run:
    from_log: /srv/tickets/4711/ib_write_bw.txt
  delegate_to: localhost
'''

RETURN = r'''
status:
  description: C(ok), C(failed), or C(skipped) in check mode.
  returned: always
  type: str
  sample: ok
test:
  description: The tool, from O(test) or from the banner of O(from_log).
  returned: always
  type: str
  sample: ib_write_bw
role:
  description: The role the output was produced in.
  returned: always
  type: str
  sample: loopback
cmd:
  description: The command that ran (the client's with O(role=loopback)), as a list.
  returned: when a tool ran or would run
  type: list
  elements: str
  sample: [/usr/bin/ib_write_bw, -d, mlx5_0, -p, "18515", -a, --report_gbits, 127.0.0.1]
rc:
  description: Exit status of that command (negative for a signal).
  returned: when a tool ran
  type: int
  sample: 0
stdout:
  description: Its standard output.
  returned: when a tool ran
  type: str
stderr:
  description: Its standard error.
  returned: when a tool ran
  type: str
results:
  description:
    - One entry per row of the result table. Bandwidth tests have C(bytes), C(iterations),
      C(bw_peak_gbps) (null when the tool did not measure it), C(bw_avg_gbps),
      C(msg_rate_mpps); latency tests C(bytes), C(iterations), C(lat_min_us), C(lat_max_us),
      C(lat_typical_us), C(lat_avg_us), C(lat_stdev_us), C(lat_p99_us), C(lat_p999_us),
      each when the tool printed it.
  returned: always
  type: list
  elements: dict
  sample:
    - {bytes: 8388608, iterations: 5000, bw_peak_gbps: 392.25, bw_avg_gbps: 392.25, msg_rate_mpps: 0.005845}
summary:
  description:
    - Bandwidth tests - C(bw_avg_gbps), C(bw_peak_gbps), C(msg_rate_mpps) at the largest size.
    - Latency tests - C(lat_typical_us), C(lat_avg_us), C(lat_min_us), C(lat_max_us),
      C(lat_p99_us), C(lat_p999_us) at the smallest size.
    - Rows of one size (C(--run_infinitely)) are averaged; C(bytes) and C(rows) say which.
  returned: always
  type: dict
  sample: {bytes: 8388608, rows: 1, bw_avg_gbps: 392.25, bw_peak_gbps: 392.25, msg_rate_mpps: 0.005845}
settings:
  description:
    - What the banner reported - C(title), C(device), C(qps), C(transport), C(connection_type),
      C(mtu_bytes), C(link_type), C(gid_index), C(rdma_cm), C(data_exchange), C(tx_depth),
      C(max_inline_bytes), C(pcie_relaxed_ordering), ... each when printed.
    - C(memory) is C(host) or the GPU memory kind (C(cuda), C(rocm), C(maca)); C(gpu) has
      C(vendor), C(index), C(name), C(pci_bus_id) of the GPU the tool used; C(dmabuf) is true
      when the memory was registered through dma-buf.
  returned: always
  type: dict
  sample: {title: RDMA_Write BW Test, device: mlx5_0, link_type: IB, mtu_bytes: 4096, qps: 1, memory: maca,
           gpu: {vendor: maca, index: 0, name: MetaX C500, pci_bus_id: "0x8"}}
tool_warnings:
  description: Warnings the tool printed (CPU frequency not at maximum, PCIe relaxed ordering, peak not measured).
  returned: always
  type: list
  elements: str
  sample: ["Conflicting CPU frequency values detected: 1200.535000 != 1251.336000. CPU Frequency is not max."]
failure:
  description:
    - Null when the test passed. Otherwise C(kind) - one of C(no_device), C(context_failed),
      C(mr_failed), C(connect_failed), C(qp_transition_failed), C(exchange_failed),
      C(completion_error), C(bad_arguments), C(timeout), C(unparsed) - C(message), the tool's
      own line that shows it, C(lines), all error lines recognised, and C(side) (C(server) or
      C(client)) with O(role=loopback).
    - A task that fails because the test could not be set up returns it too, with kind C(tool_missing)
      (no perftest on the node) or, with O(sequence), C(setup_failed) (the beacon cannot listen on
      O(address):O(beacon_port), e.g. the port is taken by another run or a leftover server).
  returned: always
  type: dict
  sample: {kind: connect_failed, message: "Couldn't connect to 10.0.0.11:18515", lines: ["Couldn't connect to 10.0.0.11:18515"]}
server:
  description: The server side of O(role=loopback) - C(cmd), C(rc), C(stdout), C(stderr), C(status), C(failure), C(results), C(killed).
  returned: with O(role=loopback), when not in check mode
  type: dict
units:
  description: The bandwidth unit the tool printed (C(Gb/sec), C(MB/sec), C(MiB/sec)), null for latency tests.
  returned: always
  type: str
  sample: Gb/sec
attempts:
  description: How many times the client was started (see O(wait_for_server)).
  returned: with O(role=client), when a tool ran
  type: int
  sample: 1
elapsed_s:
  description: Seconds the test took (with O(sequence), the whole sequence).
  returned: when a tool ran
  type: float
  sample: 1.82
steps:
  description:
    - With O(sequence), one entry per step - C(step), C(elapsed_s), C(counters) (when O(counters_root) is given),
      C(links) and C(link_samples) (the same) and C(tests). A step after which no error counter differs from the last read returned has C(counters_same_at) (the
      time of its read, epoch seconds) instead of C(counters) - on a healthy fabric, most steps.
    - Each of C(tests) is the test as given in O(sequence) (less C(peer)) with C(status), C(failure), C(results),
      C(summary), C(tool_warnings), C(units), C(rc), C(attempts), C(elapsed_s); a test that did not end C(ok) (every
      test with O(keep_output)) also C(settings), C(cmd), C(stdout) and C(stderr).
  returned: with O(sequence), when not in check mode
  type: list
  elements: dict
stopped:
  description:
    - With O(sequence) and O(controller_lease), why the run stopped before its end (the controller's lease ran out, or an
      anchor stopped the run); the tests it did not run, or cut short, failed with kind C(stopped).
  returned: when the run stopped so
  type: str
  version_added: 0.2.0
counters_start:
  description: With O(sequence) and O(counters_root), the error counters before the first step (the shape of C(gpu_fabric_ib)).
  returned: with O(sequence) and O(counters_root), when not in check mode
  type: dict
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpc.gpu_fabric.plugins.module_utils import _argv, _paths, _perftest, _process, _sequence, _window
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._ib import error_counters, read_ib
from ansible_collections.hpc.gpu_fabric.plugins.module_utils._sysroot import SysRoot


# Each anchor is asked every second by every node (module_utils/_sequence.py ANCHOR_EVERY_S); the role gives 3.
MAX_ANCHORS = 8


class ArgumentError(Exception):
    pass


class SetupError(ArgumentError):
    """The test could not be set up on this node: the task fails, and its RV(failure) says why by kind
    (C(setup_failed): the beacon's port taken; C(tool_missing): no perftest), so that the judging tells a
    benchmark that never reached the hardware from a device that failed (plugin_utils/bench/_bench.py SETUP_KINDS)."""

    def __init__(self, kind, message):
        super(SetupError, self).__init__(message)
        self.failure = {'kind': kind, 'message': message, 'lines': []}


def validate(params):
    """Everything wrong with the arguments, before anything runs."""
    # A NUL anywhere, a host or device that would be read as an option or a second value (_argv).
    try:
        _argv.check_no_nul(params)
        if params['from_log'] is not None:
            return
        for key in ('peer', 'address', 'device', 'client_device'):
            if params[key] is not None:
                _argv.check_host(params[key], key)
        _argv.check_hosts(params.get('anchors'), 'anchors')
        for number, step in enumerate(params['sequence'] or [], 1):
            for test in (step.get('tests') if isinstance(step, dict) else None) or []:
                for key in ('peer', 'device'):
                    if isinstance(test, dict) and test.get(key) is not None:
                        _argv.check_host(test[key], 'sequence step %d: %s' % (number, key))
                if isinstance(test, dict):
                    _argv.check_args(test.get('extra_args'), 'sequence step %d: extra_args' % number)
    except ValueError as exc:
        raise ArgumentError(str(exc))
    if params['sequence'] is not None:
        validate_sequence(params)
        return
    if params['test'] is None:
        raise ArgumentError('test is required unless from_log is given')
    if params['role'] is None:
        raise ArgumentError('role is required unless from_log is given (server, client or loopback)')
    if params['role'] == 'client' and not params['peer']:
        raise ArgumentError('role=client needs peer, the address of the server')
    if params['size'] is not None and params['all_sizes']:
        raise ArgumentError('size and all_sizes are mutually exclusive: one size (-s) or the whole sweep (-a)')
    if not params['test'].endswith('_bw'):
        for key in ('qps', 'bidirectional', 'report_gbits'):
            if params[key]:
                raise ArgumentError('%s applies to bandwidth tests only, not to %s' % (key, params['test']))
    if params['use_cuda_dmabuf'] and params['use_cuda'] is None:
        raise ArgumentError('use_cuda_dmabuf needs use_cuda (the CUDA GPU whose memory is registered)')
    if params['iterations'] is not None and not _perftest.MIN_ITERATIONS <= params['iterations'] <= _perftest.MAX_ITERATIONS:
        raise ArgumentError('iterations must be between %d and %d (perftest MIN_ITER/MAX_ITER)'
                            % (_perftest.MIN_ITERATIONS, _perftest.MAX_ITERATIONS))
    for key in ('size', 'duration', 'qps', 'timeout', 'ib_port', 'client_ib_port'):
        if params[key] is not None and params[key] < 1:
            raise ArgumentError('%s must be a positive integer' % key)
    if not 1 <= params['tcp_port'] <= 65535:
        raise ArgumentError('tcp_port must be between 1 and 65535')
    for key in ('use_cuda', 'use_rocm', 'use_maca', 'client_gpu', 'gid_index'):
        if params[key] is not None and params[key] < 0:
            raise ArgumentError('%s must not be negative' % key)
    if params['wait_for_server'] < 0:
        raise ArgumentError('wait_for_server must not be negative')
    if params['wait_for_server'] and params['role'] != 'client':
        raise ArgumentError('wait_for_server applies to role=client only')
    if params['role'] != 'loopback':
        for key in ('client_device', 'client_ib_port', 'client_gpu'):
            if params[key] is not None:
                raise ArgumentError('%s applies to role=loopback only' % key)


def validate_sequence(params):
    if params['test'] is None:
        raise ArgumentError('test is required with sequence')
    if params['role'] is not None:
        raise ArgumentError('sequence and role are mutually exclusive: each test of the sequence names its side')
    for key in ('address', 'run_id'):
        if not params[key]:
            raise ArgumentError('sequence needs %s' % key)
    if not 1 <= params['beacon_port'] <= 65535:
        raise ArgumentError('beacon_port must be between 1 and 65535')
    for number, step in enumerate(params['sequence'], 1):
        tests = step.get('tests') if isinstance(step, dict) else None
        if not isinstance(tests, list):
            raise ArgumentError('sequence step %d: a dict with a list of tests is expected' % number)
        for test in tests:
            if not isinstance(test, dict) or test.get('side') not in ('server', 'client') or not test.get('peer'):
                raise ArgumentError('sequence step %d: every test needs side (server or client) and peer, got %r' % (number, test))
            for key in ('use_cuda', 'use_rocm', 'use_maca', 'tcp_port'):
                if test.get(key) is not None and not isinstance(test[key], int):
                    raise ArgumentError('sequence step %d: %s must be an integer, got %r' % (number, key, test[key]))
    for key in ('size', 'iterations', 'timeout', 'dead_after', 'start_grace'):
        if params[key] is not None and params[key] < 1:
            raise ArgumentError('%s must be a positive integer' % key)
    if params.get('controller_lease') is not None and params['controller_lease'] < 0:
        raise ArgumentError('controller_lease must be 0 (off) or a positive number of seconds')
    if len(params.get('anchors') or []) > MAX_ANCHORS:
        raise ArgumentError('anchors: at most %d nodes (each is asked every second)' % MAX_ANCHORS)


def run_sequence(module, params):
    binary = module.get_bin_path(params['test'], required=False)
    if binary is None:
        raise SetupError('tool_missing', '%s not found on PATH: install perftest (package perftest, or the GPU-enabled build)'
                         % params['test'])
    base = side_options(params)

    def build(entry):
        options = dict(base)
        for key in ('device', 'tcp_port', 'use_cuda', 'use_rocm', 'use_maca'):
            if entry.get(key) is not None:
                options[key] = entry[key]
        return _perftest.build_argv(binary, params['test'], options, entry['peer'] if entry['side'] == 'client' else None)

    if module.check_mode:
        return {'status': 'skipped', 'skipped': True, 'results': [], 'settings': {}, 'tool_warnings': [], 'failure': None,
                'units': None, 'msg': 'perftest is not run in check mode',
                'cmds': [[build(t) for t in step.get('tests') or []] for step in params['sequence']]}
    counters, sampler = window_reads(module, params)
    options = dict((key, params[key]) for key in ('address', 'beacon_port', 'run_id', 'timeout', 'wait_for_server',
                                                  'dead_after', 'start_grace', 'anchors'))
    options['lease_s'] = params['controller_lease']
    try:
        done = _sequence.run_sequence(params['sequence'], build, options, counters, keep_output=params['keep_output'],
                                      sampler=sampler)
    except _sequence.BeaconError as exc:
        # Its port taken (another run, a leftover server): no test of the sequence ran.
        raise SetupError('setup_failed', str(exc))
    tests = [t for step in done['steps'] for t in step['tests']]
    failed = [t for t in tests if t['status'] != 'ok']
    result = {'status': 'failed' if failed else 'ok', 'steps': done['steps'], 'counters_start': done['counters_start'],
              'elapsed_s': done['elapsed_s'], 'results': [], 'settings': {}, 'tool_warnings': [], 'units': None,
              'failure': None, 'tests': len(tests), 'tests_failed': len(failed)}
    if done.get('stopped'):
        result['stopped'] = done['stopped']
    if failed:
        kinds = sorted(set((t['failure'] or {}).get('kind', 'unknown') for t in failed))
        result['failure'] = {'kind': kinds[0] if len(kinds) == 1 else 'several', 'lines': [],
                             'message': '%d of %d tests failed (%s)' % (len(failed), len(tests), ', '.join(kinds))}
    return result


def window_reads(module, params):
    """(counters, sampler) for the sequence: the ports' error counters with the window's (module_utils/_window.py)
    before the first step and after each, and the links of the HCAs and GPUs while a step runs; (None, None)
    without counters_root."""
    if not params['counters_root']:
        return None, None
    gpus = set()
    for step in params['sequence'] or []:
        for test in step.get('tests') or []:
            gpu = test.get('gpu') if isinstance(test, dict) else None
            if isinstance(gpu, dict) and isinstance(gpu.get('bdf'), str):
                gpus.add(gpu['bdf'])
    ethtool = module.get_bin_path('ethtool', required=False)
    links = []

    def counters():
        sysroot = SysRoot(params['counters_root'])
        devices = read_ib(sysroot)
        read = error_counters(devices)
        window = _window.read_window(sysroot, devices, sorted(gpus), ethtool)
        if links:
            # The PCI paths and link layers do not change while the node runs: the first read alone carries them
            # (plugin_utils/bench/_window.py carried), the others only what counts.
            window = dict((key, value) for key, value in window.items() if key not in _window.STATIC)
        else:
            links.extend(_window.link_bdfs(window) or [''])
        read['window'] = window
        return read

    def sampler():
        return _window.sample_links(SysRoot(params['counters_root']), [bdf for bdf in links if bdf])
    return counters, sampler


def side_options(params, client=False):
    options = dict((key, params[key]) for key in (
        'device', 'ib_port', 'gid_index', 'tcp_port', 'size', 'all_sizes', 'iterations', 'duration', 'qps',
        'bidirectional', 'report_gbits', 'disable_pcie_relaxed', 'use_cuda', 'use_rocm', 'use_maca',
        'use_cuda_dmabuf', 'extra_args'))
    if client:
        if params['client_device'] is not None:
            options['device'] = params['client_device']
        if params['client_ib_port'] is not None:
            options['ib_port'] = params['client_ib_port']
        if params['client_gpu'] is not None:
            for key in ('use_cuda', 'use_rocm', 'use_maca'):
                if options[key] is not None:
                    options[key] = params['client_gpu']
    return options


def check_build(module, binary, params):
    """GPU flags exist only in builds with that support (usage() prints them under #ifdef)."""
    wanted = ['--%s' % key for key in ('use_cuda', 'use_rocm', 'use_maca') if params[key] is not None]
    if params['use_cuda_dmabuf']:
        wanted.append('--use_cuda_dmabuf')
    if not wanted:
        return
    # --help exits 1 (perftest main(): parser() returns HELP_EXIT -> FAILURE), as --version does.
    rc, out, err = module.run_command([binary, '--help'], environ_update={'LANG': 'C', 'LC_ALL': 'C', 'LC_MESSAGES': 'C'})
    missing = [flag for flag in wanted if not _perftest.help_lists(out + err, flag)]
    if missing:
        raise ArgumentError('%s was built without %s (not in its --help): install a perftest built with that GPU support'
                            % (binary, ', '.join(missing)))


def from_report(report, role):
    parsed = report['parsed']
    return {
        'cmd': report['cmd'], 'rc': report['rc'], 'stdout': report['stdout'], 'stderr': report['stderr'],
        'status': report['status'], 'failure': report['failure'], 'results': parsed['results'],
        'settings': parsed['settings'], 'tool_warnings': parsed['tool_warnings'], 'units': parsed['units'],
        'elapsed_s': report['elapsed_s'], 'role': role,
    }


def combine_loopback(server, client):
    """One result of both sides: the client's table; the root cause of a failure, by side."""
    if client is None:
        failure = dict(server['failure'] or {'kind': 'unparsed', 'message': 'server exited before listening', 'lines': []})
        failure['side'] = 'server'
        result = dict(from_report(server, 'loopback'), status='failed', failure=failure, results=[])
        result['server'] = dict((k, v) for k, v in from_report(server, 'server').items() if k != 'role')
        result['server']['killed'] = server['killed']
        return result
    result = from_report(client, 'loopback')
    server_part = dict((k, v) for k, v in from_report(server, 'server').items() if k != 'role')
    server_part['killed'] = server['killed']
    result['server'] = server_part
    failure = None
    if client['failure']:
        failure = dict(client['failure'], side='client')
        # A server that failed on its own (MR, GPU, QP) shows up on the client as a broken
        # exchange or a hang: report the cause.
        if (client['failure']['kind'] in ('exchange_failed', 'timeout') and server['failure']
                and server['failure']['kind'] not in ('exchange_failed', 'timeout', 'unparsed')):
            failure = dict(server['failure'], side='server')
    elif server['failure']:
        failure = dict(server['failure'], side='server')
    result['failure'] = failure
    result['status'] = 'failed' if failure else 'ok'
    warnings = list(result['tool_warnings'])
    for warning in server['parsed']['tool_warnings']:
        if warning not in warnings:
            warnings.append(warning)
    result['tool_warnings'] = warnings
    for key, value in server['parsed']['settings'].items():
        result['settings'].setdefault(key, value)
    return result


def parse_log(module, params):
    # Someone else's file, read here (on the controller, or the node): a FIFO would block the
    # read forever and /dev/zero or a sparse file of GBs exhaust the memory. Regular files only,
    # no symlink followed, at most _paths.LOG_LIMIT bytes.
    try:
        text = _paths.read_regular(params['from_log'], _paths.LOG_LIMIT).decode('utf-8', 'replace')
    except (OSError, ValueError) as exc:
        raise ArgumentError('cannot read from_log %s: %s' % (params['from_log'], getattr(exc, 'strerror', None) or exc))
    parsed = _perftest.parse_output(text)
    status, failure = _perftest.outcome(parsed, None, params['role'])
    test = parsed['test'] or params['test']
    if params['test'] and parsed['test'] and parsed['test'] != params['test']:
        module.warn('from_log %s holds %s output, not %s' % (params['from_log'], parsed['test'], params['test']))
    return {'status': status, 'failure': failure, 'test': test, 'role': params['role'], 'results': parsed['results'],
            'settings': parsed['settings'], 'tool_warnings': parsed['tool_warnings'], 'units': parsed['units']}


def run(module, params):
    binary = module.get_bin_path(params['test'], required=False)
    if binary is None:
        raise SetupError('tool_missing', '%s not found on PATH: install perftest (package perftest, or the GPU-enabled build)'
                         % params['test'])
    role = params['role']
    client_args = side_options(params, client=True)
    server_args = side_options(params)
    peer = params['peer'] or ('127.0.0.1' if role == 'loopback' else None)
    if role == 'server':
        cmd = _perftest.build_argv(binary, params['test'], server_args)
    else:
        cmd = _perftest.build_argv(binary, params['test'], client_args, peer)
    if module.check_mode:
        result = {'status': 'skipped', 'skipped': True, 'cmd': cmd, 'results': [], 'settings': {}, 'tool_warnings': [],
                  'failure': None, 'units': None, 'msg': 'perftest is not run in check mode'}
        if role == 'loopback':
            result['server_cmd'] = _perftest.build_argv(binary, params['test'], server_args)
        return result
    check_build(module, binary, params)
    if role == 'loopback':
        server_cmd = _perftest.build_argv(binary, params['test'], server_args)
        server, client = _perftest.run_loopback(server_cmd, cmd, params['tcp_port'], params['timeout'])
        return combine_loopback(server, client)
    if role == 'client':
        report = _perftest.run_client(cmd, params['timeout'], params['wait_for_server'])
        return dict(from_report(report, role), attempts=report['attempts'])
    report = _perftest.run_single(cmd, params['timeout'], role=role)
    return from_report(report, role)


def message(result):
    result = dict(result, test=result['test'] or 'perftest', role=result['role'] or 'log')
    if result['status'] == 'skipped':
        return result.get('msg')
    if result['status'] == 'failed':
        failure = result['failure']
        return '%s %s failed (%s): %s' % (result['test'], result['role'], failure['kind'], failure['message'])
    if result['role'] == 'sequence':
        return '%s sequence: %d step(s), %d test(s), all ok in %.1f s' % (result['test'], len(result['steps']), result['tests'],
                                                                          result['elapsed_s'])
    summary = result['summary']
    if summary.get('bw_avg_gbps') is not None:
        return '%s %s: %.2f Gb/s average at %d bytes' % (result['test'], result['role'], summary['bw_avg_gbps'], summary['bytes'])
    if summary.get('lat_typical_us') is not None or summary.get('lat_avg_us') is not None:
        value = summary['lat_typical_us'] if summary.get('lat_typical_us') is not None else summary['lat_avg_us']
        return '%s %s: %.2f us at %d bytes' % (result['test'], result['role'], value, summary['bytes'])
    return '%s %s: ok (this side prints no result table)' % (result['test'], result['role'])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            test=dict(type='str', choices=list(_perftest.TESTS)),
            role=dict(type='str', choices=['server', 'client', 'loopback']),
            peer=dict(type='str'),
            device=dict(type='str'),
            ib_port=dict(type='int'),
            gid_index=dict(type='int'),
            tcp_port=dict(type='int', default=_perftest.DEFAULT_TCP_PORT),
            client_device=dict(type='str'),
            client_ib_port=dict(type='int'),
            client_gpu=dict(type='int'),
            size=dict(type='int'),
            all_sizes=dict(type='bool', default=False),
            iterations=dict(type='int'),
            duration=dict(type='int'),
            qps=dict(type='int'),
            bidirectional=dict(type='bool', default=False),
            report_gbits=dict(type='bool', default=False),
            disable_pcie_relaxed=dict(type='bool', default=False),
            use_cuda=dict(type='int'),
            use_cuda_dmabuf=dict(type='bool', default=False),
            use_rocm=dict(type='int'),
            use_maca=dict(type='int'),
            extra_args=dict(type='list', elements='str', default=[]),
            timeout=dict(type='int', default=120),
            wait_for_server=dict(type='int', default=0),
            fail_on_error=dict(type='bool', default=False),
            from_log=dict(type='path'),
            sequence=dict(type='list', elements='dict'),
            address=dict(type='str'),
            beacon_port=dict(type='int', default=18514),
            run_id=dict(type='str'),
            dead_after=dict(type='int', default=10),
            start_grace=dict(type='int', default=60),
            controller_lease=dict(type='int', default=0),
            anchors=dict(type='list', elements='str'),
            counters_root=dict(type='path', aliases=['root']),
            keep_output=dict(type='bool', default=False),
        ),
        mutually_exclusive=[('iterations', 'duration'), ('use_cuda', 'use_rocm', 'use_maca')],
        supports_check_mode=True,
    )
    params = module.params
    try:
        validate(params)
        if params['from_log'] is not None:
            result = parse_log(module, params)
        elif params['sequence'] is not None:
            result = run_sequence(module, params)
            result.update(test=params['test'], role='sequence')
        else:
            result = run(module, params)
            result.update(test=params['test'], role=params['role'])
    except SetupError as exc:
        module.fail_json(msg=str(exc), status='failed', failure=exc.failure)
    except ArgumentError as exc:
        module.fail_json(msg=str(exc))
    except (IOError, OSError) as exc:
        module.fail_json(msg='cannot run %s: %s' % (params['test'], exc))
    except _process.Terminated as exc:
        module.fail_json(msg='perftest_run stopped by %s; every perftest process it started was killed' % exc)
    # Explicit: Ansible counts a result with a non-zero rc and no 'failed' as failed.
    result['changed'] = False
    result['failed'] = False
    result['summary'] = _perftest.summarize(result['results'], result['test'])
    result['msg'] = message(result)
    if result['status'] == 'failed' and params['fail_on_error']:
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
