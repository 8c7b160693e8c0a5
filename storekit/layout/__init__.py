"""The /storage layout: spec (layouts/*.toml), init plan, check findings, status per area."""
