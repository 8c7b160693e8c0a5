"""Thin Typer layer: one module per noun, one output helper, one error -> exit-code table."""
