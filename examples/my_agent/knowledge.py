"""What the example agent knows: change an answer here and the run's `agent_sha256` changes."""

ANSWERS = {
    "capital of france": "Paris",
    "capital of japan": "Tokyo",
    "6 * 7": "42",
    "10 - 3": "7",
    "say hello": "hello",
    "shout ok": "ok",
}


def answer_for(question):
    return next((v for k, v in ANSWERS.items() if k in question.lower()), "I don't know")
