"""Entry point of ``python -m gateway.pipeline`` and of ``spark-submit gateway/pipeline/__main__.py``.

Takes the arguments of ``jmsgateway pipeline`` (see :mod:`gateway.pipeline.cli`).
"""

from __future__ import annotations

import sys

from gateway.pipeline.cli import main

if __name__ == "__main__":
    sys.exit(main())
