"""STOMP 1.0/1.1/1.2: frames, the sans-IO codec, the session state machine
and the thin Twisted protocol glue."""
