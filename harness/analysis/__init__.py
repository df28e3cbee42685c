"""Records -> summaries, frames, expectations, verdicts and the run's products."""
