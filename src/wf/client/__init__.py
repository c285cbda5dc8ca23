"""Python clients of a wf server: the JSON-RPC transport and the admin ``App``."""
