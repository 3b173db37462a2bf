"""ratchet's agent side: the state machine, model clients, the git workspace, batch runs and the CLI."""
