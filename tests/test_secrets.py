import pytest

from nemo_train.loggers import default_wandb_mode
from nemo_train.secrets import REDACTED, is_secret_key, scrub_secrets, scrub_text, secret_values_in


def test_scrub_by_key_and_by_env_value(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-123456789")
    config = {
        "backend": {"api_key": "abc", "api_key_env": "OPENAI_API_KEY", "url": "http://x?key=tok-123456789"},
        "list": ["tok-123456789", 3],
        "lr": 0.1,
    }
    clean = scrub_secrets(config)
    assert clean["backend"]["api_key"] == REDACTED
    assert clean["backend"]["api_key_env"] == "OPENAI_API_KEY"  # names a variable, not a secret
    assert "tok-123456789" not in str(clean)
    assert clean["lr"] == 0.1 and config["backend"]["api_key"] == "abc"  # input untouched


def test_wandb_mode_defaults(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    assert default_wandb_mode() == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert default_wandb_mode() == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert default_wandb_mode() == "disabled"


@pytest.mark.parametrize(
    "key",
    [
        "sk-" + "abcdefghijklmnop1234",  # made-up keys (in two parts: no scanner takes them for real ones)
        "sk-proj-Abc_def-1234567890abcdef",
        "sk-ant-api03-abcdefghijklmnopqrstuv",
        "hf_abcdefghijklmnopqrstuvwx",
        "ghp_abcdefghijklmnopqrstuvwxyz0123",
        "AKIAABCDEFGHIJKLMNOP",
        "AIzaSyA1234567890abcdefghijklmnopqrstuv",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijk",
        "Zx9aQ2mN8pL4kR7tY1uW3eS6dF0gH5jK",
    ],
)
def test_key_shaped_strings_are_redacted_wherever_they_appear(key):
    assert scrub_text(f"the reply echoed {key}.") == f"the reply echoed {REDACTED}."
    assert scrub_secrets({"explanation": f"[{key}]", "rows": [[1, key]]}) == {
        "explanation": f"[{REDACTED}]",
        "rows": [[1, REDACTED]],
    }


def test_bearer_values_and_nested_secret_keys():
    headers = {"headers": {"Authorization": "Bearer abc.def-123"}, "extra_body": {"api_key": {"value": "x1"}}}
    assert scrub_secrets(headers) == {
        "headers": {"Authorization": REDACTED},
        "extra_body": {"api_key": {"value": REDACTED}},
    }
    assert scrub_text("curl -H 'Authorization: Bearer abcdefgh12'") == f"curl -H 'Authorization: {REDACTED}'"


@pytest.mark.parametrize(
    "text",
    [
        "3f786850e387550fdab836ed7e6dc881de23001b3f786850e387550fdab836ed",  # a SHA-256 digest
        "laion/CLIP-ViT-H-14-laion2B-s32B-b79K",  # model ids
        "Qwen/Qwen2.5-VL-7B-Instruct",
        "checkpoints/cmnist_model_a/checkpoints/best.ckpt",
        "The stroke colour is unusual; in training this digit was red.",
        "task-specific sk-learn",
    ],
)
def test_digests_model_ids_paths_and_prose_are_kept(text):
    assert scrub_text(text) == text


def test_counts_of_tokens_are_not_secrets():
    options = {"max_tokens": 64, "max_tokens_field": "max_completion_tokens", "token_length": 12, "tokenizer": "t"}
    assert scrub_secrets(options) == options
    assert is_secret_key("hf_token") and is_secret_key("client_secret") and not is_secret_key("api_key_env")


def test_inline_secret_values_are_found():
    assert secret_values_in({"extra_body": {"api_key": "inline-1234", "n": 1}, "model": "m"}) == {"inline-1234"}
