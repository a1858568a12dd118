#!/usr/bin/env python3
"""An example agent for agenteval's `command` agent protocol (see docs/agent-protocol.md).

It reads one JSON request on stdin, "thinks" with a tool call to a lookup table, and writes
JSON-lines events to stdout, ending with `agent.terminal`. For the test suite it can also
misbehave, chosen by AGENT_MODE or by an input of the form {"question": ..., "mode": ...}:
crash, crash_secret (prints its key on stderr, then crashes), hang, garbage, no_terminal,
echo_secret, echo_env (answers with its whole environment).
"""
import json
import os
import sys
import time

ANSWERS = {
    "capital of france": "Paris",
    "capital of japan": "Tokyo",
    "6 * 7": "42",
    "10 - 3": "7",
    "say hello": "hello",
    "shout ok": "ok",
}


def emit(kind, payload, **usage):
    print(json.dumps({"kind": kind, "payload": payload, **usage}), flush=True)


def main():
    request = json.loads(sys.stdin.readline())
    task_input = request["input"]
    mode = os.environ.get("AGENT_MODE", "")
    if isinstance(task_input, dict):
        mode = task_input.get("mode", mode)
        task_input = task_input.get("question", "")
    question = task_input if isinstance(task_input, str) else json.dumps(task_input)
    emit("agent.plan", {"text": f"look up: {question}"}, input_tokens=20, output_tokens=10, cost_usd=0.0001)
    if mode == "crash":
        print("simulated crash", file=sys.stderr)
        sys.exit(3)
    if mode == "crash_secret":
        print(f"fatal: the provider refused key {os.environ.get('API_KEY', '')}", file=sys.stderr)
        sys.exit(1)
    if mode == "hang":
        time.sleep(3600)
    if mode == "garbage":
        print("this is not json", flush=True)
        time.sleep(0.2)
    emit("agent.tool_call", {"tool": "lookup", "arguments": {"q": question}})
    answer = next((v for k, v in ANSWERS.items() if k in question.lower()), "I don't know")
    if mode == "echo_env":
        answer = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()))
    if mode == "echo_secret":
        answer = f"the key is {os.environ.get('API_KEY', '')}"
        print(f"debug: using key {os.environ.get('API_KEY', '')}", file=sys.stderr)
    emit("agent.tool_result", {"tool": "lookup", "output": answer}, input_tokens=5, output_tokens=5)
    emit("agent.final_answer", {"answer": answer})
    if mode == "no_terminal":
        return
    emit("agent.terminal", {"final_answer": answer}, cost_usd=0.0002)


if __name__ == "__main__":
    main()
