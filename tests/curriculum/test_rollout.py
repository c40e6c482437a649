import torch

from curriculum.engine.rollout import Completion, generate, pack
from curriculum.engine.tiny import build_model, build_tokenizer


def test_pack_masks_align_with_next_token_logprobs():
    comps = [Completion([1, 10], [20, 21, 2], "ab", True), Completion([1, 10, 11, 12], [22, 2], "c", True)]
    r = pack(comps, [1.0, 0.0], [0, 0], pad_id=0)
    assert r.input_ids.tolist() == [[1, 10, 20, 21, 2, 0], [1, 10, 11, 12, 22, 2]]
    assert r.attention_mask.tolist() == [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]]
    # position t predicts token t+1: completion tokens start at index len(prompt)
    assert r.response_mask.tolist() == [[0, 1, 1, 1, 0], [0, 0, 0, 1, 1]]
    assert r.rewards.tolist() == [1.0, 0.0] and r.group_ids.tolist() == [0, 0]


def test_tokenizer_roundtrip_and_specials():
    tok = build_tokenizer()
    text = "Q:3+4=7\n(x) ~"
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) == len(text)
    assert tok.decode(ids) == text
    assert tok.unk_token_id in tok.encode("é", add_special_tokens=False)
    assert {tok.pad_token_id, tok.bos_token_id, tok.eos_token_id} == {0, 1, 2}


def test_generate_is_seeded_and_trims_at_eos():
    tok = build_tokenizer()
    torch.manual_seed(0)
    model = build_model(tok, 32, 1, 2, 32)
    a = generate(model, tok, ["Q:"] * 6, max_new_tokens=8, seed=5)
    torch.rand(3)  # unrelated draws must not change the sample
    b = generate(model, tok, ["Q:"] * 6, max_new_tokens=8, seed=5)
    assert [c.completion_ids for c in a] == [c.completion_ids for c in b]
    for c in a:
        assert c.prompt_ids == [tok.bos_token_id] + tok.encode("Q:", add_special_tokens=False)
        assert (tok.eos_token_id in c.completion_ids) == c.finished
        if c.finished:
            assert c.completion_ids[-1] == tok.eos_token_id
        assert len(c.completion_ids) <= 8


def test_nested_progress_bar_stays_out_of_non_tty_logs(capsys):
    from tqdm.auto import tqdm

    tok = build_tokenizer()
    torch.manual_seed(0)
    model = build_model(tok, 32, 1, 2, 32)
    for _ in tqdm(range(1), desc="rounds"):  # the trainer's outer bar
        generate(model, tok, ["Q:"] * 6, max_new_tokens=4, batch_size=2, progress=True)
    err = capsys.readouterr().err
    assert "rounds" in err  # the outer bar still reports
    assert "\x1b[A" not in err  # no cursor-up escapes from a nested bar
