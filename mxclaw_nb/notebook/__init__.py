"""The notebook surface (SPEC N1): magics, commands, the live text log, approvals."""
