from solver.verifier import extract_int, majority_answer, score_all, solve_rate


def test_extract_int():
    assert extract_int("42") == 42
    assert extract_int(" -7 \nrest") == -7
    assert extract_int("+3") == 3
    for bad in ["", "4 2", "x", "1.5", "4" * 41, "٣"]:
        assert extract_int(bad) is None, bad


def test_majority_and_solve_rate():
    assert majority_answer(["3", "3", None, "4"]) == ("3", 0.5)
    assert majority_answer([None, None]) == (None, 0.0)
    assert solve_rate([1, 0, 1, 1]) == 0.75
    assert solve_rate([]) == 0.0


def test_score_all_never_raises():
    def scorer(text):
        if text == "boom":
            raise RuntimeError("bad")
        return 2.0 if text == "big" else 1.0

    assert score_all(scorer, ["ok", "boom", "big"]) == [1.0, 0.0, 0.0]
