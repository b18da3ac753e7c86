"""Prompt texts that turn an explanation into an edit (our wording of the NEMO paper, App. A).

An image-editing instruction (:class:`~nemo_train.scoring.interventions.LLMInstructionDeriver`), a rewritten
class prompt of a zero-shot target (the same deriver in prompt mode) and an attribute edit of generated data
(:class:`~nemo_train.scoring.interventions.LLMAttributeDeriver`). Each asks for one JSON object (its keys are
written in the prompt); templates are plain ``str.format`` strings so a config can replace any of them.
"""

EDIT_INSTRUCTION = """An image of a "{true_name}" was classified as "{pred_name}".

Suspected reason for the mistake: {hypothesis}

Write one image-editing instruction that removes the suspected reason, so that an image editor could produce a version the classifier gets right.
Rules:
- Target the suspected reason directly.
- Ask for a concrete change of content, such as "Make the background a plain wall" or "Change the cup to blue". Generic edits (sharpen, enlarge, raise contrast) are not allowed.
- Never mention or hint at "{pred_name}".
- One short imperative sentence, under ten words.

Answer with one JSON object and nothing else:
{{"reasoning": "how the edit addresses the suspected reason", "solution": "the editing instruction"}}"""


PROMPT_REWRITE = """An image of a "{true_name}" was classified as "{pred_name}" by a zero-shot image-text model.

Suspected reason for the mistake: {hypothesis}
Prompt that failed: "{original_prompt}"

Rewrite the prompt for the true class so the model would match the image to it.
Rules:
- At most 15 words, a plain caption (zero-shot models like short direct captions).
- Describe the scene or setting, not a checklist of parts; no phrases like "clearly showing".
- No negations ("not", "no", "unlike").
- Work the cue named in the suspected reason naturally into the caption.

Answer with one JSON object and nothing else:
{{"reasoning": "how the caption reflects the suspected reason", "solution": "a photo of ... {true_name} ..."}}"""

ATTRIBUTE_INSTRUCTION = """An image of a "{true_name}" was classified as "{pred_name}".

Suspected reason for the mistake: {hypothesis}

The image was generated from these attributes and their allowed values:
{vocabulary}
Pick the ONE attribute the suspected reason is about and the value it should take so that the reason goes away.
Read the whole reason. If it ends with a proposed edit ("Edit: ..."), that edit is only a hint: when it changes an
attribute the reason's words do not blame, follow the words, not the edit.

Answer with one JSON object and nothing else:
{{"attribute": "one attribute name from the list", "value": "one allowed value of that attribute"}}"""
