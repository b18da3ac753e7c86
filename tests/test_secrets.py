from nemo_train.loggers import default_wandb_mode
from nemo_train.secrets import REDACTED, scrub_secrets


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
