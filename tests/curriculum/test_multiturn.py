"""Multi-turn tool use: packing with observation masks, and the turn loop on a scripted sampler
with the real sandbox behind the tools."""
import pytest
import torch

from challenger.role import Challenger
from curriculum.engine import tiny
from curriculum.engine.prompts import TokenIds
from curriculum.engine.rl import compute_advantages, policy_loss
from curriculum.engine.rollout import Completion, pack
from curriculum.engine.tools import generate_with_tools, run_turns, tool_stats
from curriculum.envs import make_env
from solver.sandbox import Sandbox
from solver.tools import CUT, PythonTool, Toolbox, with_tool_prompt


@pytest.fixture(scope="module")
def tok():
    return tiny.build_tokenizer()


@pytest.fixture(scope="module")
def box():
    with Sandbox(workers=2, timeout_s=1.0, memory_mb=128, max_output_bytes=4096) as sandbox:
        yield sandbox


def tools_on(box, output_chars=32, timeout_s=1.0):
    return Toolbox({"python": PythonTool(box, timeout_s)}, output_chars)


def enc(tok, text):
    return tok.encode(text, add_special_tokens=False)


# ------------------------------------------------------------------ packing


def hand_built(tok):
    """Two trajectories of one group: prompt, a call (model), an observation (not), the answer (model)."""
    out = []
    for answer in ("6912", "6913"):
        call, obs, ans = enc(tok, "<python>1234+5678</python>"), enc(tok, "<output>6912</output>"), enc(tok, answer)
        ids = call + obs + ans + [tok.eos_token_id]
        mask = [1] * len(call) + [0] * len(obs) + [1] * (len(ans) + 1)
        out.append(Completion(tok("1234+5678=")["input_ids"], ids, answer, True, mask=mask))
    return out


def test_pack_zeroes_observation_tokens_in_the_response_mask(tok):
    trajs = hand_built(tok)
    roll = pack(trajs, [1.0, 0.0], [0, 0], tok.pad_token_id)
    for i, c in enumerate(trajs):
        p = len(c.prompt_ids)
        resp = roll.response_mask[i]
        # position t predicts token t+1: the completion's token j is predicted at p - 1 + j
        assert resp[p - 1 : p - 1 + len(c.mask)].tolist() == [float(m) for m in c.mask]
        assert resp[: p - 1].sum() == 0 and resp[p - 1 + len(c.mask) :].sum() == 0
        assert int(resp.sum()) == c.model_tokens == len(c.completion_ids) - len(enc(tok, "<output>6912</output>"))
    plain = pack([Completion(c.prompt_ids, c.completion_ids, c.text, True) for c in trajs], [1.0, 0.0], [0, 0],
                 tok.pad_token_id)
    assert torch.equal(plain.input_ids, roll.input_ids) and torch.equal(plain.attention_mask, roll.attention_mask)
    assert plain.response_mask.sum() > roll.response_mask.sum()


def test_a_mask_of_the_wrong_length_is_refused(tok):
    c = Completion([1, 5], [6, 7, 8], "", True, mask=[1, 0])
    with pytest.raises(ValueError, match="mask has 2 entries for 3 tokens"):
        pack([c], [1.0], [0], tok.pad_token_id)


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_observation_tokens_get_no_advantage_and_no_gradient(tok, aggregation):
    torch.manual_seed(0)
    trajs = hand_built(tok)
    roll = pack(trajs, [1.0, 0.0], [0, 0], tok.pad_token_id)
    model = tiny.build_model(tok, 32, 1, 2, 64)
    logits = model(input_ids=roll.input_ids, attention_mask=roll.attention_mask).logits[:, :-1]  # [B, T-1, V]
    logits.retain_grad()
    logp_bt = logits.log_softmax(-1).gather(-1, roll.input_ids[:, 1:, None]).squeeze(-1)
    adv_bt = compute_advantages(roll.rewards, roll.group_ids, "grpo", response_mask=roll.response_mask)
    ref_bt = (logp_bt + 0.1).detach()
    loss, _ = policy_loss(logp_bt, logp_bt.detach(), adv_bt, roll.response_mask, kl_coef=0.1, ref_logp=ref_bt,
                          aggregation=aggregation, norm_len=48)
    loss.backward()
    obs = torch.zeros_like(roll.response_mask, dtype=torch.bool)
    for i, c in enumerate(trajs):
        p = len(c.prompt_ids)
        for j, m in enumerate(c.mask):
            obs[i, p - 1 + j] = m == 0
    assert obs.sum() == 2 * len(enc(tok, "<output>6912</output>"))
    assert torch.all(adv_bt[obs] == 0) and torch.all(adv_bt[roll.response_mask == 1] != 0)
    assert torch.all(logits.grad[obs] == 0)  # exactly: no loss reaches an observation position
    assert torch.all(logits.grad[roll.response_mask == 1].abs().sum(-1) > 0)


# ------------------------------------------------------------------ the loop, scripted


class Scripted:
    """A sampler that writes, for each prompt, its scripted turns in order (turn k = k observations so far);
    a turn is cut at ``max_new_tokens`` as ``generate`` would, and ends in eos otherwise."""

    def __init__(self, tok, script: dict[str, list[str]]):
        self.tok, self.script, self.calls = tok, script, []

    def __call__(self, prompts, max_new_tokens, seed):
        self.calls.append((len(prompts), max_new_tokens, seed))
        out = []
        for p in prompts:
            assert isinstance(p, TokenIds)
            text = self.tok.decode(list(p), skip_special_tokens=True)
            key = next(k for k in self.script if text.startswith(k))
            turn = self.script[key][text.count("<output>")]
            ids = enc(self.tok, turn) + [self.tok.eos_token_id]
            finished = len(ids) <= max_new_tokens
            ids = ids[:max_new_tokens]
            out.append(Completion(list(p), ids, self.tok.decode(ids, skip_special_tokens=True), finished))
        return out


def prompts(tok, *texts):
    return [tok(t)["input_ids"] for t in texts]


def test_call_observation_answer(tok, box):
    sample = Scripted(tok, {"1234+5678=": ["<python>1234+5678</python><output>999</output>junk", "6912"],
                            "2+2=": ["4"]})
    trajs = run_turns(sample, tok, prompts(tok, "1234+5678=", "2+2="), tools_on(box), max_turns=3, max_new_tokens=64,
                      seed=7)
    a, b = trajs
    # what the model wrote after the closing tag is dropped; the sandbox's output comes back
    assert a.trajectory == "<python>1234+5678</python><output>6912</output>6912"
    assert a.text == "6912" and a.finished and a.turns == 2 and a.tool_statuses == ["ok"] and a.sandbox_s > 0
    obs = enc(tok, "<output>6912</output>")
    call = enc(tok, "<python>1234+5678</python>")
    assert a.completion_ids == call + obs + enc(tok, "6912") + [tok.eos_token_id]
    assert a.mask == [1] * len(call) + [0] * len(obs) + [1] * 5
    assert a.model_tokens == len(call) + 5
    # an answer without a call is one turn, every token the model's
    assert (b.text, b.finished, b.turns, b.tool_calls, b.mask) == ("4", True, 1, 0, [1, 1])
    # turn 2 samples only the trajectory still going, with the budget it has left, on the next seed
    assert sample.calls == [(2, 64, 7), (1, 64 - len(call), 8)]
    stats = tool_stats(trajs, [1.0, 0.0])
    assert stats == {"tool_calls_mean": 0.5, "turns_mean": 1.5, "tool_error_rate": 0.0, "tool_timeout_rate": 0.0,
                     "solve_rate_with_tool": 1.0, "solve_rate_without_tool": 0.0}


def test_out_of_turns_is_unfinished(tok, box):
    sample = Scripted(tok, {"1+1=": ["<python>1+1</python>"] * 5})
    for max_turns in (2, 3):
        (t,) = run_turns(sample, tok, prompts(tok, "1+1="), tools_on(box), max_turns=max_turns, max_new_tokens=64)
        assert t.turns == max_turns and t.tool_statuses == ["ok"] * (max_turns - 1)
        assert not t.finished and t.text == ""  # no answer: scored 0
        assert t.trajectory == "<python>1+1</python><output>2</output>" * (max_turns - 1) + "<python>1+1</python>"


def test_out_of_tokens_is_unfinished(tok, box):
    # the budget counts the model's tokens over all turns: 20 for the call, 4 left for "6912" + eos
    sample = Scripted(tok, {"1234+5678=": ["<python>1234+5678</python>", "6912"]})
    call = len(enc(tok, "<python>1234+5678</python>"))
    (t,) = run_turns(sample, tok, prompts(tok, "1234+5678="), tools_on(box), max_turns=3, max_new_tokens=call + 4)
    assert t.tool_calls == 1 and t.model_tokens == call + 4 and not t.finished and t.text == "6912"
    (t,) = run_turns(sample, tok, prompts(tok, "1234+5678="), tools_on(box), max_turns=3, max_new_tokens=call)
    assert t.tool_calls == 0 and t.turns == 1 and not t.finished  # no token left to read the output with


@pytest.mark.parametrize("code,status,shows,cut", [
    ("while True: pass", "timeout", "[timeout]", False),
    ("print('x' * 10**7)", "output_limit", "xxxx", True),
    ("print('a' * 100)", "ok", "aaaa", True),
    ("1/0", "error", "ZeroDivisionError: division by zero", False),
    ("def f(:", "error", "SyntaxError", False),
    ("x = bytearray(2 * 10**9)", "memory", "[memory]", False),
])
def test_bad_snippets_give_a_capped_observation(tok, box, code, status, shows, cut):
    sample = Scripted(tok, {"q=": [f"<python>{code}</python>", "done"]})
    (t,) = run_turns(sample, tok, prompts(tok, "q="), tools_on(box, output_chars=40, timeout_s=0.5), max_turns=2,
                     max_new_tokens=200)
    assert t.tool_statuses == [status] and t.text == "done" and t.finished
    body = t.trajectory.split("<output>", 1)[1].split("</output>", 1)[0]
    assert shows in body and len(body) <= 40 + len(CUT) and body.endswith(CUT) == cut
    stats = tool_stats([t], [1.0])
    assert stats["tool_error_rate"] == float(status != "ok") and stats["tool_timeout_rate"] == float(status == "timeout")


def test_a_broken_sandbox_costs_the_call_not_the_run(tok):
    class Broken:
        def run_many(self, codes, timeout_s=None):
            raise RuntimeError("workers gone")

    sample = Scripted(tok, {"q=": ["<python>1</python>", "1"]})
    (t,) = run_turns(sample, tok, prompts(tok, "q="), Toolbox({"python": PythonTool(Broken())}), max_turns=2,
                     max_new_tokens=64)
    assert t.tool_statuses == ["killed"] and "[sandbox failed: RuntimeError]" in t.trajectory and t.finished


def test_a_real_model_through_generate(tok, box):
    """The loop on ``generate``: seeded like it, masks aligned, and every turn continues the ids as they stand."""
    torch.manual_seed(0)
    model = tiny.build_model(tok, 32, 1, 2, 128)
    tools = tools_on(box)
    # A call already in the prompt is not the model's: only calls in what it writes count.
    texts = ["<python>1</python>1+1=", "2+3="] * 4
    a = generate_with_tools(model, tok, texts, tools=tools, max_turns=3, max_new_tokens=24, seed=3)
    b = generate_with_tools(model, tok, texts, tools=tools, max_turns=3, max_new_tokens=24, seed=3)
    assert [(t.completion_ids, t.mask) for t in a] == [(t.completion_ids, t.mask) for t in b]
    for t, text in zip(a, texts):
        assert t.prompt_ids == tok(text)["input_ids"] and len(t.mask) == len(t.completion_ids)
        assert t.model_tokens <= 24 and t.turns >= 1
        assert t.trajectory == tok.decode(t.completion_ids, skip_special_tokens=True)


# ------------------------------------------------------------------ the challenger with tools


def test_challenger_proposes_through_the_turn_loop(tok, box):
    """challenger.tools: the challenger runs its program, reads the output and proposes in its last turn;
    the environment parses that turn alone, and the observation gets no place in the challenger's update."""
    env = make_env("arithmetic", num_levels=3)
    ch = Challenger(env)
    prompt = with_tool_prompt(ch.prompt(), "Run it first.\n")
    sample = Scripted(tok, {prompt: ["<python>3+4</python>", "3+4"]})

    def propose_sample(ps):
        return run_turns(sample, tok, prompts(tok, *ps), tools_on(box), max_turns=2, max_new_tokens=64, seed=0)

    ran, = ch.propose([prompt], propose_sample)
    assert ran.completion.trajectory == "<python>3+4</python><output>7</output>3+4"
    assert ran.completion.text == "3+4" and ran.valid and ran.task.text == env.parse_proposal("3+4").text
    # a call in the last turn leaves no proposal: rejected as unfinished, never an exception
    stuck = Scripted(tok, {prompt: ["<python>3+4</python>"] * 2})
    late, = ch.propose([prompt], lambda ps: run_turns(stuck, tok, prompts(tok, *ps), tools_on(box), max_turns=2,
                                                      max_new_tokens=64))
    assert not late.valid and not late.completion.finished
    # the challenger's update: the packed rollout trains the call and the proposal, not the observation
    obs = enc(tok, "<output>7</output>")
    call = enc(tok, "<python>3+4</python>")
    c = ran.completion
    assert c.mask == [1] * len(call) + [0] * len(obs) + [1] * (len(enc(tok, "3+4")) + 1)
    roll = pack([c, late.completion], [1.0, -1.0], [0, 0], tok.pad_token_id)
    p = len(c.prompt_ids)
    start = p - 1 + len(call)  # position t predicts token t+1
    assert roll.response_mask[0, start : start + len(obs)].sum() == 0
    assert int(roll.response_mask[0].sum()) == c.model_tokens == len(c.completion_ids) - len(obs)
    assert tool_stats([c, late.completion]) == {"tool_calls_mean": 1.0, "turns_mean": 2.0, "tool_error_rate": 0.0,
                                                "tool_timeout_rate": 0.0}
