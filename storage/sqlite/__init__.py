"""The SQLite backend: one file per agent instance."""
