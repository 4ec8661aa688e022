#!/usr/bin/python3
"""A stand-in for TriOnyx's agent runner, for bcpgw: no model, Python's
standard library only.

It speaks the runtime protocol the way TriOnyx's runtime/agent_runner.py
and runtime/protocol.py do, for both roles, so that bcpgw can be tried and
tested against a runtime written for TriOnyx's gateway:

- a Controller writes bcp_query_request specs in TriOnyx's spellings
  (questions {name, format, max_words} without question text, enum choices
  as "options", the context inside the spec), takes its own request_id (a
  uuid4 hex) as the query's id, ignores bcp_query_sent, and matches
  bcp_response_delivery and bcp_query_error by that id;
- a Reader reads bcp_query and bcp_subscriptions_active as TriOnyx's
  runner does (a question's "name", "format" and "max_words", defaulting
  to 10; an enum's "options"), answers Cat-2 keyed by name and Cat-3 as
  {"response": ...}, and waits for each bcp_validation_result;
- every turn ends with a result that carries the token counts at the top
  level (input_tokens, output_tokens and the cache counts);
- on a "query" prompt it also asks for a service of TriOnyx's gateway
  (send_message_request) and waits for the send_message_response.

Configuration, from the environment (the agent definition's env):
  TRIONYX_LOG      required: a file to which one JSON object is appended per
                   thing that happened
  TRIONYX_QUERIES  a JSON list of {to, category, spec}: sent on every prompt
                   "query", each with a fresh request_id
Prompts: "query" (Controller), "publish" (Reader: one publish to every
announced subscription); anything else is only logged.
"""

import json
import os
import sys
import uuid

LOG = os.environ.get("TRIONYX_LOG", "")
QUERIES = json.loads(os.environ.get("TRIONYX_QUERIES") or "[]")

# Messages read while waiting for something else, handled afterwards.
pending = []
# The request ids this Controller sent: TriOnyx's runner knows its queries
# by them.
my_requests = set()
subscriptions = []


def log(event, **fields):
    fields["event"] = event
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps(fields) + "\n")


def emit(msg):
    sys.stdout.write(json.dumps(msg, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def read():
    """The next message from the gateway, or None at the end of stdin."""
    if pending:
        return pending.pop(0)
    while True:
        line = sys.stdin.readline()
        if not line:
            return None
        line = line.strip()
        if line:
            return json.loads(line)


def wait_for(match):
    """Read until a message matches; the others are kept for later."""
    kept = []
    try:
        while True:
            line = sys.stdin.readline()
            if not line:
                return None
            if not line.strip():
                continue
            msg = json.loads(line)
            if match(msg):
                return msg
            kept.append(msg)
    finally:
        pending.extend(kept)


def result(turns=1):
    # As protocol.emit_result writes it when the SDK reported usage.
    emit({"type": "result", "duration_ms": 12, "num_turns": turns, "cost_usd": 0.0021,
          "is_error": False, "input_tokens": 321, "output_tokens": 45,
          "cache_creation_input_tokens": 6, "cache_read_input_tokens": 789})


# --- what a Reader's model would see and write --------------------------

def seen(category, fields, questions, max_words):
    """The spec as TriOnyx's runner renders it for its model."""
    out = []
    if category == 1:
        for f in fields or []:
            if f.get("type") == "enum":
                out.append("%s (enum): one of %s" % (f.get("name", "unknown"), f.get("options", [])))
            elif f.get("type") == "integer":
                out.append("%s (integer) (range: %s-%s)" % (f.get("name", "unknown"), f.get("min"), f.get("max")))
            else:
                out.append("%s (%s)" % (f.get("name", "unknown"), f.get("type", "unknown")))
    elif category == 2:
        for q in questions or []:
            out.append("%s (format: %s, max %s words)" % (
                q.get("name", "unknown"), q.get("format", "short_text"), q.get("max_words", 10)))
    elif category == 3:
        out.append("directive: %s (max %s words)" % (fields, max_words))
    return out


SAMPLES = {
    "person_name": "Ada Lovelace",
    "date": "1843-07-10",
    "email": "ada@example.org",
    "integer": "3",
    "short_list": "engines, notes",
    "short_text": "analytical engine notes",
}


def answer(category, fields, questions, directive, max_words):
    """The answer a model told what the runner shows would write."""
    if category == 1:
        out = {}
        for f in fields or []:
            kind = f.get("type")
            if kind == "enum":
                out[f["name"]] = f.get("options", ["?"])[-1]
            elif kind == "integer":
                out[f["name"]] = f.get("max", 0)
            else:
                out[f["name"]] = True
        return out
    if category == 2:
        out = {}
        for q in questions or []:
            words = SAMPLES.get(q.get("format", "short_text"), "something").split()
            out[q.get("name", "unknown")] = " ".join(words[: q.get("max_words", 10)])
        return out
    words = ("Summary of what was asked: " + (directive or "")).split()
    return {"response": " ".join(words[: max_words or 10])}


# --- turns -----------------------------------------------------------------

def on_query(msg):
    category = msg.get("category", 0)
    log("query", query_id=msg.get("query_id", ""), category=category, from_agent=msg.get("from_agent", ""),
        context=msg.get("context"),
        seen=seen(category, msg.get("fields"), msg.get("questions"), msg.get("max_words"))
        if category != 3 else ["directive: %s (max %s words)" % (msg.get("directive"), msg.get("max_words"))])
    qid = msg.get("query_id", "")
    emit({"type": "bcp_response", "query_id": qid,
          "response": answer(category, msg.get("fields"), msg.get("questions"), msg.get("directive"), msg.get("max_words"))})
    verdict = wait_for(lambda m: m.get("type") == "bcp_validation_result" and m.get("query_id") == qid)
    if verdict is not None:
        log("verdict", query_id=qid, success=verdict.get("success", False), detail=verdict.get("detail", ""))
    result()


def on_prompt(msg):
    content = msg.get("content", "")
    log("prompt", content=content)
    if content == "query":
        for q in QUERIES:
            request_id = uuid.uuid4().hex
            my_requests.add(request_id)
            emit({"type": "bcp_query_request", "request_id": request_id, "to": q["to"],
                  "category": q["category"], "spec": q["spec"]})
            log("request", request_id=request_id, to=q["to"])
        # A service of TriOnyx's gateway that bcpgw does not offer.
        request_id = uuid.uuid4().hex
        emit({"type": "send_message_request", "request_id": request_id, "to": "nobody",
              "message_type": "note", "payload": {"text": "hello"}})
        reply = wait_for(lambda m: m.get("type") == "send_message_response" and m.get("request_id") == request_id)
        if reply is not None:
            log("send_message_response", success=reply.get("success", False), detail=reply.get("detail", ""))
    elif content == "publish":
        for sub in subscriptions:
            category = sub.get("category", 0)
            response = answer(category, sub.get("fields"), sub.get("questions"), sub.get("directive"), sub.get("max_words"))
            if category == 3:
                response = {"response": response["response"]}
            emit({"type": "bcp_response", "subscription_id": sub["subscription_id"],
                  "controller": sub["controller"], "response": response})
            verdict = wait_for(lambda m, s=sub: m.get("type") == "bcp_validation_result"
                               and m.get("subscription_id") == s["subscription_id"])
            if verdict is not None:
                log("publish_verdict", subscription_id=sub["subscription_id"],
                    success=verdict.get("success", False), detail=verdict.get("detail", ""))
    result()


def on_delivery(msg):
    qid = msg.get("query_id", "")
    log("delivery", query_id=qid, subscription_id=msg.get("subscription_id"), category=msg.get("category", 0),
        from_agent=msg.get("from_agent", ""), response=msg.get("response", {}),
        matched=(qid in my_requests) if not msg.get("subscription_id") else None)
    result()


def on_query_error(msg):
    log("query_error", request_id=msg.get("request_id", ""), to_agent=msg.get("to_agent", ""),
        reason=msg.get("reason", ""), matched=msg.get("request_id", "") in my_requests)
    result()


def main():
    if not LOG:
        sys.stderr.write("TRIONYX_LOG is required\n")
        return 2
    start = read()
    if start is None or start.get("type") != "start":
        sys.stderr.write("expected start\n")
        return 2
    log("start", name=start.get("agent", {}).get("name", "unnamed"), tools=start.get("agent", {}).get("tools", []))
    emit({"type": "ready"})
    while True:
        msg = read()
        if msg is None:
            return 0
        kind = msg.get("type")
        if kind == "shutdown":
            return 0
        if kind == "bcp_subscriptions_active":
            subscriptions[:] = msg.get("subscriptions", [])
            log("subscriptions", seen=[s.get("subscription_id") + ": " + "; ".join(
                seen(s.get("category"), s.get("fields"), s.get("questions"), s.get("max_words"))
                if s.get("category") != 3 else ["directive: %s (max %s words)" % (s.get("directive"), s.get("max_words"))])
                for s in subscriptions])
        elif kind == "prompt":
            on_prompt(msg)
        elif kind == "bcp_query":
            on_query(msg)
        elif kind == "bcp_response_delivery":
            on_delivery(msg)
        elif kind == "bcp_query_error":
            on_query_error(msg)
        elif kind == "interrupt":
            emit({"type": "interrupted", "reason": msg.get("reason", "")})
        elif kind == "error":
            log("error", message=msg.get("message", ""))
        else:
            # TriOnyx's runner ignores what it does not know (bcp_query_sent).
            log("ignored", type=kind)


if __name__ == "__main__":
    sys.exit(main())
