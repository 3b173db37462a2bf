"""The agent's loop: the graph and its nodes, one model turn, the session's live objects, the state, the context budget, the prompts, and the runner."""
