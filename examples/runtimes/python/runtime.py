#!/usr/bin/env python3
"""A reference runtime for bcpgw in Python, standard library only.

It speaks the wire protocol of docs/protocol.md (JSON lines on stdin and
stdout) for both roles. Where a real runtime would ask its model, it writes
a sample answer built from the spec, so it runs without a model or a key.

Reader:
  - remembers the subscriptions of each bcp_subscriptions_active;
  - on every prompt, publishes one response to each announced subscription
    and waits (at most PYRT_VERDICT_TIMEOUT) for each bcp_validation_result;
  - answers each bcp_query with one bcp_response and waits for its verdict
    the same way.
Controller:
  - on every prompt, sends each query of PYRT_QUERIES and waits for its
    bcp_query_sent or bcp_query_error;
  - applies each bcp_response_delivery once: it appends the delivery to
    deliveries.jsonl in its working directory, and a delivery whose
    delivery_id is already there (the gateway sends it again after a
    crash) is acknowledged without being applied again. The file survives
    restarts: the working directory is the agent's own, kept by the gateway.
Every turn (prompt, bcp_query, bcp_response_delivery) ends with one result.

Configuration, from the environment (set it in the definition's env):
  PYRT_QUERIES           a JSON list of {to, category, spec} (and optionally
                         request_id): sent on every prompt; each gets a fresh
                         request_id unless it names one
  PYRT_RESPONSES         a JSON object {subscription_id: response}: what to
                         publish instead of the sample built from the spec
  PYRT_ANSWER            a JSON object: the answer to every query instead of
                         the sample built from the spec
  PYRT_VERDICT_TIMEOUT   seconds a turn waits for a verdict (default 30); a
                         Cat-3 push or answer is held for a person, and its
                         verdict is logged whenever it comes
  PYRT_LOG               a file to which one JSON object is appended per
                         thing that happened (for tests and scripts)
  PYRT_TRACE             a file to which every protocol line is appended,
                         as {"dir": "in" | "out", "line": "..."}
  PYRT_CRASH_AFTER_APPLY N: exit with status 3 right after applying the
                         Nth delivery recorded in deliveries.jsonl, before
                         its result (to try redelivery)
Its log lines go to stderr with a [LEVEL] prefix, which the gateway relays.
"""

import json
import os
import select
import sys
import time
import uuid


def env_json(name, default):
    raw = os.environ.get(name, "")
    if not raw:
        return default
    try:
        return json.loads(raw)
    except ValueError as e:
        sys.stderr.write("[ERROR] %s is not valid JSON: %s\n" % (name, e))
        sys.exit(2)


QUERIES = env_json("PYRT_QUERIES", [])
RESPONSES = env_json("PYRT_RESPONSES", {})
ANSWER = env_json("PYRT_ANSWER", None)
VERDICT_TIMEOUT = float(os.environ.get("PYRT_VERDICT_TIMEOUT") or 30)
LOG = os.environ.get("PYRT_LOG", "")
TRACE = os.environ.get("PYRT_TRACE", "")
CRASH_AFTER_APPLY = int(os.environ.get("PYRT_CRASH_AFTER_APPLY") or 0)


class Shutdown(Exception):
    """The gateway said shutdown, or closed stdin."""


def append_line(path, obj):
    """Appends obj as one JSON line with one write."""
    with open(path, "ab") as f:
        f.write(json.dumps(obj).encode() + b"\n")


def note(event, level="info", **fields):
    """Logs one thing that happened: to stderr, and to PYRT_LOG if set."""
    text = " ".join("%s=%s" % (k, json.dumps(v)) for k, v in sorted(fields.items()))
    sys.stderr.write("[%s] %s %s\n" % (level.upper(), event, text))
    sys.stderr.flush()
    if LOG:
        fields["event"] = event
        append_line(LOG, fields)


# --- the wire --------------------------------------------------------------

class Wire:
    """JSON lines with the gateway: read from stdin, written to stdout.

    Messages read while waiting for a particular one are kept, in order,
    and handed out by later reads."""

    def __init__(self):
        # Keep the real stdout for the protocol and point file descriptor 1
        # (and sys.stdout) at stderr, so that a stray print, ours or a
        # library's, lands in the log instead of corrupting the stream.
        self.out = os.fdopen(os.dup(1), "wb", buffering=0)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        self.buf = bytearray()
        self.eof = False
        self.kept = []

    def send(self, msg):
        line = json.dumps(msg, separators=(",", ":"))
        if TRACE:
            append_line(TRACE, {"dir": "out", "line": line})
        self.out.write(line.encode() + b"\n")  # one line, one write

    def _read_line(self, deadline):
        """The next line without its newline; None at the end of stdin.
        Raises TimeoutError once deadline (time.monotonic()) has passed."""
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[: i + 1]
                return line
            if self.eof:
                if self.buf:
                    line = bytes(self.buf)
                    self.buf.clear()
                    return line
                return None
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([0], [], [], left)[0]:
                    raise TimeoutError()
            chunk = os.read(0, 65536)
            if chunk:
                self.buf += chunk
            else:
                self.eof = True

    def _read(self, deadline):
        """The next message read from stdin (not a kept one)."""
        while True:
            line = self._read_line(deadline)
            if line is None:
                raise Shutdown("stdin closed")
            line = line.strip()
            if not line:
                continue
            text = line.decode("utf-8", "replace")
            if TRACE:
                append_line(TRACE, {"dir": "in", "line": text})
            try:
                msg = json.loads(text)
            except ValueError:
                msg = None
            if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
                note("bad_line", level="warn", line=text[:200])
                continue
            if msg["type"] == "shutdown":
                raise Shutdown(msg.get("reason", ""))
            return msg

    def recv(self):
        """The next message: a kept one first."""
        if self.kept:
            return self.kept.pop(0)
        return self._read(None)

    def wait_for(self, match, timeout):
        """The first message, kept or new, for which match is true; the
        others are kept. None if none came within timeout seconds."""
        for i, msg in enumerate(self.kept):
            if match(msg):
                return self.kept.pop(i)
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self._read(deadline)
            except TimeoutError:
                return None
            if match(msg):
                return msg
            self.kept.append(msg)


# --- what a model would write ----------------------------------------------

SAMPLES = {
    "short_text": "nothing new to report",
    "short_list": "alpha, beta",
    "person_name": "Ada Lovelace",
    "date": "1843-07-10",
    "email": "ada@example.org",
}


def first_words(text, n):
    return " ".join(text.split()[: max(int(n or 1), 1)])


def sample(spec):
    """A valid answer to a spec: a bcp_query, or an announced subscription.
    Specs come in both spellings; either is read."""
    category = spec.get("category")
    if category == 1:
        out = {}
        for f in spec.get("fields") or []:
            kind = f.get("type")
            if kind == "boolean":
                out[f["name"]] = True
            elif kind == "enum":
                out[f["name"]] = (f.get("values") or f.get("options"))[0]
            elif kind == "integer":
                out[f["name"]] = f.get("min", 0)
        return out
    if category == 2:
        out = {}
        for q in spec.get("questions") or []:
            fmt = q.get("expected_format") or q.get("format") or "short_text"
            if fmt == "integer":
                text = str(q.get("min", 1))
            else:
                text = SAMPLES.get(fmt, SAMPLES["short_text"])
            out[q.get("id") or q.get("name")] = first_words(text, q.get("max_words") or spec.get("max_words"))
        return out
    return {"summary": first_words("Nothing changed since the last summary.", spec.get("max_words"))}


# --- the Controller's record of applied deliveries -------------------------

class Applied:
    """deliveries.jsonl in the working directory: one line per applied
    delivery. Applying a delivery and recording its delivery_id are one
    append, so a crash leaves it either applied and recorded or neither."""

    def __init__(self, workdir):
        self.path = os.path.join(workdir, "deliveries.jsonl")
        self.ids = set()
        try:
            with open(self.path, "r+b") as f:
                data = f.read()
                end = data.rfind(b"\n") + 1
                if end < len(data):
                    # A line cut short by a crash: that delivery was not
                    # applied, and comes again.
                    f.truncate(end)
                for line in data[:end].splitlines():
                    self.ids.add(json.loads(line)["delivery_id"])
        except FileNotFoundError:
            pass

    def __contains__(self, delivery_id):
        return delivery_id in self.ids

    def apply(self, d):
        record = {k: d.get(k) for k in ("delivery_id", "from_agent", "subscription_id", "query_id",
                                         "request_id", "category", "response", "anomalies", "items")}
        with open(self.path, "ab") as f:
            f.write(json.dumps(record).encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())
        self.ids.add(d.get("delivery_id", ""))
        return len(self.ids)


# --- the runtime -------------------------------------------------------------

class Runtime:
    def __init__(self, wire):
        self.wire = wire
        self.subscriptions = []
        self.applied = None

    def start(self):
        msg = self.wire.recv()
        if msg.get("type") != "start":
            note("no_start", level="error", type=msg.get("type"))
            sys.exit(2)
        agent = msg.get("agent", {})
        self.name = agent.get("name", "")
        self.applied = Applied(agent.get("cwd") or os.getcwd())
        note("start", name=self.name, tools=agent.get("tools", []), applied=len(self.applied.ids))
        self.wire.send({"type": "ready"})

    def run(self):
        self.start()
        while True:
            msg = self.wire.recv()
            kind = msg["type"]
            if kind in ("prompt", "bcp_query", "bcp_response_delivery"):
                self.turn(msg)
            elif kind == "bcp_subscriptions_active":
                self.subscriptions = msg.get("subscriptions", [])
                note("subscriptions", ids=[s["controller"] + "/" + s["subscription_id"] for s in self.subscriptions])
            elif kind == "bcp_validation_result":
                # A verdict that came after its turn stopped waiting (a
                # Cat-3 item decided by a person, say).
                self.verdict(msg, late=True)
            elif kind == "bcp_query_error":
                # A query that was sent and then failed: query_timeout, an
                # answer a reviewer rejected, a channel removed by a reload.
                note("query_failed", level="warn", request_id=msg.get("request_id"),
                     query_id=msg.get("query_id"), reason=msg.get("reason"))
            elif kind == "error":
                note("gateway_error", level="warn", message=msg.get("message"))
            else:
                # bcp_query_sent outside a wait, interrupt (bcpgw does not
                # send it), and types of later versions: nothing to do.
                note("ignored", type=kind)

    def turn(self, msg):
        """Runs one turn and ends it with result."""
        began = time.monotonic()
        failed = False
        try:
            if msg["type"] == "prompt":
                self.on_prompt(msg)
            elif msg["type"] == "bcp_query":
                self.on_query(msg)
            else:
                self.on_delivery(msg)
        except Shutdown:
            raise
        except Exception as e:
            if msg["type"] == "bcp_response_delivery":
                # A result acknowledges a delivery, is_error or not: one
                # that could not be applied must not be answered. Exiting
                # without a result makes the gateway send it again.
                note("delivery_failed", level="error", delivery_id=msg.get("delivery_id"), error=repr(e))
                raise
            note("turn_failed", level="error", type=msg["type"], error=repr(e))
            failed = True
        self.wire.send({"type": "result", "duration_ms": int((time.monotonic() - began) * 1000),
                        "num_turns": 1, "cost_usd": 0, "is_error": failed})

    def verdict(self, msg, late=False):
        note("verdict", level="info" if msg.get("success") else "warn", late=late,
             subscription_id=msg.get("subscription_id"), query_id=msg.get("query_id"),
             success=msg.get("success", False), detail=msg.get("detail", ""))

    def wait_verdict(self, key, value):
        v = self.wire.wait_for(lambda m: m["type"] == "bcp_validation_result" and m.get(key) == value, VERDICT_TIMEOUT)
        if v is None:
            note("verdict_pending", **{key: value})
        else:
            self.verdict(v)

    # Both roles: a trigger from cron or an operator.
    def on_prompt(self, msg):
        note("prompt", content=msg.get("content", ""), metadata=msg.get("metadata"))
        for sub in list(self.subscriptions):
            sid = sub["subscription_id"]
            response = RESPONSES.get(sid)
            if response is None:
                response = sample(sub)
            self.wire.send({"type": "bcp_response", "subscription_id": sid,
                            "controller": sub["controller"], "response": response})
            note("published", subscription_id=sid, controller=sub["controller"])
            self.wait_verdict("subscription_id", sid)
        for q in QUERIES:
            self.send_query(q)

    # Controller: ask a Reader. The answer comes later, as a delivery turn.
    def send_query(self, q):
        rid = q.get("request_id") or uuid.uuid4().hex
        self.wire.send({"type": "bcp_query_request", "request_id": rid, "to": q["to"],
                        "category": q["category"], "spec": q["spec"]})
        reply = self.wire.wait_for(lambda m: m["type"] in ("bcp_query_sent", "bcp_query_error")
                                   and m.get("request_id") == rid, VERDICT_TIMEOUT)
        if reply is None:
            note("query_unanswered", level="warn", request_id=rid, to=q["to"])
        elif reply["type"] == "bcp_query_sent":
            note("query_sent", request_id=rid, query_id=reply.get("query_id"), to=q["to"],
                 bits=reply.get("bandwidth_bits"))
        else:
            note("query_refused", level="warn", request_id=rid, to=q["to"], reason=reply.get("reason"))

    # Reader: answer a Controller's query, within this turn.
    def on_query(self, msg):
        qid = msg["query_id"]
        note("query", query_id=qid, from_agent=msg.get("from_agent"), category=msg.get("category"),
             context=msg.get("context"))
        answer = ANSWER if ANSWER is not None else sample(msg)
        self.wire.send({"type": "bcp_response", "query_id": qid, "response": answer})
        self.wait_verdict("query_id", qid)

    # Controller: validated data, applied once per delivery_id.
    def on_delivery(self, d):
        did = d.get("delivery_id", "")
        if did and did in self.applied:
            note("duplicate", delivery_id=did, redelivered=d.get("redelivered", False))
            return
        n = self.applied.apply(d)
        note("applied", delivery_id=did, redelivered=d.get("redelivered", False),
             from_agent=d.get("from_agent"), subscription_id=d.get("subscription_id"),
             query_id=d.get("query_id"), request_id=d.get("request_id"),
             category=d.get("category"), response=d.get("response"))
        if CRASH_AFTER_APPLY and n == CRASH_AFTER_APPLY:
            note("crash", level="warn", delivery_id=did)
            os._exit(3)


def main():
    wire = Wire()
    try:
        Runtime(wire).run()
    except Shutdown as e:
        note("shutdown", reason=str(e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
