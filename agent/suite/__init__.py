"""Suite curation: problems that cannot tell a good kernel from a bad one (`ratchet suite check`, docs/learning.md)."""
