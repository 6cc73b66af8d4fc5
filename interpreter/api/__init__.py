"""The HTTP layer (tornado). Nothing outside this package imports it."""
