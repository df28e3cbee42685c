"""The words a scenario is written in: value types and error items, shared by the scenario and each kind's config."""
