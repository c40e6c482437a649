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


def test_shared_prompt_prefill_samples_what_plain_generate_samples():
    """Prefilling each distinct prompt once draws nothing, and ``decode`` draws what generate draws, so the
    seeded samples are plain generate's: identical in float64 (sampled, with and without top-p) and float32
    (greedy), for the embedded Llama (also under LoRA) and a Qwen2 in chat style. Rows end at different
    steps here (random models write eos now and then), so ended rows leaving the batch is covered."""
    from peft import LoraConfig, get_peft_model

    from tests.hf_models import qwen_model, qwen_tokenizer

    tok = build_tokenizer()
    torch.manual_seed(0)
    llama = build_model(tok, 32, 2, 2, 64)
    prompts = [p for p in ["Q:", "1+2=", "7-3+1=", "x"] for _ in range(4)] + ["lone"]
    qtok = qwen_tokenizer()
    qwen = qwen_model(qtok, layers=2)
    lora = get_peft_model(build_model(tok, 32, 1, 2, 64), LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                                                   init_lora_weights=False))
    for model, t, style in ((llama, tok, "plain"), (qwen, qtok, "chat"), (lora, tok, "plain")):
        for dtype, greedy, top_p in ((torch.float64, False, 1.0), (torch.float64, False, 0.7),
                                     (torch.float32, True, 1.0), (torch.float32, False, 1.0)):
            model.to(dtype)
            shared = generate(model, t, prompts, max_new_tokens=10, seed=3, greedy=greedy, top_p=top_p, style=style)
            plain = generate(model, t, prompts, max_new_tokens=10, seed=3, greedy=greedy, top_p=top_p, style=style,
                             share_prompts=False)
            assert [c.completion_ids for c in shared] == [c.completion_ids for c in plain], (style, dtype, greedy, top_p)
            assert [c.prompt_ids for c in shared] == [c.prompt_ids for c in plain]
        model.float()


def test_each_distinct_prompt_is_prefilled_once():
    tok = build_tokenizer()
    torch.manual_seed(0)
    model = build_model(tok, 32, 1, 2, 64)
    shapes = []
    model.model.embed_tokens.register_forward_hook(lambda m, args, out: shapes.append(tuple(args[0].shape)))
    prompts = [p for p in ["Q:", "12+3=", "4-4="] for _ in range(8)]
    generate(model, tok, prompts, max_new_tokens=3, seed=0)
    width = 1 + len("12+3=")  # with <bos>
    # the prefill: 3 distinct prompts but their last token; then all 24 rows, one token a step
    assert shapes[0] == (3, width - 1)
    assert shapes[1:] == [(24, 1)] * (len(shapes) - 1) and 1 <= len(shapes) - 1 <= 3


def test_ended_rows_leave_the_batch_and_the_rest_sample_as_before():
    tok = build_tokenizer()
    eos = tok.eos_token_id
    rows = []

    def run(share: bool):
        torch.manual_seed(0)
        model = build_model(tok, 32, 1, 2, 64).double()
        calls = []

        def end_three(module, args, logits):  # at the second step, the first three rows write eos
            calls.append(logits.shape[0])
            if len(calls) == 2:
                logits[:3, -1, eos] += 1e4
            return logits

        model.lm_head.register_forward_hook(end_three)
        out = generate(model, tok, ["Q: 1+2="] * 6, max_new_tokens=8, seed=4, share_prompts=share)
        rows.append(calls)
        return out

    ours, theirs = run(True), run(False)
    assert [c.completion_ids for c in ours] == [c.completion_ids for c in theirs]
    assert all(len(c.completion_ids) == 2 and c.finished for c in ours[:3])
    # ours: 6 rows for two steps (the prefill runs the decoder alone), then the 3 still going;
    # generate keeps all 6 to the end
    assert rows[0][:2] == [6, 6] and set(rows[0][2:]) == {3}
    assert set(rows[1][1:]) == {6}


def test_generation_stops_once_every_row_has_finished():
    tok = build_tokenizer()
    torch.manual_seed(0)
    model = build_model(tok, 32, 1, 2, 64)
    eos = tok.eos_token_id
    steps = []

    def favour_eos(module, args, logits):  # every row samples eos at its second token
        steps.append(1)
        if len(steps) >= 2:
            logits[..., eos] += 1e4
        return logits

    model.lm_head.register_forward_hook(favour_eos)
    out = generate(model, tok, ["Q:"] * 6, max_new_tokens=50, seed=0)
    assert all(c.finished and len(c.completion_ids) == 2 and c.completion_ids[-1] == eos for c in out)
    assert len(steps) == 2  # two sampling steps: none after every row ended


def test_a_models_own_sampling_defaults_do_not_leak_into_rollouts():
    """An instruct model ships sampling defaults (repetition penalty, top-k, min-p) in its generation config;
    transformers would apply them on top of ours, sampling another distribution than the loss scores."""
    tok = build_tokenizer()
    torch.manual_seed(0)
    model = build_model(tok, 32, 1, 2, 64)
    plain = generate(model, tok, ["Q: 1+2="] * 8, max_new_tokens=12, seed=3)
    model.generation_config.repetition_penalty = 50.0
    model.generation_config.top_k = 1
    model.generation_config.min_p = 0.9
    shipped = generate(model, tok, ["Q: 1+2="] * 8, max_new_tokens=12, seed=3)
    assert [c.completion_ids for c in shipped] == [c.completion_ids for c in plain]
    assert model.generation_config.repetition_penalty == 50.0  # the model's own config is left as it was
    # what transformers does with them: a different distribution (greedy-like, no repeats)
    ids = torch.tensor([tok("Q: 1+2=")["input_ids"]] * 8)
    torch.manual_seed(3)
    raw = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=True,
                         pad_token_id=tok.pad_token_id)[:, ids.shape[1]:]
    assert len({tuple(r) for r in raw.tolist()}) == 1  # top_k=1: every row the same
    assert len({tuple(c.completion_ids) for c in plain}) > 1
