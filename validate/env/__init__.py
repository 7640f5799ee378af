"""The env stage."""
