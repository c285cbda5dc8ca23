"""The wf server: JSON-RPC over HTTP, authentication, TLS, metrics, and the scheduler API."""
