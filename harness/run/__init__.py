"""Running a scenario: the runner, the serving window, external servers, builds, preflight, cooldown, estimate, progress, shards, resume, merge."""
