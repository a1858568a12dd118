#!/usr/bin/env python3
"""A small agent of your own, for `agent.pack: true` (docs/agents.md): it speaks the command
agent protocol (docs/agent-protocol.md) and imports a module of its folder, which is why the
folder, not only this file, travels with the run to the workers."""
import json
import sys

from knowledge import answer_for


def emit(kind, payload, **usage):
    print(json.dumps({"kind": kind, "payload": payload, **usage}), flush=True)


def main():
    request = json.loads(sys.stdin.readline())
    question = request["input"] if isinstance(request["input"], str) else json.dumps(request["input"])
    emit("agent.tool_call", {"tool": "lookup", "arguments": {"q": question}})
    answer = answer_for(question)
    emit("agent.tool_result", {"tool": "lookup", "output": answer}, input_tokens=5, output_tokens=5)
    emit("agent.final_answer", {"answer": answer})
    emit("agent.terminal", {"final_answer": answer}, cost_usd=0.0001)


if __name__ == "__main__":
    main()
