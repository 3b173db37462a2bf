"""The git workspace: one repository per problem, one commit per evaluated attempt (docs/workspace.md)."""
