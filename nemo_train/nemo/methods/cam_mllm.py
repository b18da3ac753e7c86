"""CamMLLM baseline: a Grad-CAM overlay of the prediction, read by an MLLM (NEMO paper, Sec. 4.1.3, App. A.2)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from pytorch_grad_cam import GradCAM
from pytorch_grad_cam.utils.image import show_cam_on_image
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

from nemo_train.backends.messages import user_message
from nemo_train.errors import UserInputError
from nemo_train.nemo import prompts
from nemo_train.nemo.methods.base import Explanation, ask_causes_batch
from nemo_train.scoring.benchmark import ErrorSample, NemoBenchmark


def gradcam_overlay(
    target, image: torch.Tensor, class_index: int, layer=None, reshape_transform=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Grad-CAM heat map ``[H, W]`` in [0, 1] of ``class_index`` and its overlay ``[3, H, W]`` on ``image``.

    Uses pytorch-grad-cam's ``GradCAM`` on ``target`` (``forward = logits``); ``layer`` defaults to the
    target's ``gradcam_layer()`` (the last convolution).
    """
    if layer is None:
        if not hasattr(target, "gradcam_layer"):
            raise UserInputError(f"{type(target).__name__} names no Grad-CAM layer; pass cam_layer")
        layer = target.gradcam_layer()
    with GradCAM(model=target, target_layers=[layer], reshape_transform=reshape_transform) as cam:
        with torch.enable_grad():
            heat = cam(input_tensor=image[None].to(target.device), targets=[ClassifierOutputTarget(int(class_index))])[
                0
            ]
    rgb = image.permute(1, 2, 0).cpu().numpy().astype("float32")
    overlay = show_cam_on_image(rgb, heat, use_rgb=True)
    return torch.from_numpy(heat).float(), torch.from_numpy(overlay).permute(2, 0, 1).float() / 255.0


def describe_heat(heat: torch.Tensor, image: torch.Tensor) -> str:
    """Rule-based reading of a heat map: where its mass lies and how much falls on the drawn object."""
    h, w = heat.shape
    mass = heat / heat.sum().clamp_min(1e-8)
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32), indexing="ij")
    cy, cx = float((mass * ys).sum() / h), float((mass * xs).sum() / w)
    vertical = "upper" if cy < 0.4 else "lower" if cy > 0.6 else "middle"
    horizontal = "left" if cx < 0.4 else "right" if cx > 0.6 else "centre"
    foreground = (image.max(0).values > 0.1).float()
    on_object = float((mass * foreground).sum())
    where = "on the figure's strokes" if on_object > 0.5 else "mostly on the empty background around the figure"
    return (
        f"The heat map concentrates on the {vertical} {horizontal} part of the image, {where} "
        f"({on_object:.0%} of the attention); the model may have relied on that local part of the shape."
    )


class CamMLLM:
    """Explain an error from the Grad-CAM overlay of the predicted class.

    With ``backend=None`` (offline) the overlay is read by :func:`describe_heat`, a rule-based
    description of where the attention lies, not by a language model.
    """

    name = "CamMLLM"

    def __init__(
        self, target, backend=None, temperature: float = 0.7, cam_layer=None, template: str = prompts.CAM_MLLM
    ) -> None:
        self.target, self.backend, self.temperature, self.cam_layer = target, backend, temperature, cam_layer
        self.template = template

    def overlay(self, sample: ErrorSample) -> tuple[torch.Tensor, torch.Tensor]:
        """The Grad-CAM heat map and overlay of the predicted class on the error image."""
        reshape = self.target.gradcam_reshape() if hasattr(self.target, "gradcam_reshape") else None
        return gradcam_overlay(self.target, sample.image, sample.prediction, self.cam_layer, reshape)

    def _read(self, samples, cams, benchmark: NemoBenchmark, m: int) -> list[list[str]]:
        """Up to ``m`` readings of each overlay (one batched request for all of them)."""
        if self.backend is None:
            return [[describe_heat(heat, sample.image)] for sample, (heat, _) in zip(samples, cams)]
        names = benchmark.class_names
        conversations = [
            [
                user_message(
                    self.template.format(true_name=names[s.label], pred_name=names[s.prediction]), images=[overlay]
                )
            ]
            for s, (_, overlay) in zip(samples, cams)
        ]
        return ask_causes_batch(self.backend, conversations, n=m, temperature=self.temperature if m > 1 else 0.0)

    def candidates(self, sample: ErrorSample, benchmark: NemoBenchmark, m: int) -> list[str]:
        return self.candidates_batch([sample], benchmark, m)[0]

    def candidates_batch(self, samples: Sequence[ErrorSample], benchmark: NemoBenchmark, m: int) -> list[list[str]]:
        return self._read(samples, [self.overlay(s) for s in samples], benchmark, m)

    def explain(self, sample: ErrorSample, benchmark: NemoBenchmark) -> Explanation:
        return self.explain_batch([sample], benchmark)[0]

    def explain_batch(self, samples: Sequence[ErrorSample], benchmark: NemoBenchmark) -> list[Explanation]:
        cams = [self.overlay(s) for s in samples]
        return [
            Explanation(found[0] if found else "", found, details={"gradcam": overlay})
            for found, (_, overlay) in zip(self._read(samples, cams, benchmark, 1), cams)
        ]
