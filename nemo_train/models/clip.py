"""A small CLIP (transformers ``CLIPModel``) trained from scratch on generated image-caption pairs.

Why transformers' ``CLIPModel`` rather than an open_clip custom model: the trained space is saved as
a standard Hugging Face folder (model, tokenizer, image processor) that every CLIP consumer of the
toolkit loads by path exactly like a hub id (the zero-shot target and the retrieval baseline of the
NEMO evaluation, the failure-mode search), and ``return_loss=True`` gives the symmetric contrastive
loss. The tokenizer is CLIP's own byte-level BPE (49,408 tokens), built offline from the vocabulary
file that open_clip ships, so captions tokenise exactly as for the released CLIP models.

:class:`CLIPModule` trains it (``nemo-train fit --config configs/clip/synthetic.yaml``), logs the
zero-shot accuracy of every (source, attribute) and image<->text recall@k, extracts image embeddings
through ``Trainer.predict``, and can export the Hugging Face folder at the end of training.
:class:`CLIPEncoder` wraps a trained folder / checkpoint for inference.
"""

from __future__ import annotations

import gzip
import json
import tempfile
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPTokenizer
from transformers.convert_slow_tokenizer import bytes_to_unicode
from transformers.utils import logging as hf_logging

from nemo_train.errors import UserInputError
from nemo_train.models.image_text import BatchedEncoder, ImageTextEncoder, PixelPreprocess
from nemo_train.models.loading import load_damaged_checked

__all__ = ["BatchedEncoder", "CLIPEncoder", "CLIPModule", "clip_tokenizer", "recall_at_k"]

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
_BPE_MERGES = 49152 - 256 - 2


def clip_tokenizer(max_length: int = 77) -> CLIPTokenizer:
    """CLIP's BPE tokenizer, built offline from open_clip's bundled vocabulary (same ids as the hub's);
    ``max_length`` is the model's token budget (longer texts are truncated)."""
    path = Path(find_spec("open_clip").origin).parent / "bpe_simple_vocab_16e6.txt.gz"  # read, not imported
    lines = gzip.open(path).read().decode("utf-8").split("\n")[1 : _BPE_MERGES + 1]
    merges = [tuple(line.split()) for line in lines]
    symbols = list(bytes_to_unicode().values())
    vocab = symbols + [s + "</w>" for s in symbols] + ["".join(m) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}))
        (Path(folder) / "merges.txt").write_text("#version: 0.2\n" + "\n".join(" ".join(m) for m in merges) + "\n")
        return CLIPTokenizer(
            str(Path(folder) / "vocab.json"), str(Path(folder) / "merges.txt"), model_max_length=max_length
        )


def recall_at_k(similarity: torch.Tensor, k: int) -> float:
    """Fraction of rows whose own column (the diagonal) is among their ``k`` largest entries."""
    k = min(k, similarity.shape[1])
    top = similarity.topk(k, dim=1).indices
    return float((top == torch.arange(len(similarity), device=top.device)[:, None]).any(1).float().mean())


class CLIPModule(L.LightningModule):
    """Contrastive image-text training of a small ``CLIPModel`` from scratch.

    Args:
        image_size, patch_size: vision transformer input side and patch side.
        vision_width, vision_layers, text_width, text_layers, heads: tower sizes.
        embed_dim: dimension of the joint space.
        max_length: token budget of a caption.
        lr, weight_decay, warmup_fraction: AdamW with linear warm-up then cosine decay.
        attribute_head_weight: weight of an auxiliary loss during training: a linear head per
            (source, attribute) slot of the datamodule classifies the image embedding into the
            attribute's values. It gives the image tower a direct signal for shape-like attributes
            (digit, tilt, object, CLEVR shape), which contrastive training from scratch on a few
            thousand captions otherwise never separates (the text tower collapses their words while the
            image tower cannot yet tell them apart); the caption loss then aligns the words with them.
            The heads are not part of the exported model; zero-shot accuracy is measured with text
            prompts only. 0 trains on captions alone.
        recall_ks: k values of the image<->text recall logged at validation.
        export_subdir: when set, the Hugging Face folder (model + tokenizer + image processor) is written
            to ``<trainer.default_root_dir>/<export_subdir>`` at the end of ``fit``, next to the run's
            checkpoints; any CLIP consumer then loads it by path.
    """

    def __init__(
        self,
        image_size: int = 32,
        patch_size: int = 8,
        vision_width: int = 128,
        vision_layers: int = 3,
        text_width: int = 96,
        text_layers: int = 2,
        heads: int = 4,
        embed_dim: int = 64,
        max_length: int = 24,
        lr: float = 2e-3,
        weight_decay: float = 0.05,
        warmup_fraction: float = 0.1,
        attribute_head_weight: float = 0.0,
        recall_ks: list[int] = [1, 5],  # noqa: B006 (jsonargparse shows the default)
        export_subdir: str | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        if image_size % patch_size:
            raise UserInputError(f"image_size={image_size} must be a multiple of patch_size={patch_size}")
        self.tokenizer = clip_tokenizer(max_length)
        config = CLIPConfig(
            text_config=dict(
                vocab_size=len(self.tokenizer),
                hidden_size=text_width,
                intermediate_size=4 * text_width,
                num_hidden_layers=text_layers,
                num_attention_heads=heads,
                max_position_embeddings=max_length,
                bos_token_id=self.tokenizer.bos_token_id,
                eos_token_id=self.tokenizer.eos_token_id,
                pad_token_id=self.tokenizer.pad_token_id,
            ),
            vision_config=dict(
                image_size=image_size,
                patch_size=patch_size,
                hidden_size=vision_width,
                intermediate_size=4 * vision_width,
                num_hidden_layers=vision_layers,
                num_attention_heads=heads,
            ),
            projection_dim=embed_dim,
        )
        self.model = CLIPModel(config)
        self.preprocess = PixelPreprocess(image_size, CLIP_MEAN, CLIP_STD, resample="bilinear")
        self.zero_shot: dict[str, list[str]] = {}
        self.heads = torch.nn.ModuleDict()  # auxiliary attribute heads, built in setup from the datamodule
        self._val: list[dict] = []

    # ----------------------------------------------------------------- encoders
    def pixels(self, images: torch.Tensor) -> torch.Tensor:
        """Images in ``[0, 1]`` (any size) -> normalised pixel values at the model's input size."""
        return self.preprocess.normalised(images)

    def tokens(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        tok = self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.hparams.max_length, return_tensors="pt"
        )
        return {k: tok[k].to(self.preprocess.mean.device) for k in ("input_ids", "attention_mask")}

    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        """L2-normalised image embeddings ``[B, D]``."""
        return F.normalize(self.model.get_image_features(pixel_values=self.pixels(images)).pooler_output, dim=-1)

    def encode_text(self, texts: Sequence[str]) -> torch.Tensor:
        """L2-normalised text embeddings ``[T, D]``."""
        return F.normalize(self.model.get_text_features(**self.tokens(texts)).pooler_output, dim=-1)

    # ----------------------------------------------------------------- training
    def setup(self, stage: str) -> None:
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if datamodule is not None and hasattr(datamodule, "zero_shot_prompts"):
            self.zero_shot = datamodule.zero_shot_prompts()
        if self.hparams.attribute_head_weight > 0 and not len(self.heads):
            for slot, prompts in self.zero_shot.items():
                self.heads[slot.replace("/", "_")] = torch.nn.Linear(self.hparams.embed_dim, len(prompts))

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        n = len(batch["image"])
        out = self.model(**self.tokens(batch["caption"]), pixel_values=self.pixels(batch["image"]), return_loss=True)
        loss = out.loss
        if len(self.heads):
            head_loss = self.attribute_loss(out.image_embeds, batch["attrs"])
            self.log("train/attribute_loss", head_loss, batch_size=n)
            loss = loss + self.hparams.attribute_head_weight * head_loss
        self.log("train/loss", loss, prog_bar=True, batch_size=n)
        self.log("train/logit_scale", self.model.logit_scale.exp(), batch_size=n)
        return loss

    def attribute_loss(self, image: torch.Tensor, attrs: torch.Tensor) -> torch.Tensor:
        """Mean over slots of the auxiliary heads' cross-entropy on the images whose source has the slot,
        plus on the slot's own prompts (prompt ``v`` is class ``v``): one head shared by both towers pulls
        an attribute's images and its words to the same directions from the first step."""
        prompts = [p for slot in self.zero_shot.values() for p in slot]
        text = F.normalize(self.model.get_text_features(**self.tokens(prompts)).pooler_output, dim=-1)
        scale, losses, start = self.model.logit_scale.exp(), [], 0
        for column, head in enumerate(self.heads.values()):
            count = head.out_features
            rows = attrs[:, column] >= 0
            if rows.any():
                losses.append(F.cross_entropy(head(scale * image[rows]), attrs[rows, column]))
            words = head(scale * text[start : start + count])
            losses.append(F.cross_entropy(words, torch.arange(count, device=words.device)))
            start += count
        return torch.stack(losses).mean()

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        image, text = self.encode_image(batch["image"]), self.encode_text(batch["caption"])
        loss = F.cross_entropy(
            self.model.logit_scale.exp() * image @ text.T, torch.arange(len(image), device=image.device)
        )
        self.log("val/loss", loss, batch_size=len(image))
        self._val.append({"image": image.cpu(), "text": text.cpu(), "attrs": batch["attrs"].cpu()})

    def on_validation_epoch_end(self) -> None:
        if not self._val:
            return
        image = torch.cat([v["image"] for v in self._val])
        text = torch.cat([v["text"] for v in self._val])
        attrs = torch.cat([v["attrs"] for v in self._val])
        self._val.clear()
        values = self.zero_shot_accuracy(image, attrs)
        sim = image @ text.T
        for k in self.hparams.recall_ks:
            values[f"val/recall@{k}_image_to_text"] = recall_at_k(sim, k)
            values[f"val/recall@{k}_text_to_image"] = recall_at_k(sim.T, k)
        if values:
            self.log_dict(values, prog_bar=False)
            accs = [v for key, v in values.items() if key.startswith("val/zeroshot/")]
            if accs:
                self.log("val/zeroshot_mean", sum(accs) / len(accs), prog_bar=True)

    @torch.no_grad()
    def zero_shot_accuracy(self, image: torch.Tensor, attrs: torch.Tensor) -> dict[str, float]:
        """``{"val/zeroshot/<source>/<attribute>": accuracy}`` of prompt classification on ``image`` embeddings."""
        out = {}
        for column, (slot, prompts) in enumerate(self.zero_shot.items()):
            rows = attrs[:, column] >= 0
            if not rows.any():
                continue
            pred = (image[rows] @ self.encode_text(prompts).cpu().T).argmax(-1)
            out[f"val/zeroshot/{slot}"] = float((pred == attrs[rows, column]).float().mean())
        return out

    def predict_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        """Image embeddings of a batch (``Trainer.predict`` extracts large sets, any strategy)."""
        return self.encode_image(batch["image"])

    def configure_optimizers(self):
        decay = [p for n, p in self.named_parameters() if p.ndim >= 2 and "embedding" not in n]
        rest = [p for n, p in self.named_parameters() if not (p.ndim >= 2 and "embedding" not in n)]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.hparams.weight_decay}, {"params": rest, "weight_decay": 0.0}],
            lr=self.hparams.lr,
        )
        steps = max(int(self.trainer.estimated_stepping_batches), 1) if self._trainer is not None else 1000
        scheduler = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=self.hparams.lr, total_steps=steps, pct_start=self.hparams.warmup_fraction
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_fit_end(self) -> None:
        if self.hparams.export_subdir and self.trainer.is_global_zero:
            self.export(Path(self.trainer.default_root_dir) / self.hparams.export_subdir)

    # ----------------------------------------------------------------- export
    def export(self, folder: str | Path) -> Path:
        """Write a Hugging Face folder (model, tokenizer, image processor) loadable like a hub id."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        hf_logging.disable_progress_bar()  # quiet output: no shard-writing bar
        self.model.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)
        size = self.hparams.image_size
        CLIPImageProcessor(
            size={"shortest_edge": size},
            crop_size={"height": size, "width": size},
            image_mean=list(CLIP_MEAN),
            image_std=list(CLIP_STD),
        ).save_pretrained(folder)
        return folder


class CLIPEncoder(ImageTextEncoder):
    """A trained CLIP as an :class:`~nemo_train.models.image_text.ImageTextEncoder` (batched, L2-normalised).

    ``source`` is a Hugging Face folder or hub id of a CLIP model (e.g. one exported by
    :meth:`CLIPModule.export`) or a :class:`CLIPModule` Lightning checkpoint (``.ckpt``). Images are resized
    bilinearly, as the failure-mode search has always fed this encoder.
    """

    def __init__(self, source: str | Path, batch_size: int = 256) -> None:
        source = str(source)
        if not source.endswith(".ckpt"):
            loaded = load_damaged_checked(
                ImageTextEncoder.from_pretrained, source, what="CLIP folder", resample="bilinear"
            )
            super().__init__(loaded.model, loaded.tokenizer, loaded.pixels, batch_size=batch_size)
            return
        if not Path(source).is_file():
            raise UserInputError(f"CLIP checkpoint {source!r} does not exist")
        module = load_damaged_checked(
            CLIPModule.load_from_checkpoint,
            source,
            what="CLIP checkpoint",
            map_location="cpu",
            weights_only=True,
            strict=False,
        )  # auxiliary heads are not needed
        pixels = PixelPreprocess(module.hparams.image_size, CLIP_MEAN, CLIP_STD, resample="bilinear")
        super().__init__(module.model, module.tokenizer, pixels, batch_size=batch_size)
