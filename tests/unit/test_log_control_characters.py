"""The text log escapes control characters a client chose (gateway.log_observer.text_line_observer)."""

from __future__ import annotations

import io
import json

from twisted.logger import Logger

from gateway.log_observer import escape_controls, json_line_observer, text_line_observer

HOSTILE = "/queue/x\r2026-01-01T00:00:00+0000 [gateway.tap#info] FORGED\x1b[2J\x1b]0;t\x07\x00\x7f\x9b1m"


def test_a_destination_with_cr_and_ansi_escapes_is_one_escaped_line() -> None:
    """Before: the CR and the escape sequences reached the file raw (a terminal showed a forged line)."""
    stream = io.StringIO()
    Logger(observer=text_line_observer(stream)).warn("may not write {destination}", destination=HOSTILE)
    text = stream.getvalue()
    assert text.count("\n") == 1
    assert not any((ord(char) < 0x20 and char != "\n") or 0x7F <= ord(char) < 0xA0 for char in text), repr(text)
    assert "may not write /queue/x\\x0d2026-01-01T00:00:00+0000 [gateway.tap#info] FORGED\\x1b[2J" in text


def test_tabs_and_twisteds_continuation_lines_are_kept() -> None:
    stream = io.StringIO()
    Logger(observer=text_line_observer(stream)).info("two\nlines\tand a tab")
    assert stream.getvalue().endswith("two\n\tlines\tand a tab\n")


def test_escape_controls_leaves_printable_text_alone() -> None:
    assert escape_controls("héllo wörld ☃ /queue/a.b") == "héllo wörld ☃ /queue/a.b"


def test_json_lines_escape_c0_controls_themselves() -> None:
    stream = io.StringIO()
    Logger(observer=json_line_observer(stream)).warn("may not write {destination}", destination=HOSTILE)
    line = stream.getvalue()
    assert line.count("\n") == 1 and "\x1b" not in line and "\r" not in line
    assert json.loads(line)["destination"] == HOSTILE
