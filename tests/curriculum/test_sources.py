"""Task sources of the generator arms, and the probing and filtering rules of the loop."""
import random

import pytest

from curriculum.envs import Task, make_env
from curriculum.sources import EMA, LevelSampler
from curriculum.pool import near_band
from solver.role import Attempt, has_signal


def test_uniform_draws_every_level_up_to_max_and_skips_excluded():
    env = make_env("arithmetic", num_levels=6)
    sampler = LevelSampler(env, max_level=3)
    tasks = sampler.draw(300, random.Random(0))
    assert {t.level for t in tasks} == {1, 2, 3}
    assert all(abs(sum(t.level == k for t in tasks) - 100) < 30 for k in (1, 2, 3))
    excluded = {t.text for t in tasks[:50]}
    again = sampler.draw(300, random.Random(0), exclude=excluded)
    assert not excluded & {t.text for t in again}
    assert LevelSampler(env).levels == [1, 2, 3, 4, 5, 6]


def test_adaptive_weights_follow_running_solve_rates():
    env = make_env("arithmetic", num_levels=4)
    sampler = LevelSampler(env, adaptive=True, floor=0.02)
    assert sampler.weights() == pytest.approx([0.27] * 4)  # unseen levels count as p = 1/2
    tasks = [Task("1+1", "2", 1), Task("1+1+1", "3", 2), Task("1+1+1+1", "4", 3), Task("x", "y", 3)]
    sampler.observe(tasks, [1.0, 0.5, 0.0, 0.0])
    assert sampler.rates == {1: 1.0, 2: 0.5, 3: 0.0}
    assert sampler.weights() == pytest.approx([0.02, 0.27, 0.02, 0.27])
    sampler.observe([Task("2+2", "4", 1)], [0.0])
    assert sampler.rates[1] == pytest.approx(1 - EMA)
    draws = sampler.draw(2000, random.Random(1))
    share = {k: sum(t.level == k for t in draws) / len(draws) for k in (1, 2, 3, 4)}
    w = sampler.weights()
    for k in (1, 2, 3, 4):
        assert share[k] == pytest.approx(w[k - 1] / sum(w), abs=0.03)
    clone = LevelSampler(env, adaptive=True, floor=0.02)
    clone.load_state_dict(sampler.state_dict())
    assert clone.rates == sampler.rates


def test_has_signal():
    def group(*scores):
        return [Attempt(None, None, s) for s in scores]

    assert has_signal(group(0.0, 1.0, 1.0))
    assert not has_signal(group(1.0, 1.0)) and not has_signal(group(0.0, 0.0, 0.0))


@pytest.mark.parametrize("p,m,want", [(0.0, 8, False), (1.0, 8, False), (0.5, 8, False), (0.25, 8, True),
                                      (0.125, 8, True), (0.75, 8, True), (0.875, 8, True), (0.5, 64, False),
                                      (0.0, 4, True)])
def test_near_band_asks_for_more_samples_only_near_an_edge(p, m, want):
    # band [0.2, 0.8]; standard error sqrt(q(1-q)/m) with q clipped to [1/2m, 1-1/2m], 1.5 of them
    assert near_band(p, m, 0.2, 0.8) is want


def test_each_mode_has_its_source_and_only_selfplay_proposes():
    from curriculum.config import MODES, load_config
    from curriculum.pool import TaskPool
    from curriculum.sources import GeneratorSource, PoolSource, make_source

    env = make_env("arithmetic", num_levels=4)
    kinds = {}
    for mode in MODES:
        cc = load_config("configs/demo_cpu.yaml", [f"curriculum.mode={mode}"]).curriculum
        source = make_source(mode, cc, env, TaskPool(8, 4), held_out=set())
        kinds[mode] = (type(source), source.proposes, source.draws > 1, getattr(source, "filtered", None))
        assert source.batch(0, random.Random(0)) == []
    assert kinds["selfplay"][:2] == (PoolSource, True)
    assert kinds["uniform"] == (GeneratorSource, False, False, False)
    assert kinds["uniform_filtered"] == (GeneratorSource, False, cc.filter_max_batches > 1, True)
    assert kinds["adaptive"][:2] == (GeneratorSource, False)


def test_generator_sources_keep_groups_by_signal_and_checkpoint_their_rates():
    from curriculum.sources import GeneratorSource

    env = make_env("arithmetic", num_levels=4)
    task = Task("1+1", "2", 1)
    flat = [Attempt(task, None, 1.0)] * 4
    mixed = [Attempt(task, None, 1.0), Attempt(task, None, 0.0)]
    filtered = GeneratorSource(LevelSampler(env), held_out=set(), filter_draws=3)
    plain = GeneratorSource(LevelSampler(env, adaptive=True), held_out=set())
    assert (filtered.draws, filtered.keep(flat), filtered.keep(mixed)) == (3, False, True)
    assert (plain.draws, plain.keep(flat)) == (1, True)
    plain.observe([task], [0.25])
    again = GeneratorSource(LevelSampler(env, adaptive=True), held_out=set())
    again.load_state_dict(plain.state_dict())
    assert again.levels.rates == {1: 0.25}
    held = {t.text for t in env_tasks(env)}
    assert not held & {t.text for t in GeneratorSource(LevelSampler(env), held).batch(200, random.Random(1))}


def env_tasks(env):
    rng = random.Random(5)
    return [env.sample_task(1, rng) for _ in range(20)]
