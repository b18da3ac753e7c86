"""The distillation tests share the NEMO tests' toys (``tests/nemo/nemo_toys.py``, ``tiny_recipe.py``)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
