"""Off-policy evaluation: how a learner would have done on the pages and clicks another
policy logged (docs/algorithms.md, "Off-policy evaluation")."""
