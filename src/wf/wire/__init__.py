"""The wire contract: what may cross the boundary between wf processes.

The server, the ``App`` client and the worker SDK all import this package, so
a value is refused at the edge of the process that produced it as well as at
the server. It imports nothing of the server, the store or the core.
"""
