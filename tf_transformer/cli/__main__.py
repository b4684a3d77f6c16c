"""``python -m tf_transformer.cli``: the same as ``tft``."""

import sys

from tf_transformer.cli import main

sys.exit(main())
