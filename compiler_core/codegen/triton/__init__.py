"""codegen/triton stage."""
