"""``GRPOModule``: the LoRA explainer trained by reinforcement from the verified scores of its own answers.

Group Relative Policy Optimization over :class:`~nemo_train.explainer.module.ExplainerModule` (the same model,
processor, adapter, optimizer, schedule and checkpoints as ``fit`` of a distilled explainer). Each training step:

1. every error of the batch is asked ``group_size`` times (the picture and question of its item, the chat template
   and left-padded batch of :mod:`nemo_train.explainer.generation`); the policy samples one answer per copy;
2. the reward (``class_path``; :class:`~nemo_train.explainer.rewards.ExplanationReward`) scores each answer;
   within the group of one error the advantage of an answer is ``(reward - group mean) / (group std + std_eps)``;
3. the loss is the policy gradient on the answer tokens' log-probabilities with a KL penalty to the reference
   policy, per token ``-A * exp(logp - logp.detach()) + kl_coef * (exp(ref - logp) - (ref - logp) - 1)``, averaged
   over each answer's tokens and then over the answers (one update per sampled batch: the ratio is 1 and its
   gradient that of REINFORCE with the group baseline; the KL term is the unbiased estimator GRPO uses).

The reference policy is the starting point: the trainable weights (the adapter this stage starts from, e.g. the
distilled one, and any fully trained modules) are copied once when the model is built, and the reference
log-probabilities are computed by swapping those copies in for one forward pass without gradients (no second model;
a resumed run keeps the starting adapter as its reference). Logged: ``train/reward`` and each of its parts, the
within-group reward std, ``train/kl``, ``train/entropy`` (of the policy over the answer tokens), answer length in
tokens, the loss; with a W&B logger, every ``table_every_n_steps`` steps a table of sampled answers with their
pictures and rewards. Validation answers each held-out error greedily and logs ``val/reward`` and its parts, the
full scoring next to the training reward (a reward that rises while these fall is the reward being gamed).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from lightning.pytorch.loggers import WandbLogger

from datamodules.explanations import build_messages, processor_images
from nemo_train.backends.jsonparse import extract_json
from nemo_train.errors import UserInputError
from nemo_train.explainer.module import ExplainerModule
from nemo_train.explainer.rewards import ExplanationReward, checked_output, nan_mean

#: Batch keys aligned with the token sequence besides ids and mask (extended with zeros over the answer).
_TOKEN_ALIGNED = ("mm_token_type_ids", "token_type_ids")
#: Config attributes naming image / video tokens (Qwen2-VL family, Llama-3.2-Vision, LLaVA-style models).
_MEDIA_TOKENS = (
    "image_token_id",
    "video_token_id",
    "vision_start_token_id",
    "vision_end_token_id",
    "image_token_index",
)


class GRPOModule(ExplainerModule):
    """The explainer fine-tuned by GRPO against ``reward`` (see the module).

    Args:
        reward: scores answers (``class_path`` / ``init_args``; e.g. ``nemo_train.nemo.reward.VerifiedEditReward``).
        group_size: answers sampled per error (at least 2: the advantage is relative to the group).
        kl_coef: weight of the KL penalty to the reference policy (0: no reference forward pass).
        temperature, top_p: sampling of the answers (no top-k cut; log-probabilities use the same temperature).
        max_new_tokens: the longest answer sampled.
        std_eps: added to each group's reward std.
        table_every_n_steps: steps between tables of sampled answers (W&B logger only; 0: never).
        answer_key: the JSON key the evaluation tables read an answer's explanation from (``cause_of_error``, as
            ``ask_causes_batch``); an answer without it (malformed JSON, a misspelt key) is rewarded as an empty
            explanation, as the tables count it, so a policy cannot earn by drifting out of the format. ``null``:
            the raw text is the explanation.
        **kwargs: :class:`ExplainerModule`'s arguments (``model_name_or_path``, ``adapter``, LoRA settings, ``lr``...).
    """

    def __init__(
        self,
        reward: ExplanationReward,
        group_size: int = 4,
        kl_coef: float = 0.04,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 48,
        std_eps: float = 1e-4,
        table_every_n_steps: int = 50,
        answer_key: str | None = "cause_of_error",
        **kwargs: Any,
    ) -> None:
        if group_size < 2:
            raise UserInputError(f"group_size={group_size}; expected at least 2 answers per error")
        if kl_coef < 0 or temperature <= 0 or not 0 < top_p <= 1 or max_new_tokens < 1 or std_eps <= 0:
            raise UserInputError(
                f"kl_coef={kl_coef}, temperature={temperature}, top_p={top_p}, max_new_tokens={max_new_tokens}, "
                f"std_eps={std_eps}; expected kl_coef >= 0, temperature > 0, top_p in (0, 1], max_new_tokens >= 1, "
                "std_eps > 0"
            )
        if not callable(reward):
            raise UserInputError(f"reward {type(reward).__name__} is not callable as reward(errors, texts)")
        super().__init__(**kwargs)
        for hparams in (self._hparams, self._hparams_initial):  # the reward is an object, not a setting
            hparams.pop("reward", None)
        self.reward = reward
        self.reference: dict[str, torch.Tensor] | None = None

    # ------------------------------------------------------------------------------------------ model

    def configure_model(self) -> None:
        """Build the model as :class:`ExplainerModule` does, then keep a copy of the starting trainable weights."""
        super().configure_model()
        if self.reference is None:
            self.reference = {n: p.detach().clone() for n, p in self.model.named_parameters() if p.requires_grad}

    @contextmanager
    def reference_weights(self) -> Iterator[None]:
        """The reference policy's weights swapped in (no copy: the parameters point at the saved tensors)."""
        live: dict[str, torch.Tensor] = {}
        params = dict(self.model.named_parameters())
        try:
            for name, saved in self.reference.items():
                param = params[name]
                if saved.device != param.device or saved.dtype != param.dtype:
                    saved = self.reference[name] = saved.to(param.device, param.dtype)
                live[name], param.data = param.data, saved
            yield
        finally:
            for name, data in live.items():
                params[name].data = data

    # ------------------------------------------------------------------------------------- sampling

    def prompt_inputs(self, items: Sequence[dict[str, Any]], repeat: int = 1) -> dict[str, torch.Tensor]:
        """The left-padded generation inputs of ``items``, each conversation ``repeat`` times in a row."""
        processor = self.processor
        system = self.prompting.get("system_prompt")
        texts, pictures = [], []
        for item in items:
            messages = build_messages(item["prompt"], item.get("system") or system)
            text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            texts += [text] * repeat
            pictures += [item["picture"]] * repeat
        bos = processor.tokenizer.bos_token
        inputs = processor(
            text=texts,
            images=processor_images(pictures),
            return_tensors="pt",
            padding=True,
            padding_side="left",
            add_special_tokens=not (bos and texts[0].startswith(bos)),
        )
        return dict(inputs.to(self.device))

    def stop_ids(self) -> set[int]:
        """Token ids that end an answer (the tokenizer's and the generation config's end tokens)."""
        tokenizer = self.processor.tokenizer
        ends = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ids = {tokenizer.eos_token_id} | set(ends if isinstance(ends, (list, tuple)) else [ends])
        return {int(i) for i in ids if i is not None}

    def media_token_ids(self) -> list[int]:
        """The image / video placeholder and delimiter tokens of the model, never sampled: an answer holding one would
        be read as another image in the forward pass that scores it."""
        config = getattr(self.model, "config", None)
        found = []
        for source in (config, getattr(config, "text_config", None)):
            for name in _MEDIA_TOKENS:
                value = getattr(source, name, None)
                if isinstance(value, int) and value >= 0:
                    found.append(value)
        return sorted(set(found))

    @torch.no_grad()
    def sample(self, inputs: dict[str, torch.Tensor], greedy: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """``(answer ids [N, T], mask [N, T])``: one answer per conversation; the mask keeps each answer up to and
        including its first end token."""
        hp = self.hparams
        tokenizer = self.processor.tokenizer
        sampling = (
            {"do_sample": False}
            if greedy
            else {"do_sample": True, "temperature": hp.temperature, "top_p": hp.top_p, "top_k": 0}
        )
        was_training = self.model.training
        self.model.eval()
        try:
            out = self.model.generate(
                **inputs,
                max_new_tokens=hp.max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
                suppress_tokens=self.media_token_ids() or None,
                **sampling,
            )
        finally:
            self.model.train(was_training)
        answer = out[:, inputs["input_ids"].shape[1] :]
        is_stop = torch.zeros_like(answer, dtype=torch.bool)
        for stop in self.stop_ids():
            is_stop |= answer == stop
        before = torch.cumsum(is_stop.int(), dim=1) - is_stop.int()  # end tokens strictly before each position
        return answer, (before == 0).int()

    def decode(self, answer: torch.Tensor, mask: torch.Tensor) -> list[str]:
        tokenizer = self.processor.tokenizer
        return [tokenizer.decode(ids[m.bool()], skip_special_tokens=True).strip() for ids, m in zip(answer, mask)]

    # ---------------------------------------------------------------------------------- log-probabilities

    def explanations(self, answers: Sequence[str]) -> list[str]:
        """The explanation each answer gives as the evaluation reads it: its ``answer_key`` string ('' without)."""
        key = self.hparams.answer_key
        if key is None:
            return list(answers)
        found = [extract_json(answer) for answer in answers]
        return [f[key].strip() if isinstance(f, dict) and isinstance(f.get(key), str) else "" for f in found]

    def answer_logits(self, inputs: dict[str, torch.Tensor], answer: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``float[N, T, V]``: the model's logits (divided by the sampling temperature) for each answer token."""
        length = answer.shape[1]
        batch = dict(inputs)
        batch["input_ids"] = torch.cat([inputs["input_ids"], answer], dim=1)
        batch["attention_mask"] = torch.cat([inputs["attention_mask"], mask.to(inputs["attention_mask"].dtype)], 1)
        for key in _TOKEN_ALIGNED:
            if key in batch:
                batch[key] = torch.cat([batch[key], torch.zeros_like(answer, dtype=batch[key].dtype)], 1)
        logits = self.model(**batch, logits_to_keep=length + 1).logits[:, -(length + 1) : -1]
        return logits.float() / self.hparams.temperature

    @staticmethod
    def token_logprobs(logits: torch.Tensor, answer: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(logits, dim=-1).gather(-1, answer.unsqueeze(-1)).squeeze(-1)

    def group_advantages(self, rewards: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(advantages [N], within-group std [N / group_size])`` of rewards laid out group after group."""
        groups = rewards.view(-1, group_size)
        std = groups.std(dim=1, keepdim=True)
        advantages = (groups - groups.mean(dim=1, keepdim=True)) / (std + self.hparams.std_eps)
        return advantages.flatten(), std.flatten()

    # --------------------------------------------------------------------------------------- training

    def sample_groups(self, batch: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """``group_size`` sampled answers per error of ``batch``, group after group, and their rewards."""
        group = self.hparams.group_size
        inputs = self.prompt_inputs(batch, repeat=group)
        answer, mask = self.sample(inputs)
        texts = self.decode(answer, mask)
        errors = [item["error"] for item in batch for _ in range(group)]
        rewards, parts = checked_output(self.reward(errors, texts), len(texts))
        return {"inputs": inputs, "answer": answer, "mask": mask, "texts": texts, "rewards": rewards, "parts": parts}

    def grpo_loss(
        self, inputs: dict[str, torch.Tensor], answer: torch.Tensor, mask: torch.Tensor, rewards: Sequence[float]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The GRPO loss of sampled answers with their rewards (laid out group after group), and its statistics."""
        hp = self.hparams
        reward = torch.tensor(list(rewards), dtype=torch.float32, device=answer.device)
        advantages, group_std = self.group_advantages(reward, hp.group_size)
        weights = mask.float()
        tokens = weights.sum(dim=1).clamp(min=1)
        if hp.kl_coef > 0:
            with torch.no_grad(), self.reference_weights():
                reference = self.token_logprobs(self.answer_logits(inputs, answer, mask), answer)
        logits = self.answer_logits(inputs, answer, mask)
        logp = self.token_logprobs(logits, answer)
        per_token = -advantages[:, None] * torch.exp(logp - logp.detach())
        kl = torch.zeros_like(logp)
        if hp.kl_coef > 0:
            delta = reference - logp
            kl = torch.exp(delta) - delta - 1
            per_token = per_token + hp.kl_coef * kl
        loss = ((per_token * weights).sum(dim=1) / tokens).mean()
        with torch.no_grad():
            log_probs = torch.log_softmax(logits.detach(), dim=-1)
            entropy = -(log_probs.exp() * log_probs).sum(-1)
            stats = {
                "train/loss": loss.detach(),
                "train/reward": reward.mean(),
                "train/reward_group_std": group_std.mean(),
                "train/kl": ((kl.detach() * weights).sum(1) / tokens).mean(),
                "train/entropy": ((entropy * weights).sum(1) / tokens).mean(),
                "train/answer_tokens": weights.sum(1).mean(),
            }
        return loss, stats

    def training_step(self, batch: list[dict[str, Any]], batch_idx: int) -> torch.Tensor:
        sampled = self.sample_groups(batch)
        loss, stats = self.grpo_loss(sampled["inputs"], sampled["answer"], sampled["mask"], sampled["rewards"])
        n = len(batch)
        self.log_dict(stats, batch_size=n)
        self.log("reward", stats["train/reward"], prog_bar=True, batch_size=n, logger=False)
        for name, values in sampled["parts"].items():
            value = nan_mean(values)
            if value == value:  # nan: the part is undefined on every answer of the batch
                self.log(f"train/reward/{name}", value, batch_size=n)
        self._maybe_table(batch, sampled["texts"], sampled["rewards"], self.hparams.group_size)
        return loss

    def validation_step(self, batch: list[dict[str, Any]], batch_idx: int) -> None:
        inputs = self.prompt_inputs(batch)
        answer, mask = self.sample(inputs, greedy=True)
        texts = self.explanations(self.decode(answer, mask))
        rewards, parts = checked_output(self.reward([item["error"] for item in batch], texts), len(texts))
        n = len(batch)
        self.log("val/reward", sum(rewards) / n, prog_bar=True, batch_size=n, sync_dist=True)
        for name, values in parts.items():
            value = nan_mean(values)
            if value == value:
                self.log(f"val/reward/{name}", value, batch_size=n, sync_dist=True)

    def _maybe_table(self, batch, texts: list[str], rewards: list[float], group: int) -> None:
        """A W&B table of the step's first error's answers: picture, question, answer, reward."""
        every = self.hparams.table_every_n_steps
        if not every or self.global_step % every or not isinstance(self.logger, WandbLogger):
            return
        import wandb

        item = batch[0]
        rows = [
            [self.global_step, wandb.Image(item["picture"]), item["prompt"], text, reward]
            for text, reward in zip(texts[:group], rewards[:group])
        ]
        self.logger.log_table("train/samples", ["step", "picture", "question", "answer", "reward"], rows)
