"""schedule stage."""
