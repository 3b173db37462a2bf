"""Learning: the RL environment over the agent's own turns, and attempts exported as training data (docs/learning.md)."""
