"""Reading the event store back: off-policy evaluation, how a learner would have done on the
pages and clicks another policy logged (docs/algorithms.md, "Off-policy evaluation"), and
search analytics, what users searched and clicked (`analytics`)."""
