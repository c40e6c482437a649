from solver.verifier import (extract_boxed, extract_int, label_accuracy, majority_answer, math_equal, score_all,
                             solve_rate, vote)


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


def test_boxed_answers_are_extracted_from_long_reasoning():
    reasoning = "Let x be the share. " * 200 + "So x = 1/2 and, checking, \\boxed{\\frac{1}{2}}."
    assert extract_boxed(reasoning) == "\\frac{1}{2}"
    assert extract_boxed("first \\boxed{3}, then \\boxed{4}") == "4"  # several boxes: the last one
    assert extract_boxed("\\boxed{\\frac{a}{b^{2}}}") == "\\frac{a}{b^{2}}"  # nested braces
    assert extract_boxed("the answer is 1/2") is None  # unboxed: no answer
    assert extract_boxed("\\boxed{ }") is None and extract_boxed("") is None  # empty
    assert extract_boxed("\\boxed{1/2") is None  # cut short before the box closed


def test_math_equivalence_on_literal_answers():
    for a, b in [("1/2", "0.5"), ("\\frac{1}{2}", "1/2"), ("\\frac12", "0.5"), ("3", "3.0"), ("x^2", "x \\cdot x"),
                 ("12", "12")]:
        assert math_equal(a, b) and math_equal(b, a), (a, b)
    for a, b in [("1/2", "0.25"), ("3", "4"), ("abc", "3"), ("", ""), ("1/2", "x" * 300)]:
        assert not math_equal(a, b), (a, b)


def test_majority_vote_counts_equivalent_answers_together():
    boxed = ["\\boxed{1/2}", "\\boxed{0.5}", "so \\boxed{\\frac{1}{2}}", "\\boxed{3}", "no box", "\\boxed{}",
             "\\boxed{3} or \\boxed{1/2}"]
    answers = [extract_boxed(c) for c in boxed]
    assert answers == ["1/2", "0.5", "\\frac{1}{2}", "3", None, None, "1/2"]
    label, share = majority_answer(answers, math_equal)
    assert (label, share) == ("1/2", 4 / 7)  # unboxed and empty answers count, against the label
    assert vote(answers, math_equal)[1] == [True, True, True, False, False, False, True]
    assert majority_answer(answers) == ("1/2", 2 / 7)  # by string alone, 0.5 is another answer
    assert majority_answer(["3", "4", "4", "3"]) == ("3", 0.5)  # a tie: the first seen
    assert majority_answer([None, None], math_equal) == (None, 0.0)


def test_label_accuracy_on_a_hand_built_batch():
    labels = ["1/2", "0.5", None, "7", "\\frac{3}{4}"]
    truths = ["0.5", "1/2", "2", "8", "0.75"]
    assert label_accuracy(labels, truths, math_equal) == 3 / 5
    assert label_accuracy(labels, truths) == 0.0  # strings alone would call every label wrong
    assert label_accuracy([], []) == 0.0
