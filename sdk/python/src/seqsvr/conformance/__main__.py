"""``python -m seqsvr.conformance static|load ...``: see :mod:`seqsvr.conformance.runner`."""

import sys

from .runner import main

sys.exit(main())
