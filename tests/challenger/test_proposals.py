import random

import pytest

from challenger.proposals import MAX_PROPOSAL_CHARS, parse_proposals
from curriculum.envs import make_env

GARBAGE = [
    "", " ", "\n\n", "3++4", "+", "7", "٣+٤", "3+4=7", "１+２", "\x00\x01", "ﾟ･✿ヾ╲(｡◕‿◕｡)╱✿･ﾟ", "9" * 5000,
    "1+" * 3000, "3 + 4", "-3+4", "3+4-", "3/4", "(3+4)", "import os", "\ud800",
]


@pytest.mark.parametrize("text", GARBAGE)
def test_garbage_is_rejected_not_raised(text):
    env = make_env("arithmetic")
    [parsed] = parse_proposals([text], env.parse_proposal)
    assert not parsed.valid and parsed.reason


def test_random_bytes_never_raise():
    env = make_env("arithmetic")
    rng = random.Random(0)
    texts = ["".join(chr(rng.randint(0, 0x2FFF)) for _ in range(rng.randint(0, 40))) for _ in range(500)]
    out = parse_proposals(texts, env.parse_proposal)
    assert len(out) == 500
    assert all(p.valid == (p.task is not None) for p in out)


def test_parser_bug_becomes_rejection():
    def broken(text):
        raise ZeroDivisionError("boom")

    [p] = parse_proposals(["1+1"], broken)
    assert p.reason == "ZeroDivisionError: boom"


def test_truncated_and_oversized():
    env = make_env("arithmetic")
    out = parse_proposals(["1+1", "1+1", "1" * (MAX_PROPOSAL_CHARS + 1)], env.parse_proposal, finished=[True, False, True])
    assert [p.valid for p in out] == [True, False, False]
    assert [p.reason for p in out[1:]] == ["truncated", "too_long"]
    assert out[0].task.answer == "2"
