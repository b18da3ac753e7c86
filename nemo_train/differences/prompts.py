"""Prompt texts of the model-differences methods, in the structure of "Towards automatic discovery and
explanation of differences between vision models" (App. A), in our own words."""

from __future__ import annotations

METRIC_DEFINITIONS = (
    "Completeness: the correlation between which model an evaluator predicts to be better from the explanation "
    "alone and which model actually is better, over many conditions (higher is better, at most 1). "
    "Density: how much Completeness drops when a quarter of the explanation's tokens are removed at random "
    "(higher means more of the words carry information; negative means some words mislead)."
)

STYLE_RULES = (
    "- The explanation must be correct and cover every aspect of the results.\n"
    "- Do not restate the results one by one, list pros and cons verbatim, or quote numbers or result labels.\n"
    "- Write one paragraph, short enough for one or two lines.\n"
    "- Use short, direct sentences without filler connectors or long clauses."
)

EVALUATOR = (
    "You are a machine learning researcher. Model A and Model B are {task}. You will read an explanation of how "
    "Model A and Model B differ. Using only the explanation, answer the question by choosing one option.\n\n"
    "[Example]\n{example}\n\n"
    "Now the evaluation.\nExplanation: {explanation}\n\n"
    "Question: Which model performs better on images with this condition: {condition}?\n"
    "Options: [1] Model A, [2] Model B, [3] Cannot be determined\n"
    "Answer with the option number and its text only."
)

SUMMARIZE = (
    "You are a machine learning expert. Model A and Model B are {task}. From the evaluation results below, "
    "explain the strengths and weaknesses of Model A and Model B.\nRequirements:\n{rules}\n\n"
    "Evaluation results (condition: which model is more accurate and by how much):\n{results}\n\n"
    'Reply with a JSON object only: {{"explanation": "<your explanation>"}}'
)

UPDATE = (
    "You are a machine learning expert. Your task is to check an explanation of how two models differ against "
    "new results and improve it if needed. Model A and Model B are {task}.\n\n"
    "Metric definitions: {definitions}\n\nRequirements for the explanation:\n{rules}\n\n"
    "Your role:\n1. Check whether the explanation accounts for the new experimental results.\n"
    "2. Give feedback on how the explanation could be improved.\n"
    "3. Write an updated explanation that keeps the original points and adds the new findings, complete and compact.\n\n"
    "Inputs:\n- Explanation: {explanation}\n- Metrics before the new results: {before}\n"
    "- Experimental results under the new conditions:\n{results}\n- Metrics of the explanation on all results so far: {after}\n\n"
    'Reply with a JSON object only: {{"feedback": "<feedback>", "explanation": "<updated explanation>"}}'
)

EXPLORE = (
    "You are a machine learning expert. You wrote the explanations below of the strengths and weaknesses of two "
    "models, Model A and Model B ({task}), and they were scored.\n\nMetric definitions: {definitions}\n\n"
    "History:\n{history}\n\n"
    "To improve these scores you must gather more evidence by testing further conditions. Allowed conditions:\n"
    "{space}\n\nChoose the values you consider most important to test next; every value must be one of the allowed "
    'ones. For each condition decide the strategy: "exploration" (search new kinds of conditions broadly) or '
    '"exploitation" (probe around promising conditions). Conditions already tested: {tested}.\n\n'
    "Reply with a JSON object only, with exactly {k} different conditions: "
    '{{"conditions": [{{"strategy": "exploration", "condition": {example}}}, ...]}}'
)
