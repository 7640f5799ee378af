"""The model stage."""
