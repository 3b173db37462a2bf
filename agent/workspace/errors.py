"""What a workspace refuses, as exceptions whose message is one line (agent/workspace/repo.py raises
them; the CLI maps them to the workspace exit code, docs/exit-codes.md)."""
from __future__ import annotations


class WorkspaceError(Exception):
    """A workspace that ratchet will not use or cannot find; the message is one line."""


class ForeignRepository(WorkspaceError):
    """The directory exists but ratchet did not create it."""


class DirtyWorkspace(WorkspaceError):
    """The repository has changes that ratchet did not make (user edits)."""


class WorkspaceBusy(WorkspaceError):
    """Another writer held the repository's lock past the timeout."""


class UnknownProblem(WorkspaceError):
    """No workspace matches the problem file or name."""
