"""ir stage."""
