"""One sglang server: its process, its control-plane answers, the streaming client and transport, the open-loop clock, its log, its sampler."""
