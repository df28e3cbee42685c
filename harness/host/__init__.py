"""The host: /proc, NVML, the run's fingerprint."""
