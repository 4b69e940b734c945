"""autodiff stage."""
