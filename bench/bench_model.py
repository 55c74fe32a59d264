"""The long run of the embedded broker's model-based test.

Runs the same hypothesis state machine as ``tests/unit/test_broker_model.py``
(the real session and broker on a real SQLite store, checked step by step
against ``tests/support/jms_model.py``) for many more examples and steps than
CI does.  It measures no speed: it prints how many examples ran and fails
(exit status 1, with the shrunk failing sequence) on the first violation.
Run it before and after any change to the broker (the paging rewrite).

Run: ``.venv/bin/python -m bench.bench_model [--examples 5000] [--steps 80] [--paging]``
(or ``JMSGATEWAY_MODEL_EXAMPLES=5000``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=int(os.environ.get("JMSGATEWAY_MODEL_EXAMPLES", "2000")),
                        help="random client sessions to run (default 2000)")
    parser.add_argument("--steps", type=int, default=80, help="steps per session (default 80)")
    parser.add_argument("--paging", action="store_true",
                        help="with a memory limit of about two messages: nearly every queue pages (docs/paging.md)")
    options = parser.parse_args(argv if argv is not None else sys.argv[1:] if __name__ == "__main__" else [])
    from tests.unit.test_broker_model import run

    started = time.monotonic()
    try:
        run(options.examples, options.steps, paging=options.paging)
    except Exception as error:
        traceback.print_exception(error)  # (with hypothesis' notes: the failing steps)
        print(f"model violated after {time.monotonic() - started:.0f}s: {error}", flush=True)
        return 1
    print(f"{options.examples} sessions of up to {options.steps} steps matched the model "
          f"({time.monotonic() - started:.0f}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
