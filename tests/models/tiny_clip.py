"""The smallest CLIP settings the tests train (a few seconds on CPU): 16 px, one layer per tower."""

TINY_CLIP = dict(
    image_size=16, patch_size=8, vision_width=32, vision_layers=1, text_width=32, text_layers=1, heads=2, embed_dim=16
)
