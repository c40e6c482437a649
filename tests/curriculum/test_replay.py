"""Self-play's pool in use: replay of past tasks, the challenger's references, a round with nothing valid.
The pool's own rules are tested without a model; a trainer only where the round uses them."""
import contextlib
import random

from curriculum.config import load_config
from curriculum.envs import make_env
from curriculum.pool import PoolEntry, TaskPool, group_kinds
from curriculum.sources import PoolSource
from curriculum.trainer import SelfPlayTrainer


@contextlib.contextmanager
def demo_trainer(tiny_overrides, *overrides):
    trainer = SelfPlayTrainer(load_config("configs/demo_cpu.yaml", [*tiny_overrides, *overrides]))
    try:
        yield trainer
    finally:
        trainer.close()


def test_pool_source_replays_retired_tasks():
    env = make_env("arithmetic")
    pool = TaskPool(capacity=64, max_age=8)
    source = PoolSource(pool, replay_fraction=0.5)
    rng = random.Random(0)
    for i in range(6):  # "1+i" questions, three of them retired
        task = env.parse_proposal(f"1+{i}")
        pool.add(PoolEntry(task, 0.5, 1, task.text))
    for text in ("1+0", "1+1", "1+2"):
        source.observe([env.parse_proposal(text)], [1.0])  # mastered: it leaves the pool
    texts = [t.text for t in source.batch(4, rng)]
    assert len(set(texts)) == 4 and source.stats(4, 4) == {"solver/replayed_tasks": 2}  # half of 4, from the three
    assert sum(t in pool.retired for t in texts) == 2
    assert sum(t in pool.entries for t in texts) == 2
    pool.retired.clear()  # nothing to replay: the pool alone
    assert sorted(t.text for t in source.batch(4, rng)) == ["1+3", "1+4", "1+5"]
    for text in ("1+3", "1+4", "1+5"):
        source.observe([env.parse_proposal(text)], [1.0])
    assert len(pool) == 0  # emptied: the whole batch replays rather than nothing at all
    assert sorted(t.text for t in source.batch(2, rng)) in (["1+3", "1+4"], ["1+3", "1+5"], ["1+4", "1+5"])
    assert source.replayed == 2 and len(source.batch(8, rng)) == 3
    assert PoolSource(pool, replay_fraction=0.0).batch(4, rng) == []  # without replay: nothing to train on


def test_a_trainer_step_draws_its_batch_from_the_pool_source(tiny_overrides):
    with demo_trainer(tiny_overrides, "solver.batch_prompts=4", "curriculum.replay_fraction=0.5") as trainer:
        for i in range(6):
            task = trainer.env.parse_proposal(f"1+{i}")
            trainer.pool.add(PoolEntry(task, 0.5, 1, task.text))
        tasks, attempts, _ = trainer.solver_batch(1, 0)
        assert len(tasks) == 4 and len(attempts) == 4 * trainer.cfg.solver.group_size
        assert {t.text for t in tasks} <= set(trainer.pool.entries)


def test_references_follow_the_sampler_and_survive_an_empty_pool():
    env = make_env("arithmetic")
    pool = TaskPool(capacity=64, max_age=8)
    rng = random.Random(0)

    def refs():
        return pool.references(2, "", "hard", rng, lambda: env.sample_task(1, rng))

    first = refs()  # nothing accepted yet: the generator's level-1 tasks
    assert len(first) == 2 and all(t.level == 1 for t in first)
    for i in range(20):
        task = env.parse_proposal(f"{i // 4}+{i % 4}")
        pool.add(PoolEntry(task, 0.95, 1, task.text))
    hard = env.parse_proposal("9-8+7-6")
    pool.add(PoolEntry(hard, 0.2, 1, hard.text))
    # weight 0.8 against 20 x 0.05: drawn in most prompts, where uniform draws would show it in 1 of 10
    assert sum(hard.text in {t.text for t in refs()} for _ in range(200)) > 120
    uniform = sum(hard.text in {t.text for t in pool.references(2, "", "uniform", rng, None)} for _ in range(200))
    assert uniform < 60
    for text in list(pool.entries):
        pool.update_solve_rate(text, 1.0)  # all mastered: the pool is empty
    assert len(pool) == 0
    assert [t.text for t in refs()] == ["4+3", "9-8+7-6"]  # the newest retired


def test_group_kinds_cycle_through_the_types_from_a_random_one():
    rng = random.Random(3)
    kinds = group_kinds(("a", "b", "c"), 5, rng)
    assert kinds[:3] in (["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]) and kinds[3:] == kinds[:2]
    assert group_kinds((), 3, rng) == ["", "", ""]


def test_a_round_without_one_valid_proposal_is_named(tiny_overrides, monkeypatch, caplog):
    from curriculum.envs.base import InvalidProposal

    with demo_trainer(tiny_overrides, "curriculum.fill_proposals=8") as trainer:
        def refuse(text):
            raise InvalidProposal("empty")

        monkeypatch.setattr(trainer.env, "parse_proposal", refuse)
        with caplog.at_level("WARNING", logger="selfplay"):
            trainer.fill_pool(1)
        assert len(trainer.pool) == 0
        warning = [r.getMessage() for r in caplog.records if "fill proposals was valid" in r.getMessage()]
        assert len(warning) == 1 and "none of the challenger's 32 fill proposals" in warning[0]  # 4 batches of 8
        assert "empty " in warning[0].split("(")[1]  # the rejection reasons, counted
        assert "no challenger update has happened yet" in warning[0] and "collapsed" not in warning[0]
        trainer.updates.steps["challenger"] = 4  # after updates: the collapse is a likely cause
        caplog.clear()
        with caplog.at_level("WARNING", logger="selfplay"):
            trainer.fill_pool(2)
        warning = [r.getMessage() for r in caplog.records if "fill proposals was valid" in r.getMessage()]
        assert len(warning) == 1 and "challenger.optim.warmup_steps" in warning[0]


def test_proposals_solved_above_the_band_are_kept_for_replay(tiny_overrides, monkeypatch):
    def solved(trainer):
        parse, count = trainer.env.parse_proposal, iter(range(10**6))
        monkeypatch.setattr(trainer.env, "parse_proposal", lambda text: parse(f"1+{next(count) % 9}"))  # all valid

        def probe(proposals, *args):
            for p in proposals:
                p.solve_rate = 1.0  # every probe right: above band_high
            return {}
        monkeypatch.setattr(trainer, "probe", probe)

    for fraction, kept in ((0.5, True), (0.0, False)):
        with demo_trainer(tiny_overrides, "curriculum.fill_proposals=8", "curriculum.band_high=0.8",
                          f"curriculum.replay_fraction={fraction}") as trainer:
            solved(trainer)
            trainer.fill_pool(1)
            assert len(trainer.pool) == 0
            trainable = {f"1+{i}" for i in range(9) if f"1+{i}" not in trainer.held_out}  # never a held-out task
            assert set(trainer.pool.retired) <= trainable and len(trainer.pool.retired) >= (4 if kept else 0)
            assert kept or not trainer.pool.retired
            assert all(e.solve_rate == 1.0 for e in trainer.pool.retired.values())
