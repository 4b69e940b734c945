"""decomp stage."""
