"""Reading the event store back: off-policy evaluation, how a learner would have done on the
pages and clicks another policy logged (docs/algorithms.md, "Off-policy evaluation"); search
analytics, what users searched and clicked (`analytics`); relevance judgments from the
clicks, corrected for position (`judgments`); and the log in User Behavior Insights form, out
and in (`ubi`)."""
