"""Simulated figures that move (jupyter_gpu.simulate.motion and the scenario's ``motion``): tracks as
pure functions of the elapsed time, their strict schema, and the moving ``demo`` at chosen times."""

from __future__ import annotations

import pytest

from jupyter_gpu import simulate
from jupyter_gpu.simulate.motion import Track, interpolate

MIB = 1024 * 1024


def moving_gpu(**motion):
    return {"memory_total_mib": 81920, "utilization": 7, "motion": motion}


def test_keyframes_are_joined_by_lines_and_held_outside_them():
    points = ((10.0, 20.0), (20.0, 40.0), (30.0, 0.0))
    assert [interpolate(points, t) for t in (0, 10, 15, 20, 25, 30, 99)] == [20, 20, 30, 40, 20, 0, 0]


def test_a_loop_repeats_and_whole_numbers_round():
    track = Track(points=((0.0, 0.0), (10.0, 100.0)), low=0, high=100, loop_s=20, whole=True)
    assert [track.at(t) for t in (0, 5, 10, 15, 20, 25, 45)] == [0, 50, 100, 100, 0, 50, 50]


def test_jitter_wobbles_within_the_range_and_is_the_same_at_the_same_time():
    track = Track(points=((0.0, 95.0),), low=0, high=100, jitter=0.1, seed="gpus[0].motion.utilization")
    values = [track.at(t) for t in range(120)]
    assert len(set(values)) > 20  # it moves
    assert all(85.5 <= v <= 100 for v in values)  # ±10 % of 95, never above the range
    assert values == [track.at(t) for t in range(120)]  # a pure function of the time
    other = Track(points=((0.0, 95.0),), low=0, high=100, jitter=0.1, seed="gpus[1].motion.utilization")
    assert [other.at(t) for t in range(120)] != values  # tracks wobble out of step


def test_zero_does_not_wobble():
    track = Track(points=((0.0, 60.0), (10.0, 0.0)), low=0, high=100, jitter=0.5)
    assert [track.at(t) for t in range(10, 100)] == [0.0] * 90  # an idle GPU stays at 0 %


def test_a_scenario_evaluates_its_motion_at_a_time():
    scenario = simulate.Scenario.from_dict(
        {
            "gpus": [
                {
                    "memory_total_mib": 81920,
                    "motion": {"loop_s": 100, "utilization": {"points": [[0, 10], [50, 90]]}},
                    "processes": [
                        {"pid": 7, "memory_mib": 1, "motion": {"memory_mib": {"points": [[0, 1000], [10, 3000]]}}},
                        {"pid": 8, "memory_mib": 500},
                    ],
                },
                {"utilization": 33},
            ]
        }
    )
    assert scenario.moves and scenario.at(0).gpus[1] is scenario.gpus[1]  # a still GPU is itself
    later = scenario.at(25)
    assert later.gpus[0].utilization == 50
    assert [p.memory_mib for p in later.gpus[0].processes] == [3000, 500]
    assert later.gpus[0].memory_used_mib == 3500  # used memory follows the processes
    assert scenario.at(125).gpus[0].utilization == 50  # looped
    assert simulate.Scenario.from_dict({"gpus": [{"utilization": 3}]}).moves is False


@pytest.mark.parametrize(
    ("scenario", "words"),
    [
        ({"gpus": [moving_gpu(utilization={"points": []})]}, "gpus[0].motion.utilization.points must hold at least"),
        ({"gpus": [moving_gpu(utilization={"points": [[0, 101]]})]}, "utilization.points[0].value must be <= 100"),
        ({"gpus": [moving_gpu(utilization={"points": [5]})]}, "points[0] must be a [seconds, value] pair"),
        ({"gpus": [moving_gpu(utilization={"points": [[0, 1], [0, 2]]})]}, "points[1].seconds must be later"),
        ({"gpus": [moving_gpu(utilization={"points": [[-1, 1]]})]}, "points[0].seconds must be >= 0"),
        ({"gpus": [moving_gpu(utilization={"points": [[0, 1]], "jitter": 2})]}, "utilization.jitter must be <= 1"),
        ({"gpus": [moving_gpu(utilization={"points": [[0, 1]], "wobble": 2})]}, "wobble is not a scenario key"),
        ({"gpus": [moving_gpu(memory_used_mib={"points": [[0, 1]]})]}, "motion.memory_used_mib is not a scenario key"),
        (
            {"gpus": [moving_gpu(loop_s=10, power_w={"points": [[0, 1], [20, 2]]})]},
            "gpus[0].motion.loop_s (10) must be >= the last point's seconds of power_w",
        ),
        ({"motion_start": "now"}, "motion_start must be a number"),
        (
            {
                "gpus": [
                    {
                        "memory_total_mib": 1000,
                        "processes": [{"pid": 5, "motion": {"memory_mib": {"points": [[0, 100], [9, 990]]}}}],
                        "memory_reserved_mib": 20,
                    }
                ]
            },
            "gpus[0]: its processes' memory can reach 990 MiB",
        ),
        (
            {
                "gpus": [
                    {
                        "memory_used_mib": 10,
                        "processes": [{"pid": 5, "motion": {"memory_mib": {"points": [[0, 1]]}}}],
                    }
                ]
            },
            "gpus[0].memory_used_mib cannot be given when a process's memory moves",
        ),
        (
            {
                "gpus": [
                    {
                        "mig_slices": [
                            {
                                "profile": "1g.10gb",
                                "processes": [{"pid": 5, "motion": {"memory_mib": {"points": [[0, 1]]}}}],
                            }
                        ]
                    }
                ]
            },
            "a process's memory cannot move in a MIG slice",
        ),
    ],
)
def test_bad_motions_are_refused_with_one_line_naming_the_key(tmp_path, scenario, words):
    with pytest.raises(simulate.ScenarioError) as raised:
        simulate.write_scenario(tmp_path / "s.json", scenario)
    assert words in str(raised.value) and "\n" not in str(raised.value)


def at(seconds: float) -> simulate.Scenario:
    return simulate.Scenario.from_dict(simulate.demo_scenario()).at(seconds)


def test_the_demos_training_job_ramps_up_dips_and_ends():
    start, running, validating, ended = at(0), at(200), at(300), at(simulate.DEMO_LOOP_S - 10)
    training = [s.gpus[0] for s in (start, running, validating, ended)]
    assert [g.processes[0].user for g in training] == ["bob"] * 4
    assert training[0].utilization == 0 and training[0].memory_used_mib < 2100
    assert training[1].utilization > 90 and 70_000 < training[1].memory_used_mib < 76_000
    assert 35 <= training[2].utilization <= 45  # the validation dip at minute 5
    assert training[3].utilization == 0 and training[3].memory_used_mib < 2100  # the job ended
    assert at(simulate.DEMO_LOOP_S + 200) == running  # the loop starts the next job


def test_the_demos_kernel_goes_idle_holding_its_memory():
    busy, idle, later = at(120), at(400), at(800)
    assert busy.gpus[1].utilization > 50
    assert idle.gpus[1].utilization == later.gpus[1].utilization == 0
    held = [p.memory_mib for p in idle.gpus[1].processes]
    assert held == [p.memory_mib for p in later.gpus[1].processes] == [18432, 2048]


def test_the_demo_moves_within_its_rules_every_second_of_its_loop():
    figures = set()
    for second in range(simulate.DEMO_LOOP_S):
        scenario = at(second)
        for gpu in scenario.gpus:
            assert 0 <= gpu.utilization <= 100 and gpu.power_w <= gpu.power_limit_w
            assert gpu.memory_used_mib + gpu.memory_reserved_mib <= gpu.memory_total_mib
        assert scenario.gpus[2] == at(0).gpus[2]  # the idle GPU stays idle and empty
        figures.add((scenario.gpus[0].utilization, scenario.gpus[3].utilization))
    assert len(figures) > 100


def test_demo_moves_in_step_across_processes_and_demo_still_stands(monkeypatch):
    clock = [1_000_000.0]
    monkeypatch.setattr("jupyter_gpu.simulate.scenario.time.time", lambda: clock[0])
    one, two = simulate.ScenarioSource("demo"), simulate.ScenarioSource("demo")
    assert one.current() == two.current() == at(1_000_000)  # counted from the Unix epoch: in step
    assert one.current() is one.current()  # evaluated once per second
    clock[0] += 333
    assert one.current() == at(1_000_333) != at(1_000_000)
    still = simulate.ScenarioSource(simulate.DEMO_STILL)
    first = still.current()
    clock[0] += 100
    assert still.current() is first and not first.moves
    assert [g.utilization for g in first.gpus] == [97, 12, 0, 3]


def test_a_scenario_file_without_motion_start_moves_from_when_it_was_first_read(tmp_path, monkeypatch):
    clock = [5_000.0]
    monkeypatch.setattr("jupyter_gpu.simulate.scenario.time.time", lambda: clock[0])
    path = tmp_path / "s.json"
    simulate.write_scenario(path, {"gpus": [moving_gpu(utilization={"points": [[0, 10], [100, 60]]})]})
    source = simulate.ScenarioSource(str(path))
    assert source.current().gpus[0].utilization == 10
    clock[0] += 50
    assert source.current().gpus[0].utilization == 35


def test_the_moving_demo_reaches_the_faces_through_pynvml(monkeypatch):
    import pynvml

    clock = [1_000_200.0]
    monkeypatch.setattr("jupyter_gpu.simulate.scenario.time.time", lambda: clock[0])
    simulate.install("demo")
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        expected = at(1_000_200).gpus[0]
        assert pynvml.nvmlDeviceGetUtilizationRates(handle).gpu == expected.utilization
        [process] = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        assert process.usedGpuMemory == int(expected.processes[0].memory_mib * MIB)
        clock[0] += 400  # the validation dip of minute 10
        assert pynvml.nvmlDeviceGetUtilizationRates(handle).gpu == at(1_000_600).gpus[0].utilization
        pynvml.nvmlShutdown()
    finally:
        simulate.uninstall()


def test_every_call_of_one_sample_sees_one_world_even_across_a_second(monkeypatch):
    """A sample (scenario.SAMPLE_GAP_S): calls closer than the gap see the world of the whole second
    the sample's first call fell in, so a snapshot never mixes two seconds of motion."""
    from jupyter_gpu.simulate import scenario as scenario_module

    clock = [1_000_000.9]
    monkeypatch.setattr("jupyter_gpu.simulate.scenario.time.time", lambda: clock[0])
    source = simulate.ScenarioSource("demo")
    first = source.current()
    assert first == at(1_000_000)
    clock[0] += 0.15  # the next second begins mid-snapshot
    assert source.current() is first
    clock[0] += scenario_module.SAMPLE_GAP_S * 1.5  # a pause: the next sample
    assert source.current() == at(1_000_001) != first
    # A reader polling without pauses still sees the world move, after SAMPLE_MAX_S at most
    began, seen = clock[0], set()
    while clock[0] - began <= scenario_module.SAMPLE_MAX_S + 1:
        clock[0] += scenario_module.SAMPLE_GAP_S / 2
        seen.add(id(source.current()))
    assert len(seen) >= 2


def test_tracks_are_evaluated_once_per_sample_and_still_figures_never(monkeypatch):
    from jupyter_gpu.simulate import motion

    clock = [2_000_000.0]
    monkeypatch.setattr("jupyter_gpu.simulate.scenario.time.time", lambda: clock[0])
    evaluated = []
    real_at = motion.Track.at
    monkeypatch.setattr(motion.Track, "at", lambda self, t: evaluated.append(self.seed) or real_at(self, t))
    data = {
        "gpus": [
            {
                "memory_total_mib": 81920,
                "motion": {"utilization": {"points": [[0, 10], [100, 60]]}},
                "processes": [{"pid": 10 + p, "memory_mib": 1} for p in range(500)]
                + [{"pid": 9, "memory_mib": 1, "motion": {"memory_mib": {"points": [[0, 1], [100, 50]]}}}],
            },
            {"processes": [{"pid": 1000 + p, "memory_mib": 1} for p in range(500)]},
            {
                "motion": {"temperature": {"points": [[0, 40], [100, 80]]}},
                "processes": [{"pid": 2000 + p, "memory_mib": 1} for p in range(500)],
            },
        ]
    }
    scenario = simulate.Scenario.from_dict(data)
    evaluated.clear()  # parsing evaluates a process's memory at 0 s once
    source = simulate.ScenarioSource("1")
    source._scenario = scenario  # a preset source holding this scenario: no file involved
    for _ in range(100):  # one sample of 100 calls
        world = source.current()
    assert sorted(evaluated) == [
        "gpus[0].motion.utilization",
        "gpus[0].processes[500].motion.memory_mib",
        "gpus[2].motion.temperature",
    ]
    assert world.gpus[1] is scenario.gpus[1]  # the still GPU is shared, not copied
    assert world.gpus[2].processes is scenario.gpus[2].processes  # only its temperature moves
    assert world.gpus[2].temperature == 40 and world.gpus[2].memory_used_mib == 500
    assert world.gpus[0].processes[:500] == scenario.gpus[0].processes[:500]
    assert world.gpus[0].memory_used_mib == 500 + world.gpus[0].processes[500].memory_mib
    clock[0] += 30
    source.current()
    assert len(evaluated) == 6  # the next sample: the three tracks again, nothing else
