"""What a STOMP subscriber of the real gateway reads on a MESSAGE frame: text or bytes
(``amq-msg-type``, since every frame has ``content-length``) and the redelivery count
after a NACK (``JMSXDeliveryCount`` next to ``redelivered``)."""

from __future__ import annotations

import uuid

from tests.support.stomp_clients import StompClients


def test_message_frames_name_their_type_and_count_redeliveries(stomp: StompClients) -> None:
    queue = f"/queue/frames-{uuid.uuid4().hex[:8]}"
    producer = stomp.connect(text=True)
    producer.send(queue, "some text", receipt=True)
    stomp.connect().send(queue, b"\x00\x01", receipt=True)
    consumer = stomp.connect()
    consumer.subscribe(queue, "s", ack="client-individual")
    text, raw = consumer.messages(2)
    assert (text.body, text.headers["amq-msg-type"]) == (b"some text", "text")
    assert (raw.body, raw.headers["amq-msg-type"]) == (b"\x00\x01", "bytes")
    assert "JMSXDeliveryCount" not in text.headers and "redelivered" not in text.headers
    consumer.ack(raw)
    consumer.nack(text)
    again = consumer.message()
    assert again.body == b"some text" and again.headers["redelivered"] == "true"
    assert again.headers["JMSXDeliveryCount"] == "2"
    consumer.nack(again)
    assert consumer.message().headers["JMSXDeliveryCount"] == "3"
