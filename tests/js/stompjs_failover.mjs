// A @stomp/stompjs client over WebSocket that fails over between gateways (issue 35 #2).
//
// node stompjs_failover.mjs <queue> <count> <ws-url> [<ws-url> ...]
//
// stompjs takes one brokerURL; its documented hook for a list is beforeConnect, which runs before
// every (re)connection attempt: here it moves to the next URL each time, so after the active
// gateway dies the reconnects land on the standby once it has taken over.  The client subscribes
// (client-individual acks), sends <count> persistent messages one at a time, each with a receipt
// and an x-dedup-id, resends those whose RECEIPT did not come before a disconnect, acknowledges
// every delivery, and ends once every message was receipted and delivered.  It prints one JSON
// line per event for the test: connected (url), receipted (body), message (body, redelivered), done.
import { Client } from "@stomp/stompjs";
import WebSocket from "ws";

Object.assign(globalThis, { WebSocket }); // (Node 20 has no WebSocket of its own: stompjs' documented way)

const [queue, countText, ...urls] = process.argv.slice(2);
const count = Number(countText);
const say = event => process.stdout.write(JSON.stringify(event) + "\n");

let attempt = 0;
let next = 0; // the next body to send
let waiting = null; // {body, receipt} sent, RECEIPT not seen
const receipted = new Set();
const delivered = new Set();

const client = new Client({
  reconnectDelay: 200,
  heartbeatIncoming: 0,
  heartbeatOutgoing: 0,
  connectionTimeout: 2000,
  beforeConnect: c => { c.brokerURL = urls[attempt++ % urls.length]; },
});

function sendNext() {
  if (!client.connected || waiting !== null) return;
  if (next >= count) { finish(); return; }
  const body = `m-${next}`;
  const receipt = `r-${body}-${attempt}`;
  waiting = { body, receipt };
  client.watchForReceipt(receipt, () => {
    if (waiting === null || waiting.receipt !== receipt) return;
    receipted.add(body);
    say({ event: "receipted", body });
    waiting = null;
    next += 1;
    setTimeout(sendNext, 5);
  });
  client.publish({ destination: queue, body,
                   headers: { persistent: "true", receipt, "x-dedup-id": body } });
}

function finish() {
  if (receipted.size === count && delivered.size === count) {
    say({ event: "done" });
    client.deactivate().then(() => process.exit(0));
  }
}

client.onConnect = () => {
  say({ event: "connected", url: client.brokerURL });
  waiting = null; // (unreceipted: resent with the same x-dedup-id)
  client.subscribe(queue, frame => {
    const body = frame.body;
    say({ event: "message", body, redelivered: frame.headers.redelivered === "true" });
    delivered.add(body);
    frame.ack();
    finish();
  }, { ack: "client-individual" });
  sendNext();
};
client.onWebSocketClose = () => { waiting = null; };
client.onStompError = frame => say({ event: "error", message: frame.headers.message });

setTimeout(() => { say({ event: "timeout" }); process.exit(2); }, 120000);
client.activate();
