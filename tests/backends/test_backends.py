"""Chat backends: message conversion, the scripted backend, JSON re-asks, a local tiny Hugging Face MLLM."""

from __future__ import annotations

import base64
import io
import json
import os

os.environ.setdefault("WANDB_MODE", "disabled")

import pytest
import torch
from PIL import Image

from nemo_train.backends import BackendError, HFLocalBackend, ScriptedBackend, system_message, user_message
from nemo_train.backends.base import REASK_TEXT
from nemo_train.backends.messages import to_local_messages, to_openai_messages, to_pil
from nemo_train.errors import UserInputError


def test_tensor_and_pil_images_become_png_data_urls():
    tensor = torch.zeros(3, 2, 2)
    tensor[0, 0, 0] = 1.0  # one red pixel
    pil = Image.new("RGB", (3, 1), (0, 0, 255))
    messages = [system_message("be brief"), user_message("what?", [tensor, pil])]
    converted = to_openai_messages(messages)
    assert converted[0] == {"role": "system", "content": "be brief"}
    first, second, text = converted[1]["content"]
    assert text == {"type": "text", "text": "what?"}
    decoded = [
        Image.open(io.BytesIO(base64.b64decode(part["image_url"]["url"].split(",", 1)[1]))) for part in (first, second)
    ]
    assert decoded[0].getpixel((0, 0)) == (255, 0, 0) and decoded[0].getpixel((1, 1)) == (0, 0, 0)
    assert decoded[1].size == (3, 1) and decoded[1].getpixel((2, 0)) == (0, 0, 255)
    # the local form keeps placeholders in order and returns the images beside them
    local, images = to_local_messages(converted)
    assert local[1]["content"] == [{"type": "image"}, {"type": "image"}, {"type": "text", "text": "what?"}]
    assert [im.size for im in images] == [(2, 2), (3, 1)]


def test_bad_messages_raise_user_input_error():
    with pytest.raises(UserInputError, match="role"):
        to_openai_messages([{"role": "robot", "content": "x"}])
    with pytest.raises(UserInputError, match="part of type 'audio'"):
        to_openai_messages([{"role": "user", "content": [{"type": "audio"}]}])
    with pytest.raises(UserInputError, match=r"shape \(4, 2, 2\)"):
        to_pil(torch.zeros(4, 2, 2))


def test_scripted_backend_records_calls_and_runs_out():
    backend = ScriptedBackend(["a", "b", "c"])
    assert backend.chat([user_message("x")], n=2, temperature=0.3, seed=1) == ["a", "b"]
    assert backend.calls[0]["n"] == 2 and backend.calls[0]["seed"] == 1
    with pytest.raises(BackendError, match="ran out"):
        backend.chat([user_message("y")], n=2)
    with pytest.raises(UserInputError, match="n=0"):
        backend.chat([user_message("y")], n=0)


def test_chat_json_reasks_only_the_malformed_samples():
    backend = ScriptedBackend(['{"h": 1}', "sorry, no", '{"h": 3}', '{"h": 2}'])
    assert backend.chat_json([user_message("three hypotheses")], n=3, temperature=1.0) == [{"h": 1}, {"h": 2}, {"h": 3}]
    reask = backend.calls[1]["messages"]
    assert reask[-2] == {"role": "assistant", "content": "sorry, no"}
    assert reask[-1]["content"][-1]["text"] == REASK_TEXT
    assert backend.stats.json_reasks == 1 and backend.stats.json_failures == 0


def test_chat_json_with_no_reasks_fails_softly():
    backend = ScriptedBackend(lambda messages: "never JSON")
    assert backend.chat_json([user_message("x")], n=2, max_reasks=0) == [None, None]
    assert len(backend.calls) == 1 and backend.stats.json_failures == 2


def test_chat_json_batch_reasks_all_malformed_replies_together():
    # "a": JSON at once; "b": JSON after one re-ask; "c": never JSON
    def reply(messages):
        question = messages[0]["content"][-1]["text"]
        asked = sum(m["role"] == "assistant" for m in messages)
        return json.dumps({"q": question}) if question == "a" or (question == "b" and asked == 1) else "no"

    backend = ScriptedBackend(reply)
    found = backend.chat_json_batch([[user_message(q)] for q in "abc"], max_reasks=2)
    assert found == [[{"q": "a"}], [{"q": "b"}], [None]]
    assert backend.batches == [3, 2, 1]  # first replies, then each round's malformed ones in one request
    assert backend.stats.json_reasks == 3 and backend.stats.json_failures == 1
    assert backend.chat_json([user_message("b")]) == [{"q": "b"}]  # one conversation: the same path


def test_batches_keep_input_order_with_threads():
    backend = ScriptedBackend(lambda messages: messages[-1]["content"][-1]["text"][::-1], concurrency=4)
    questions = [f"q{i}" for i in range(10)]
    assert backend.chat_batch([[user_message(q)] for q in questions]) == [[q[::-1]] for q in questions]


# ----------------------------------------------------------------------------- local Hugging Face model
@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from nemo_train.models.vlm import materialize_tiny

    return materialize_tiny(tmp_path_factory.mktemp("tiny"))


def test_hf_local_backend_generates_from_images_and_text(tiny_model_dir, tmp_path):
    backend = HFLocalBackend(tiny_model_dir, device="cpu", cache=tmp_path / "cache")
    messages = [user_message("Why was this digit misclassified?", [torch.rand(3, 28, 28)])]
    greedy = backend.chat(messages, n=2, max_tokens=6)
    assert len(greedy) == 2 and greedy[0] == greedy[1] and isinstance(greedy[0], str)
    # a fresh backend on the same folder reads the reply from the cache instead of generating
    again = HFLocalBackend(tiny_model_dir, device="cpu", cache=tmp_path / "cache")
    assert again.chat(messages, n=2, max_tokens=6) == greedy and again._model is None
    sampled = backend.chat(messages, n=3, temperature=1.0, max_tokens=6, seed=7)
    assert len(sampled) == 3
    uncached = HFLocalBackend(tiny_model_dir, device="cpu")
    assert uncached.chat(messages, n=3, temperature=1.0, max_tokens=6, seed=7) == sampled  # seeded sampling repeats
    # a random model does not write JSON: the failure is recorded, not raised
    assert uncached.chat_json(messages, max_tokens=4, max_reasks=1) == [None]
    assert uncached.stats.json_failures == 1


def test_hf_local_backend_forgets_cached_replies_that_stay_malformed(tiny_model_dir, tmp_path):
    """A local model's batched ``chat_batch`` keys its cache as ``chat`` does: a reply that is still not JSON after
    the re-asks leaves no row (first reply nor re-ask), so a later run asks again instead of replaying it."""
    backend = HFLocalBackend(tiny_model_dir, device="cpu", cache=tmp_path / "cache")
    messages = [user_message("Why was this digit misclassified?", [torch.rand(3, 28, 28)])]
    assert backend.chat_json_batch([messages, messages[:]], max_tokens=4, max_reasks=1) == [[None], [None]]
    assert backend.stats.json_failures == 2 and len(backend.cache) == 0


def test_hf_local_backend_with_objects_and_a_peft_adapter(tiny_model_dir, tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_model_dir)
    base = AutoModelForImageTextToText.from_pretrained(tiny_model_dir)
    messages = [user_message("Explain.", [torch.rand(3, 28, 28)])]
    from_objects = HFLocalBackend(model=base, processor=processor, name="tiny").chat(messages, max_tokens=5)
    assert from_objects == HFLocalBackend(tiny_model_dir, device="cpu").chat(messages, max_tokens=5)

    torch.manual_seed(0)
    lora = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    lora.save_pretrained(tmp_path / "adapter")
    backend = HFLocalBackend(tiny_model_dir, adapter=tmp_path / "adapter", device="cpu")
    assert backend.model.endswith("+adapter") and backend.cache_params() == {"adapter": str(tmp_path / "adapter")}
    merged = backend.chat(messages, max_tokens=5)
    assert not isinstance(backend._model, PeftModel)  # served merged: plain layers, no adapter branch
    separate = HFLocalBackend(tiny_model_dir, adapter=tmp_path / "adapter", device="cpu", merge_adapter=False)
    assert separate.chat(messages, max_tokens=5) == merged
    assert isinstance(separate._model, PeftModel)
    with torch.no_grad():  # the merged weights are the base weights plus the adapter's low-rank update
        x = torch.rand(3, 64)
        layer = separate._model.base_model.model.model.language_model.layers[0].self_attn.q_proj
        fused = backend._model.model.language_model.layers[0].self_attn.q_proj
        torch.testing.assert_close(fused(x), layer(x), rtol=1e-5, atol=1e-6)
        assert not torch.allclose(fused(x), layer.base_layer(x))
    with pytest.raises(UserInputError, match="adapter folder"):
        HFLocalBackend(tiny_model_dir, adapter=tmp_path / "missing")
    with pytest.raises(UserInputError, match="model_name_or_path"):
        HFLocalBackend()


def test_hf_local_backend_loads_a_saved_explainer_folder(tiny_model_dir, tmp_path):
    from nemo_train.explainer import ExplainerModule

    module = ExplainerModule(model_name_or_path=str(tiny_model_dir), lora_r=2)
    module.configure_model()
    folder = module.save_adapter(tmp_path / "explainer")
    messages = [user_message("Why?", [torch.rand(3, 28, 28)])]
    backend = HFLocalBackend(folder, device="cpu")
    reply = backend.chat(messages, max_tokens=5)
    assert reply == HFLocalBackend(model=module.model.eval(), processor=module.processor).chat(messages, max_tokens=5)
    from peft import PeftModel

    assert not isinstance(backend._model, PeftModel)  # the adapter is merged for serving
    assert isinstance(HFLocalBackend(folder, device="cpu", merge_adapter=False).load()[0], PeftModel)


def test_hf_local_batched_generation_matches_one_at_a_time(tiny_model_dir, tmp_path):
    g = torch.Generator().manual_seed(3)
    conversations = [
        [user_message("Why?", [torch.rand(3, 28, 28, generator=g)])],
        [
            user_message(
                "Why was this digit classified as a seven instead of a one?", [torch.rand(3, 28, 28, generator=g)]
            )
        ],
        [system_message("Be brief."), user_message("Explain the error.", [torch.rand(3, 28, 28, generator=g)])],
    ]
    single = HFLocalBackend(tiny_model_dir, device="cpu")
    one_by_one = [single.chat(c, n=2, max_tokens=6) for c in conversations]
    batched = HFLocalBackend(tiny_model_dir, device="cpu", batch_size=2, cache=tmp_path / "c")
    assert batched.chat_batch(conversations, n=2, max_tokens=6) == one_by_one  # left padding changes nothing
    assert batched.stats.requests == 3
    assert batched.chat(conversations[1], n=2, max_tokens=6) == one_by_one[1]  # stored per conversation
    assert batched.stats.cache_hits == 1
    sampled = batched.chat_batch(conversations, n=2, temperature=1.0, max_tokens=4, seed=1)
    assert [len(r) for r in sampled] == [2, 2, 2]
    # a seeded sample depends on the conversation, not on the batch it was pending in (a rerun after a kill)
    fresh = HFLocalBackend(tiny_model_dir, device="cpu", batch_size=2)
    assert fresh.chat_batch(conversations[::-1], n=2, temperature=1.0, max_tokens=4, seed=1) == sampled[::-1]
    assert fresh.chat(conversations[2], n=2, temperature=1.0, max_tokens=4, seed=1) == sampled[2]
    other_seed = fresh.chat_batch(conversations, n=2, temperature=1.0, max_tokens=4, seed=2)
    assert other_seed != sampled  # the seed still decides
    capped = HFLocalBackend(tiny_model_dir, device="cpu", max_new_tokens=3)
    assert capped.chat_batch(conversations, max_tokens=6) == [single.chat(c, max_tokens=3) for c in conversations]
    assert capped.cache_params()["max_new_tokens"] == 3  # a capped reply is cached apart from an uncapped one
    with pytest.raises(UserInputError, match="max_new_tokens"):
        HFLocalBackend(tiny_model_dir, max_new_tokens=0)
