"""Durable state: one Store protocol, SQLite (embedded default) and PostgreSQL backends."""
