"""Quality parity: seeded long-context tasks with known answers, asked of the ON and OFF arms.

`tasks` generates samples, `fit` fits them to a token length, `scoring` grades answers,
`parity` compares arms and gives verdicts (`floor` tests ON-vs-OFF against OFF-vs-OFF), `churn`
sizes the traffic that pushes a sample to the host tier, `run` drives a server. See
docs/quality.md.
"""
