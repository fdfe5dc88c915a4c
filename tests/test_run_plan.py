"""How much notebook 05 trains: the original's full run on a GPU, scaled down on a CPU, knobs that override."""

import pytest

from helpers.course import run_plan as R


@pytest.fixture
def env(monkeypatch):
    monkeypatch.delenv("COURSE_QUICK", raising=False)
    monkeypatch.delenv("COURSE_FULL", raising=False)
    return monkeypatch


@pytest.mark.parametrize("device", ["cuda", "cuda:1", "mps", "xpu"])
def test_a_gpu_trains_the_originals_ten_epochs_on_everything(env, device):
    plan = R.run_plan(device)
    assert (plan.epochs, plan.train_images, plan.test_images) == (10, None, None)
    assert device in str(plan)


def test_the_cpu_trains_less_and_names_the_knob(env):
    plan = R.run_plan("cpu")
    assert plan.epochs == R.CPU_EPOCHS < 10
    assert (plan.train_images, plan.test_images) == (10_000, 2_000)
    assert "COURSE_FULL=1" in str(plan) and "10,000 training" in str(plan)


def test_course_full_runs_the_original_on_any_device(env):
    env.setenv("COURSE_FULL", "1")
    for device in ("cpu", "cuda"):
        assert (R.run_plan(device).epochs, R.run_plan(device).train_images) == (10, None)


def test_quick_mode_wins_and_needs_no_device(env):
    env.setenv("COURSE_QUICK", "1")
    env.setenv("COURSE_FULL", "1")
    plan = R.run_plan()  # no device lookup in quick mode
    assert (plan.epochs, plan.train_images) == (R.EPOCHS_QUICK, None) and "quick mode" in str(plan)


def test_default_device_is_the_course_device(env):
    env.setenv("COURSE_DEVICE", "cpu")
    assert R.run_plan() == R.run_plan("cpu")


def test_a_misspelt_flag_is_an_error(env):
    env.setenv("COURSE_FULL", "yes please")
    with pytest.raises(ValueError, match="COURSE_FULL='yes please' is not understood"):
        R.run_plan("cpu")
