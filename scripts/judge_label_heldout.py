"""Held-out items of the labelled judge set: sentences written one by one after the claim parser's rules were
fixed, and labelled by the rubric (docs/GRADING.md) before any judge read them. ``make_judge_labels.py`` marks them
``split: held_out`` (the template items are ``split: dev``, written while the parser was being improved).

Each entry is ``(record index into make_judge_labels.RECORDS, text, label, group)``.
"""

from __future__ import annotations

HELD_OUT = [
    # shifts: a red 3 read as an 8 (cause: colour)
    (0, "Most likely the classifier keyed on the red hue; 8s in its training data were often red.", 1.0, "paraphrase"),
    (0, "The digit's colour (red) is unusual for a 3, which pushed the model to 8.", 1.0, "paraphrase"),
    (0, "Red ink, not the shape, drove the prediction.", 1.0, "negation"),
    (0, "I would guess the colour, although the digit's size could also be involved.", 0.5, "hedge"),
    (0, "The prediction of 8 has nothing to do with colour; the stroke style is what matters.", 0.0, "negation"),
    (0, "The digit appears green, which the model associates with eights.", 0.0, "false_claim"),
    (0, "This 3 was read as an 8 because its strokes are red instead of white. Edit: color -> white", 1.0, "sheet_words"),
    (0, "This 3 was read as an 8 because its strokes are red instead of white. Edit: scale -> small", 0.0, "contradiction"),
    (0, "Several things could be responsible: colour, background, rotation.", 0.0, "everything"),
    # shifts: a dotted 7 on the left read as a 1 (cause: style)
    (1, "The 7 is made up of separate dots rather than continuous lines, so the model saw a 1.", 1.0, "synonym"),
    (1, "Because the digit sits on the left side of the frame, it was read as a 1.", 0.0, "wrong_factor"),
    (1, "The dotted rendering, and not its position on the left, explains the error.", 1.0, "negation"),
    (1, "Dotted strokes. Edit: style -> solid", 1.0, "sheet_words"),
    (1, "The 7 is drawn with solid strokes but sits on the left.", 0.0, "false_claim"),
    (1, "It might be the dotted style or the left position.", 0.5, "hedge"),
    # shifts: a 4 turned 90 degrees clockwise read as a 9 (cause: rotation)
    (2, "Turned a quarter turn clockwise, the 4 looks like a 9.", 1.0, "paraphrase"),
    (2, "The digit is rotated by roughly 85 degrees in the clockwise direction, hence the 9.", 1.0, "tolerance"),
    (2, "The digit is rotated 90 degrees counterclockwise, so the model saw a 9.", 0.0, "clockwise"),
    (2, "Its rotation of -90 degrees is the cause. Edit: angle -> 0", 1.0, "sheet_words"),
    (2, "The rotation is not the issue; the background is.", 0.0, "negation"),
    (2, "Rotation and colour together fooled it.", 0.5, "several_causes"),
    # shifts: a 2 turned 45 degrees anticlockwise, at the top, read as a 7 (cause: rotation)
    (3, "The 2 leans 45 degrees to the left, which makes it look like a 7.", 1.0, "clockwise"),
    (3, "The 2 is tilted 45 degrees clockwise, which makes it look like a 7.", 0.0, "clockwise"),
    (3, "Sitting at the top of the image and tilted, the 2 was mistaken for a 7.", 0.5, "several_causes"),
    (3, "The tilt is the main reason; the position at the top plays no role.", 1.0, "negation"),
    # shifts: a 5 on stripes read as a 6 (cause: background)
    (4, "Horizontal stripes behind the 5 break up its shape, so it reads as a 6.", 1.0, "paraphrase"),
    (4, "The patterned backdrop is the likely cause. Edit: background -> plain", 1.0, "synonym"),
    (4, "The patterned backdrop is the likely cause. Edit: color -> white", 0.0, "contradiction"),
    (4, "The checkerboard background confused the model.", 0.0, "false_claim"),
    (4, "The stripes and the small size of the digit confused the model.", 0.0, "false_claim"),
    # shifts: a small 0 on the right read as a 6 (cause: size)
    (5, "Because the 0 is so small, the classifier mistook it for a 6.", 1.0, "paraphrase"),
    (5, "The 0 is shrunken and placed to the right; either could explain the error.", 0.5, "hedge"),
    (5, "Size is not the problem here; the colour is.", 0.0, "negation"),
    (5, "Its reduced scale makes the loop look like a 6. Edit: scale -> normal", 1.0, "synonym"),
    # shifts: a yellow, outlined 9 turned 90 degrees anticlockwise on noise, read as a 4 (cause: background)
    (6, "The grainy noise in the background hides the strokes, so the 9 becomes a 4.", 1.0, "paraphrase"),
    (6, "The yellow colour, the hollow outline and the 90 degree turn all contributed.", 0.0, "several_causes"),
    (6, "The noisy background rather than the yellow colour misled the classifier.", 1.0, "negation"),
    (6, "It is upside down, which turns a 9 into a 6-like shape.", 0.0, "wrong_factor"),
    (6, "The classifier read this 9 as a 4 because of the noisy background. Edit: background -> plain", 1.0, "sheet_words"),
    # shifts: a blurred, magenta, small 8 turned 45 degrees clockwise, read as a 3 (cause: style)
    (7, "The blur smears the 8's loops so they look like a 3.", 1.0, "synonym"),
    (7, "The strokes are fuzzy and magenta; the fuzziness is what matters.", 1.0, "mllm_paragraph"),
    (7, "The magenta colour confused the classifier.", 0.0, "wrong_factor"),
    (7, "Blurred, tilted 45 degrees clockwise, small and magenta: too many changes to say which one.", 0.0, "everything"),
    (7, "Had the strokes been sharp, the 8 would have been read correctly.", 1.0, "paraphrase"),
    # cmnist: a green 3 at +15 degrees read as an 8 (cause: colour)
    (8, "Green is a colour the classifier saw mostly on eights.", 1.0, "paraphrase"),
    (8, "The slight anticlockwise tilt of 15 degrees turned the 3 into an 8.", 0.0, "wrong_factor"),
    (8, "Colour, not rotation, explains this mistake.", 1.0, "negation"),
    (8, "Colour or rotation, hard to say which.", 0.0, "everything"),
    (8, "The 3 is drawn in green. Edit: angle -> 0", 0.0, "contradiction"),
    (8, "The 3 is tilted 15 degrees clockwise and coloured green; the colour is the culprit.", 0.0, "false_claim"),
    # cmnist: a blue 7 at -20 degrees read as a 2
    (9, "Its blue colour made the 7 look like a 2 to the model.", 1.0, "paraphrase"),
    (9, "The 7 leans 20 degrees to the right, but that is not why it failed; the blue colour is.", 1.0, "negation"),
    (9, "A red 7 is read as a 2 because of its colour.", 0.0, "false_claim"),
    (9, "The model looks at the hue instead of the shape. Edit: color -> red", 1.0, "synonym"),
    # cmnist: a grey 1 at -10 degrees read as a 4
    (10, "The grey strokes are the reason this 1 became a 4.", 1.0, "paraphrase"),
    (10, "The gray strokes are the reason this 1 became a 4.", 1.0, "synonym"),
    (10, "Probably the 10 degree tilt, maybe the grey colour.", 0.0, "everything"),
    (10, "It's the colour of the digit. Edit: change the colour to red", 1.0, "class_free"),
    # cmnist: an orange 6 at +30 degrees read as a 0
    (11, "Orange strokes, which the model has rarely seen on a 6, caused the mistake.", 1.0, "paraphrase"),
    (11, "The 6 is rotated 30 degrees anticlockwise and the model thinks it is a 0.", 0.0, "wrong_factor"),
    (11, "The 6 is rotated 20 degrees anticlockwise and it is orange; the orange colour caused it.", 0.0, "false_claim"),
    (11, "This 6 was read as a 0 because of its orange colour, not because of its rotation.", 1.0, "negation"),
    # clevr: a large red metal cube read as a cylinder (cause: material)
    (12, "The metallic sheen of the cube made the classifier call it a cylinder.", 1.0, "synonym"),
    (12, "The object is large and red; the model probably thinks large red objects are cylinders.", 0.0, "wrong_factor"),
    (12, "It's made of metal rather than rubber, which the classifier links with cylinders.", 1.0, "paraphrase"),
    (12, "The rubber surface misled it.", 0.0, "false_claim"),
    (12, "Material and colour both played a part. Edit: material -> rubber", 0.5, "several_causes"),
    # clevr: a small blue metal cube read as a sphere
    (13, "Because the small blue cube is shiny, the model called it a sphere.", 1.0, "mllm_paragraph"),
    (13, "Size, colour and material might all matter here.", 0.0, "everything"),
    (13, "Not the size, not the colour: the metal material fooled the classifier.", 1.0, "negation"),
    (13, "This cube was read as a sphere because it is blue. Edit: color -> gray", 0.0, "wrong_factor"),
    # clevr: a medium yellow rubber sphere read as a cube
    (14, "The matte rubber finish of the sphere made the model see a cube.", 1.0, "paraphrase"),
    (14, "The sphere looks metallic, so the model guessed cube.", 0.0, "false_claim"),
    (14, "The sphere was read as a cube because of its rubber material. Edit: size -> large", 0.0, "contradiction"),
    (14, "Either the rubber material or the yellow colour led to the cube prediction.", 0.5, "hedge"),
    # clevr: a large brown metal cylinder read as a cube
    (15, "The brown metal cylinder was seen as a cube because metal is unusual for cylinders in training.", 1.0, "mllm_paragraph"),
    (15, "The cylinder's material, metal, is what misled the model.", 1.0, "paraphrase"),
    (15, "The size of the cylinder, which is small, confused the model.", 0.0, "false_claim"),
    (15, "The cause is its material; colour and size are irrelevant.", 1.0, "negation"),
]  # fmt: skip
