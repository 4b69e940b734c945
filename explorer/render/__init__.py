"""Rendering helpers: DOT -> SVG, highlighted code, plots as SVG, HTML pages and notebook export."""
