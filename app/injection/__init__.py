"""injection."""
