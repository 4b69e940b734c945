"""codegen/cpp stage."""
