# -*- coding: utf-8 -*-
# Copyright (c) hpc.gpu_fabric contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

"""role_variable_errors: a role variable its role would refuse, said in one line (playbooks/validate.yml checks
every node's variables with it before anything else)."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.hpc.gpu_fabric.plugins.filter.role_variables import FilterModule, role_options

ERRORS = FilterModule().filters()['role_variable_errors']


def test_a_mistyped_value_is_one_short_line_naming_variable_value_and_type():
    assert ERRORS({'fabric_bench_bw_ratio': 'abc'}) == ["fabric_bench_bw_ratio='abc' is not a number (float), as role fabric_bench expects"]
    # memlock_soft is raw ('unlimited' or a number): anything goes.
    assert ERRORS({'fabric_bench_k': '2.5', 'memlock_soft': 'unlimited'}) == \
        ["fabric_bench_k='2.5' is not a whole number (int), as role fabric_bench expects"]


def test_what_a_role_takes_from_the_command_line_is_taken():
    # -e gives strings: what role argument validation converts is no error.
    given = {'fabric_bench_bw_ratio': '0.9', 'fabric_bench_all_sizes': 'yes', 'gpu_fabric_benchmark': 'maybe',
             'fabric_collective_launcher': 'local', 'fabric_bench_k': '3', 'fabric_bench_gpu_ratio': None, 'not_a_role_variable': object()}
    assert ERRORS(given) == []


def test_choices_and_booleans_are_checked():
    errors = ERRORS({'fabric_collective_launcher': 'mpi', 'fabric_bench_all_sizes': 'maybe'})
    assert "fabric_bench_all_sizes='maybe' is not true or false (bool), as role fabric_bench expects" in errors
    assert "fabric_collective_launcher='mpi' is not one that role fabric_collective takes (mpirun, srun, local)" in errors


def test_a_list_is_checked_element_by_element_against_its_choices():
    assert ERRORS({'fabric_bench_memory': ['host'], 'fabric_bench_hcas': ['mlx5_0']}) == []
    assert ERRORS({'fabric_bench_memory': 'host,gpu'}) == []
    assert ERRORS({'fabric_bench_memory': ['host', 'disk']}) == \
        ["fabric_bench_memory=['host', 'disk'] has 'disk', which role fabric_bench does not take (host, gpu)"]


def test_a_long_or_hostile_value_is_cut_and_escaped():
    [line] = ERRORS({'fabric_bench_bw_ratio': '\x1b]0;x\x07' + 'a' * 500})
    assert '\x1b' not in line and '\\x1b' in line and len(line) < 150


def test_every_role_variable_is_known_and_the_input_must_be_a_mapping():
    # Read from every role's meta/argument_specs.yml.
    assert {'fabric_bench_bw_ratio', 'fabric_collective_launcher', 'memlock_soft'} <= set(role_options())
    with pytest.raises(AnsibleFilterError):
        ERRORS(['fabric_bench_bw_ratio'])


def test_every_string_form_the_end_to_end_run_gives_is_taken():
    # tests/functional/test_string_variables.py gives every numeric and boolean role variable as -e text.
    from tests.functional.test_string_variables import STRINGS
    given = dict(pair.split('=', 1) for pair in STRINGS)
    assert len(given) > 30 and ERRORS(given) == []
