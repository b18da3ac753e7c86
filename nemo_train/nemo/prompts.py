"""Prompt texts of SciTX and the MLLM baselines (our wording of the NEMO paper, App. A).

The prompts that turn an explanation into an edit are :mod:`nemo_train.scoring.edit_prompts`.

Each prompt asks for one JSON object (its keys are written in the prompt). Templates
are plain ``str.format`` strings so a config can replace any of them.
"""

from __future__ import annotations

from collections.abc import Sequence

SCITX_HYPOTHESIS = """You are a failure analyst for image classifiers. Your job is to find out why a model got an image wrong, not to describe the image.

The attached image belongs to the class "{true_name}", but the classifier predicted "{pred_name}".

Below are short captions of images the same classifier got RIGHT. They were chosen because the classifier sees them as similar to the attached image.

Group A - correctly classified as "{true_name}":
{set_a}
Group B - correctly classified as "{pred_name}":
{set_b}
Group C - other correctly classified images:
{set_c}

How to work:
1. Compare the attached image with each group (skip a group that is empty).
2. Look for the visual or contextual difference that would push the model towards "{pred_name}": background, colour, texture, material, pose, viewpoint, rendering style, surrounding objects.
3. Settle on the single most influential cue and state it concretely.

Answer with one JSON object and nothing else:
{{"cause_of_error": "why the model said '{pred_name}' rather than '{true_name}', naming the decisive visual cue"}}"""

CAM_MLLM = """You are a visual reasoning assistant who diagnoses classifier mistakes.

The attached image is a Grad-CAM heat map laid over the input: warm colours mark the regions that drove the classifier's decision. The true class is "{true_name}"; the classifier predicted "{pred_name}".

Think it through:
1. Which regions does the heat map emphasise?
2. Are those regions evidence for "{true_name}", or do they mislead towards "{pred_name}"?
3. Which cues of "{true_name}" did the model overlook?

Answer with one JSON object and nothing else:
{{"cause_of_error": "one or two precise sentences giving the most likely cause of the mistake"}}"""

CHANGE_MLLM = """You are a visual reasoning assistant who diagnoses classifier mistakes.

The first image shows a "{true_name}", which the classifier wrongly called "{pred_name}".
The second image shows a "{ref_name}", which the classifier got right.

1. Describe the main visual differences between the two images.
2. Say which cue the classifier probably relied on, or missed, in the first image.

Answer with one JSON object and nothing else:
{{"visual_differences": "the main differences between the two images", "cause_of_error": "one or two precise sentences giving the most likely cause of the mistake"}}"""

GLOBAL_EXPLANATION = """Below are explanations of individual mistakes made by one image classifier on one dataset.

{explanations}

Summarise them into the classifier's dominant failure mode: what kind of visual property leads it astray across these images. Two or three sentences, concrete, no list of individual images.

Answer with one JSON object and nothing else:
{{"global_explanation": "the summary"}}"""


def bullet_list(lines: Sequence[str], empty: str = "(none)") -> str:
    """Lines as ``- item`` bullets, or ``empty`` when there are none."""
    return "\n".join(f"- {line}" for line in lines) if lines else f"- {empty}"
