"""Test-session settings shared by the unit tests and the notebooks that nbval runs."""

import os
from pathlib import Path

import pytest

# Notebooks are checked against outputs stored in quick mode; set COURSE_QUICK=0 to run them in full.
os.environ.setdefault("COURSE_QUICK", "1")

# One worker per core (pyproject.toml's addopts), so one thread per worker and per kernel it starts: with torch's
# default of a thread per core each, two workers on two cores ran lessons 05 and its solutions in 85 s instead of
# 30 s (BENCHMARKS.md, "CI's time"). Every stored output holds whatever the thread count: machines with 2 to 16
# cores run them. Set OMP_NUM_THREADS to override.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Some CUDA setups print a harmless one-time UserWarning at a process's first backward() (notebook 04
# explains it); the notebooks' kernels inherit this filter, so a stored output does not depend on it.
CUBLAS_CONTEXT_WARNING = "ignore:Attempting to run cuBLAS:UserWarning"  # no comma: it separates filters
os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), CUBLAS_CONTEXT_WARNING]))

# The tests read the course's messages in English whatever this machine's locale; tests of the Chinese edition
# set COURSE_LANG=zh-CN themselves (helpers/course/i18n.py).
os.environ["COURSE_LANG"] = "en"

# The Chinese twins of the lessons run under nbval like the English ones, against their own Chinese outputs
# (tools/translate.py build --outputs). The solutions' twins are left out: their code is the English solutions'
# (tests/test_translation.py compares it token by token), which nbval runs, and what they print in Chinese is
# their verdicts, which the static test of every twin's outputs checks. Measured on a shared 2-core machine
# (load 1.5 to 4): the ten lessons' twins 187 s of CPU time (221 s wall), all twenty 220 s (276 s wall).
collect_ignore_glob = ["notebooks/zh-CN/solutions/*.ipynb"]

# The quick lane, `pytest -m "not slow"`: every module's unit tests in about a minute. What it leaves out is
# marked here, in one place, by kind: the notebooks under nbval, the files whose every test starts a browser,
# torchrun, a whole notebook or a benchmark, the tests that use a fixture which does, and the single tests that
# start processes (a doctor, a kernel, torchrun) or run a slow bank of answers (more than a few seconds each).
SLOW_FILES = {
    "test_site.py",  # builds the site, then Chromium
    "test_slides.py",  # JupyterLab with RISE and Chromium
    "test_variants.py",  # notebooks in a kernel without oneDNN
    "test_bench_ladder.py",  # benchmarks
    "test_benchmark.py",
    "test_train_tudui_torchrun.py",  # torchrun
    "test_site_cheatsheet.py",  # the cheat sheet's script, torchrun
    "test_exercises_10.py",  # every answer rehearsed in a child process, on three pretend machines
}
SLOW_FIXTURES = {"executed", "graded"}  # a notebook run in a kernel (test_clinic.py), a class graded (test_grade.py)
SLOW_TESTS = {  # file: test functions, every parametrization
    "test_notebooks.py": {"test_notebook_copied_alone_runs"},
    "test_translation.py": {"test_a_chinese_notebook_runs_and_speaks_chinese"},
    "test_ddp.py": {
        "test_two_processes_train_as_one_and_resume_on_one",
        "test_a_collective_only_rank_0_calls_fails_fast",
        "test_a_job_past_its_timeout_is_killed",
        "test_two_nodes_on_localhost",
        "test_fsdp_shards_and_matches_one_process",
        "test_the_ddp_benchmark_runs_quickly",
    },
    "test_launch.py": {"test_torchrun_on_a_port_in_use_fails_at_once_with_what_to_do"},
    "test_doctor.py": {
        "test_doctor_runs_here",
        "test_doctor_with_misspelt_course_device_fails_naming_the_fix",
        "test_report_of_this_machine_holds_nothing_private",
    },
    "test_zh_runtime_doctor_clinic.py": {
        "test_doctor_on_this_machine_speaks_chinese",
        "test_doctor_report_block_in_chinese",
        "test_clinic_note_and_traceback_line_in_chinese",
    },
    "test_known_errors.py": {
        "test_children_that_cannot_import_a_notebook_definition",
        "test_a_worker_error_from_a_script_gets_a_note_for_scripts",
        "test_a_whole_model_loaded_where_its_class_is_not",
        "test_wrapper_prefixes_as_torch_writes_them",
    },
    # a rehearsal in a child process, some on three machines, some with a port rehearsed again
    "test_rehearse.py": {
        "test_a_checkpoint_saved_on_a_gpu_needs_map_location_on_a_laptop",
        "test_a_gpu_index_past_the_machines_gpus_and_a_cuda_call_on_a_laptop",
        "test_a_scripts_own_bug_is_reported_as_such_not_as_a_failure_of_the_rehearsal",
        "test_a_wrong_machine_or_a_missing_script_is_a_clear_usage_error",
        "test_adam_steps_on_a_pretend_gpu_without_asking_the_real_driver",
        "test_an_old_scripts_variable_and_lstm_stay_on_the_pretend_gpu",
        "test_fix_ports_a_legacy_type_picked_once_and_the_moves_behind_its_flag",
        "test_fix_ports_method_2_keeping_comments_and_rehearses_it_clean_everywhere",
        "test_fix_puts_a_scripts_top_level_work_under_a_main_guard_for_spawned_workers",
        "test_fix_takes_the_state_dict_of_a_wrapper_made_in_one_branch_only",
        "test_float64_is_refused_on_a_mac_only",
        "test_json_is_one_object_with_file_line_kind_message_fix",
        "test_method_2_on_a_pretend_gpu_finds_the_labels_and_numpy_at_their_lines_with_the_cpus_numbers",
        "test_method_2_runs_on_a_mac_and_a_laptop_but_never_uses_the_macs_gpu",
        "test_numpy_with_force_copies_to_the_host_itself_and_is_not_a_problem",
        "test_the_offline_mnist_has_the_tensors_scripts_read_off_the_real_one",
        "test_the_report_speaks_chinese",
        "test_the_step_limit_stops_the_run_and_says_so",
        "test_workers_on_a_mac_are_a_problem_only_where_a_spawned_worker_would_start_them_again",
    },
    "test_rehearse_several.py": {
        "test_adam_steps_on_a_pretend_gpu",
        "test_map_location_cuda_on_a_laptop_fails_as_there",
        "test_one_child_three_machines_each_its_own_report",
    },
    "test_rehearse_magic.py": {
        "test_a_cell_is_rehearsed_as_a_gpu_with_its_own_lines_and_numbers",
        "test_the_report_speaks_the_learners_language",
        "test_the_same_cell_runs_on_a_mac_and_a_laptop",
    },
    "test_rehearse_adversarial.py": {
        "test_each_idiom_gets_the_real_machines_verdict",
        "test_a_script_that_catches_the_stop_still_stops_at_the_step_limit",
    },
    "test_score_rehearsal.py": {"test_the_rehearsal_and_the_fix_of_one_fixture"},
    "test_train_tudui.py": {
        "test_trains_saves_and_resumes",
        "test_a_resumed_run_sees_the_data_order_of_an_uninterrupted_one",
    },
    "test_speed.py": {"test_rungs_train_and_sync_as_described"},
    "test_exercises_00.py": {"test_every_check_turns_garbage_into_feedback"},
    "test_notebook_machines.py": {"test_00_children_on_this_machine_agree_with_the_asserts"},
    "test_training.py": {"test_fit_learns_and_records_history"},
    "test_github_files.py": {"test_issue_forms_follow_githubs_schema"},
    # banks whose every answer runs a training loop: the quick lane keeps the exercises' other tests
    "test_exercises_06.py": {"test_quiet_loop_accepts", "test_quiet_loop_explains"},
    "test_exercises_07.py": {
        "test_batch_finder_accepts",
        "test_accumulation_feedback_never_shows_the_solution",
        "test_training_memory_accepts",
        "test_accumulation_accepts",
        "test_accumulation_explains",
        "test_accumulation_peak_hint_says_where_and_goes_deeper",
        "test_checks_never_raise",
    },
    "test_zh_runtime_checks_04_06.py": {
        "test_06_quiet_loop_in_chinese",
        "test_wrong_answers_get_chinese_feedback_without_the_solution",
    },
    "test_zh_runtime_checks_07_09.py": {"test_wrong_answers_get_chinese_feedback_without_the_solution"},
    "test_hints.py": {"test_feedback_never_prints_the_solution"},
}


# CI's floor phase, `pytest -m "not newest_only"`: what the oldest torch the course declares can break. Left out there,
# and run once, on the newest torch: what cannot differ between torch versions (the translation, the site, the slides,
# the guides, the install files, the layout, the notebooks' structure) and what the floor already proves another way
# (the Chinese twins run the English code token for token, and their Chinese checks are the English ones in other
# words; the grader runs the lessons' own checks; a notebook copied alone is what Colab runs, on the newest torch).
NEWEST_ONLY_FILES = {
    "test_translation.py",
    "test_zh_runtime_core.py",
    "test_zh_runtime_checks_04_06.py",
    "test_zh_runtime_checks_07_09.py",
    "test_zh_runtime_doctor_clinic.py",
    "test_site.py",
    "test_slides.py",
    "test_teacher_guides.py",
    "test_readme.py",
    "test_setup_files.py",
    "test_github_files.py",
    "test_cell_tags.py",
    "test_layout.py",
    "test_import_cycles.py",
    "test_essentials.py",
    "test_notebooks.py",
    "test_hints.py",
    "test_grade.py",
    "test_grade_marks.py",
    "test_grade_nbgrader.py",
    "test_grade_points.py",
    "test_grade_release.py",
    "test_gpu_figures.py",
    "test_pictures.py",
    "test_schematics.py",
    "test_markers.py",
}
CHINESE_EDITION = Path(__file__).resolve().parent / "notebooks" / "zh-CN"


def pytest_collection_modifyitems(config, items):
    for item in items:
        name = item.path.name
        if (
            item.path.suffix == ".ipynb"
            or name in SLOW_FILES
            or SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))
            or getattr(item, "originalname", item.name) in SLOW_TESTS.get(name, ())
        ):
            item.add_marker(pytest.mark.slow)
        if name in NEWEST_ONLY_FILES or item.path.is_relative_to(CHINESE_EDITION):
            item.add_marker(pytest.mark.newest_only)


@pytest.fixture(autouse=True)
def _environment_put_back():
    """Each test leaves the process's environment as it found it: the notebooks' kernels, started later by the same
    pytest, inherit it (a tool that set MPLBACKEND=Agg for its children once hid lesson 05's figures)."""
    saved = dict(os.environ)
    yield
    for name in set(os.environ) - set(saved):
        del os.environ[name]
    os.environ.update({k: v for k, v in saved.items() if os.environ.get(k) != v})
