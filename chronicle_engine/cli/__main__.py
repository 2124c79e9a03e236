"""`python -m chronicle_engine.cli`: the same as the `chronicle` console script."""

import sys

from . import main

sys.exit(main())
