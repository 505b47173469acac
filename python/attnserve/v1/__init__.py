"""The generated attnserve.v1 wire messages and stubs (made at build time from proto/)."""
