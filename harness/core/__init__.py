"""The leaves: exit codes, optional extras, safe YAML with lines, model shapes, the bundled scenarios. Import nothing else of harness."""
