"""The attnserve.v1 wire messages and stubs, generated from proto/attnserve/v1 (shipped; see _stubgen.py)."""
